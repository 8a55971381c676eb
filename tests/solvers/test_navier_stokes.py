"""NavierStokes2D: exact solutions, convergence orders, conservation, reference agreement."""

import numpy as np
import pytest

from ssmpde.core import relative_l2
from ssmpde.solvers import get_solver
from ssmpde.solvers.navier_stokes import (NavierStokes2D, SolverDivergedError, forcing_field,
                                          reference_etdrk4_step, reference_step)
from ssmpde.solvers.random_fields import PeriodicGRF, sample_rng

pytestmark = pytest.mark.usefixtures("raise_on_fp_errors")


def grid(n):
    c = np.arange(n) / n
    return c[:, None], c[None, :]  # y, x


def solver(**config):
    base = dict(resolution=32, simulation_resolution=32, viscosity=1e-3, final_time=1.0,
                record_interval=0.5, time_step=1e-3, forcing="none")
    base.update(config)
    return NavierStokes2D(**base)


def smooth_field(n, seed=0, amplitude=1.0):
    return amplitude * PeriodicGRF(n, alpha=2.5, tau=7.0).sample(sample_rng(seed, 0))


def test_registry_builds_the_solver():
    ns = get_solver("navier-stokes", viscosity=1e-4)
    assert isinstance(ns, NavierStokes2D) and ns.config.viscosity == 1e-4


def test_nonlinear_term_matches_closed_form():
    # ω = sin 2πx + cos 4πy: ψ = sin 2πx / 4π² + cos 4πy / 16π², u = ∂yψ, v = −∂xψ, so
    # u ω_x + v ω_y = 1.5 sin 4πy cos 2πx. A sign error in u or v flips a term.
    n = 32
    y, x = grid(n)
    w = np.sin(2 * np.pi * x) + np.cos(4 * np.pi * y) + 0 * y
    ns = solver(simulation_resolution=n, resolution=n)
    engine = ns._engine(1)
    engine.load(w[None])
    expected = 1.5 * np.sin(4 * np.pi * y) * np.cos(2 * np.pi * x)
    np.testing.assert_allclose(engine.advection()[0], expected, atol=1e-12)


@pytest.mark.parametrize("backend", ["pyfftw", "numpy"])
def test_faithful_step_equals_plain_numpy_reference(backend):
    n, dt = 32, 1e-3
    w0 = smooth_field(n, amplitude=20.0)[None]
    f = forcing_field("fno", n)
    ns = NavierStokes2D(resolution=n, simulation_resolution=n, viscosity=1e-3, forcing="fno",
                        final_time=dt, record_interval=dt, time_step=dt, fft_backend=backend)
    ours = ns.simulate(w0[:, None], 3)[:, -1, 0]
    w_hat = np.fft.rfft2(w0)
    for _ in range(3):
        w_hat = reference_step(w_hat, np.fft.rfft2(f), 1e-3, dt)
    theirs = np.fft.irfft2(w_hat, s=(n, n))
    assert np.max(np.abs(ours - theirs)) <= 1e-12 * np.max(np.abs(theirs))


def shell_solution(t, w0_modes, nu, lam, steady):
    return steady + (w0_modes - steady) * np.exp(-nu * lam * t)


@pytest.mark.parametrize("scheme", ["euler-cn", "rk3-cn"])
@pytest.mark.parametrize("forcing", ["none", "fno"])
def test_single_shell_field_decays_exactly(scheme, forcing):
    # Modes with one |k| have ψ ∝ ω, so u·∇ω = 0: ω relaxes to f / (νλ) as exp(−νλt).
    # 16² resolves |k| = 5 (and keeps the 10,000 steps quick).
    n, nu = 16, 1e-3
    y, x = grid(n)
    if forcing == "fno":  # the FNO forcing lives on |k|² = 2: put ω0 there too
        k2 = 2
        w0 = 0.7 * np.cos(2 * np.pi * (x + y)) - 0.4 * np.sin(2 * np.pi * (x - y)) \
            + 0.3 * np.cos(2 * np.pi * (x - y))
    else:
        k2 = 25
        w0 = np.cos(2 * np.pi * (3 * x + 4 * y)) + 0.5 * np.sin(2 * np.pi * 5 * y) \
            - 0.8 * np.cos(2 * np.pi * (4 * x - 3 * y)) + 0 * x
    lam = 4 * np.pi ** 2 * k2
    steady = forcing_field(forcing, n)[0] / (nu * lam)
    ns = NavierStokes2D(resolution=n, simulation_resolution=n, viscosity=nu, forcing=forcing,
                        final_time=1.0, record_interval=0.25, time_step=1e-4, scheme=scheme)
    frames = ns.simulate(w0[None, None], 4)
    for step in range(5):
        exact = shell_solution(0.25 * step, w0, nu, lam, steady)
        error = np.linalg.norm(frames[0, step, 0] - exact) / np.linalg.norm(exact)
        assert error <= 1e-9, (step, error)


@pytest.mark.parametrize("forcing", ["none", "fno"])
@pytest.mark.parametrize("drag", [0.0, 0.1])
def test_etdrk4_reproduces_a_decaying_shell_to_round_off(forcing, drag):
    # With u·∇ω = 0 the vorticity equation is linear, ω̂' = −(νλ + μ) ω̂ + f̂, which ETDRK4
    # integrates exactly (E and the φ-functions are exact for a constant forcing): 20 steps
    # of 0.05 reproduce ω = steady + (ω0 − steady) e^{−(νλ+μ)t}, steady = f / (νλ + μ), to
    # round-off (measured 1e-15 .. 4e-15).
    n, nu = 16, 1e-3
    y, x = grid(n)
    k2 = 2 if forcing == "fno" else 25
    w0 = (0.7 * np.cos(2 * np.pi * (x + y)) - 0.4 * np.sin(2 * np.pi * (x - y))
          if forcing == "fno" else
          np.cos(2 * np.pi * (3 * x + 4 * y)) - 0.8 * np.cos(2 * np.pi * (4 * x - 3 * y)))
    rate = nu * 4 * np.pi ** 2 * k2 + drag
    steady = forcing_field(forcing, n)[0] / rate
    ns = NavierStokes2D(resolution=n, simulation_resolution=n, viscosity=nu, forcing=forcing,
                        final_time=1.0, record_interval=0.25, time_step=0.05, scheme="etdrk4",
                        drag=drag)
    frames = ns.simulate(w0[None, None], 4)
    for step in range(5):
        exact = steady + (w0 - steady) * np.exp(-rate * 0.25 * step)
        error = np.linalg.norm(frames[0, step, 0] - exact) / np.linalg.norm(exact)
        assert error <= 2e-14, (step, error)


def test_etdrk4_equals_the_numpy_oracle_with_drag_and_moving_forcing():
    n, dt, steps = 16, 0.02, 3
    ns = NavierStokes2D(resolution=n, simulation_resolution=n, viscosity=(1e-3, 2e-3),
                        forcing="torus-vis-force", final_time=steps * dt,
                        record_interval=steps * dt, time_step=dt, scheme="etdrk4", drag=0.1)
    inputs = ns.sample_inputs(seed=4, indices=[0, 1, 2])
    parameters = {k: inputs[k] for k in ("viscosity", "forcing_amplitude")}
    start = 1.3
    ours = ns.step(inputs["initial"][:, None], time=start, parameters=parameters)[:, 0]
    for b in range(3):
        amplitude = inputs["forcing_amplitude"][b:b + 1]
        w_hat = np.fft.rfft2(inputs["initial"][b:b + 1, 0])
        for k in range(steps):
            def forcing(node, k=k):
                phase = 0.2 * (start + (k + node) * dt)
                return np.fft.rfft2(forcing_field("torus-vis-force", n, amplitude, phase))

            w_hat = reference_etdrk4_step(w_hat, forcing, inputs["viscosity"][b], dt, 0.1)
        theirs = np.fft.irfft2(w_hat, s=(n, n))[0]
        assert np.abs(ours[b] - theirs).max() <= 1e-13 * np.abs(theirs).max()


def test_drag_enters_the_faithful_step_as_the_numpy_oracle_says():
    n, dt = 16, 1e-2
    w0 = smooth_field(n, amplitude=5.0)[None]
    ns = NavierStokes2D(resolution=n, simulation_resolution=n, viscosity=1e-3, forcing="fno",
                        final_time=dt, record_interval=dt, time_step=dt, drag=0.3)
    ours = ns.simulate(w0[:, None], 2)[:, -1, 0]
    w_hat = np.fft.rfft2(w0)
    for _ in range(2):
        w_hat = reference_step(w_hat, np.fft.rfft2(forcing_field("fno", n)), 1e-3, dt, 0.3)
    theirs = np.fft.irfft2(w_hat, s=(n, n))
    assert np.max(np.abs(ours - theirs)) <= 1e-13 * np.max(np.abs(theirs))


@pytest.mark.parametrize("scheme", ["euler-cn", "rk3-cn", "etdrk4"])
def test_float32_is_within_its_documented_bound_of_float64(scheme):
    # docs/numerics/float32.md: relative L2 <= 1e-5 (measured at 32², T = 0.5: 4e-7 .. 2e-6)
    config = dict(resolution=32, simulation_resolution=32, viscosity=1e-3, forcing="fno",
                  final_time=0.5, record_interval=0.5, scheme=scheme,
                  time_step=1e-3 if scheme == "euler-cn" else 0.01)
    double, single = (NavierStokes2D(**config, dtype=dtype) for dtype in ("float64", "float32"))
    w0 = double.sample_inputs(seed=0, indices=[0, 1])["initial"]
    a, b = double.simulate(w0, 1)[:, -1], single.simulate(w0, 1)[:, -1]
    error = relative_l2(b, a).max()
    assert 1e-9 < error <= 1e-5, error  # it did run in float32
    assert b.dtype == np.float64


@pytest.mark.parametrize("scheme", ["rk3-cn", "etdrk4"])
def test_kolmogorov_preset_keeps_its_laminar_solution_steady(scheme):
    # Kochkov's flow on [0, 2π)² rescaled to the unit torus: u = U sin(4Y), U = 1 / (16 ν + μ)
    # (Y = 2π y, ν = 1e-3, μ = 0.1) is the exact steady state of the forced, damped equations;
    # its vorticity −4U cos(8π y) is one shell, so advection vanishes and it must stay put.
    config = dict(NavierStokes2D.PRESETS["kolmogorov-re1000"], simulation_resolution=32,
                  resolution=32, spin_up=0.0, final_time=2.0, record_interval=1.0,
                  scheme=scheme, time_step=0.01)
    ns = NavierStokes2D(**config)
    y, x = grid(32)
    U = 1.0 / (16 * 1e-3 + 0.1)
    laminar = -4 * U * np.cos(8 * np.pi * y) + 0 * x
    frames = ns.simulate(laminar[None, None], 2)
    for step in (1, 2):
        error = np.abs(frames[0, step, 0] - laminar).max() / np.abs(laminar).max()
        assert error <= 1e-13, (step, error)


def test_kolmogorov_flow_keeps_zero_mean_vorticity_and_spins_up():
    config = dict(NavierStokes2D.PRESETS["kolmogorov-re1000"], simulation_resolution=32,
                  resolution=32, final_time=0.5, record_interval=0.25, spin_up=0.5,
                  time_step=0.01)
    ns = NavierStokes2D(**config)
    inputs = ns.sample_inputs(seed=0, indices=[0, 1])
    cold = NavierStokes2D(**{**config, "spin_up": 0.0}).sample_inputs(seed=0, indices=[0, 1])
    spun = NavierStokes2D(**{**config, "spin_up": 0.0, "final_time": 0.5,
                             "record_interval": 0.5}).simulate(cold["initial"], 1)[:, -1]
    np.testing.assert_array_equal(inputs["initial"], spun)  # spin-up: the solver, 0.5 on
    frames = ns.solve_batch(inputs)["vorticity"]
    means = frames.mean(axis=(-2, -1))
    assert np.abs(means).max() <= 1e-12 * np.abs(frames).max(), means


def test_spin_up_on_a_coarser_grid_is_the_coarse_spin_up_interpolated():
    # Independent composition: the random field truncated to 16² by hand (FFT), spun up by a
    # 16² solver, zero-padded to 32² by hand, must be the 32² solver's spun-up initial state.
    config = dict(NavierStokes2D.PRESETS["kolmogorov-re1000"], simulation_resolution=32,
                  resolution=32, final_time=0.5, record_interval=0.25, spin_up=0.5,
                  time_step=0.01)
    fine = NavierStokes2D(**config, spin_up_resolution=16)
    cold = NavierStokes2D(**{**config, "spin_up": 0.0}).sample_inputs(seed=0, indices=[0, 1])

    def resample(field, n):
        m = field.shape[-1]
        spectrum = np.fft.fft2(field) / m ** 2
        keep = min(m, n) // 2
        wanted = np.r_[0:keep, -keep + 1:0]  # |k| < keep: the Nyquist mode dropped
        out = np.zeros(field.shape[:-2] + (n, n), dtype=complex)
        out[..., wanted[:, None], wanted] = spectrum[..., wanted[:, None], wanted]
        return np.fft.ifft2(out).real * n ** 2

    coarse = NavierStokes2D(**{**config, "spin_up": 0.0, "simulation_resolution": 16,
                               "resolution": 16, "final_time": 0.5, "record_interval": 0.5})
    spun = coarse.simulate(resample(cold["initial"], 16), 1)[:, -1]
    np.testing.assert_allclose(fine.sample_inputs(seed=0, indices=[0, 1])["initial"],
                               resample(spun, 32), rtol=0, atol=1e-12 * np.abs(spun).max())
    # the default (the simulation grid) is unchanged, bit for bit
    default = NavierStokes2D(**config).sample_inputs(seed=0, indices=[0])["initial"]
    same = NavierStokes2D(**config, spin_up_resolution=32).sample_inputs(
        seed=0, indices=[0])["initial"]
    np.testing.assert_array_equal(default, same)


def test_spectral_downsampling_stores_the_modes_the_coarse_grid_holds():
    config = dict(NavierStokes2D.PRESETS["kolmogorov-re1000"], simulation_resolution=32,
                  resolution=32, spin_up=0.0, final_time=0.2, record_interval=0.1,
                  time_step=0.01)
    inputs = NavierStokes2D(**config).sample_inputs(seed=3, indices=[0])
    full = NavierStokes2D(**config).solve_batch(inputs)["vorticity"]
    stored = NavierStokes2D(**{**config, "resolution": 8},
                            downsampling="spectral").solve_batch(inputs)["vorticity"]
    strided = NavierStokes2D(**{**config, "resolution": 8}).solve_batch(inputs)["vorticity"]
    np.testing.assert_array_equal(strided, full[..., ::4, ::4])
    # by hand: the 32² frames' Fourier modes |k| < 4 per axis, evaluated on the 8² nodes
    spectrum = np.fft.fft2(full) / 32 ** 2
    wanted = np.r_[0:4, -3:0]
    y, x = np.meshgrid(np.arange(8) / 8, np.arange(8) / 8, indexing="ij")
    expected = np.zeros(full.shape[:-2] + (8, 8))
    for ky in wanted:
        for kx in wanted:
            expected += (spectrum[..., ky, kx, None, None]
                         * np.exp(2j * np.pi * (ky * y + kx * x))).real
    np.testing.assert_allclose(stored, expected, rtol=0, atol=1e-12 * np.abs(full).max())
    # the stored frames are the frames' mean-preserving low-pass: not the strided nodes
    assert np.abs(stored - strided).max() > 1e-3 * np.abs(full).max()


def moving_forcing_exact(n, t, nu, amplitude):
    # f = A sin(2πx + ct), c = 0.2, on the |k| = 1 shell: a' = −κa + A e^{ict}, a(0) = 0,
    # a(t) = A (e^{ict} − e^{−κt}) / (κ + ic), ω = Im(a e^{2πix}).
    y, x = grid(n)
    kappa, c = nu * 4 * np.pi ** 2, 0.2
    a = amplitude * (np.exp(1j * c * t) - np.exp(-kappa * t)) / (kappa + 1j * c)
    return np.imag(a * np.exp(2j * np.pi * x)) + 0 * y


def fitted_order(steps, errors):
    return np.polyfit(np.log(steps), np.log(errors), 1)[0]


@pytest.mark.parametrize("scheme, order", [("euler-cn", 1.0), ("rk3-cn", 2.0),
                                           ("etdrk4", 4.0)])
def test_time_dependent_forcing_converges_at_scheme_order(scheme, order):
    n, nu, T = 16, 1e-2, 2.0
    amplitudes = np.zeros((1, 2, 6))
    amplitudes[0, 0, 0] = 10.0  # only sin(2πx + φ), p = 1: a single shell
    exact = moving_forcing_exact(n, T, nu, 0.1 * 10.0)
    steps, errors = [0.2, 0.1, 0.05, 0.025], []
    for dt in steps:
        ns = NavierStokes2D(resolution=n, simulation_resolution=n, viscosity=nu,
                            forcing="torus-vis-force", final_time=T, record_interval=T,
                            time_step=dt, scheme=scheme)
        out = ns.simulate(np.zeros((1, 1, n, n)), 1,
                          parameters={"viscosity": [nu], "forcing_amplitude": amplitudes})
        errors.append(np.linalg.norm(out[0, -1, 0] - exact) / np.linalg.norm(exact))
    assert abs(fitted_order(steps, errors) - order) < 0.1, errors


@pytest.mark.parametrize("scheme, order", [("euler-cn", 1.0), ("rk3-cn", 2.0),
                                           ("etdrk4", 4.0)])
def test_temporal_convergence_on_smooth_grf(scheme, order):
    # The faithful FNO scheme is first order (explicit Euler advection); the fast RK3/CN one
    # is second order (CN diffusion; with weak diffusion its third-order explicit error
    # dominates these step sizes, so ν = 1e-2 keeps both parts in play). Each error is
    # measured against the same scheme with Δt / 64.
    n, T = 32, 0.2
    w0 = smooth_field(n, seed=3, amplitude=10.0)[None, None]

    def run(dt):
        ns = solver(simulation_resolution=n, resolution=n, final_time=T, record_interval=T,
                    time_step=dt, scheme=scheme, forcing="fno", viscosity=1e-2)
        return ns.simulate(w0, 1)[0, -1, 0]

    steps = [0.01, 0.005, 0.0025, 0.00125]
    reference = run(steps[-1] / 64)
    errors = [np.linalg.norm(run(dt) - reference) / np.linalg.norm(reference) for dt in steps]
    assert abs(fitted_order(steps, errors) - order) < 0.1, errors


@pytest.mark.parametrize("time_stepping", ["faithful", "cfl"])
def test_mean_vorticity_is_conserved_to_round_off(time_stepping):
    n = 32
    w0 = smooth_field(n, amplitude=10.0) + 0.3
    ns = solver(resolution=n, simulation_resolution=n, forcing="fno", final_time=2.0,
                record_interval=0.5, time_stepping=time_stepping,
                time_step=1e-3 if time_stepping == "faithful" else None)
    frames = ns.simulate(w0[None, None], 4)
    means = frames[0, :, 0].mean(axis=(-2, -1))
    assert np.max(np.abs(means - 0.3)) < 1e-13
    assert np.max(np.abs(frames[0, -1, 0] - frames[0, 0, 0])) > 1e-2  # the flow did move


def test_batch_of_samples_equals_samples_one_at_a_time():
    ns = solver(simulation_resolution=32, resolution=16, forcing="fno", time_stepping="cfl",
                time_step=None)
    w0 = np.stack([smooth_field(32, seed=s, amplitude=5.0 * (s + 1)) for s in range(3)])[:, None]
    batch = ns.simulate(w0, 2, output_resolution=16)
    for s in range(3):
        single = ns.simulate(w0[s:s + 1], 2, output_resolution=16)
        np.testing.assert_array_equal(batch[s], single[0])


def test_cfl_mode_agrees_with_faithful_scheme():
    n = 64
    w0 = smooth_field(n, seed=1)[None, None] * 5
    kw = dict(resolution=n, simulation_resolution=n, viscosity=1e-4, forcing="fno",
              final_time=2.0, record_interval=1.0)
    faithful = NavierStokes2D(**kw).simulate(w0, 2)[0, -1, 0]
    fast = NavierStokes2D(**kw, time_stepping="cfl").simulate(w0, 2)[0, -1, 0]
    assert np.linalg.norm(fast - faithful) / np.linalg.norm(faithful) < 2e-3


def test_step_at_stored_resolution_interpolates_spectrally():
    ns = solver(resolution=16, simulation_resolution=32, forcing="fno")
    y, x = grid(16)
    w = np.cos(2 * np.pi * (x + y))[None, None, None] + 0 * y  # band-limited on 16²
    nxt = ns.step(w)
    assert nxt.shape == (1, 1, 16, 16)
    # same thing run at the simulation resolution, then strided
    y2, x2 = grid(32)
    w_big = (np.cos(2 * np.pi * (x2 + y2)) + 0 * y2)[None, None, None]
    np.testing.assert_allclose(nxt[0, 0], ns.step(w_big)[0, 0, ::2, ::2], atol=1e-12)


def test_torus_forcing_phase_decomposition():
    rng = np.random.default_rng(0)
    amplitudes = rng.uniform(size=(2, 2, 6))
    phase = 0.7
    moving = forcing_field("torus-vis-force", 16, amplitudes, phase=phase)
    split = np.cos(phase) * forcing_field("torus-vis", 16, amplitudes) \
        + np.sin(phase) * forcing_field("torus-vis", 16, amplitudes, phase=np.pi / 2)
    np.testing.assert_allclose(moving, split, atol=1e-14)


@pytest.mark.parametrize("config, message", [
    (dict(viscosity=-1e-3), "viscosity"),
    (dict(viscosity=0.0), "viscosity"),
    (dict(viscosity=float("nan")), "viscosity"),
    (dict(viscosity=(1e-4, 1e-5)), "low, high"),
    (dict(resolution=60, simulation_resolution=256), "divisor"),
    (dict(forcing="kolmogorov-flow"), "unknown forcing"),
    (dict(spin_up=-1.0), "spin_up"),
    (dict(spin_up=0.5, forcing="torus-vis-force"), "phase"),
    (dict(spin_up=0.00015, time_step=1e-4), "whole number of time steps"),
    (dict(time_stepping="fast"), "time_stepping"),
    (dict(spin_up_resolution=2 ** 17), "spin_up_resolution must be"),
    (dict(spin_up_resolution=0), "spin_up_resolution must be"),
    (dict(spin_up_resolution=33), "spin_up_resolution must be an even"),
    (dict(downsampling="fourier"), "unknown downsampling 'fourier'.*spectral"),
    (dict(record_interval=0.3, final_time=1.0), "whole number"),
    (dict(time_step=3e-4, record_interval=1.0), "whole number"),
    (dict(scheme="etdrk4", time_stepping="cfl"), "needs a fixed step"),
    (dict(drag=-0.1), "drag must be a finite number >= 0"),
    (dict(drag=float("inf")), "drag"),
    (dict(scheme="rk4"), "unknown scheme"),
    (dict(dtype="float16"), "unknown dtype"),
])
def test_bad_config_is_rejected_with_a_clear_message(config, message):
    with pytest.raises(ValueError, match=message):
        NavierStokes2D(**config)


def test_unknown_option_suggests_the_right_one():
    with pytest.raises(TypeError, match="Did you mean 'viscosity'"):
        NavierStokes2D(viscocity=1e-3)


def test_unknown_equation_is_rejected():
    with pytest.raises(ValueError, match="unknown equation 'navier-stoke'.*navier-stokes"):
        get_solver("navier-stoke")


def test_bad_states_are_rejected():
    ns = solver()
    with pytest.raises(ValueError, match="shape"):
        ns.step(np.zeros((1, 32, 32)))
    with pytest.raises(ValueError, match="NaN"):
        ns.simulate(np.full((1, 1, 32, 32), np.nan), 1)
    with pytest.raises(ValueError, match="viscosity"):
        solver(viscosity=(1e-4, 1e-3)).simulate(np.zeros((1, 1, 32, 32)), 1)


def test_blow_up_raises_a_clear_error():
    ns = solver(final_time=10.0, record_interval=1.0, time_step=0.05)
    w0 = smooth_field(32, amplitude=400.0)[None, None]
    with np.errstate(all="ignore"), pytest.raises(SolverDivergedError, match="time step"):
        ns.simulate(w0, 10)


def test_solver_satisfies_the_stepper_protocol():
    from ssmpde.solvers import Stepper

    ns = solver(record_interval=0.25)
    assert isinstance(ns, Stepper)
    assert ns.fields == ("vorticity",) and ns.window == 1 and ns.dt == 0.25
    history = smooth_field(32)[None, None, None]
    frame = ns.step(history)
    assert frame.shape == (1, 1, 32, 32)
    np.testing.assert_array_equal(frame, ns.simulate(history[:, -1], 1)[:, -1])


def test_spatial_convergence_is_spectral():
    # A band-limited initial field (|k| < 8), run at 16², 32², 64² and compared with 128²
    # at the shared points: each doubling must gain more than any algebraic order would
    # (measured: 7.9e-4, 4.8e-8, 3.7e-16).
    from ssmpde.solvers.spectral import spectral_resample

    w = 10 * PeriodicGRF(128).sample(sample_rng(0, 0))
    w = spectral_resample(spectral_resample(w, 16), 128)

    def run(n):
        ns = NavierStokes2D(resolution=n, simulation_resolution=n, viscosity=1e-2,
                            forcing="fno", final_time=0.5, record_interval=0.5,
                            time_step=1e-3, scheme="rk3-cn")
        return ns.simulate(spectral_resample(w, n)[None, None], 1)[0, -1, 0]

    reference = run(128)
    errors = [np.abs(run(n) - reference[::128 // n, ::128 // n]).max() / np.abs(reference).max()
              for n in (16, 32, 64)]
    assert errors[0] / errors[1] > 1e3 and errors[1] / errors[2] > 1e6, errors
    assert errors[2] < 1e-13, errors


@pytest.mark.slow
def test_benchmark_resolution_batch_invariance_and_reference_agreement():
    # 256², the FNO grid: batch 1 uses every core inside each FFT (threaded FFTW, parallel
    # kernels), batch 3 runs one sample per core (serial FFTW and kernels). Same bits.
    n = 256
    w0 = np.stack([PeriodicGRF(n).sample(sample_rng(1, i)) for i in range(3)])[:, None]
    ns = NavierStokes2D(resolution=64, simulation_resolution=n, viscosity=1e-5,
                        final_time=0.01, record_interval=0.005)
    batch = ns.simulate(w0, 2, output_resolution=64)
    for i in range(3):
        np.testing.assert_array_equal(ns.simulate(w0[i:i + 1], 2, output_resolution=64)[0],
                                      batch[i])
    w_hat = np.fft.rfft2(w0[:, 0])
    f_hat = np.fft.rfft2(forcing_field("fno", n))
    for _ in range(100):
        w_hat = reference_step(w_hat, f_hat, 1e-5, 1e-4)
    reference = np.fft.irfft2(w_hat, s=(n, n))[:, ::4, ::4]
    assert np.max(np.abs(batch[:, -1, 0] - reference)) <= 1e-12 * np.max(np.abs(reference))
