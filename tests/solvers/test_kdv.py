"""Korteweg–de Vries: exact one- and two-soliton solutions, fourth order in time, conservation
(the mean to round-off, ∫u² and the Hamiltonian to the truncation error), an independent
integration of the right-hand side, the Zabusky–Kruskal run, datasets, the command line and
bad input.

Exact solutions of u_t + 6 u u_x + u_xxx = 0 (Hirota's form u = 2 (log τ)_xx): one soliton,
u = (c/2) sech²(½√c (x − x0 − ct)); two solitons, τ = 1 + e^{η1} + e^{η2} + A e^{η1 + η2} with
η_i = k_i (x − x_i) − k_i³ t and A = ((k1 − k2) / (k1 + k2))²: speeds k_i², and after they meet
the faster is shifted forward, the slower back (the phase shifts, log(1/A) / k_i).
"""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from ssmpde.cli import main
from ssmpde.data import open_dataset, roles_of, validate
from ssmpde.generation import generate
from ssmpde.solvers import Stepper, get_solver
from ssmpde.solvers.kdv import KdV


def soliton(x, time, speed, position, length):
    """One soliton of u_t + 6 u u_x + u_xxx = 0, its nearest periodic image on [0, length)."""
    xi = (x - position - speed * time + length / 2) % length - length / 2
    return speed / 2 / np.cosh(np.sqrt(speed) / 2 * xi) ** 2


def two_solitons(x, time, k1, x1, k2, x2):
    """Hirota's two-soliton solution, u = 2 (τ τ_xx − τ_x²) / τ² (cancellation costs only
    absolute round-off: every term is of the size of τ²)."""
    e1, e2 = np.exp(k1 * (x - x1) - k1 ** 3 * time), np.exp(k2 * (x - x2) - k2 ** 3 * time)
    a = ((k1 - k2) / (k1 + k2)) ** 2
    tau = 1 + e1 + e2 + a * e1 * e2
    tau_x = k1 * e1 + k2 * e2 + a * (k1 + k2) * e1 * e2
    tau_xx = k1 ** 2 * e1 + k2 ** 2 * e2 + a * (k1 + k2) ** 2 * e1 * e2
    return 2 * (tau * tau_xx - tau_x ** 2) / tau ** 2


def textbook(n, length, final_time, time_step, records=1):
    """KdV in the textbook scaling b = 6, δ = 1, stored at the simulation resolution."""
    return KdV(resolution=n, simulation_resolution=n, domain_length=length, convection=6.0,
               dispersion=1.0, final_time=final_time, record_interval=final_time / records,
               time_step=time_step)


def invariants(frames, length, convection=1.0, dispersion=1.0):
    """Mean of u, of u² and of the Hamiltonian density b u³/6 − δ u_x²/2 over x."""
    n = frames.shape[-1]
    k = 2 * np.pi / length * np.fft.rfftfreq(n, 1.0 / n)
    k[-1] = 0.0
    u_x = np.fft.irfft(1j * k * np.fft.rfft(frames), n)
    energy = convection * frames ** 3 / 6 - dispersion * u_x ** 2 / 2
    return frames.mean(-1), (frames ** 2).mean(-1), energy.mean(-1)


def test_one_soliton_moves_at_its_speed_and_keeps_its_shape(raise_on_fp_errors):
    # c = 1 on L = 50, N = 256 (5 L √c: the spectrum at the 2/3 cutoff is below 1e-10), the
    # periodic tails 4 e^{−√c L / 2} = 6e-11: what is left is ETDRK4's time error, measured
    # 1.5e-8 at h = 0.01 (and shrinking as h⁴, see the next test). The soliton travels 10, a
    # fifth of the domain, in which time its profile would change by O(1) if it stood still.
    n, length, speed, final_time = 256, 50.0, 1.0, 10.0
    x = length * np.arange(n) / n
    u = textbook(n, length, final_time, 0.01).simulate(
        soliton(x, 0.0, speed, 15.0, length)[None, None], 1)[0, -1, 0]
    exact = soliton(x, final_time, speed, 15.0, length)
    assert np.abs(u - exact).max() < 5e-8 * speed / 2
    assert np.abs(soliton(x, 0.0, speed, 15.0, length) - exact).max() > 0.4
    assert x[np.argmax(u)] == pytest.approx(15.0 + speed * final_time, abs=length / n)


def test_lpsda_scaling_soliton_matches_the_general_formula():
    # u_t + b u u_x + δ u_xxx = 0 has u = (3c/b) sech²(½√(c/δ)(x − ct)): b = 1, δ = ¼, c = ½
    # (amplitude 1.5); measured error 2.8e-9 of the amplitude.
    n, length, speed, final_time = 256, 50.0, 0.5, 8.0
    x = length * np.arange(n) / n
    solver = KdV(resolution=n, simulation_resolution=n, domain_length=length, convection=1.0,
                 dispersion=0.25, final_time=final_time, record_interval=final_time,
                 time_step=0.01)

    def exact(time):
        xi = (x - 10.0 - speed * time + length / 2) % length - length / 2
        return 3 * speed / np.cosh(0.5 * np.sqrt(speed / 0.25) * xi) ** 2

    u = solver.simulate(exact(0.0)[None, None], 1)[0, -1, 0]
    assert np.abs(u - exact(final_time)).max() < 1e-8 * 3 * speed


def test_fourth_order_in_time_against_the_exact_soliton(raise_on_fp_errors):
    # measured max errors 3.0e-6, 1.9e-7, 1.1e-8, 6.8e-10 (amplitude ½): orders 3.95, 4.09,
    # 4.07; the spatial error and the tails (< 1e-10) are far below the finest
    n, length, speed, final_time = 256, 50.0, 1.0, 4.0
    x = length * np.arange(n) / n
    u0 = soliton(x, 0.0, speed, 15.0, length)[None, None]
    exact = soliton(x, final_time, speed, 15.0, length)
    steps = np.array([0.05, 0.025, 0.0125, 0.00625])
    errors = np.array([np.abs(textbook(n, length, final_time, h).simulate(u0, 1)[0, -1, 0]
                              - exact).max() for h in steps])
    orders = np.log2(errors[:-1] / errors[1:])
    assert np.all(np.abs(orders - 4) < 0.4), (orders, errors)


def test_two_solitons_collide_with_the_exact_phase_shifts(raise_on_fp_errors):
    # The fast soliton (k = 1.2) starts 12 behind the slow one (k = 0.8), overtakes it near
    # t = 15 and leaves it; at t = 25 they are apart again, each shifted (by +2.7 and −4.0)
    # from where it would be alone. Tails at the ends stay below 3e-13. Measured: 2.7e-8 at
    # h = 0.005 (time error; 5.7e-7 at 0.01); without the interaction the profile would be
    # off by 0.87 of the peak.
    n, length, final_time = 512, 100.0, 25.0
    x = length * np.arange(n) / n
    u0 = two_solitons(x, 0.0, 1.2, 25.0, 0.8, 37.0)
    exact = two_solitons(x, final_time, 1.2, 25.0, 0.8, 37.0)
    u = textbook(n, length, final_time, 0.005).simulate(u0[None, None], 1)[0, -1, 0]
    assert np.abs(u - exact).max() < 1e-7 * exact.max()
    alone = soliton(x, final_time, 1.44, 25.0, length) + soliton(x, final_time, 0.64, 37.0,
                                                                  length)
    assert np.abs(alone - exact).max() > 0.5 * exact.max()


def test_mass_to_round_off_and_the_other_invariants_to_the_truncation_error(
        raise_on_fp_errors):
    # Two random LPSDA states (max|u| 4.2) on the preset's grid for t = 20. ETDRK4 does not
    # conserve ∫u² and H exactly; their drift is its truncation error: measured 5.0e-7 and
    # 2.9e-6 at h = 0.02, 1.8e-8 and 8.2e-8 at h = 0.01 (ratios 28 and 35: fourth order
    # and better), the mean to 1.5e-16.
    drifts = []
    for h in (0.02, 0.01):
        solver = get_solver("kdv", preset="lpsda", resolution=512, final_time=20.0,
                            record_interval=2.0, time_step=h)
        frames = solver.simulate(solver.initial_condition(0, [0, 1]), 10)[:, :, 0]
        mean, square, energy = invariants(frames, solver.config.domain_length)
        np.testing.assert_allclose(mean, mean[:, :1].repeat(11, axis=1), rtol=0,
                                   atol=1e-14 * np.abs(frames).max())
        drifts.append([np.abs(square / square[:, :1] - 1).max(),
                       np.abs(energy / energy[:, :1] - 1).max()])
        assert solver.checks.failure(frames[:, -2, None], frames[:, -1, None],
                                     solver.fields) is None
    coarse, fine = np.array(drifts)
    assert np.all(coarse / fine > 12), drifts  # order > 3.6
    assert fine[0] < 5e-8 and fine[1] < 2.5e-7, drifts


@pytest.mark.parametrize("dealias", [True, False])
def test_agrees_with_an_independent_integration_of_the_tendency(dealias):
    # scipy's DOP853 (rtol = atol = 1e-12) on the plain NumPy right-hand side: measured
    # 3.7e-11 relative at h = 0.005 (5.5e-10 at 0.01: ETDRK4's own fourth-order error).
    solver = KdV(resolution=64, simulation_resolution=64, domain_length=32.0, final_time=2.0,
                 record_interval=2.0, time_step=0.005, dealias=dealias)
    u0 = solver.initial_condition(4, [0, 1])
    solution = solve_ivp(lambda t, y: solver.tendency(y.reshape(2, 1, 64)).ravel(), (0.0, 2.0),
                         u0.ravel(), method="DOP853", rtol=1e-12, atol=1e-12)
    reference = solution.y[:, -1].reshape(2, 64)
    ours = solver.simulate(u0, 1)[:, -1, 0]
    assert np.abs(ours - reference).max() < 2e-10 * np.abs(reference).max()


@pytest.mark.parametrize("mode, dealias, nonlinear", [(2, True, True), (6, True, False),
                                                      (6, False, True)])
def test_tendency_of_a_single_mode_matches_hand_derivatives(mode, dealias, nonlinear):
    # u = A sin κx: u u_x = ½A²κ sin 2κx, u_xxx = −κ³A cos κx; 2·6 > 32/3 is dealiased away
    n, amplitude, convection, dispersion = 32, 0.7, 3.0, 0.5
    solver = KdV(resolution=32, simulation_resolution=64, domain_length=20.0,
                 convection=convection, dispersion=dispersion, dealias=dealias,
                 final_time=0.1, record_interval=0.1, time_step=0.01)
    kappa = 2 * np.pi * mode / 20.0
    x = 20.0 * np.arange(n) / n
    u = amplitude * np.sin(kappa * x)
    expected = dispersion * kappa ** 3 * amplitude * np.cos(kappa * x) \
        - nonlinear * convection * 0.5 * amplitude ** 2 * kappa * np.sin(2 * kappa * x)
    got = solver.tendency(np.broadcast_to(u, (2, 1, n)))
    np.testing.assert_allclose(got[:, 0], np.broadcast_to(expected, (2, n)), rtol=0,
                               atol=1e-12 * np.abs(expected).max())


def test_zabusky_kruskal_against_a_converged_run():
    # cos πx on [0, 2), δ = 0.022²: the wave steepens (t_B = 1/π) and breaks into a train of
    # solitons, the tallest about 2.3 at t = 1.2 (3.8 t_B). The preset (N = 256, h = 2e-4)
    # against N = 512, h = 1e-4: measured 1.0e-7 relative at t = 1.2 (7.9e-7 at t = 0.6).
    preset = get_solver("kdv", preset="zabusky-kruskal", resolution=128, record_interval=0.6)
    fine = get_solver("kdv", preset="zabusky-kruskal", resolution=128, record_interval=0.6,
                      simulation_resolution=512, time_step=1e-4)
    coarse = preset.simulate(preset.initial_condition(0, [0]), 2, output_resolution=128)
    converged = fine.simulate(fine.initial_condition(0, [0]), 2, output_resolution=128)
    error = np.abs(coarse - converged).max() / np.abs(converged).max()
    assert error < 3e-6, error
    assert 2.0 < converged[0, -1].max() < 2.6


def test_datasets_roles_reproducibility_and_the_stepper_contract():
    options = dict(preset="lpsda", resolution=64, simulation_resolution=128, final_time=0.8,
                   time_step=0.02)
    a = generate("kdv", num_samples=5, seed=2, batch_size=1, progress=False, **options)
    b = generate("kdv", num_samples=5, seed=2, batch_size=5, progress=False, **options)
    np.testing.assert_array_equal(a.u.values, b.u.values)
    validate(b, check_finite=True)
    assert roles_of(b) == {"u": "state"} and b.u.dims == ("sample", "time", "x")
    np.testing.assert_allclose(b.x.values, 128.0 * np.arange(64) / 64)  # x_j = L j / N
    np.testing.assert_allclose(b.time.values, [0.0, 0.4, 0.8])
    solver = get_solver("kdv", **{k: v for k, v in options.items() if k != "preset"},
                        domain_length=128.0)
    assert isinstance(solver, Stepper) and solver.dt == 0.4 and solver.parameter_names == ()
    # a step from the stored (coarser) grid continues the stored trajectory
    frames = b.u.values[:, :, None]
    np.testing.assert_allclose(solver.step(frames[:, 1:2]), frames[:, 2], rtol=0,
                               atol=1e-10 * np.abs(frames).max())  # measured 1.1e-15
    lpsda = get_solver("kdv", preset="lpsda")
    assert lpsda.grid == (256,) and lpsda.simulation_grid == (512,) and lpsda.num_records == 250


def test_generate_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "kdv.nc"
    assert main(["generate", "kdv", "--samples", "2", "--out", str(out), "--no-progress",
                 "--resolution", "32", "--simulation-resolution", "32", "--domain-length",
                 "32", "--time", "0.8", "--record-interval", "0.4", "--time-step", "0.05"]) == 0
    with open_dataset(out) as ds:
        assert ds.u.shape == (2, 3, 32) and ds.attrs["ssmpde_equation"] == "kdv"


@pytest.mark.parametrize("options, message", [
    (dict(dispersion=0.0), "dispersion must be a positive"),
    (dict(convection=-6.0), "convection must be a positive"),
    (dict(resolution=100), "must be an even divisor of the simulation resolution"),
    (dict(time_step=0.03), "whole number of time steps"),
    (dict(initial_condition="soliton"), "unknown initial_condition"),
    (dict(lmax=1), "lmax must be an integer >= 2"),
    (dict(dealias="no"), "dealias must be True or False"),
])
def test_bad_configs(options, message):
    with pytest.raises(ValueError, match=message):
        KdV(**options)


def test_a_too_large_step_is_caught():
    from ssmpde.solvers.base import SolverDivergedError

    solver = KdV(resolution=64, simulation_resolution=64, domain_length=32.0, final_time=40.0,
                 record_interval=40.0, time_step=2.0)
    with np.errstate(all="ignore"), pytest.raises(SolverDivergedError, match="time_step 2 "):
        solver.simulate(3 * solver.initial_condition(0, [0]), 1)
