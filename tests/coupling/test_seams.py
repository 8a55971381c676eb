"""One way to do each thing in the coupling: one decoding of a generator config into a solver
(``solver_of``), one comparison of a learned stepper's generator config with the data's, one
load of each run directory, and rollout schedules as named objects in one registry."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from ssmpde.cli import main
from ssmpde.coupling import hybrid_rollout, parse_schedule
from ssmpde.coupling.run import (IGNORED_GENERATOR_FIELDS, GeneratorMismatchWarning,
                                 StoredGridWarning, generator_differences, run_rollout)
from ssmpde.coupling.schedules import SOLVER, SURROGATE, Schedule, register_schedule
from ssmpde.data import open_dataset
from ssmpde.generation import generate
from ssmpde.solvers.base import solver_of
from ssmpde.surrogates.train import TrainConfig, train

TINY_FNO = {"width": 4, "depth": 1, "modes": [4]}
KS = dict(preset="lpsda", resolution=64, simulation_resolution=128, final_time=0.5)


def _ks(path, **changes):
    generate("kuramoto-sivashinsky", num_samples=4, seed=0, out=path, progress=False,
             **{**KS, **changes})
    return path


@pytest.fixture(scope="module")
def ks(tmp_path_factory):
    """KS data (ν = 0.1, stored at 64 of 128 points), a surrogate and a 2x5 corrector of
    it, and data of other generator configs."""
    root = tmp_path_factory.mktemp("seams")
    made = {"data": _ks(root / "ks.nc")}
    for name, target in (("surrogate", {}),
                         ("corrector", {"target": "correction", "coarse": "2x5"})):
        made[name] = root / name
        train("fno", made["data"], out=made[name], preset="burgers", progress=False,
              model_overrides=TINY_FNO,
              config=TrainConfig(epochs=1, batch_size=8, window=1, num_test=2, **target))
    made["viscosity"] = _ks(root / "ks-nu0.125.nc", viscosity=0.125)
    made["coarsening"] = _ks(root / "ks-at-256.nc", simulation_resolution=256)
    made["another-seed"] = root / "ks-seed1.nc"
    generate("kuramoto-sivashinsky", num_samples=2, seed=1, out=made["another-seed"],
             progress=False, **{**KS, "final_time": 0.6})
    made["equation"] = root / "burgers.nc"
    generate("burgers", num_samples=2, seed=0, out=made["equation"], progress=False,
             resolution=64, simulation_resolution=128, viscosity=0.1, final_time=0.5,
             record_interval=0.1, time_step=0.01)
    return made


# ------------------------------------------------------------------------------------------
# One decoding of a generator config, one error text
# ------------------------------------------------------------------------------------------

def test_solver_of_a_dataset_and_of_its_config_are_the_same_solver(ks):
    with open_dataset(ks["data"]) as ds:
        from_ds = solver_of(ds)
        record = json.loads((ks["corrector"] / "config.json").read_text())
        from_config = solver_of(record["dataset"]["generator_config"])
    assert from_ds.config == from_config.config and from_ds.name == "kuramoto-sivashinsky"


@pytest.mark.parametrize("config, problem", [
    (None, "no generator config is recorded"),
    ([], "it is a list, not a JSON object"),
    ({"solver": {}}, "it has no 'equation'"),
    ({"equation": "kuramoto-sivashinsky"}, "it has no 'solver' object"),
    ({"equation": "pdebench-1d-burgers", "solver": {}}, "unknown equation"),
    ({"equation": "burgers", "solver": {"visc": 1}}, "visc"),
], ids=["none", "list", "no-equation", "no-solver", "unknown-equation", "bad-option"])
def test_every_way_a_config_cannot_rebuild_a_solver_has_one_error(config, problem):
    with pytest.raises(ValueError, match="cannot rebuild the solver from the checkpoint x: ") \
            as caught:
        solver_of(config, origin="the checkpoint x")
    assert problem in str(caught.value) and "\n" not in str(caught.value)
    assert "'equation' and 'solver' entries that 'ssmpde generate' writes" in str(caught.value)


def test_the_corrector_and_the_correction_data_use_the_same_decoding(ks, tmp_path):
    """A corrector whose checkpoint lost its generator config, and a dataset without one,
    get the one error of solver_of."""
    from ssmpde.coupling.corrected import stepper_from_checkpoint
    from ssmpde.surrogates.correction import coarse_solver

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "weights.safetensors"):
        (bare / name).write_bytes((ks["corrector"] / name).read_bytes())
    record = json.loads((bare / "config.json").read_text())
    del record["dataset"]["generator_config"]
    (bare / "config.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match=f"cannot rebuild the solver from the checkpoint "
                                         f".*bare: no generator config is recorded"):
        stepper_from_checkpoint(bare)
    with open_dataset(ks["data"]) as ds:
        ds.attrs["ssmpde_config"] = json.dumps({"seed": 0})
        with pytest.raises(ValueError, match="cannot rebuild the solver from the generator "
                                             "config of .*ks.nc.*: it has no 'equation'"):
            coarse_solver(ds, "2x5")


# ------------------------------------------------------------------------------------------
# A learned stepper and the data it is rolled out on: the same generator config
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("data, names", [
    ("viscosity", "viscosity 0.1 in training, 0.125 in the data"),
    ("coarsening", "simulation_resolution 128 in training, 256 in the data"),
    ("equation", 'equation "kuramoto-sivashinsky" in training, "burgers" in the data'),
])
@pytest.mark.parametrize("learned", ["corrector", "surrogate"])
def test_a_learned_stepper_is_refused_on_data_of_another_generator(ks, data, names, learned):
    with pytest.raises(ValueError) as caught:
        run_rollout(ks[learned], steps=1, schedules=["surrogate"], data=ks[data], coarse=[])
    message = str(caught.value)
    assert names in message and "\n" not in message
    assert message.startswith(f"{ks[learned].resolve()} was trained on data of another "
                              "generator config")
    assert "--allow-mismatch (allow_mismatch=True)" in message
    if data == "equation":  # the equation alone: its options differ of course
        assert "viscosity" not in message


def test_a_corrector_beside_the_surrogate_is_compared_too(ks):
    """The surrogate trained on ν = 0.1 data rolled out on them, beside a corrector of other
    data: refused, naming the corrector."""
    other = ks["viscosity"].parent / "corrector-nu0.125"
    train("fno", ks["viscosity"], out=other, preset="burgers", progress=False,
          model_overrides=TINY_FNO,
          config=TrainConfig(epochs=1, batch_size=8, window=1, num_test=2,
                             target="correction", coarse="2x5"))
    with pytest.raises(ValueError, match=f"{other.resolve()} was trained .*viscosity 0.125 in "
                                         "training, 0.1 in the data"):
        run_rollout(ks["surrogate"], steps=1, schedules=["surrogate"], data=ks["data"],
                    coarse=[], correctors=[other])


def test_allow_mismatch_warns_and_takes_the_data_s_solver_as_the_reference(ks, tmp_path):
    out = tmp_path / "transfer.nc"
    with pytest.warns(GeneratorMismatchWarning, match="viscosity 0.1 in training, 0.125 in "
                                                      "the data") as caught:
        rows = run_rollout(ks["corrector"], steps=2, schedules=["surrogate"],
                           data=ks["viscosity"], coarse=[], allow_mismatch=True, out=out)
    assert sum(w.category is GeneratorMismatchWarning for w in caught) == 1
    corrected = next(r for r in rows if r["kind"] == "corrected")
    assert np.isfinite(corrected["final_rel_l2"])
    with open_dataset(out) as ds:  # the reference solver is the one that made the data
        assert json.loads(ds.attrs["ssmpde_config"])["solver"]["viscosity"] == 0.125
    # The command line: refused in one line without the flag, a warning with it.
    argv = ["rollout", "--checkpoint", str(ks["corrector"]), "--data", str(ks["viscosity"]),
            "--steps", "1", "--schedule", "surrogate", "--coarse", "none"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoredGridWarning)
        assert main(argv) == 2
        with pytest.warns(GeneratorMismatchWarning):
            assert main([*argv, "--allow-mismatch"]) == 0


def test_another_seed_sample_count_and_length_are_the_same_generator(ks):
    with warnings.catch_warnings():
        warnings.simplefilter("error", GeneratorMismatchWarning)
        warnings.simplefilter("ignore", StoredGridWarning)
        rows = run_rollout(ks["corrector"], steps=1, schedules=["surrogate"],
                           data=ks["another-seed"], coarse=[])
    assert any(r["kind"] == "corrected" for r in rows)
    assert {"seed", "num_samples", "solver.final_time"} <= IGNORED_GENERATOR_FIELDS
    trained = {"equation": "burgers", "seed": 0, "num_samples": 8,
               "solver": {"viscosity": 0.1, "final_time": 1.0}}
    assert generator_differences(trained, {**trained, "seed": 3, "num_samples": 2,
                                           "solver": {"viscosity": 0.1, "final_time": 2.0}}) == []
    assert generator_differences(trained, {**trained, "solver": {"final_time": 1.0}}) == [
        "viscosity 0.1 in training, absent in the data"]


# ------------------------------------------------------------------------------------------
# One load of each run directory
# ------------------------------------------------------------------------------------------

def test_a_rollout_decodes_each_run_once(ks, monkeypatch, capsys):
    """``rollout --corrector RUN``: config.json, the weights and the task decoded once per
    run directory, configure() called once per stepper; also where one run is both the
    checkpoint and a corrector."""
    from ssmpde.coupling.stepper import SurrogateStepper
    from ssmpde.surrogates import checkpoint
    from ssmpde.surrogates.datasets import Task

    calls = Counter()

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(checkpoint, "read_record", counted("config", checkpoint.read_record))
    monkeypatch.setattr(checkpoint, "decode_json", counted("json", checkpoint.decode_json))
    monkeypatch.setattr(checkpoint, "safe_open", counted("weights", checkpoint.safe_open))
    monkeypatch.setattr(Task, "from_dict", classmethod(counted("task", Task.from_dict.__func__)))
    monkeypatch.setattr(SurrogateStepper, "configure",
                        counted("configure", SurrogateStepper.configure))
    base = ["rollout", "--steps", "1", "--schedule", "surrogate", "--coarse", "none"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoredGridWarning)
        assert main([*base, "--checkpoint", str(ks["surrogate"]), "--corrector",
                     str(ks["corrector"])]) == 0
        assert calls == {"config": 2, "json": 2, "weights": 2, "task": 2, "configure": 2}
        calls.clear()
        assert main([*base, "--checkpoint", str(ks["corrector"]), "--corrector",
                     str(ks["corrector"])]) == 0
        assert calls == {"config": 1, "json": 1, "weights": 1, "task": 1, "configure": 1}
    assert "| corrected 2x5 | corrected |" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------
# Schedules: a new one is one class and one registry line
# ------------------------------------------------------------------------------------------

@register_schedule("alternating")
@dataclass(frozen=True)
class Alternating(Schedule):
    """``alternate:N``: N surrogate steps, then N solver steps (a schedule made in a test)."""

    run_length: int
    syntax = "alternate:N"

    @classmethod
    def parse(cls, text):
        head, _, count = text.partition(":")
        return cls(int(count)) if head == "alternate" and count.isdigit() else None

    def text(self):
        return f"alternate:{self.run_length}"

    def component(self, step):
        return SURROGATE if (step // self.run_length) % 2 == 0 else SOLVER


class _Shift:
    """A stepper adding a constant per step."""

    window, dt = 1, 0.1

    def __init__(self, increment):
        self.fields, self.increment = ("a",), increment

    def step(self, history, *, time=0.0, parameters=None):
        return history[:, -1] + self.increment


def test_a_schedule_registered_in_a_test_runs_in_hybrid_rollout_and_the_command(ks, capsys):
    assert parse_schedule("alternate:2") == Alternating(2)
    assert parse_schedule(Alternating(3).text()) == Alternating(3)
    result = hybrid_rollout(_Shift(1.0), _Shift(10.0), np.zeros((1, 1, 1, 3)), 6,
                            "alternate:2")
    assert result.source == ["surrogate", "surrogate", "solver", "solver", "surrogate",
                             "surrogate"]
    np.testing.assert_array_equal(result.frames[0, :, 0, 0], [10, 20, 21, 22, 32, 42])
    with pytest.raises(ValueError, match="bad schedule 'alternate:x': use one of .*"
                                         "'alternate:N'"):
        parse_schedule("alternate:x")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoredGridWarning)
        rows = run_rollout(ks["surrogate"], steps=4, schedules=["alternate:1"], coarse=[])
    row = next(r for r in rows if r["schedule"] == "alternate:1")
    assert (row["kind"], row["surrogate"], row["solver"]) == ("alternating", 2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoredGridWarning)
        assert main(["rollout", "--checkpoint", str(ks["surrogate"]), "--steps", "2",
                     "--schedule", "alternate:1", "--coarse", "none"]) == 0
    assert "| alternate:1 | alternating |" in capsys.readouterr().out


def test_hybrid_rollout_holds_no_test_of_the_schedule_kind():
    import inspect

    from ssmpde.coupling import hybrid

    source = inspect.getsource(hybrid.hybrid_rollout)
    assert "isinstance" not in source and "plan ==" not in source
