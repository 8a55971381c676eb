"""Training runs survive being killed at any point of a save, and have one writer at a time.

A crash is injected before each file operation of epoch 2's save (every write into the
journal, the commit marker, every move into place, the journal's removal). Resuming must then
reproduce the uninterrupted run bit for bit. The sweep runs in-process (a BaseException that
no handler catches stops the run where it is, as a kill would); one real SIGKILL in a
subprocess checks the same thing end to end.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ssmpde.data import OutputLockedError
from ssmpde.generation import generate
from ssmpde.surrogates import checkpoint
from ssmpde.surrogates.train import TrainConfig, train

SMALL = dict(width=8, depth=1, state_size=4)
CONFIG = TrainConfig(epochs=3, batch_size=2, lr=1e-3, num_test=1)
#: Every run here trains on this many torch and numba threads, in this process and in the
#: subprocess alike: runs are compared bit for bit, and a reduction split over another number
#: of threads rounds differently. (Another test in the same process may have left other
#: counts in effect; ``train(threads=...)`` sets them for the run and restores them after.)
THREADS = 1
#: File operations of one save: 2 tensor files, 3 text files (state, metrics, config), the
#: marker (write + rename), 5 moves into place, removing the journal.
OPERATIONS = 12


class Killed(BaseException):
    """Stands in for SIGKILL: nothing catches it."""


@pytest.fixture(scope="module")
def darcy(tmp_path_factory):
    path = tmp_path_factory.mktemp("darcy") / "darcy.nc"
    generate("darcy", num_samples=5, seed=0, out=path, resolution=9,
             simulation_resolution=17, progress=False)
    return path


@pytest.fixture(scope="module")
def straight(darcy, tmp_path_factory):
    run = tmp_path_factory.mktemp("straight") / "run"
    train("geomano", darcy, out=run, preset="darcy", model_overrides=SMALL, config=CONFIG,
          progress=False, threads=THREADS)
    return run


def crash_at(monkeypatch, point: int, epoch: int = 2):
    """Raise Killed before file operation ``point`` (1-based) of the save of ``epoch``."""
    state = {"count": 0, "active": False}
    original_save = checkpoint.save_run

    def save_run(out, model, optimizer, scheduler, record, saved_epoch, step, metrics=None):
        state["active"] = saved_epoch == epoch
        try:
            return original_save(out, model, optimizer, scheduler, record, saved_epoch, step,
                                 metrics)
        finally:
            state["active"] = False

    def counted(function):
        def wrapper(*args, **kwargs):
            if state["active"]:
                state["count"] += 1
                if state["count"] == point:
                    raise Killed(point)
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(checkpoint, "save_run", save_run)
    monkeypatch.setattr("ssmpde.surrogates.train.save_run", save_run)
    monkeypatch.setattr(checkpoint, "save_file", counted(checkpoint.save_file))
    monkeypatch.setattr(checkpoint.os, "replace", counted(os.replace))
    monkeypatch.setattr(checkpoint.shutil, "rmtree", counted(shutil.rmtree))
    monkeypatch.setattr(Path, "write_text", counted(Path.write_text))
    return state


def assert_same_run(a: Path, b: Path):
    wa, wb = load_file(a / "weights.safetensors"), load_file(b / "weights.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key
    losses = [[json.loads(line)["train_loss"] for line in (run / "metrics.jsonl")
               .read_text().splitlines()] for run in (a, b)]
    assert losses[0] == losses[1]


@pytest.mark.parametrize("point", range(1, OPERATIONS + 1))
def test_a_crash_at_any_point_of_a_save_resumes_to_the_same_run(point, darcy, straight,
                                                                 tmp_path, monkeypatch):
    run = tmp_path / "run"
    state = crash_at(monkeypatch, point)
    with pytest.raises(Killed):
        train("geomano", darcy, out=run, preset="darcy", model_overrides=SMALL,
              config=CONFIG, progress=False, threads=THREADS)
    assert state["count"] == point
    monkeypatch.undo()
    # The directory holds one consistent epoch (1, or 2 once the marker is written) ...
    done = json.loads((run / "training_state.json").read_text())["epoch"] \
        if not (run / checkpoint.PENDING / checkpoint.COMPLETE).exists() else 2
    assert done in (1, 2)
    # ... and resuming finishes the run exactly as if nothing had happened.
    train("geomano", darcy, out=run, preset="darcy", model_overrides=SMALL, config=CONFIG,
          progress=False, resume=True, threads=THREADS)
    assert not (run / checkpoint.PENDING).exists()
    assert json.loads((run / "training_state.json").read_text())["epoch"] == 3
    assert_same_run(straight, run)


def test_sigkill_between_file_writes_then_resume(darcy, straight, tmp_path):
    run = tmp_path / "run"
    script = textwrap.dedent(f"""
        import os, signal
        from ssmpde.surrogates import checkpoint
        from ssmpde.surrogates.train import TrainConfig, train
        original = checkpoint.os.replace
        def replace(src, dst):
            # The journal is committed; kill after the weights moved into place, before
            # the optimiser state does: new weights beside the old optimiser state.
            if str(dst).endswith("training_state.safetensors") and "{run}" in str(dst):
                os.kill(os.getpid(), signal.SIGKILL)
            return original(src, dst)
        checkpoint.os.replace = replace
        train("geomano", {str(darcy)!r}, out={str(run)!r}, preset="darcy",
              model_overrides={SMALL!r}, config=TrainConfig(epochs=3, batch_size=2, lr=1e-3,
                                                            num_test=1), progress=False,
              threads={THREADS})
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    assert (run / checkpoint.PENDING / checkpoint.COMPLETE).exists()
    # Evaluation refuses the half-moved run instead of mixing epochs ...
    with pytest.raises(checkpoint.TornRunError, match="interrupted while saving"):
        checkpoint.check_consistent(run)
    # ... and resuming completes the save, then the run, bit for bit.
    train("geomano", darcy, out=run, preset="darcy", model_overrides=SMALL, config=CONFIG,
          progress=False, resume=True, threads=THREADS)
    assert_same_run(straight, run)


def test_a_run_with_files_from_different_epochs_is_refused(darcy, straight, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(straight, run)
    state = json.loads((run / "training_state.json").read_text())
    state["epoch"] = 2  # as if an older tool had written the files one by one
    (run / "training_state.json").write_text(json.dumps(state))
    with pytest.raises(checkpoint.TornRunError, match="different epochs"):
        train("geomano", darcy, out=run, preset="darcy", model_overrides=SMALL,
              config=CONFIG, progress=False, resume=True)


def test_resume_with_other_options_names_them(darcy, straight, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(straight, run)
    changed = TrainConfig(epochs=5, batch_size=2, lr=3e-3, num_test=1)
    with pytest.raises(ValueError, match=r"epochs 3 \(now 5\); lr 0.001 \(now 0.003\)"):
        train("geomano", darcy, out=run, preset="darcy", model_overrides=SMALL,
              config=changed, progress=False, resume=True)


def test_a_second_writer_of_a_run_fails_at_once(darcy, tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from ssmpde.data import output_lock\n"
         f"with output_lock({str(run)!r}):\n"
         "    print('locked', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.perf_counter()
        with pytest.raises(OutputLockedError, match=f"PID {holder.pid}"):
            train("geomano", darcy, out=run, preset="darcy", model_overrides=SMALL,
                  config=CONFIG, progress=False)
        assert time.perf_counter() - started < 5
        assert not run.exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_diverging_run_stops_with_the_epoch_named(darcy, tmp_path):
    from ssmpde.surrogates.train import TrainingDivergedError

    with pytest.raises(TrainingDivergedError, match="epoch 1"):
        train("geomano", darcy, out=tmp_path / "run", preset="darcy", model_overrides=SMALL,
              config=TrainConfig(epochs=2, batch_size=2, lr=1e30, max_grad_norm=0.0),
              progress=False)
    assert not (tmp_path / "run" / "weights.safetensors").exists()  # nothing NaN was saved
