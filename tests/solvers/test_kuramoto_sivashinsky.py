"""Kuramoto–Sivashinsky: ETDRK4 coefficients against high precision, fourth-order convergence,
conservation of the mean, the Kassam–Trefethen classic, the fast path against the NumPy
reference, reproducibility and bad input."""

import mpmath
import numpy as np
import pytest

from ssmpde.data import roles_of
from ssmpde.generation import generate
from ssmpde.solvers import get_solver
from ssmpde.solvers.kuramoto_sivashinsky import KuramotoSivashinsky
from ssmpde.solvers.spectral import etdrk4_coefficients


def high_precision(z: float, h: float = 1.0) -> list[float]:
    """Q, f1, f2, f3 of Kassam & Trefethen's eq. (2.5) at 50 digits (direct formulas are
    exact there: the cancellation costs digits mpmath has to spare)."""
    mpmath.mp.dps = 50
    z = mpmath.mpf(z)
    e = mpmath.e ** z
    return [float(v) for v in (h * (mpmath.e ** (z / 2) - 1) / z,
                               h * (-4 - z + e * (4 - 3 * z + z ** 2)) / z ** 3,
                               h * (2 + z + e * (-2 + z)) / z ** 3,
                               h * (-4 - 3 * z - z ** 2 + e * (4 - z)) / z ** 3)]


def test_contour_coefficients_agree_with_high_precision():
    # |hL| from 1e-8 to 1e2 (negative: dissipation; positive: KS's growing modes)
    values = np.concatenate([-np.logspace(-8, 2, 31), np.logspace(-8, 1, 19)])
    coefficients = etdrk4_coefficients(values, 1.0)
    worst = 0.0
    for i, z in enumerate(values):
        exact = high_precision(z)
        got = [coefficients[key][i] for key in ("Q", "f1", "f2", "f3")]
        worst = max(worst, max(abs(g - e) / abs(e) for g, e in zip(got, exact)))
    assert worst <= 1e-13, worst  # measured 4.7e-14
    np.testing.assert_allclose(coefficients["E"], np.exp(values), rtol=1e-15)


def smooth(n=64, length=22.0):
    x = length * np.arange(n) / n
    return (np.cos(2 * np.pi * x / length) + 0.5 * np.sin(4 * np.pi * x / length))[None, None]


def test_fourth_order_in_time():
    # measured: errors 1.5e-7, 1.1e-8, 7.7e-10, 5.0e-11; fitted order 3.84
    config = dict(resolution=64, simulation_resolution=64, domain_length=22.0, viscosity=1.0,
                  final_time=0.5, record_interval=0.5)
    u0 = smooth()
    reference = KuramotoSivashinsky(**config, time_step=1 / 4096).simulate(u0, 1)[0, -1, 0]
    steps = [1 / 16, 1 / 32, 1 / 64, 1 / 128]
    errors = [np.linalg.norm(KuramotoSivashinsky(**config, time_step=h).simulate(u0, 1)
                             [0, -1, 0] - reference) / np.linalg.norm(reference)
              for h in steps]
    order = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    assert abs(order - 4) < 0.3, (order, errors)


def test_mean_is_conserved_to_round_off(raise_on_fp_errors):
    ks = get_solver("kuramoto-sivashinsky", preset="lpsda", final_time=2.0)
    u0 = ks.initial_condition(3, [0, 1]) + np.array([[[0.7]], [[-0.2]]])
    frames = ks.simulate(u0, 20)
    means = frames.mean(axis=-1)[:, :, 0]
    np.testing.assert_allclose(means, means[:, :1].repeat(21, axis=1), rtol=0, atol=1e-13)


def test_fast_path_matches_the_numpy_reference():
    ks = KuramotoSivashinsky(resolution=64, simulation_resolution=64, domain_length=22.0,
                             viscosity=0.8, final_time=0.5, record_interval=0.5,
                             time_step=0.05)
    u0 = smooth()
    ours = ks.simulate(u0, 1)[0, -1, 0]
    u = np.fft.irfft(ks.reference_step(np.fft.rfft(u0[:, 0]), steps=10), 64)
    np.testing.assert_allclose(ours, u[0], rtol=0, atol=1e-12 * np.abs(u).max())


def test_kassam_trefethen_classic_against_a_converged_run():
    # The classic run (N = 128, h = 1/4, no dealiasing, as kursiv.m) against our converged
    # reference (N = 256, h = 1/256) at t = 30; measured agreement: 3.4e-05 relative.
    classic = get_solver("kuramoto-sivashinsky", preset="kassam-trefethen", final_time=30.0,
                         record_interval=30.0)
    fine = get_solver("kuramoto-sivashinsky", preset="kassam-trefethen", final_time=30.0,
                      record_interval=30.0, simulation_resolution=256, resolution=128,
                      time_step=1 / 256)
    coarse = classic.simulate(classic.initial_condition(0, [0]), 1)[0, -1, 0]
    converged = fine.simulate(fine.initial_condition(0, [0]), 1, output_resolution=128)[0, -1, 0]
    error = np.linalg.norm(coarse - converged) / np.linalg.norm(converged)
    assert error < 1e-4, error
    assert np.abs(converged).max() > 1.2  # the pattern has grown from |u0| <= 1.3 ... 1.48


def test_reproducible_for_batch_sizes_and_replays():
    config = dict(preset="lpsda", resolution=64, simulation_resolution=64, final_time=0.3,
                  viscosity=(0.075, 0.125))
    a = generate("kuramoto-sivashinsky", num_samples=7, seed=2, batch_size=1, progress=False,
                 **config)
    b = generate("kuramoto-sivashinsky", num_samples=7, seed=2, batch_size=7, progress=False,
                 **config)
    np.testing.assert_array_equal(a.u.values, b.u.values)
    assert a.u.dims == ("sample", "time", "x") and roles_of(a)["u"] == "state"
    np.testing.assert_allclose(a.x.values[1], 64.0 / 64)  # x_j = L j / N
    assert np.all((a.viscosity >= 0.075) & (a.viscosity <= 0.125))


@pytest.mark.parametrize("config, message", [
    (dict(viscosity=0.0), "viscosity must be a positive"),
    (dict(viscosity=-0.1), "viscosity must be a positive"),
    (dict(resolution=100), "must divide the simulation resolution"),
    (dict(time_step=0.03), "whole number of time steps"),
    (dict(final_time=0.25), "whole number of record intervals"),
    (dict(initial_condition="gaussian"), "unknown initial_condition"),
])
def test_bad_configs(config, message):
    with pytest.raises(ValueError, match=message):
        KuramotoSivashinsky(**config)
    with pytest.raises(ValueError, match="unknown kuramoto-sivashinsky preset"):
        get_solver("kuramoto-sivashinsky", preset="lpsda-nu0.2")


def test_a_too_large_step_is_caught():
    from ssmpde.solvers.base import SolverDivergedError

    ks = KuramotoSivashinsky(resolution=64, simulation_resolution=64, domain_length=22.0,
                             viscosity=1.0, final_time=40.0, record_interval=40.0,
                             time_step=5.0, dealias=False)
    with np.errstate(all="ignore"), pytest.raises(SolverDivergedError, match="time_step"):
        ks.simulate(30 * smooth(), 1)
