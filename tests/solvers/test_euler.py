"""Euler2D: the numba kernel against its NumPy oracle, exact Riemann solutions (Sod along x
and y, Lax, Toro's 123), conservation, second-order convergence, symmetry, well-balanced
gravity, per-sample reproducibility, datasets, and bad input.

The exact Riemann solver (``exact_riemann.py``, Toro ch. 4) is written independently of the
package. Figures in comments were measured on the development machine.
"""

import numpy as np
import pytest

from ssmpde.data import roles_of, validate
from ssmpde.generation import generate
from ssmpde.solvers import get_solver
from ssmpde.solvers.base import SolverDivergedError
from ssmpde.solvers.euler import (
    Euler2D,
    conserved_totals,
    fast_step,
    gce_rt_state,
    integrate,
    kelvin_helmholtz_state,
    reference_step,
)

from .exact_riemann import SOD_LEFT, SOD_RIGHT, riemann_solution, star_state

LAX = ((0.445, 0.698, 3.528), (0.5, 0.0, 0.571))
TORO_123 = ((1.0, -2.0, 0.4), (1.0, 2.0, 0.4))


def centres(n: int, origin: float = 0.0) -> np.ndarray:
    return origin + (np.arange(n) + 0.5) / n


def riemann_tube(n: int, left, right, axis: str = "x", width: int = 4):
    """A Riemann problem at ½ along ``axis`` on ``n`` × ``width`` square cells: the primitive
    state ``[1, 5, ny, nx]`` and the domain lengths."""
    shape = (width, n) if axis == "x" else (n, width)
    along = centres(n)[None, :] if axis == "x" else centres(n)[:, None]
    state = np.zeros((1, 5, *shape))
    for field, k in ((0, 0), (1 if axis == "x" else 2, 1), (3, 2)):
        state[0, field] = np.broadcast_to(np.where(along < 0.5, left[k], right[k]), shape)
    state[0, 4] = np.broadcast_to(along < 0.5, shape)
    lengths = (1.0, width / n) if axis == "x" else (width / n, 1.0)
    return state, lengths


def profile(state: np.ndarray, axis: str) -> np.ndarray:
    """(ρ, u_normal, p) along the tube of a ``[1, 5, ny, nx]`` state (the first line)."""
    if axis == "x":
        return state[0, [0, 1, 3], 0, :]
    return state[0, [0, 2, 3], :, 0]


def random_state(rng, batch: int, ny: int, nx: int) -> np.ndarray:
    state = np.empty((batch, 5, ny, nx))
    state[:, 0] = 1 + 0.5 * rng.random((batch, ny, nx))
    state[:, 1:3] = 0.5 * rng.normal(size=(batch, 2, ny, nx))
    state[:, 3] = 1 + 0.5 * rng.random((batch, ny, nx))
    state[:, 4] = rng.random((batch, ny, nx))
    return state


# -- the kernel against its NumPy oracle ------------------------------------------------------
BOUNDARY_CASES = ["periodic", "outflow", "reflective", ("outflow", "periodic"),
                  ("reflective", "outflow")]


@pytest.mark.parametrize("gravity", [False, True], ids=["no-gravity", "gravity"])
@pytest.mark.parametrize("limiter", ["mc", "minmod"])
@pytest.mark.parametrize("boundary", BOUNDARY_CASES,
                         ids=lambda b: b if isinstance(b, str) else "-".join(b))
def test_kernel_matches_the_numpy_reference(boundary, limiter, gravity, raise_on_fp_errors):
    rng = np.random.default_rng(7)
    state = random_state(rng, 2, 13, 17)  # odd sizes; blocks of 3 rows leave a short one
    potential = 0.1 * rng.normal(size=(2, 13, 17)) if gravity else None
    dt = np.array([1e-3, 2.5e-3])
    options = dict(lengths=(1.0, 0.8), gamma=1.4, boundary=boundary, limiter=limiter,
                   potential=potential)
    fast, bad = fast_step(state, dt, rows=3, **options)
    slow = reference_step(state, dt, **options)
    assert not bad.any()
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-13)  # measured 4e-16 .. 7e-16


@pytest.mark.parametrize("gravity", [False, True], ids=["no-gravity", "gravity"])
def test_kernel_matches_the_reference_through_the_first_order_fallback(gravity):
    # A near-vacuum right half and a long step make the half-step faces non-positive.
    n = 16
    state = np.zeros((1, 5, n, n))
    state[0, 0], state[0, 3] = 1.0, 1.0
    state[0, 0, :, n // 2:], state[0, 3, :, n // 2:] = 1e-3, 1e-3
    state[0, 1, :, :n // 2] = 3.0
    potential = 0.01 * centres(n)[None, :, None] * np.ones((1, n, n)) if gravity else None
    fast, _ = fast_step(state, 0.02, boundary="outflow", potential=potential)
    slow = reference_step(state, 0.02, boundary="outflow", potential=potential)
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-12)


def test_result_does_not_depend_on_the_block_height_or_the_build():
    rng = np.random.default_rng(3)
    state = random_state(rng, 2, 11, 9)
    potential = 0.1 * rng.normal(size=(1, 11, 9))
    outputs = [fast_step(state, 1e-3, boundary=("reflective", "periodic"),
                         potential=potential, rows=rows, parallel=parallel)[0]
               for rows in (1, 4, 11) for parallel in (True, False)]
    for other in outputs[1:]:
        np.testing.assert_array_equal(other, outputs[0])


# -- exact Riemann solutions ----------------------------------------------------------------------
@pytest.mark.parametrize("axis", ["x", "y"])
def test_sod_star_states_match_the_exact_solution(axis, raise_on_fp_errors):
    time = 0.2
    state, lengths = riemann_tube(400, SOD_LEFT, SOD_RIGHT, axis)
    out, _ = integrate(state, time, lengths=lengths, boundary="outflow")
    rho, u, p = profile(out, axis)
    # every line across the tube is the same 1D solution
    lines = out[0] if axis == "x" else out[0].transpose(0, 2, 1)
    assert np.abs(lines - lines[:, :1]).max() < 1e-13
    star = star_state(SOD_LEFT, SOD_RIGHT, 1.4)
    a_star = np.sqrt(1.4 * star.pressure / star.density_left)
    tail = 0.5 + (star.velocity - a_star) * time  # rarefaction tail
    contact = 0.5 + star.velocity * time
    shock = 0.5 + 1.7522 * time  # shock speed of Sod's problem (Toro §4.3.3)
    x, margin = centres(400), 0.03

    def plateau(values, lo, hi):
        return np.mean(values[(x > lo + margin) & (x < hi - margin)])

    measured = {"pressure": plateau(p, tail, shock), "velocity": plateau(u, tail, shock),
                "density_left": plateau(rho, tail, contact),
                "density_right": plateau(rho, contact, shock)}
    # measured (x and y alike): relative errors 3e-5 (p*), 8e-5 (u*), 8e-5 (ρ*L), 8e-6 (ρ*R)
    for name, value in measured.items():
        assert abs(value / getattr(star, name) - 1) < 0.01, (name, value, getattr(star, name))


def test_sod_density_error_falls_with_resolution():
    errors = []
    for n in (100, 200, 400):
        state, lengths = riemann_tube(n, SOD_LEFT, SOD_RIGHT)
        out, _ = integrate(state, 0.2, lengths=lengths, boundary="outflow")
        exact = riemann_solution(centres(n), 0.2, SOD_LEFT, SOD_RIGHT)[0]
        errors.append(np.abs(out[0, 0, 0] - exact).mean())
    # measured: 4.7e-3, 2.4e-3, 1.3e-3 (order ~0.9: first order at the discontinuities)
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 2e-3


@pytest.mark.parametrize("problem, final_time, bound", [
    (LAX, 0.14, 8e-3),        # measured L1 5.2e-3
    (TORO_123, 0.15, 2e-3),   # measured L1 1.1e-3; star density 0.022, pressure 0.0019
], ids=["lax", "toro-123"])
def test_strong_riemann_problems_stay_positive(problem, final_time, bound,
                                               raise_on_fp_errors):
    left, right = problem
    state, lengths = riemann_tube(400, left, right)
    out, _ = integrate(state, final_time, lengths=lengths, boundary="outflow")
    assert out[0, 0].min() > 0 and out[0, 3].min() > 0
    exact = riemann_solution(centres(400), final_time, left, right)[0]
    assert np.abs(out[0, 0, 0] - exact).mean() < bound


# -- conservation, convergence, symmetry ---------------------------------------------------------
def test_mass_momentum_energy_are_conserved_to_round_off(raise_on_fp_errors):
    rng = np.random.default_rng(1)
    state = random_state(rng, 2, 40, 48)
    before = conserved_totals(state, 1.4)
    out = state
    steps = 0
    while steps < 100:
        out, taken = integrate(out, 0.01, lengths=(1.2, 1.0))
        steps += taken
    after = conserved_totals(out, 1.4)
    scale = np.abs(before).max(axis=1, keepdims=True)
    # measured: 3e-16 relative after 101 steps
    assert np.abs(after - before).max() / scale.min() < 1e-12


def advected_wave(n: int, time: float) -> np.ndarray:
    """ρ = 1 + 0.2 sin 2π(x + y − 2t), u = v = 1, p = 1, as exact cell averages."""
    h = 1.0 / n
    x = centres(n)
    average = (np.sin(np.pi * h) / (np.pi * h)) ** 2  # of sin 2π(x + y) over a cell
    state = np.ones((1, 5, n, n))
    state[0, 0] = 1 + 0.2 * average * np.sin(2 * np.pi * (x[None, :] + x[:, None] - 2 * time))
    state[0, 4] = 0.0
    return state


@pytest.mark.parametrize("limiter, order", [("mc", 1.8), ("minmod", 1.6)])
def test_smooth_wave_converges_at_second_order(limiter, order, raise_on_fp_errors):
    sizes = (32, 64, 128)
    errors = []
    for n in sizes:
        out, _ = integrate(advected_wave(n, 0.0), 0.5, limiter=limiter)
        errors.append(np.abs(out[0, 0] - advected_wave(n, 0.5)[0, 0]).mean())
    observed = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    # measured: MC 2.05, 2.15; minmod 1.75, 1.83 (minmod clips the extrema harder)
    assert observed.min() >= order, (errors, observed)


def symmetric_blast(n: int) -> np.ndarray:
    """Even in x about ½: a dense ellipse and an off-centre pressure pulse, at rest."""
    x, y = centres(n)[None, :], centres(n)[:, None]
    state = np.zeros((1, 5, n, n))
    state[0, 0] = np.where(((x - 0.5) / 0.3) ** 2 + ((y - 0.55) / 0.2) ** 2 < 1, 2.0, 1.0)
    state[0, 3] = 1 + 9 * np.exp(-((x - 0.5) ** 2 + (y - 0.3) ** 2) / 0.005)
    state[0, 4] = state[0, 0] - 1
    return state


def test_mirror_symmetric_state_stays_symmetric():
    out, _ = integrate(symmetric_blast(64), 0.2, boundary="reflective")
    mirrored = out[..., ::-1].copy()
    mirrored[:, 1] *= -1  # x → 1 − x flips u
    # measured: 0 (bitwise; the HLLC flux is written to be exactly mirror-antisymmetric)
    np.testing.assert_allclose(out, mirrored, rtol=0, atol=1e-13)


def test_transposed_state_gives_the_transposed_solution():
    state = symmetric_blast(48)
    swapped = state.transpose(0, 1, 3, 2)[:, [0, 2, 1, 3, 4]].copy()  # x ↔ y, u ↔ v
    out, _ = integrate(state, 0.1, boundary="periodic")
    out_swapped, _ = integrate(swapped, 0.1, boundary="periodic")
    np.testing.assert_allclose(out_swapped.transpose(0, 1, 3, 2)[:, [0, 2, 1, 3, 4]], out,
                               rtol=0, atol=1e-12)  # measured 3e-14


# -- gravity -----------------------------------------------------------------------------------
@pytest.mark.parametrize("boundary", ["periodic", "reflective", "outflow"])
def test_polytropic_equilibrium_stays_at_rest(boundary, raise_on_fp_errors):
    # GCE-RT with A = 0: K̃ = K₀ everywhere, the γ = 2 polytrope in hydrostatic equilibrium.
    x = centres(64, -0.5)
    state, potential = gce_rt_state(x[None, :], x[:, None], rho0=1.1, p0=0.9, atwood=0.0,
                                    a=0.5, b=0.3)
    out, steps = integrate(state[None], 1.0, gamma=2.0, boundary=boundary,
                           potential=potential[None])
    assert steps > 100
    # measured: 4.5e-15 (periodic), 4.8e-15 (reflective), 5.8e-15 (outflow) after 205 steps
    assert np.abs(out[0, 1:3]).max() <= 1e-10
    np.testing.assert_allclose(out[0, [0, 3]], state[[0, 3]], rtol=1e-12)


def test_layered_atmosphere_with_an_entropy_jump_on_a_face_stays_at_rest():
    # φ = g y; two isentropic layers (γ = 1.4), the lighter (higher entropy) on top, the jump
    # on a cell face with p continuous: every cell lies on its own layer's isentrope.
    gamma, g, n = 1.4, 1.0, 32
    y = centres(n)[:, None] * np.ones((1, 8))
    potential = g * y
    p_face, k_low, k_high = 1.0, 1.0, 2.0

    def layer(k, phi_ref, p_ref):
        h_ref = gamma / (gamma - 1) * p_ref / (p_ref / k) ** (1 / gamma)
        h = h_ref - (potential - phi_ref)
        rho = (h * (gamma - 1) / (gamma * k)) ** (1 / (gamma - 1))
        return rho, k * rho ** gamma

    upper = y > 0.5
    rho_low, p_low = layer(k_low, 0.5 * g, p_face)
    rho_high, p_high = layer(k_high, 0.5 * g, p_face)
    state = np.zeros((1, 5, n, 8))
    state[0, 0] = np.where(upper, rho_high, rho_low)
    state[0, 3] = np.where(upper, p_high, p_low)
    state[0, 4] = upper
    out, _ = integrate(state, 1.0, lengths=(0.25, 1.0), gamma=gamma,
                       boundary=("periodic", "reflective"), potential=potential[None])
    assert np.abs(out[0, 1:3]).max() <= 1e-10  # measured 7e-16


def test_rayleigh_taylor_perturbation_grows():
    # The heavy outer gas is not in equilibrium and falls in: the speed grows frame to frame
    # (measured rms 0.009, 0.016, 0.021, 0.026, 0.033, 0.043) and the interface mixes.
    solver = Euler2D(problem="gce-rt", resolution=32, simulation_resolution=32, gamma=2.0,
                     final_time=3.0, record_interval=0.5)
    out = solver.solve_batch(solver.sample_inputs(seed=4, indices=[0]))
    speed = np.sqrt(out["velocity_x"][0] ** 2 + out["velocity_y"][0] ** 2)
    rms = np.sqrt((speed ** 2).mean(axis=(1, 2)))
    assert rms[0] == 0 and np.all(np.diff(rms) > 0) and rms[-1] > 3 * rms[1], rms
    mixed = ((out["tracer"][0] > 0.05) & (out["tracer"][0] < 0.95)).mean(axis=(1, 2))
    assert np.all(np.diff(mixed) > 0), mixed  # cells holding both gases: 0.04 → 0.13


def test_total_energy_with_potential_is_conserved():
    # ∂t(E + ρφ) + ∇·(...) = 0 for a static φ: the face-centred energy source keeps
    # the sum exact.
    rng = np.random.default_rng(5)
    state = random_state(rng, 1, 24, 24)
    x = centres(24)
    potential = (0.3 * np.sin(2 * np.pi * x)[None, :] * np.cos(2 * np.pi * x)[:, None])[None]
    out, _ = integrate(state, 0.05, gamma=1.4, potential=potential)  # 7 steps

    def total(s):
        return conserved_totals(s, 1.4)[0, 3] + (s[0, 0] * potential[0]).sum()

    assert abs(total(out) - total(state)) < 1e-12 * abs(total(state))  # measured 0
    np.testing.assert_allclose(out[0, 0].sum(), state[0, 0].sum(), rtol=1e-13)


# -- the registered solver -------------------------------------------------------------------
def test_samples_do_not_depend_on_the_batch_size():
    for problem in ("ce-rm", "gce-rt"):
        options = dict(problem=problem, resolution=8, simulation_resolution=16,
                       gamma=2.0 if problem == "gce-rt" else 1.4, final_time=0.04,
                       record_interval=0.02)
        one = generate("euler", num_samples=3, seed=2, batch_size=1, progress=False, **options)
        three = generate("euler", num_samples=3, seed=2, batch_size=3, progress=False,
                         **options)
        for name in one.data_vars:
            np.testing.assert_array_equal(one[name].values, three[name].values)
        assert not np.array_equal(three.density.values[0], three.density.values[1])


def test_dataset_layout_roles_units_and_pooling():
    ds = generate("euler", num_samples=1, seed=0, progress=False, problem="gce-rt", gamma=2.0,
                  resolution=8, simulation_resolution=16, final_time=0.04,
                  record_interval=0.02)
    validate(ds, check_finite=True)
    assert roles_of(ds) == {"density": "state", "velocity_x": "state",
                            "velocity_y": "state", "pressure": "state",
                            "tracer": "state", "potential": "forcing"}
    assert ds.density.dims == ("sample", "time", "y", "x") and ds.density.shape == (1, 3, 8, 8)
    assert ds.potential.dims == ("sample", "y", "x")
    # CF 7.1: bounds take their coordinate's units and carry none (as xarray writes them)
    bounds = {ds[c].attrs["bounds"] for c in ("x", "y")}
    assert bounds == {"x_bounds", "y_bounds"}
    assert all("units" in ds[v].attrs for v in ds.variables if v not in bounds)
    assert all("units" not in ds[v].attrs for v in bounds)
    np.testing.assert_allclose(ds.x.values, centres(8, -0.5))  # GCE-RT: [−½, ½]²
    # stored frames are 2 × 2 block averages of the simulation
    fine = Euler2D(problem="gce-rt", gamma=2.0, resolution=16, simulation_resolution=16,
                   final_time=0.04, record_interval=0.02)
    inputs = fine.sample_inputs(0, [0])
    frames = fine.solve_batch(inputs)
    pooled = frames["density"].reshape(1, 3, 8, 2, 8, 2).mean(axis=(3, 5))
    np.testing.assert_allclose(ds.density.values, pooled, rtol=1e-14)
    no_gravity = generate("euler", num_samples=1, seed=0, progress=False, resolution=8,
                          simulation_resolution=16, final_time=0.02, record_interval=0.02)
    assert "potential" not in no_gravity and float(no_gravity.x[0]) == 1 / 16


def test_presets_and_checks():
    cerm = get_solver("euler", preset="ce-rm")
    assert cerm.grid == (128, 128) and cerm.simulation_grid == (256, 256)
    assert cerm.num_records == 20 and cerm.config.gamma == 1.4
    gcert = get_solver("euler", preset="gce-rt")
    assert gcert.num_records == 10 and gcert.config.gamma == 2.0
    assert gcert.parameter_specs() == {"potential": (256, 256)}
    assert cerm.checks.conserved == ("density",)
    assert get_solver("euler", preset="sod-x").checks.conserved == ()
    assert set(cerm.checks.positive) == {"density", "pressure"}
    for name in ("sod-x", "sod-y", "lax", "toro-123", "kelvin-helmholtz"):
        solver = get_solver("euler", preset=name, resolution=16, simulation_resolution=16)
        initial = solver.initial_condition(0, [0])
        assert initial.shape == (1, 5, 16, 16) and (initial[:, [0, 3]] > 0).all()
    sod_y = get_solver("euler", preset="sod-y", resolution=8, simulation_resolution=8)
    assert np.array_equal(sod_y.initial_condition(0, [0])[0, 0, :, 3], [1, 1, 1, 1] + [0.125] * 4)


def test_the_hybrid_checks_accept_real_frames_and_reject_bad_ones():
    solver = Euler2D(resolution=16, simulation_resolution=32, final_time=0.2,
                     record_interval=0.1)
    frames = solver.simulate(solver.initial_condition(0, [0]), 2, output_resolution=16)
    for k in range(2):
        assert solver.checks.failure(frames[:, k], frames[:, k + 1], solver.fields) is None
    bad = frames[:, 2].copy()
    bad[0, 3, 4, 4] = -1.0
    assert "pressure is not positive" in solver.checks.failure(frames[:, 1], bad, solver.fields)
    bad = frames[:, 2].copy()
    bad[0, 0] *= 1.2
    assert "mean density drift" in solver.checks.failure(frames[:, 1], bad, solver.fields)
    bad = frames[:, 2].copy()
    bad[0, 3] *= 1.1  # 10 % more internal energy from nowhere
    assert "total energy drift" in solver.checks.failure(frames[:, 1], bad, solver.fields)
    bad = frames[:, 2].copy()
    bad[0, 1] += 0.5  # a uniform push: x momentum from nowhere
    assert "total x momentum drift" in solver.checks.failure(frames[:, 1], bad, solver.fields)
    assert not get_solver("euler", preset="gce-rt").checks.totals  # gravity exchanges them


def test_kelvin_helmholtz_and_ce_rm_initial_states():
    x = centres(64)
    kh = kelvin_helmholtz_state(x[None, :], x[:, None], np.ones(4), np.zeros(4))
    assert kh[0].min() > 0.99 and kh[0].max() < 2.01 and abs(kh[1].mean()) < 1e-12
    solver = Euler2D(resolution=32, simulation_resolution=64)
    state = solver.initial_condition(9, [0])[0]
    assert set(np.unique(state[0])) == {1.0, 2.0} and set(np.unique(state[3])) == {1.0, 20.0}
    np.testing.assert_array_equal(state[4], state[0] - 1)  # tracer marks the dense gas
    radius = np.hypot(x[None, :] - 0.5, x[:, None] - 0.5)
    assert np.all(state[0][radius < 0.19] == 2) and np.all(state[0][radius > 0.31] == 1)


def test_stepper_accepts_states_and_potential_on_the_stored_grid():
    solver = Euler2D(problem="gce-rt", gamma=2.0, resolution=8, simulation_resolution=16,
                     final_time=0.02, record_interval=0.02)
    ds = generate("euler", num_samples=1, seed=1, progress=False, **solver.config_dict())
    frames = np.stack([ds[f].values for f in solver.fields], axis=2)
    frame = solver.step(frames[:, :1], parameters={"potential": ds.potential.values})
    assert frame.shape == (1, 5, 8, 8) and np.isfinite(frame).all()
    # spreading then pooling gives a state back exactly
    np.testing.assert_array_equal(solver._restrict(solver.to_simulation_grid(frames[:, 0]),
                                                   (8, 8)), frames[:, 0])
    assert np.abs(frame - frames[:, 1]).max() < 0.05


# -- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("options, message", [
    (dict(gamma=1.0), "gamma must be a finite number > 1"),
    (dict(gamma=0.5), "gamma must be a finite number > 1"),
    (dict(boundary="wall"), "unknown boundary 'wall'"),
    (dict(boundary="outfow"), "Did you mean 'outflow'"),
    (dict(limiter="superbee"), "unknown limiter 'superbee'"),
    (dict(cfl=0.0), r"cfl must lie in \(0, 1\]"),
    (dict(cfl=1.5), r"cfl must lie in \(0, 1\]"),
    (dict(problem="ce_rm"), "unknown problem 'ce_rm'. Did you mean 'ce-rm'"),
    (dict(resolution=48), "stored resolution 48 must divide the simulation resolution 256"),
    (dict(final_time=0.25, record_interval=0.1), "final_time must be a whole number"),
    (dict(interface_amplitude=0.2), "interface_amplitude must lie in"),
])
def test_bad_configurations_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        Euler2D(**options)


def test_unknown_preset_is_refused():
    with pytest.raises(ValueError, match="unknown euler preset 'ce-rn'. Did you mean 'ce-rm'"):
        get_solver("euler", preset="ce-rn")


@pytest.mark.parametrize("field, value, message", [
    (0, 0.0, "initial density must be positive and finite"),
    (0, -1.0, "initial density must be positive and finite"),
    (3, -0.1, "initial pressure must be positive and finite"),
    (3, np.nan, "initial pressure must be positive and finite .*NaN or inf"),
    (1, np.inf, "initial velocity or tracer contains NaN or inf"),
])
def test_bad_initial_states_are_refused(field, value, message):
    state, lengths = riemann_tube(16, SOD_LEFT, SOD_RIGHT)
    state[0, field, 1, 3] = value
    with pytest.raises(ValueError, match=message):
        integrate(state, 0.1, lengths=lengths, boundary="outflow")
    if np.isfinite(value):  # the solver's own path (the base rejects NaN first)
        solver = Euler2D(resolution=16, simulation_resolution=16, problem="sod-x",
                         boundary="outflow", final_time=0.01, record_interval=0.01)
        square = np.repeat(state[:, :, 1:2], 16, axis=2)  # the row with the bad cell
        with pytest.raises(ValueError, match=message):
            solver.simulate(square, 1)


def test_bad_integrate_arguments_are_refused():
    state, _ = riemann_tube(16, SOD_LEFT, SOD_RIGHT)
    with pytest.raises(ValueError, match="gamma must be a finite number > 1"):
        integrate(state, 0.1, gamma=1.0)
    with pytest.raises(ValueError, match=r"cfl must lie in \(0, 1\]"):
        integrate(state, 0.1, cfl=2.0)
    with pytest.raises(ValueError, match="unknown boundary 'open'"):
        integrate(state, 0.1, boundary=("outflow", "open"))
    with pytest.raises(ValueError, match="unknown limiter"):
        integrate(state, 0.1, limiter="vanleer")
    with pytest.raises(ValueError, match=r"shape \[batch, 5, ny, nx\]"):
        integrate(state[:, :4], 0.1)
    with pytest.raises(ValueError, match="potential must have shape"):
        integrate(state, 0.1, potential=np.zeros((1, 16, 16)))
    with pytest.raises(ValueError, match="final_time must be a positive"):
        integrate(state, -1.0)
    solver = Euler2D(problem="gce-rt", gamma=2.0, resolution=8, simulation_resolution=8,
                     final_time=0.02, record_interval=0.02)
    with pytest.raises(ValueError, match="draws 'potential' per sample"):
        solver.step(solver.initial_condition(0, [0])[:, None])


def test_blow_up_raises_solver_diverged_error():
    n = 32
    state = np.zeros((1, 5, n, n))
    state[0, 0], state[0, 3] = 1.0, 1.0
    cliff = np.zeros((1, n, n))
    cliff[0, :, n // 2:] = 1e4  # a potential step no gas can hold
    with pytest.raises(SolverDivergedError, match="non-positive or non-finite by t = .*lower "
                                                  "the cfl number"):
        integrate(state, 0.1, potential=cliff)
    fast = state.copy()
    fast[0, 1] = 1e14
    with pytest.raises(SolverDivergedError, match="time step collapsed"):
        integrate(fast, 1.0)


def test_interrupted_gce_rt_generation_resumes_to_the_same_file(tmp_path):
    """Kill-and-resume: an interrupted run (after two of three batches) continues from the
    parts on disk, with another batch size, to the file an uninterrupted run writes."""
    from generation.test_generate import Interrupt, assert_same_dataset

    config = dict(preset="gce-rt", resolution=8, simulation_resolution=16, final_time=0.1,
                  record_interval=0.05)
    full = generate("euler", num_samples=3, seed=2, batch_size=1, out=tmp_path / "full.nc",
                    progress=False, **config)
    solver = get_solver("euler", **config)
    solver.solve_batch = Interrupt(solver, after=2)
    out = tmp_path / "resumed.nc"
    with pytest.raises(KeyboardInterrupt, match="2 of 3 samples are saved"):
        generate(solver, num_samples=3, seed=2, batch_size=1, out=out, progress=False)
    assert not out.exists()
    resumed = generate("euler", num_samples=3, seed=2, batch_size=2, out=out, progress=False,
                       **config)
    assert_same_dataset(resumed, full)
    assert "potential" in resumed and resumed.potential.dims == ("sample", "y", "x")
