"""The solvers' right-hand sides ∂u/∂t (``tendency``) against the solvers' own trajectories
(centred differences converge at second order), hand-computed derivatives of single modes and
exact Navier–Stokes eigenmodes; coarser time steps of Navier–Stokes; the Euler default."""

import numpy as np
import pytest

from ssmpde.solvers import get_solver
from ssmpde.solvers.allen_cahn import AllenCahn
from ssmpde.solvers.burgers import Burgers1D
from ssmpde.solvers.euler import Euler2D
from ssmpde.solvers.kuramoto_sivashinsky import KuramotoSivashinsky
from ssmpde.solvers.navier_stokes import NavierStokes2D


def _ks(h):
    return KuramotoSivashinsky(resolution=32, simulation_resolution=32, domain_length=22.0,
                               viscosity=(0.9, 1.1), final_time=h, record_interval=h,
                               time_step=h / 8)


def _burgers(h):
    return Burgers1D(resolution=32, simulation_resolution=32, viscosity=(0.05, 0.1),
                     final_time=h, record_interval=h, time_step=h / 8)


def _allen_cahn(h):
    return AllenCahn(resolution=32, simulation_resolution=32, diffusivity=(0.05, 0.1),
                     final_time=h, record_interval=h, time_step=h / 8)


def _navier_stokes(h):
    # second-order RK3/CN at a fixed step; the moving forcing tests the time argument
    return NavierStokes2D(resolution=32, simulation_resolution=32, viscosity=(1e-3, 2e-3),
                          forcing="torus-vis-force", final_time=h, record_interval=h,
                          time_step=h / 10, scheme="rk3-cn")


# (build, finest record interval h, burn-in records, start time, bound on the finest error
# relative to max|tendency|). Measured finest errors: KS 4.5e-6, Burgers 2.6e-5 (after the
# burn-in slaves the stiff modes), Allen-Cahn 6.5e-6, NS 4.0e-4; orders 2.000-2.008.
CASES = {
    "kuramoto-sivashinsky": (_ks, 5e-3, 200, 0.0, 1e-5),
    "burgers": (_burgers, 1e-3, 100, 0.0, 6e-5),
    "allen-cahn": (_allen_cahn, 1e-3, 100, 0.0, 1e-5),
    "navier-stokes": (_navier_stokes, 5e-3, 4, 5.0, 1.5e-3),
}


@pytest.mark.parametrize("name", CASES)
def test_centred_differences_of_the_solver_trajectory_converge_to_the_tendency(name):
    build, h, burn_in, start, bound = CASES[name]
    solver = build(h)
    inputs = solver.sample_inputs(seed=0, indices=[0, 1])
    parameters = {k: v for k, v in inputs.items() if k != "initial"}
    frames = solver.simulate(inputs["initial"], burn_in + 4, time=start, parameters=parameters)
    centre, time = burn_in, start + burn_in * h
    exact = solver.tendency(frames[:, centre], time=time, parameters=parameters)
    assert exact.shape == frames[:, centre].shape and exact.dtype == np.float64
    errors = []
    for m in (4, 2, 1):  # intervals 4h, 2h, h from one trajectory
        difference = (frames[:, centre + m] - frames[:, centre - m]) / (2 * m * h)
        errors.append(np.abs(difference - exact).max())
    orders = np.log2(np.array(errors[:-1]) / errors[1:])
    assert np.all(orders > 1.8), (orders, errors)
    assert errors[-1] < bound * np.abs(exact).max(), errors
    if name == "navier-stokes":  # the forcing's phase is read from `time`
        stale = solver.tendency(frames[:, centre], time=0.0, parameters=parameters)
        assert np.abs(difference - stale).max() > 100 * errors[-1]


@pytest.mark.parametrize("name, mode, dealias, nonlinear", [
    ("kuramoto-sivashinsky", 2, True, True),
    ("kuramoto-sivashinsky", 6, False, True),
    ("kuramoto-sivashinsky", 6, True, False),  # 2·6 > 32/3: the 2/3 rule removes u u_x
    ("burgers", 3, True, True),
    ("burgers", 6, False, True),
    ("burgers", 6, True, False),
])
def test_single_mode_matches_hand_derivatives(name, mode, dealias, nonlinear):
    # u = A sin(κx): u u_x = ½A²κ sin(2κx), u_xx = −κ²u, u_xxxx = κ⁴u; on a 32-point grid
    # (the solver simulates on 64: the tendency lives on the grid of its input)
    n, amplitude, viscosity = 32, 0.7, np.array([0.5, 1.2])
    solver = get_solver(name, resolution=32, simulation_resolution=64, viscosity=(0.1, 2.0),
                        dealias=dealias, final_time=0.1, record_interval=0.1, time_step=0.01)
    length = solver.config.domain_length if name == "kuramoto-sivashinsky" else 1.0
    x = length * np.arange(n) / n
    kappa = 2 * np.pi * mode / length
    u = amplitude * np.sin(kappa * x)
    if name == "kuramoto-sivashinsky":
        linear = kappa ** 2 - viscosity[:, None] * kappa ** 4
    else:
        linear = -viscosity[:, None] * kappa ** 2
    expected = linear * u - nonlinear * 0.5 * amplitude ** 2 * kappa * np.sin(2 * kappa * x)
    frames = np.broadcast_to(u, (2, 1, n))
    got = solver.tendency(frames, parameters={"viscosity": viscosity})
    assert got.shape == (2, 1, n)
    np.testing.assert_allclose(got[:, 0], expected, rtol=0, atol=1e-11 * np.abs(expected).max())


def _grid(n):
    coord = np.arange(n) / n
    return coord[None, :], coord[:, None]  # x, y of [y, x] arrays


@pytest.mark.parametrize("forcing", ["none", "fno"])
def test_navier_stokes_eigenmode_tendency_is_diffusion_plus_forcing(forcing):
    # Modes with |k|² = 2 (in units of (2π)²): ψ = ω / 8π², so u·∇ω = 0 exactly
    n, viscosity = 16, np.array([1e-3, 2e-2, 1e-3])
    x, y = _grid(n)
    mode = np.cos(2 * np.pi * x) * np.cos(2 * np.pi * y) + 0.5 * np.sin(2 * np.pi * (x - y))
    f = 0.1 * (np.sin(2 * np.pi * (x + y)) + np.cos(2 * np.pi * (x + y))) \
        if forcing == "fno" else 0.0
    omega = np.stack([mode, 3 * mode, np.zeros((n, n))])[:, None]
    solver = NavierStokes2D(resolution=16, simulation_resolution=32, viscosity=(1e-3, 1e-1),
                            forcing=forcing, final_time=0.1, record_interval=0.1,
                            time_step=0.01)
    got = solver.tendency(omega, parameters={"viscosity": viscosity})
    expected = -viscosity[:, None, None] * 8 * np.pi ** 2 * omega[:, 0] + f
    assert got.shape == (3, 1, n, n)
    np.testing.assert_allclose(got[:, 0], expected, rtol=0, atol=1e-13)


def test_navier_stokes_moving_forcing_is_evaluated_at_the_given_time():
    n, time = 16, 3.0
    amplitudes = np.zeros((1, 2, 6))
    amplitudes[0, 0, 0] = 1.0  # sin(2πx + φ)
    amplitudes[0, 1, 5] = 0.5  # cos(4π(x + y) + φ)
    solver = NavierStokes2D(**NavierStokes2D.TINY)
    got = solver.tendency(np.zeros((1, 1, n, n)), time=time,
                          parameters={"viscosity": [1e-3], "forcing_amplitude": amplitudes})
    x, y = _grid(n)
    phase = 0.2 * time
    expected = 0.1 * (np.sin(2 * np.pi * x + phase) + 0.5 * np.cos(4 * np.pi * (x + y) + phase))
    np.testing.assert_allclose(got[0, 0], expected, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="forcing_amplitude"):
        solver.tendency(np.zeros((1, 1, n, n)), parameters={"viscosity": [1e-3]})


def test_tendency_rejects_frames_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"\[batch, 1, x\]"):
        _ks(0.1).tendency(np.zeros((2, 32)), parameters={"viscosity": [1.0, 1.0]})
    with pytest.raises(ValueError, match=r"\[batch, 1, n, n\]"):
        NavierStokes2D(**NavierStokes2D.TINY).tendency(np.zeros((1, 1, 16, 8)))


def test_navier_stokes_coarser_time_step():
    faithful = NavierStokes2D(**{**NavierStokes2D.TINY, "time_step": 0.01})  # 10 per record
    assert faithful.coarser_time_step(2) == {"time_step": pytest.approx(0.02)}
    assert faithful.coarser_time_step(5) == {"time_step": pytest.approx(0.05)}
    with pytest.raises(ValueError, match="divides 10"):
        faithful.coarser_time_step(3)
    default = NavierStokes2D(**{**NavierStokes2D.TINY, "time_step": None})  # FNO's 1e-4
    assert default.coarser_time_step(4) == {"time_step": pytest.approx(4e-4)}
    cfl = NavierStokes2D(**{**NavierStokes2D.TINY, "time_stepping": "cfl", "time_step": None,
                            "cfl": 0.3})
    assert cfl.coarser_time_step(3) == {"cfl": pytest.approx(0.9),
                                        "time_step": pytest.approx(0.03)}


@pytest.mark.parametrize("time_stepping", ["faithful", "cfl"])
def test_coarsened_navier_stokes_keeps_the_record_interval(time_stepping):
    fine = NavierStokes2D(resolution=16, simulation_resolution=32, viscosity=1e-3,
                          forcing="fno", final_time=0.2, record_interval=0.1,
                          time_stepping=time_stepping, time_step=0.01, cfl=0.3)
    coarse = fine.coarsened(space=2, time=2)
    assert coarse.config.simulation_resolution == 16
    assert coarse.config.time_step == pytest.approx(0.02)
    assert coarse.config.cfl == pytest.approx(0.6 if time_stepping == "cfl" else 0.3)
    assert coarse.dt == fine.dt
    initial = fine.sample_inputs(seed=0, indices=[0])["initial"]
    a = fine.simulate(initial, 1, output_resolution=16)[0, -1]
    b = coarse.simulate(fine._restrict(initial, (16, 16)), 1)[0, -1]
    assert np.linalg.norm(a - b) < 0.1 * np.linalg.norm(a)


def test_euler_has_no_tendency_and_points_to_the_coarse_indicator():
    euler = get_solver("euler", **Euler2D.TINY)
    state = np.zeros((1, len(euler.fields), 16, 16))
    with pytest.raises(ValueError, match="coarse"):
        euler.tendency(state)
