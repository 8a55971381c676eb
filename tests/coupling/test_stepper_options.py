"""SurrogateStepper's inference options: precision (16-bit autocast, never on by default)
and compile (through ssmpde.surrogates.compiled.compile_model), and how run_rollout and
``ssmpde rollout`` pass them on."""

import numpy as np
import pytest

from ssmpde.cli import main
from ssmpde.core import relative_l2
from ssmpde.coupling import SurrogateStepper
from ssmpde.data import open_dataset
from ssmpde.generation import generate
from ssmpde.surrogates.train import TrainConfig, train

KS = dict(resolution=32, simulation_resolution=64, domain_length=22.0, viscosity=1.0,
          final_time=1.0, record_interval=0.25, time_step=0.05)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A small FNO trained one epoch on KS trajectories (window 1)."""
    folder = tmp_path_factory.mktemp("stepper_options")
    data = folder / "ks.nc"
    generate("kuramoto-sivashinsky", num_samples=4, seed=0, out=data, progress=False, **KS)
    train("fno", data, out=folder / "run", preset="burgers",
          model_overrides=dict(width=8, depth=1, modes=(4,)),
          config=TrainConfig(epochs=1, batch_size=4, window=1), progress=False)
    return folder / "run"


@pytest.fixture(scope="module")
def inputs(run):
    """What one step takes: the first frames ``[batch, window 1, field, x]`` and the
    conditioning (the viscosity)."""
    stepper = SurrogateStepper.from_checkpoint(run)
    with open_dataset(stepper.record["dataset"]["path"]) as ds:
        return {"history": ds["u"].values[:, :1, None],
                "parameters": {"viscosity": ds["viscosity"].values}}


def test_float32_is_the_default_and_runs_the_model_unchanged(run, inputs):
    stepper = SurrogateStepper.from_checkpoint(run)
    assert stepper.precision == "float32" and stepper.compile is None
    assert stepper._wrapped.model is stepper.model  # no wrapper in the default path


@pytest.mark.parametrize("precision, tolerance", [("bfloat16", 1e-2), ("float16", 2e-3)])
def test_reduced_precision_stays_close_to_float32(run, inputs, precision, tolerance):
    full = SurrogateStepper.from_checkpoint(run).step(**inputs)
    reduced = SurrogateStepper.from_checkpoint(run, precision=precision)
    low = reduced.step(**inputs)
    assert low.dtype == np.float64 and low.shape == full.shape
    error = relative_l2(low, full).max()
    assert 0 < error < tolerance, error  # really computed in 16 bits, and close
    # switching back gives float32's numbers exactly
    assert np.array_equal(reduced.configure(precision="float32").step(**inputs), full)


def test_bad_options_are_refused(run):
    with pytest.raises(ValueError, match="precision must be one of"):
        SurrogateStepper.from_checkpoint(run, precision="int8")
    with pytest.raises(ValueError, match="unknown torch.compile backend"):
        SurrogateStepper.from_checkpoint(run, compile="no-such-backend")
    with pytest.raises(ValueError, match="compile must be"):
        SurrogateStepper.from_checkpoint(run, compile=3)


@pytest.mark.e2e
def test_compile_option_compiles_once_and_matches_eager(run, inputs, compile_calls):
    eager = SurrogateStepper.from_checkpoint(run).step(**inputs)
    stepper = SurrogateStepper.from_checkpoint(run, compile="aot_eager")
    assert stepper.compile == "aot_eager" and compile_calls == []  # compiled at the first step
    first = stepper.step(**inputs)
    second = stepper.step(**inputs)
    assert compile_calls == ["aot_eager"]
    assert relative_l2(first, eager).max() < 1e-6
    assert np.array_equal(first, second)


def test_rollout_command_passes_compile_precision_and_threads(run, compile_calls, capsys):
    status = main(["rollout", "--checkpoint", str(run), "--steps", "2", "--schedule",
                   "surrogate", "--coarse", "none", "--compile", "aot_eager", "--precision",
                   "bfloat16", "--threads", "1"])
    assert status == 0, capsys.readouterr().err
    assert compile_calls == ["aot_eager"]
    assert "| surrogate | surrogate |" in capsys.readouterr().out


@pytest.mark.parametrize("threads, torch_threads, numba_threads", [
    (None, 1, None),  # the rollout default: one torch thread, numba and FFTW at every core
    (1, 1, 1),
    (2, 2, 2),
])
def test_rollout_runs_under_the_thread_policy(run, monkeypatch, threads, torch_threads,
                                              numba_threads):
    """What the surrogate's steps and the solver's steps really run on, observed inside the
    rollout (not the argument: a decorator on the wrong function once made ``threads`` a
    no-op that a test of the argument did not notice)."""
    import numba
    import torch

    from ssmpde.coupling.run import run_rollout

    monkeypatch.delenv("SSMPDE_THREADS", raising=False)
    seen = set()
    surrogate_step = SurrogateStepper.step

    def observed_surrogate(self, *args, **kwargs):
        seen.add((torch.get_num_threads(), numba.get_num_threads()))
        return surrogate_step(self, *args, **kwargs)

    monkeypatch.setattr(SurrogateStepper, "step", observed_surrogate)
    before = torch.get_num_threads(), numba.get_num_threads()
    rows = run_rollout(run, steps=2, schedules=["solver", "surrogate"], coarse=[],
                       threads=threads)
    assert {row["schedule"] for row in rows} >= {"solver", "surrogate"}
    expected_numba = numba.config.NUMBA_NUM_THREADS if numba_threads is None else min(
        numba_threads, numba.config.NUMBA_NUM_THREADS)
    assert seen == {(torch_threads, expected_numba)}
    assert (torch.get_num_threads(), numba.get_num_threads()) == before  # restored
