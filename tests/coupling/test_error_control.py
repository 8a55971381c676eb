"""Hybrid rollouts that pay their way: the coarse-solver baseline, error-controlled adaptive
schedules with their indicators, and parareal with a learned (here: stand-in) coarse
propagator."""

from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest

from ssmpde.coupling import hybrid_rollout, parse_schedule, rollout
from ssmpde.coupling.baseline import coarse_baselines, parse_coarsening, solver_run
from ssmpde.coupling.schedules import Adaptive, CheckedAdaptive, Parareal
from ssmpde.coupling.indicators import indicator_quality, make_indicator
from ssmpde.coupling.parareal import parareal
from ssmpde.plotting import pareto_front, plot_pareto
from ssmpde.solvers import get_solver

# KS on a 32-point grid integrated on 64 points (stored = simulation grid / 2).
KS = dict(resolution=32, simulation_resolution=64, domain_length=22.0, viscosity=1.0,
          final_time=4.0, record_interval=0.5, time_step=0.05)


class Perturbed:
    """A stand-in surrogate: one step of ``base`` plus relative noise of size ``eps`` (a
    number, or a sequence cycled through call by call). The noise is a function of the
    input frame, so the same input gives the same output, as a trained model's does."""

    window = 1
    fields = ("u",)
    parameter_names = ("viscosity",)

    def __init__(self, base, eps):
        self.base, self.eps, self.dt = base, eps, base.dt
        self.calls = 0

    def step(self, history, *, time=0.0, parameters=None):
        frame = self.base.step(history, time=time, parameters=parameters)
        eps = self.eps[self.calls % len(self.eps)] if np.ndim(self.eps) else self.eps
        self.calls += 1
        seed = int.from_bytes(np.asarray(history[:, -1]).tobytes()[-8:], "little")
        noise = np.random.default_rng(seed).standard_normal(frame.shape)
        return frame + eps * noise * np.sqrt(np.mean(frame ** 2, axis=(1, 2), keepdims=True))


@pytest.fixture(scope="module")
def ks():
    solver = get_solver("kuramoto-sivashinsky", **KS)
    initial = solver.simulate(solver.sample_inputs(0, range(3))["initial"], 2,
                              output_resolution=32)[:, -1]  # past the initial transient
    return solver, initial[:, None]


def test_parse_schedule_error_control_and_parareal():
    assert parse_schedule("adaptive:1e-3") == Adaptive(1e-3, None)
    assert parse_schedule("adaptive:0.1:coarse") == Adaptive(0.1, "coarse")
    assert parse_schedule("adaptive:inf") == Adaptive(float("inf"), None)
    assert parse_schedule("parareal:4") == Parareal(4, None, 1e-6)
    assert parse_schedule("parareal:4:2:1e-3") == Parareal(4, 2, 1e-3)
    assert parse_schedule("adaptive") == CheckedAdaptive()
    for bad, match in (("adaptive:x", "not a number"), ("adaptive:-1", ">= 0"),
                       ("adaptive:0.1:magic", "unknown error indicator"),
                       ("parareal", "parareal:SLICES"), ("parareal:0", "at least one slice"),
                       ("parareal:2.5", "not a number")):
        with pytest.raises(ValueError, match=match):
            parse_schedule(bad)


def test_adaptive_tolerance_zero_is_the_solver_and_infinity_the_surrogate(ks):
    solver, history = ks
    for indicator in ("residual", "coarse"):
        alone = hybrid_rollout(solver, Perturbed(solver, 0.01), history, 6, "solver",
                               reference=None)
        zero = hybrid_rollout(solver, Perturbed(solver, 0.01), history, 6,
                              f"adaptive:0:{indicator}", reference=None)
        np.testing.assert_array_equal(zero.frames, alone.frames)
        assert zero.source == ["solver"] * 6
        model = hybrid_rollout(solver, Perturbed(solver, 0.01), history, 6, "surrogate",
                               reference=None)
        infinite = hybrid_rollout(solver, Perturbed(solver, 0.01), history, 6,
                                  f"adaptive:inf:{indicator}", reference=None)
        np.testing.assert_array_equal(infinite.frames, model.frames)
        assert infinite.source == ["surrogate"] * 6


def test_adaptive_accepts_exactly_the_proposals_below_the_tolerance(ks):
    solver, history = ks
    # Good and bad proposals alternate: 1e-4 and 3e-2 relative noise.
    surrogate = Perturbed(solver, [1e-4, 3e-2])
    result = hybrid_rollout(solver, surrogate, history, 8, "adaptive:3e-3:coarse")
    for source, estimate, reason in zip(result.source, result.estimates, result.reasons):
        if source == "surrogate":
            assert estimate < 3e-3 and reason is None
        else:
            assert source == "fallback" and estimate >= 3e-3 and "tolerance" in reason
    assert result.source == ["surrogate", "fallback"] * 4
    assert result.seconds["indicator"] > 0
    # Control keeps the error near the good proposals', far below the bad ones'.
    loose = hybrid_rollout(solver, Perturbed(solver, [1e-4, 3e-2]), history, 8, "surrogate")
    assert result.errors[-1] < 0.1 * loose.errors[-1]


@pytest.mark.parametrize("name", ["residual", "coarse"])
def test_indicators_rank_the_true_one_step_error(ks, name):
    """Over proposals whose error spans three decades, each indicator's estimate is nearly a
    monotone function of the true error (Spearman ρ > 0.9)."""
    solver, history = ks
    trajectories = np.concatenate([history, rollout(solver, history, 12)], axis=1)
    levels = np.geomspace(1e-5, 1e-1, 7)
    surrogate = Perturbed(solver, levels)
    quality = indicator_quality(solver, surrogate, trajectories,
                                {name: make_indicator(name, solver)})
    assert quality["states"] == 3 * 12
    assert quality["indicators"][name]["spearman"] > 0.9
    # An exact step: the coarse solver agrees to its own error; the residual's floor is the
    # trapezoidal rule's local error, third order in the step on the simulation grid while
    # |ν k⁴ dt| is small, reduced towards first order by the stiff modes as dt shrinks (at
    # dt = 0.025 the 64-point grid's top mode has ν k⁴ dt ≈ 170). On a coarser stored grid
    # the tendency's spatial error adds a first-order floor.
    exact = make_indicator(name, solver)(history, solver.step(history), time=0.0,
                                         parameters=None)
    if name == "coarse":
        assert np.all(exact < 1e-3)
    else:
        floors = []
        for interval in (0.1, 0.05, 0.025):
            fine = get_solver("kuramoto-sivashinsky", **{**KS, "record_interval": interval,
                                                         "time_step": 0.0025, "resolution": 64})
            start = fine.to_simulation_grid(history[:, 0])[:, None]
            step = fine.step(start)
            floors.append(np.mean(make_indicator(name, fine)(start, step, time=0.0,
                                                             parameters=None)))
        orders = np.log2(np.array(floors[:-1]) / floors[1:])
        assert orders[0] > 2.5 and np.all(orders > 2.0), orders


def test_indicator_errors():
    solver = get_solver("kuramoto-sivashinsky", **KS)
    with pytest.raises(ValueError, match="unknown error indicator"):
        make_indicator("oracle", solver)
    with pytest.raises(ValueError, match="second surrogate"):
        make_indicator("ensemble", solver)
    from ssmpde.solvers.base import get_solver_class

    euler = get_solver("euler", **get_solver_class("euler").TINY)
    with pytest.raises(ValueError, match="indicator='coarse'"):
        make_indicator("residual", euler)


def test_parareal_with_as_many_iterations_as_slices_is_the_fine_solution(ks):
    solver, history = ks
    surrogate = Perturbed(solver.coarsened(space=2, time=5), 1e-3)
    frames, info = parareal(solver, surrogate, history, 12, slices=4, tolerance=0.0)
    # The fine propagator slice after slice, bit for bit.
    chain, start = [], history
    for length in (3, 3, 3, 3):
        part, _ = solver_run(solver, start, length)
        chain.append(part)
        start = part[:, -1:]
    np.testing.assert_array_equal(frames, np.concatenate(chain, axis=1))
    assert info.iterations == 4 and info.converged
    # Slices already exact are not recomputed: 4 + 3 + 2 + 1 slice runs of 3 steps.
    assert info.fine_steps == 3 * (4 + 3 + 2 + 1)
    # ... and close to one continuous run (restarts through the stored grid cost little).
    whole, _ = solver_run(solver, history, 12)
    assert np.max(np.abs(frames - whole)) < 1e-3 * np.max(np.abs(whole))


def test_parareal_converges_and_stops_at_its_tolerance(ks):
    """With a smooth coarse propagator (the solver on half the grid with 5x longer steps),
    one correction cuts the error at the horizon tenfold; the tolerance stops the
    iterations."""
    solver, history = ks
    coarse = Perturbed(solver.coarsened(space=2, time=5), 0.0)
    fine, _ = parareal(solver, coarse, history, 12, slices=4)  # exact
    errors = []
    for iterations in range(3):
        frames, info = parareal(solver, coarse, history, 12, slices=4,
                                max_iterations=iterations, tolerance=0.0)
        errors.append(np.linalg.norm(frames[:, -1] - fine[:, -1])
                      / np.linalg.norm(fine[:, -1]))
    assert errors[0] > 1e-5 and errors[1] < 0.1 * errors[0] and errors[2] < errors[0]
    _, info = parareal(solver, coarse, history, 12, slices=4, tolerance=1e-5)
    assert info.converged and info.iterations == 2
    assert info.changes[0] > 1e-5 >= info.changes[1]


def test_parareal_fine_slices_in_worker_processes_match(ks):
    solver, history = ks
    serial, _ = parareal(solver, Perturbed(solver, 1e-3), history, 8, slices=4,
                         max_iterations=2)
    with ProcessPoolExecutor(2) as pool:
        parallel, info = parareal(solver, Perturbed(solver, 1e-3), history, 8, slices=4,
                                  max_iterations=2, executor=pool)
    assert info.workers == 2 and info.fine_steps == 8 + 6
    np.testing.assert_allclose(parallel, serial, rtol=0, atol=1e-12 * np.abs(serial).max())


def test_parareal_worker_solvers_are_kept_by_config_not_by_object_id(ks, monkeypatch):
    """A worker thread keeps the solvers it rebuilds. Keyed by the solver object's id, a
    reused id (forced here: every object gets id 0) handed a later run the solver of another
    configuration; keyed by the configuration, each run gets its own."""
    from ssmpde.coupling import parareal as module

    solver, history = ks
    other = get_solver("kuramoto-sivashinsky", **{**KS, "viscosity": 0.5})
    monkeypatch.setattr(module, "id", lambda obj: 0, raising=False)
    monkeypatch.setattr(module, "_SOLVERS", {})
    with ThreadPoolExecutor(1) as pool:  # one worker thread: the runs share its solvers
        for fine in (solver, other):
            serial, _ = parareal(fine, Perturbed(fine, 1e-3), history, 4, slices=2)
            parallel, _ = parareal(fine, Perturbed(fine, 1e-3), history, 4, slices=2,
                                   executor=pool)
            np.testing.assert_allclose(parallel, serial, rtol=0,
                                       atol=1e-12 * np.abs(serial).max())
    assert len(module._SOLVERS) == 2


def test_parareal_input_errors(ks):
    solver, history = ks
    surrogate = Perturbed(solver, 0)
    with pytest.raises(ValueError, match="slices must be an integer in 1..5"):
        parareal(solver, surrogate, history, 5, slices=6)
    with pytest.raises(ValueError, match="max_iterations"):
        parareal(solver, surrogate, history, 5, slices=2, max_iterations=-1)


def test_coarse_baselines_are_timed_and_measured(ks):
    solver, history = ks
    reference, seconds = solver_run(solver, history, 6)
    assert seconds > 0
    rows = coarse_baselines(solver, history, 6, reference=reference)
    labels = [r["schedule"] for r in rows]
    # 64 -> 32 points is the only space factor the 32-point stored grid allows.
    assert labels[0] == "coarse 2x1 (grid 32, dt 0.05)"
    assert all(r["space"] in (1, 2) for r in rows)
    for row in rows:
        assert row["seconds"] > 0 and 0 < row["final_rel_l2"] < 1
        # Independent check of the error: the coarse solver run directly.
        coarse = solver.coarsened(space=row["space"], time=row["time"])
        frames = coarse.simulate(history[:, -1], 6)[:, -1]
        expected = np.mean(np.linalg.norm((frames - reference[:, -1])[:, 0], axis=-1)
                           / np.linalg.norm(reference[:, -1, 0], axis=-1))
        assert row["final_rel_l2"] == pytest.approx(expected, rel=1e-10)
    # Longer steps are less accurate (ETDRK4 is fourth order in time).
    by_time = {r["time"]: r["final_rel_l2"] for r in rows if r["space"] == 1}
    assert by_time[2] < by_time[5]
    bad = coarse_baselines(solver, history, 2, reference=reference[:, :2],
                           coarsenings=["4x1"])
    assert "does not divide" in bad[0]["failed"]
    with pytest.raises(ValueError, match="SPACExTIME"):
        parse_coarsening("2")


def test_pareto_front_and_figure(tmp_path):
    rows = [{"schedule": "solver", "kind": "solver", "final_rel_l2": 0.0, "seconds": 1.0},
            {"schedule": "a", "kind": "coarse", "final_rel_l2": 0.1, "seconds": 0.1},
            {"schedule": "b", "kind": "surrogate", "final_rel_l2": 0.2, "seconds": 0.2},
            {"schedule": "c", "kind": "adaptive", "final_rel_l2": 0.01, "seconds": 0.5},
            {"schedule": "d", "kind": "fixed", "failed": "diverged"}]
    assert [r["schedule"] for r in pareto_front(rows)] == ["a", "c", "solver"]
    path = plot_pareto(tmp_path / "p.png", rows, title="t")
    assert path.stat().st_size > 10_000
    with pytest.raises(ValueError, match="at least one row"):
        plot_pareto(tmp_path / "q.png", rows[-1:])


def test_against_coarse_names_the_best_or_the_coarse_row_that_wins():
    from ssmpde.coupling.baseline import against_coarse

    fine = {"schedule": "solver, one run", "kind": "solver", "final_rel_l2": 0.0,
            "seconds": 1.0}
    coarse = {"schedule": "coarse 2x1", "kind": "coarse", "final_rel_l2": 0.02,
              "seconds": 0.3}
    good = {"schedule": "adaptive:0.001", "kind": "adaptive", "final_rel_l2": 0.005,
            "seconds": 0.2}
    slow = {"schedule": "parareal:5:1", "kind": "parareal", "final_rel_l2": 0.001,
            "seconds": 2.0}
    verdict = against_coarse([fine, coarse, good, slow])
    # The adaptive row beats every solver run as fast; the parareal row is more accurate but
    # slower than the fine solver, which is exact: it never pays its way.
    assert verdict["best"] is good and "adaptive:0.001" in verdict["summary"]
    verdict = against_coarse([fine, coarse, slow])
    assert verdict["best"] is None and verdict["dominated_by"] is fine
    bad = dict(good, final_rel_l2=0.05, seconds=0.5)
    verdict = against_coarse([fine, coarse, bad])
    assert verdict["best"] is None and verdict["dominated_by"] is coarse
    assert "no surrogate-based configuration beats" in verdict["summary"]
    assert "50% of the fine solver" in verdict["summary"]


def test_error_controlled_and_parareal_rollouts_export_their_accounting(ks, tmp_path):
    import json

    from ssmpde.coupling import to_dataset
    from ssmpde.data import open_dataset, save

    solver, history = ks
    for schedule, key in (("adaptive:3e-3:coarse", "error_estimates"),
                          ("parareal:2:1", "parareal")):
        result = hybrid_rollout(solver, Perturbed(solver, [1e-4, 3e-2]), history, 4,
                                schedule)
        ds = to_dataset(result, solver=solver, schedule=schedule)
        save(ds, tmp_path / "r.nc", overwrite=True)
        with open_dataset(tmp_path / "r.nc") as back:
            config = json.loads(back.attrs["ssmpde_config"])
            assert key in config and config["wall_seconds"] > 0
            if key == "parareal":
                assert config["parareal"]["iterations"] == 1
                assert list(back.source.values) == [3] * 4


def test_a_corrected_row_that_ends_where_its_coarse_solver_does_is_named_no_gain():
    # The demo's trap: "corrected 2x2" at the coarse 2x2 solver's own error is no learned
    # gain, whatever else the verdict says.
    from ssmpde.coupling.baseline import against_coarse

    fine = {"schedule": "solver, one run", "kind": "solver", "final_rel_l2": 0.0,
            "seconds": 1.0}
    coarse = {"schedule": "coarse 2x2 (grid 64², 2x longer step)", "kind": "coarse",
              "space": 2, "time": 2, "final_rel_l2": 0.000909, "seconds": 0.1}
    idle = {"schedule": "corrected 2x2", "kind": "corrected", "final_rel_l2": 0.0009093,
            "seconds": 0.15}
    verdict = against_coarse([fine, coarse, idle])
    assert verdict["no_gain"] == [idle]
    assert "corrected 2x2 ends where coarse 2x2 does" in verdict["summary"]
    assert "adds nothing" in verdict["summary"]
    useful = dict(idle, final_rel_l2=0.0004)
    verdict = against_coarse([fine, coarse, useful])
    assert verdict["no_gain"] == [] and "adds nothing" not in verdict["summary"]
