"""Hybrid rollouts: solver-only and surrogate-only schedules reproduce their components, the
adaptive policy falls back on bad surrogate steps, and the SurrogateStepper's contract."""

from pathlib import Path

import numpy as np
import pytest
import torch

from ssmpde.coupling import (Checks, Conditions, SurrogateStepper, hybrid_rollout,
                             parse_schedule, rollout)
from ssmpde.coupling.schedules import (CheckedAdaptive, Parareal, Pattern, SolverOnly,
                                       SurrogateOnly)
from ssmpde.data import SchemaError, config_of, open_dataset, roles_of, save
from ssmpde.generation import generate
from ssmpde.solvers import get_solver
from ssmpde.surrogates.datasets import Normalizer, Task
from ssmpde.surrogates.train import TrainConfig, load_checkpoint, train

SOLVER = dict(resolution=16, simulation_resolution=16, record_interval=0.1, time_step=0.01,
              viscosity=1e-3)


@pytest.fixture(scope="module")
def ns_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ns")
    data = root / "ns.nc"
    generate("navier-stokes", num_samples=4, seed=0, out=data, final_time=0.6,
             progress=False, **SOLVER)
    run = root / "run"
    train("geomano", data, out=run, preset="navier-stokes",
          model_overrides=dict(width=8, depth=1, state_size=4),
          config=TrainConfig(epochs=1, batch_size=2, window=2, num_test=1), progress=False)
    return data, run


def initial_history(data, window):
    with open_dataset(data) as ds:
        frames = ds.vorticity.values[:, :window, None]
        viscosity = ds.viscosity.values
        forcing = ds.forcing.values
    return frames, {"viscosity": viscosity, "forcing": forcing}


def test_solver_only_reproduces_the_solvers_trajectory(ns_run):
    data, run = ns_run
    solver = get_solver("navier-stokes", **SOLVER)
    surrogate = SurrogateStepper.from_checkpoint(run)
    history, parameters = initial_history(data, 2)
    result = hybrid_rollout(solver, surrogate, history, 3, schedule="solver",
                            time=0.1, parameters=parameters, reference=None)
    # The solver stepping on its own, one record interval at a time: bit for bit.
    state, own = history[:, -1:], []
    for k in range(3):
        state = solver.step(state, time=0.1 + 0.1 * k,
                            parameters={"viscosity": parameters["viscosity"]})[:, None]
        own.append(state[:, 0])
    np.testing.assert_array_equal(result.frames, np.stack(own, axis=1))
    assert result.source == ["solver"] * 3
    # ... and one continuous integration, up to the round trip through physical space.
    continuous = solver.simulate(history[:, -1], 3, time=0.1)
    np.testing.assert_allclose(result.frames[:, :, 0], continuous[:, 1:, 0], rtol=0,
                               atol=1e-13)


def test_surrogate_only_reproduces_the_models_rollout(ns_run):
    data, run = ns_run
    solver = get_solver("navier-stokes", **SOLVER)
    surrogate = SurrogateStepper.from_checkpoint(run)
    history, parameters = initial_history(data, 2)
    result = hybrid_rollout(solver, surrogate, history, 3, schedule="surrogate",
                            time=0.1, parameters=parameters)
    # The model's own autoregressive loop, written out from the checkpoint.
    model, record = load_checkpoint(run)
    task = Task.from_dict(record["task"])
    norms = {k: Normalizer(**v) for k, v in record["normalizers"].items()}
    f, c = norms["fields"], norms["conditioning"]
    inputs = Normalizer(f.mean * task.window + c.mean, f.std * task.window + c.std)
    window = torch.tensor(history, dtype=torch.float32)
    cond = torch.stack([torch.tensor(parameters["viscosity"], dtype=torch.float32)[:, None,
                                                                                   None]
                        .expand(-1, 16, 16),
                        torch.tensor(parameters["forcing"], dtype=torch.float32)], dim=1)
    expected = []
    with torch.no_grad():
        for _ in range(3):
            x = torch.cat([window.flatten(1, 2), cond], dim=1)
            frame = f.decode(model(inputs.encode(x)))
            expected.append(frame)
            window = torch.cat([window[:, 1:], frame[:, None]], dim=1)
    np.testing.assert_allclose(result.frames, torch.stack(expected, 1).double().numpy(),
                               rtol=1e-6, atol=1e-6)
    assert result.source == ["surrogate"] * 3 and result.errors.shape == (3,)
    assert result.reference_seconds > 0 and result.seconds["surrogate"] > 0


class Faulty:
    """A stand-in surrogate: the solver's step, except NaN at step 1 and a blow-up at 3."""

    def __init__(self, solver):
        self.solver, self.fields, self.dt, self.window = solver, solver.fields, solver.dt, 1
        self.calls = 0

    def step(self, history, *, time=0.0, parameters=None):
        frame = self.solver.step(history[:, -1:], time=time, parameters=parameters)
        self.calls += 1
        if self.calls == 2:
            frame[0, 0, 3, 3] = np.nan
        if self.calls == 4:
            frame = frame * 10.0
        return frame


def test_adaptive_falls_back_on_bad_steps_and_records_why(ns_run):
    data, _ = ns_run
    solver = get_solver("navier-stokes", **SOLVER)
    history, _ = initial_history(data, 1)
    result = hybrid_rollout(solver, Faulty(solver), history, 5, schedule="adaptive")
    assert result.source == ["surrogate", "fallback", "surrogate", "fallback", "surrogate"]
    assert result.reasons[1] == "non-finite values"
    assert result.reasons[3].startswith("mean-square growth")
    assert np.isfinite(result.frames).all()
    assert result.steps == {"solver": 0, "surrogate": 3, "fallback": 2}
    np.testing.assert_allclose(result.errors, 0.0, atol=1e-12)  # solver-quality everywhere


def test_pattern_schedules():
    assert parse_schedule("surrogate:4,solver:1") == Pattern((("surrogate", 4), ("solver", 1)))
    assert parse_schedule("solver-only") == parse_schedule("solver:1") == SolverOnly()
    assert parse_schedule("Surrogate") == SurrogateOnly()
    assert parse_schedule("adaptive") == CheckedAdaptive()
    for bad in ("surrogate:0", "model:3", "surrogate:two", "solver,surrogate"):
        with pytest.raises(ValueError, match="bad schedule"):
            parse_schedule(bad)


def test_checks():
    previous = np.random.default_rng(0).standard_normal((2, 1, 8, 8))
    previous -= previous.mean(axis=(2, 3), keepdims=True)  # zero mean, as vorticity here
    checks = Checks(conserved=("vorticity",), mean_tolerance=0.05, growth_bound=1.5)
    fields = ("vorticity",)
    assert checks.failure(previous, previous * 1.1, fields) is None
    assert "mean vorticity drift" in checks.failure(previous, previous + 1.0, fields)
    assert "growth" in checks.failure(previous, previous * 2.0, fields)
    # A field whose mean is not declared conserved may drift.
    assert Checks().failure(previous, previous + 0.1, fields) is None


def test_checks_accept_a_correct_step_from_a_uniform_state():
    # Regression: the drift used to be divided by the field's spread, so a uniform state
    # (rho = 1, u = v = 0 at rest) failed every step ("mean drift 2e+08 x std").
    fields = ("density", "u", "v", "pressure")
    checks = Checks(conserved=("density", "u", "v"), positive=("density", "pressure"))
    rest = np.stack([np.ones((8, 8)), np.zeros((8, 8)), np.zeros((8, 8)),
                     np.ones((8, 8))])[None].repeat(2, axis=0)
    assert checks.failure(rest, rest.copy(), fields) is None
    # a correct step that starts to move: tiny zero-mean velocity, density unchanged
    moving = rest.copy()
    moving[:, 1] = 1e-9 * np.sin(2 * np.pi * np.arange(8) / 8)[None, :]
    assert checks.failure(rest, moving, fields) is None
    nan = rest.copy()
    nan[0, 0, 2, 2] = np.nan
    assert checks.failure(rest, nan, fields) == "non-finite values"
    blown = rest.copy()
    blown[:, 1] = 50.0
    assert "drift" in checks.failure(rest, blown, fields)
    blown = rest.copy()
    blown[:, 3] *= 10.0  # pressure is not conserved, but may not grow a hundredfold
    assert "growth of pressure" in checks.failure(rest, blown, fields)
    negative = rest.copy()
    negative[1, 3, 0, 0] = -1.0
    assert "pressure is not positive" in checks.failure(rest, negative, fields)


def test_checks_of_derived_totals_and_bounded_fields():
    """Compressible flow: total energy is conserved though no field's mean is, and a flow
    that starts at rest (u = 0) must be allowed to move (no growth bound on u)."""
    gamma = 1.4
    fields = ("density", "velocity_x", "pressure")

    def energy(f):
        return 0.5 * f["density"] * f["velocity_x"] ** 2 + f["pressure"] / (gamma - 1)

    checks = Checks(positive=("density", "pressure"), totals={"energy": energy},
                    bounded=("density", "pressure"))
    x = np.arange(16) / 16
    rest = np.stack([1 + 0.2 * np.sin(2 * np.pi * x), 0 * x, 1 + 0 * x])[None]
    # An exchange of internal for kinetic energy at constant total: accepted, although the
    # velocity's mean square grows without bound from zero.
    moving = rest.copy()
    moving[0, 1] = 0.3 * np.sin(2 * np.pi * x)
    moving[0, 2] = rest[0, 2] - (gamma - 1) * 0.5 * moving[0, 0] * moving[0, 1] ** 2
    assert checks.failure(rest, moving, fields) is None
    assert "growth of velocity_x" in Checks().failure(rest, moving, fields)
    heated = moving.copy()
    heated[0, 2] *= 1.2  # 20 % more internal energy from nowhere
    assert "total energy drift" in checks.failure(rest, heated, fields)


def test_surrogate_stepper_contract(ns_run):
    data, run = ns_run
    stepper = SurrogateStepper.from_checkpoint(run)
    assert stepper.fields == ("vorticity",) and stepper.window == 2
    assert stepper.dt == pytest.approx(0.1)
    history, parameters = initial_history(data, 2)
    with pytest.raises(ValueError, match="pass parameters"):
        stepper.step(history)
    with pytest.raises(ValueError, match=r"history must have shape \[batch, 2, 1, 16, 16\]"):
        stepper.step(history[:, :1], parameters=parameters)
    frames = rollout(stepper, history, 2, parameters=parameters)
    assert frames.shape == (4, 2, 1, 16, 16) and frames.dtype == np.float64


def test_operator_checkpoint_is_not_a_time_stepper(tmp_path):
    data = tmp_path / "darcy.nc"
    generate("darcy", num_samples=3, seed=0, out=data, resolution=17,
             simulation_resolution=33, progress=False)
    train("geomano", data, out=tmp_path / "run", preset="darcy",
          model_overrides=dict(width=8, depth=1), config=TrainConfig(epochs=1, batch_size=3),
          progress=False)
    with pytest.raises(ValueError, match="needs a model trained on trajectories"):
        SurrogateStepper.from_checkpoint(tmp_path / "run")


def test_export_validates_and_round_trips_through_netcdf(ns_run, tmp_path):
    from ssmpde.coupling import to_dataset

    data, run = ns_run
    solver = get_solver("navier-stokes", **SOLVER)
    surrogate = SurrogateStepper.from_checkpoint(run)
    history, parameters = initial_history(data, 2)
    result = hybrid_rollout(solver, surrogate, history, 4, schedule="surrogate:1,solver:1",
                            time=0.1, parameters=parameters)
    ds = to_dataset(result, solver=solver, surrogate=surrogate,
                    schedule="surrogate:1,solver:1")
    assert list(ds.source.values) == [1, 0, 1, 0]
    assert ds.vorticity.dims == ("sample", "time", "y", "x")
    np.testing.assert_allclose(ds.time.values, [0.2, 0.3, 0.4, 0.5])
    path = tmp_path / "rollout.nc"
    save(ds, path)
    with open_dataset(path) as back:
        np.testing.assert_array_equal(back.vorticity.values, result.frames[:, :, 0])
        np.testing.assert_array_equal(back.rel_l2_error.values, result.errors)
        config = config_of(back)
        assert config["schedule"] == "surrogate:1,solver:1"
        assert config["checkpoint"] == str(run.resolve())
        assert config["steps"] == {"solver": 2, "surrogate": 2, "fallback": 0}
        assert back.source.attrs["flag_meanings"] == "solver surrogate fallback parareal"


@pytest.mark.e2e
def test_rollout_command_writes_the_rollout_and_the_figure(ns_run, tmp_path, capsys):
    from ssmpde.cli import main

    data, run = ns_run
    out, plot, pareto = (tmp_path / name for name in ("rollout.nc", "rollout.png", "p.png"))
    assert main(["rollout", "--checkpoint", str(run), "--steps", "4", "--schedule",
                 "surrogate:2,solver:1", "--schedule", "adaptive", "--schedule",
                 "adaptive:0.05:coarse", "--schedule", "parareal:2:1", "--samples", "0:2",
                 "--out", str(out), "--plot", str(plot), "--coarse", "1x2",
                 "--pareto", str(pareto)]) == 0
    text = capsys.readouterr().out
    assert "| solver, one run | solver | 0 |" in text
    assert "| surrogate:2,solver:1 | fixed |" in text
    assert "| adaptive:0.05:coarse | adaptive |" in text
    assert "| parareal:2:1 | parareal |" in text and "1 iteration, 4 fine steps" in text
    assert "| coarse 1x2 (grid 16x16, dt 0.02) | coarse |" in text
    assert pareto.stat().st_size > 10_000
    with open_dataset(out) as ds:
        assert ds.vorticity.shape == (2, 4, 16, 16)
        assert list(ds.source.values) == [1, 1, 0, 1]
    assert plot.stat().st_size > 10_000
    assert main(["rollout", "--checkpoint", str(run), "--steps", "3", "--schedule",
                 "surrogate:x"]) == 2
    assert "bad schedule" in capsys.readouterr().err


class _Shift:
    """A Stepper adding ``increment`` to each of its fields per step (window 1)."""

    window, dt, parameter_names = 1, 0.5, ()

    def __init__(self, fields, increment):
        self.fields, self.increment = tuple(fields), np.asarray(increment, dtype=float)

    def step(self, history, *, time=0.0, parameters=None):
        assert history.shape[2] == len(self.fields)  # sees only its own fields
        return history[:, -1] + self.increment[None, :, None]


def test_a_surrogate_of_some_of_the_solver_fields():
    """An Euler surrogate predicts ρ, u, v, p but not the tracer: on its steps the fields it
    does not advance keep their last values, and the solver re-anchors all of them."""
    solver = _Shift(("a", "tracer"), [1.0, 10.0])
    surrogate = _Shift(("a",), [2.0])
    history = np.zeros((1, 1, 2, 3))
    result = hybrid_rollout(solver, surrogate, history, 3, "surrogate:2,solver:1")
    assert result.source == ["surrogate", "surrogate", "solver"]
    np.testing.assert_array_equal(result.frames[0, :, :, 0], [[2, 0], [4, 0], [5, 10]])
    with pytest.raises(ValueError, match=r"has \['b'\], which \['a', 'tracer'\] lacks"):
        hybrid_rollout(solver, _Shift(("a", "b"), [0, 0]), history, 1, "surrogate")


def test_a_solver_that_cannot_continue_from_surrogate_frames():
    """A fixed schedule that hands the solver an unphysical surrogate frame (negative density)
    fails with a message naming the step and the adaptive schedule; the solver's own errors
    from the initial history stay what they are."""
    from ssmpde.coupling import HybridRolloutError

    class Picky(_Shift):
        def step(self, history, *, time=0.0, parameters=None):
            if (history[:, -1] < 0).any():
                raise ValueError("initial density must be positive")
            return super().step(history, time=time, parameters=parameters)

    solver, surrogate = Picky(("a",), [1.0]), _Shift(("a",), [-5.0])
    history = np.ones((1, 1, 1, 3))
    with pytest.raises(HybridRolloutError, match=r"step 2 of schedule 'surrogate:1,solver:1'"
                                                  r".*adaptive"):
        hybrid_rollout(solver, surrogate, history, 2, "surrogate:1,solver:1")
    with pytest.raises(ValueError, match="initial density") as caught:
        hybrid_rollout(solver, surrogate, -history, 1, "solver")
    assert not isinstance(caught.value, HybridRolloutError)


@pytest.mark.parametrize("text", ["solver", "surrogate", "surrogate:4,solver:1", "adaptive",
                                  "adaptive:0.001", "adaptive:0.1:coarse", "adaptive:inf",
                                  "parareal:4", "parareal:4:2", "parareal:4:2:0.001"])
def test_schedule_text_reads_back_as_the_same_schedule(text):
    plan = parse_schedule(text)
    assert parse_schedule(plan.text()) == plan


def test_schedule_text_of_a_parareal_tolerance_without_iterations():
    assert Parareal(4, None, 1e-3).text() == "parareal:4:4:0.001"


def test_a_parsed_schedule_runs_as_its_text():
    solver, surrogate = _Shift(("a",), [1.0]), _Shift(("a",), [2.0])
    history = np.zeros((1, 1, 1, 3))
    by_text = hybrid_rollout(solver, surrogate, history, 5, "surrogate:2,solver:1")
    by_plan = hybrid_rollout(solver, surrogate, history, 5,
                             parse_schedule("surrogate:2,solver:1"))
    np.testing.assert_array_equal(by_plan.frames, by_text.frames)
    assert by_plan.source == by_text.source


def test_conditions_of_a_dataset_already_validated(ns_run):
    """``validate=False`` (for a dataset just opened with validation) gives the same inputs,
    and still names a variable without a role."""
    data, _ = ns_run
    with open_dataset(data) as ds:
        ds = ds.load()
    checked, trusted = Conditions.from_dataset(ds), Conditions.from_dataset(ds, validate=False)
    assert sorted(checked.static) == sorted(trusted.static) == [
        "forcing", "viscosity", "vorticity@0"]
    for name, value in checked.static.items():
        np.testing.assert_array_equal(trusted.static[name], value)
    del ds["viscosity"].attrs["role"]
    with pytest.raises(SchemaError, match="'viscosity' has no 'role'"):
        Conditions.from_dataset(ds, validate=False)


@pytest.mark.e2e
def test_rollout_command_reads_its_data_once_and_parses_each_schedule_once(
        ns_run, monkeypatch, tmp_path):
    """One open of the data file, validated there and only there, also for a checkpoint
    without the generator config (the solver's config then comes from the open file)."""
    import json
    import shutil
    import sys

    from ssmpde.coupling import run, schedules

    data, checkpoint = ns_run
    bare = tmp_path / "run"
    shutil.copytree(checkpoint, bare)
    record = json.loads((bare / "config.json").read_text())
    del record["dataset"]["generator_config"]
    (bare / "config.json").write_text(json.dumps(record))
    calls = {"open": [], "roles": 0, "parse": []}
    original_open, original_roles, parse = open_dataset, roles_of, schedules.parse_schedule

    def counted_open(path, **options):
        calls["open"].append(Path(path).resolve())
        return original_open(path, **options)

    def counted_roles(ds):
        calls["roles"] += 1
        return original_roles(ds)

    def counted_parse(text):
        calls["parse"].append(text)
        return parse(text)

    # Every module outside the data package that imported the two names holds its own
    # reference: count the calls from all of them (the package's own calls stay uncounted).
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name == "ssmpde.data" or (name.startswith("ssmpde.")
                                     and not name.startswith("ssmpde.data.")):
            for attribute, original, counted in (("open_dataset", original_open, counted_open),
                                                 ("roles_of", original_roles, counted_roles)):
                if getattr(module, attribute, None) is original:
                    monkeypatch.setattr(module, attribute, counted)
    monkeypatch.setattr(run, "parse_schedule", counted_parse)
    monkeypatch.setattr(schedules, "parse_schedule", counted_parse)
    rows = run.run_rollout(bare, steps=1, schedules=["surrogate:1,solver:1", "solver"],
                           coarse=[])
    assert calls["open"] == [data.resolve()] and calls["roles"] == 0
    assert sorted(calls["parse"]) == ["solver", "surrogate", "surrogate:1,solver:1"]
    assert [row["schedule"] for row in rows] == ["solver, one run", "solver", "surrogate",
                                                 "surrogate:1,solver:1"]
    assert [row["kind"] for row in rows] == ["solver", "solver", "surrogate", "fixed"]
    assert rows[1]["final_rel_l2"] < 1e-12  # the solver from the file's config: the same
