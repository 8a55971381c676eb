"""Burgers1D: Cole–Hopf exact solutions, conservation, fourth order in time, the NumPy oracle,
per-sample reproducibility, bad input and the dataset layout.

Cole–Hopf: u = −2ν φ_x / φ with φ_t = ν φ_xx. For u0 = sin 2πx, φ0 = exp(−(1 − cos 2πx)/(4πν))
= e^{−a} [I_0(a) + 2 Σ_n I_n(a) cos 2πnx], a = 1/(4πν); each mode decays as exp(−4π²n²νt).
The e^{−a} factor cancels in φ_x/φ, so the scaled Bessel functions ``ive`` keep it finite.
"""

import numpy as np
import pytest
from scipy.special import ive

from ssmpde.data import roles_of, validate
from ssmpde.generation import generate
from ssmpde.solvers import get_solver
from ssmpde.solvers.burgers import Burgers1D


def cole_hopf(x: np.ndarray, viscosity: float, time: float, modes: int = 400) -> np.ndarray:
    """Exact u(x, t) for u0 = sin 2πx."""
    a = 1.0 / (4 * np.pi * viscosity)
    n = np.arange(1, modes)
    with np.errstate(under="ignore"):  # the far modes underflow to 0, harmlessly
        c = ive(n, a) * np.exp(-4 * np.pi ** 2 * n ** 2 * viscosity * time)
    phase = 2 * np.pi * np.outer(x, n)
    phi = ive(0, a) + 2 * np.cos(phase) @ c
    phi_x = -2 * (2 * np.pi * n * np.sin(phase)) @ c
    return -2 * viscosity * phi_x / phi


def sine_run(n: int, viscosity: float, final_time: float, time_step: float,
             records: int = 1) -> np.ndarray:
    """Frames ``[records + 1, n]`` of the solver from u0 = sin 2πx."""
    solver = Burgers1D(resolution=n, simulation_resolution=n, viscosity=viscosity,
                       final_time=final_time, record_interval=final_time / records,
                       time_step=time_step)
    x = np.arange(n) / n
    return solver.simulate(np.sin(2 * np.pi * x)[None, None], records)[0, :, 0]


@pytest.mark.parametrize("viscosity, final_time, n, time_step", [
    (0.1, 1.0, 128, 1e-3),
    (0.01, 0.2, 512, 1e-4),
    (0.01, 0.5, 512, 1e-4),
])
def test_matches_the_cole_hopf_solution(viscosity, final_time, n, time_step,
                                        raise_on_fp_errors):
    u = sine_run(n, viscosity, final_time, time_step)[-1]
    exact = cole_hopf(np.arange(n) / n, viscosity, final_time)
    error = np.abs(u - exact).max() / np.abs(exact).max()
    # measured: 1.1e-12 (ν = 0.1), 6.8e-11 (ν = 0.01, t = 0.2, just after the front forms at
    # t = 1/2π), 3.5e-13 (t = 0.5)
    assert error < 1e-8


def test_spatial_mean_is_conserved_to_round_off(raise_on_fp_errors):
    solver = Burgers1D(resolution=256, simulation_resolution=256, viscosity=0.02,
                       final_time=0.5, record_interval=0.05, time_step=5e-4)
    u0 = solver.initial_condition(5, [0, 1, 2]) + np.array([0.0, 0.3, -1.1])[:, None, None]
    frames = solver.simulate(u0, solver.num_records)
    means = frames.mean(axis=-1)[:, :, 0]
    scale = np.abs(frames).max()
    np.testing.assert_allclose(means, np.broadcast_to(means[:, :1], means.shape),
                               rtol=0, atol=1e-14 * scale)
    assert solver.checks.failure(frames[:, -2], frames[:, -1], solver.fields) is None


def test_fourth_order_in_time(raise_on_fp_errors):
    n, viscosity, final_time = 128, 0.05, 0.4
    reference = sine_run(n, viscosity, final_time, final_time / 640)[-1]
    steps = np.array([0.02, 0.01, 0.005, 0.0025])
    errors = np.array([np.abs(sine_run(n, viscosity, final_time, h)[-1] - reference).max()
                       for h in steps])
    order = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert abs(order - 4) < 0.3, (order, errors)


def test_fast_path_equals_the_numpy_reference(raise_on_fp_errors):
    n, h = 256, 1e-3
    solver = Burgers1D(resolution=n, simulation_resolution=n, viscosity=(0.01, 0.05),
                       final_time=10 * h, record_interval=10 * h, time_step=h,
                       alpha=2.5, tau=7.0, sigma=49.0)
    inputs = solver.sample_inputs(2, [0, 1, 2])
    fast = solver.solve_batch(inputs)["u"][:, -1]
    parameters = {"viscosity": inputs["viscosity"]}
    # Kassam & Trefethen's 32 contour points (the fast path takes 64)
    v_hat = solver.reference_step(np.fft.rfft(inputs["initial"][:, 0]), parameters, steps=10,
                                  contour_points=32)
    slow = np.fft.irfft(v_hat, n=n)
    assert np.abs(fast - slow).max() < 1e-12 * np.abs(slow).max()
    # without dealiasing the two paths agree just as well
    raw = Burgers1D(**{**solver.config_dict(), "viscosity": (0.01, 0.05), "dealias": False})
    undealiased = raw.solve_batch(inputs)["u"][:, -1]
    v_hat = raw.reference_step(np.fft.rfft(inputs["initial"][:, 0]), parameters, steps=10,
                               contour_points=32)
    assert np.abs(undealiased - np.fft.irfft(v_hat, n=n)).max() < 1e-12 * np.abs(slow).max()


def test_samples_do_not_depend_on_the_batch_size():
    options = dict(resolution=32, simulation_resolution=128, viscosity=(0.02, 0.1),
                   final_time=0.1, record_interval=0.05, time_step=1e-3)
    one = generate("burgers", num_samples=7, seed=11, batch_size=1, progress=False, **options)
    seven = generate("burgers", num_samples=7, seed=11, batch_size=7, progress=False, **options)
    for name in ("u", "viscosity"):
        np.testing.assert_array_equal(one[name].values, seven[name].values)
    assert len(np.unique(seven.viscosity.values)) == 7


def test_dataset_roles_dims_and_presets():
    ds = generate("burgers", num_samples=2, seed=0, progress=False, resolution=64,
                  simulation_resolution=256, final_time=0.2, record_interval=0.1,
                  time_step=1e-3)
    validate(ds, check_finite=True)
    assert roles_of(ds) == {"u": "state", "viscosity": "parameter"}
    assert ds.u.dims == ("sample", "time", "x") and ds.u.shape == (2, 3, 64)
    assert ds.viscosity.dims == ("sample",)
    np.testing.assert_allclose(ds.x.values, np.arange(64) / 64)
    np.testing.assert_allclose(ds.time.values, [0.0, 0.1, 0.2])
    fno = get_solver("burgers", preset="fno")
    assert fno.grid == (1024,) and fno.simulation_grid == (8192,) and fno.num_records == 1
    script = get_solver("burgers", preset="fno-script")
    assert script.num_records == 200 and script.grid == (1024,)
    assert script.config.viscosity == 1e-3 and script.config.sigma == 49.0


def test_stored_frames_are_strided_from_the_simulation_grid():
    fine = Burgers1D(resolution=128, simulation_resolution=128, viscosity=0.05,
                     final_time=0.1, record_interval=0.1, time_step=1e-3)
    coarse = Burgers1D(**{**fine.config_dict(), "resolution": 32})
    inputs = fine.sample_inputs(0, [0])
    np.testing.assert_array_equal(coarse.solve_batch(inputs)["u"],
                                  fine.solve_batch(inputs)["u"][..., ::4])


@pytest.mark.parametrize("options, message", [
    (dict(viscosity=0.0), "viscosity must be a positive finite number"),
    (dict(viscosity=-0.1), "viscosity must be a positive finite number"),
    (dict(viscosity=(0.1, 0.01)), r"viscosity range must be \(low, high\)"),
    (dict(resolution=300), ("stored resolution 300 must be an even divisor of the simulation "
                            "resolution 8192")),
    (dict(simulation_resolution=1001), "simulation_resolution must be an even integer"),
    (dict(time_step=3e-4), "record_interval must be a whole number of time steps"),
    (dict(final_time=1.5, record_interval=1.0), "final_time must be a whole number of record"),
    (dict(time_step=0.0), "time_step must be a positive finite number"),
    (dict(dealias="yes"), "dealias must be True or False"),
])
def test_bad_configurations_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        Burgers1D(**options)


def test_bad_names_and_parameters():
    with pytest.raises(ValueError, match="Did you mean 'fno'"):
        get_solver("burgers", preset="fn")
    with pytest.raises(TypeError, match="burgers option"):
        get_solver("burgers", visocity=0.1)
    solver = Burgers1D(resolution=16, simulation_resolution=16, viscosity=(0.1, 0.2),
                       final_time=0.01, record_interval=0.01, time_step=0.01)
    history = np.zeros((2, 1, 1, 16))
    with pytest.raises(ValueError, match="draws 'viscosity' per sample"):
        solver.step(history)
    with pytest.raises(ValueError, match="viscosity must be positive"):
        solver.step(history, parameters={"viscosity": [0.1, -0.1]})


def test_restarts_keep_the_etdrk4_operator(monkeypatch):
    # A hybrid rollout restarts the solver every step: the contour coefficients (dearer than a
    # record interval of steps) are computed once per batch size and operator, and a restart
    # gives the numbers a fresh solver gives.
    from ssmpde.solvers import spectral

    calls = []
    original = spectral.etdrk4_coefficients

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(spectral, "etdrk4_coefficients", counting)
    options = dict(resolution=32, simulation_resolution=32, viscosity=(0.05, 0.1),
                   final_time=0.02, record_interval=0.01, time_step=0.005)
    solver = Burgers1D(**options)
    history = solver.sample_inputs(0, [0, 1])["initial"][:, None]
    viscosity = {"viscosity": np.array([0.05, 0.07])}
    first = solver.step(history, parameters=viscosity)
    assert len(calls) == 2  # one contour evaluation per distinct viscosity
    again = solver.step(history, parameters=viscosity)
    assert len(calls) == 2
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, Burgers1D(**options).step(history,
                                                                   parameters=viscosity))
    solver.step(history, parameters={"viscosity": np.array([0.05, 0.08])})
    solver.step(history[:1], parameters={"viscosity": np.array([0.05])})
    assert len(calls) == 2 + 2 + 2 + 1  # a new operator, the fresh solver's, a new batch
