"""generate() on dask.distributed: batches as tasks writing regions of one zarr store.

Every test compares with the single-process run, bit for bit. One two-worker LocalCluster
(single-threaded processes) serves the module; the command-line tests start their own with
--workers 2, as a user would. Fault injection: a worker process that dies inside a task, a
solver that blows up on one sample, a driver killed with SIGKILL, a second writer of the same
store, a scheduler that does not answer.
"""

import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import uuid

import dask
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssmpde.cli import main
from ssmpde.data import (DatasetFileError, OutputLockedError, StoreProgress, config_of,
                         open_dataset, store_progress, update_store_progress, write_store_region)
from ssmpde.generation import generate
from ssmpde.solvers import get_solver
from ssmpde.solvers.base import SolverDivergedError, get_solver_class
from ssmpde.solvers.darcy import Darcy
from ssmpde.solvers.navier_stokes import NavierStokes2D

from .helpers import assert_same_dataset

distributed = pytest.importorskip("distributed")

ROOT = pathlib.Path(__file__).resolve().parents[2]
EQUATIONS = ["navier-stokes", "darcy", "kuramoto-sivashinsky", "burgers", "euler"]
# A Navier-Stokes batch of one sample takes ~0.2 s: slow enough to kill a run in its middle.
SLOW_NS = ["--resolution", "16", "--simulation-resolution", "32", "--viscosity", "1e-3",
           "--time", "1", "--record-interval", "0.5", "--time-step", "2e-4"]
SLOW_NS_CONFIG = dict(resolution=16, simulation_resolution=32, viscosity=1e-3, final_time=1.0,
                      record_interval=0.5, time_step=2e-4)
THREAD_ENV = {name: "1" for name in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS")}


@pytest.fixture(scope="module")
def client():
    """Two single-threaded worker processes, the shape `--workers 2` gives on two cores."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0", env=THREAD_ENV) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        yield client



def tiny(equation: str) -> dict:
    return dict(get_solver_class(equation).TINY)


def batches_of(record: StoreProgress) -> set[tuple[int, int]]:
    """The batch-size-1 batches a record lists as complete."""
    return {(i, i + 1) for start, stop in record.complete for i in range(start, stop)}


class CountingDarcy(Darcy):
    """Darcy that leaves one file per batch it computes (on whatever worker) in ``calls``."""

    calls = ""

    def solve_batch(self, inputs, *, progress=None):
        marker = pathlib.Path(self.calls) / f"{len(inputs['a'])}-{uuid.uuid4().hex}"
        marker.touch()
        return super().solve_batch(inputs, progress=progress)


class DyingDarcy(Darcy):
    """Darcy whose worker process dies (os._exit) in the third batch computed, once."""

    calls = ""

    def solve_batch(self, inputs, *, progress=None):
        calls = pathlib.Path(self.calls)
        (calls / uuid.uuid4().hex).touch()
        if len(list(calls.iterdir())) >= 3:
            try:  # exactly one death, whichever worker gets here first
                os.close(os.open(calls.parent / "died", os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os._exit(1)
        return super().solve_batch(inputs, progress=progress)


class CountingNS(NavierStokes2D):
    """Navier-Stokes that leaves one file per batch it computes in ``calls``."""

    calls = ""

    def solve_batch(self, inputs, *, progress=None):
        (pathlib.Path(self.calls) / uuid.uuid4().hex).touch()
        return super().solve_batch(inputs, progress=progress)


class CrashNS(NavierStokes2D):
    """Navier-Stokes that crashes (not on its input: a RuntimeError, as a bug or a lost
    library would) on its sample ``bad``."""

    bad = -1

    def sample_inputs(self, seed, indices):
        if self.bad in indices:
            raise RuntimeError(f"crashed on sample {self.bad}")
        return super().sample_inputs(seed, indices)


class BlowUpNS(NavierStokes2D):
    """Navier-Stokes whose sample ``bad`` starts a million times too strong: a real CFL
    blow-up of the solver, in that sample only."""

    bad = -1

    def sample_inputs(self, seed, indices):
        inputs = super().sample_inputs(seed, indices)
        for row, index in enumerate(indices):
            if index == self.bad:
                inputs["initial"][row] *= 1e6
        return inputs


# ------------------------------------------------------------------------------------------
# The same numbers as one process
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("equation", EQUATIONS)
def test_two_workers_write_the_store_of_the_single_process_run(tmp_path, client, equation):
    config = tiny(equation)
    single = generate(equation, num_samples=5, seed=3, batch_size=2, out=tmp_path / "one.zarr",
                      progress=False, **config)
    store = generate(equation, num_samples=5, seed=3, batch_size=2, out=tmp_path / "two.zarr",
                     scheduler=client, progress=False, **config)
    assert_same_dataset(store, single)
    assert store_progress(tmp_path / "two.zarr") is None  # marked complete
    assert (tmp_path / "two.zarr" / ".zmetadata").is_file()  # consolidated
    assert config_of(store)["num_samples"] == 5
    single.close()
    store.close()
    assert sorted(os.listdir(tmp_path)) == ["one.zarr", "two.zarr"]  # no lock, no temporary


@pytest.mark.e2e
def test_command_line_local_cluster_info_and_convert_round_trip(tmp_path, capsys):
    out = tmp_path / "darcy.zarr"
    args = ["generate", "darcy", "--samples", "5", "--batch-size", "2", "--seed", "1",
            "--resolution", "9", "--simulation-resolution", "17"]
    assert main([*args, "--out", str(out), "--workers", "2"]) == 0
    captured = capsys.readouterr()
    assert "dask: scheduler tcp://" in captured.err and " workers, " in captured.err
    assert "batches of 2 samples" in captured.err  # 5 samples on 2 workers: --batch-size
    assert "5/5" in captured.err and "sample" in captured.err  # the bar counts samples
    assert f"wrote {out}" in captured.out
    assert main([*args, "--out", str(tmp_path / "single.zarr"), "--no-progress"]) == 0
    with open_dataset(out) as a, open_dataset(tmp_path / "single.zarr") as b:
        assert_same_dataset(a, b)
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    assert "status:" not in capsys.readouterr().out  # a finished store says nothing more
    # convert round-trips exactly, history included, both ways
    assert main(["convert", str(out), str(tmp_path / "darcy.nc")]) == 0
    assert main(["convert", str(tmp_path / "darcy.nc"), str(tmp_path / "back.zarr")]) == 0
    assert main(["convert", str(tmp_path / "back.zarr"), str(tmp_path / "back.nc")]) == 0
    with open_dataset(out) as a, open_dataset(tmp_path / "darcy.nc") as b, \
            open_dataset(tmp_path / "back.zarr") as c, \
            open_dataset(tmp_path / "back.nc") as d:
        for other in (b, c, d):
            assert_same_dataset(a, other, history=True)
    assert "wrote" in capsys.readouterr().out
    assert main(["convert", str(out), str(tmp_path / "darcy.nc")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["convert", str(out), str(tmp_path / "darcy.nc"), "--overwrite"]) == 0
    assert main(["convert", str(out), str(out), "--overwrite"]) == 2
    assert "one of the inputs" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["back.nc", "back.zarr", "darcy.nc", "darcy.zarr",
                                            "single.zarr"]


# ------------------------------------------------------------------------------------------
# Faults
# ------------------------------------------------------------------------------------------

def test_a_worker_killed_inside_a_task_is_retried_and_the_data_are_the_same(tmp_path, client):
    calls = tmp_path / "calls"
    calls.mkdir()
    solver = DyingDarcy(**tiny("darcy"))
    solver.calls = str(calls)
    workers_before = set(client.run(os.getpid).values())
    store = generate(solver, num_samples=6, seed=2, batch_size=1, out=tmp_path / "d.zarr",
                     scheduler=client, progress=False)
    assert (tmp_path / "died").exists(), "no worker died: the fault was not injected"
    # Six batches, the killed one twice; a batch the dead worker had finished but whose
    # (tiny) result the driver had not fetched yet is computed again too: same bytes.
    assert len(list(calls.iterdir())) >= 7
    single = generate(solver, num_samples=6, seed=2, progress=False)  # "died" exists: lives
    assert_same_dataset(store, single)
    store.close()
    client.wait_for_workers(2, timeout=60)  # the nanny restarted the dead one
    assert set(client.run(os.getpid).values()) != workers_before


def test_a_sample_that_blows_up_is_named_and_its_store_removed(tmp_path, client, capsys):
    """A blow-up is a failure of the run's own settings: they fail the same way again, so the
    store goes (as the parts of a run in one process do) and the corrected command needs no
    --overwrite. A crash that is not the input's (below: RuntimeError) keeps the store."""
    out = tmp_path / "ns.zarr"
    config = tiny("navier-stokes")
    solver = BlowUpNS(**config)
    solver.bad = 5
    with pytest.raises(SolverDivergedError, match=r"^sample 5 \(batch 4\.\.5\) failed: "
                                                  r"SolverDivergedError: .*non-finite.* in "
                                                  r"sample 5: .*was removed: change the "
                                                  r"settings"):
        generate(solver, num_samples=8, seed=4, batch_size=2, out=out, scheduler=client,
                 progress=False)
    assert sorted(os.listdir(tmp_path)) == []
    fixed = generate("navier-stokes", num_samples=8, seed=4, batch_size=2, out=out,
                     scheduler=client, progress=False, **config)
    single = generate("navier-stokes", num_samples=8, seed=4, progress=False, **config)
    assert_same_dataset(fixed, single)
    fixed.close()
    assert sorted(os.listdir(tmp_path)) == ["ns.zarr"]


def test_a_crashed_store_is_kept_named_and_resumed(tmp_path, client, capsys):
    out = tmp_path / "ns.zarr"
    config = tiny("navier-stokes")
    solver = CrashNS(**config)
    solver.bad = 5
    with pytest.raises(RuntimeError, match=r"^samples 4\.\.5 failed: RuntimeError: crashed "
                                           r"on sample 5\. .*rerun the same command"):
        generate(solver, num_samples=8, seed=4, batch_size=2, out=out, scheduler=client,
                 progress=False)
    record = store_progress(out)
    assert record is not None and (4, 6) not in record.complete
    assert record.config == {"equation": "navier-stokes", "num_samples": 8, "seed": 4,
                             "solver": get_solver("navier-stokes", **config).config_dict()}
    # the unfinished store is never taken for a dataset, and says how far it got
    with pytest.raises(DatasetFileError, match="still being written.*rerun the same"):
        open_dataset(out)
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    done, total = record.batch_counts()
    assert f"status: being written, {done} of 4 batches complete" in text and total == 4
    assert f"sample={record.samples_complete}," in text
    assert main(["convert", str(out), str(tmp_path / "ns.nc")]) == 2
    assert "still being written" in capsys.readouterr().err
    # the in-process path does not silently continue it either
    with pytest.raises(FileExistsError, match="being written by a run on a dask cluster"):
        generate("navier-stokes", num_samples=8, seed=4, out=out, progress=False, **config)
    # the same call without the crash finishes it: the numbers of one process
    resumed = generate("navier-stokes", num_samples=8, seed=4, batch_size=2, out=out,
                       scheduler=client, progress=False, **config)
    # (the store keeps the attributes of its layout: "source" names the class that made it)
    single = generate(CrashNS(**config), num_samples=8, seed=4, progress=False)
    assert_same_dataset(resumed, single)
    resumed.close()
    assert sorted(os.listdir(tmp_path)) == ["ns.zarr"]


def kill_driver_mid_run(tmp_path, cluster_flags, capsys):
    """Start `ssmpde generate ... --out ns.zarr` with ``cluster_flags`` in a subprocess; once
    three batches are recorded, stop it (SIGSTOP), check that a second writer is locked out
    and that `ssmpde info` reads the store, then SIGKILL the driver. Returns (store, its
    processes)."""
    psutil = pytest.importorskip("psutil")
    out = tmp_path / "ns.zarr"
    command = [sys.executable, "-m", "ssmpde.cli", "generate", "navier-stokes", "--samples",
               "10", "--batch-size", "1", "--seed", "6", *SLOW_NS, *cluster_flags,
               "--no-progress", "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), **THREAD_ENV)
    log = tmp_path / "driver.log"  # a file, not a pipe nobody reads while the driver runs
    with open(log, "w") as handle:
        driver = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=handle,
                                  stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        record = None
        while time.monotonic() < deadline and driver.poll() is None:
            record = store_progress(out)  # atomic updates: never half a record
            if record is not None and record.samples_complete >= 3:
                break
            time.sleep(0.02)
        assert driver.poll() is None and record is not None, log.read_text()[-3000:]
        # Stopped, not yet killed: it keeps its lock and its store in progress for the checks
        # below, and cannot record the remaining batches meanwhile (under load it used to
        # finish the run before the SIGKILL came).
        driver.send_signal(signal.SIGSTOP)
        # While it runs: a second writer of the same store fails at once on the lock ...
        begin = time.perf_counter()
        with pytest.raises(OutputLockedError, match=f"PID {driver.pid}\\b"):
            generate("navier-stokes", num_samples=10, batch_size=1, seed=6, out=out,
                     workers=2, progress=False, **SLOW_NS_CONFIG)
        assert time.perf_counter() - begin < 2.0  # refused before any cluster started
        # ... and `ssmpde info` reads the store in progress.
        capsys.readouterr()
        assert main(["info", str(out)]) == 0
        assert "batches complete" in capsys.readouterr().out
        processes = psutil.Process(driver.pid).children(recursive=True)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    return out, processes


def resume_counting_batches(tmp_path, out, client):
    """The killed run again (its config, a solver that counts batches): only the batches
    missing from the record are computed, and the data are those of one process."""
    record = store_progress(out)
    assert record is not None, "the run finished before it could be killed"
    recorded = batches_of(record)
    assert 3 <= len(recorded) < 10
    calls = tmp_path / "calls"
    calls.mkdir()
    counting = CountingNS(**SLOW_NS_CONFIG)
    counting.calls = str(calls)
    resumed = generate(counting, num_samples=10, batch_size=1, seed=6, out=out,
                       scheduler=client, progress=False)
    assert len(list(calls.iterdir())) == 10 - len(recorded)  # only the missing batches
    single = generate("navier-stokes", num_samples=10, batch_size=5, seed=6, progress=False,
                      **SLOW_NS_CONFIG)
    assert_same_dataset(resumed, single)
    assert resumed.attrs["history"] == record.history  # the run's own provenance, kept
    resumed.close()
    assert sorted(os.listdir(tmp_path)) == ["calls", "driver.log", "ns.zarr"]


def test_killed_driver_on_a_scheduler_resumes_only_the_missing_batches(tmp_path, client,
                                                                       capsys):
    # The driver uses a running scheduler (the module's cluster, by its address): its
    # workers outlive it and may finish tasks of the dead run, which changes nothing.
    out, _ = kill_driver_mid_run(tmp_path, ["--scheduler", client.scheduler.address], capsys)
    resume_counting_batches(tmp_path, out, client)


@pytest.mark.slow
def test_killed_driver_of_a_local_cluster_takes_its_workers_and_resumes(tmp_path, client,
                                                                        capsys):
    psutil = pytest.importorskip("psutil")
    out, processes = kill_driver_mid_run(tmp_path, ["--workers", "2"], capsys)
    _, alive = psutil.wait_procs(processes, timeout=30)
    assert not alive, f"worker processes outlived the driver: {alive}"
    resume_counting_batches(tmp_path, out, client)


def test_resume_computes_only_the_batches_missing_from_the_record(tmp_path, client):
    # The record, not the values on disk, says what is done: a batch written but not yet
    # recorded (the driver died in between) is computed again and written identically.
    out = tmp_path / "d.zarr"
    config = tiny("darcy")
    calls = tmp_path / "calls"
    calls.mkdir()
    counting = CountingDarcy(**config)
    counting.calls = str(calls)
    full = generate(counting, num_samples=6, seed=9, batch_size=2, out=out, scheduler=client,
                    progress=False)
    reference = full.load()
    full.close()
    assert len(list(calls.iterdir())) == 3
    # Re-open the finished store as if the driver had died after two of three batches.
    record = StoreProgress(config=config_of(reference), history=reference.history,
                           run_id="0" * 32, num_samples=6, batch_size=2,
                           complete=((0, 4),))
    update_store_progress(out, record)
    (out / ".zmetadata").unlink()
    for path in calls.iterdir():
        path.unlink()
    resumed = generate(counting, num_samples=6, seed=9, batch_size=2, out=out,
                       scheduler=client, progress=False)
    # Samples 4 and 5 only (one batch a worker: two batches of one).
    assert sum(int(path.name.split("-")[0]) for path in calls.iterdir()) == 2
    assert_same_dataset(resumed, reference, history=True)
    resumed.close()


# ------------------------------------------------------------------------------------------
# Clear errors
# ------------------------------------------------------------------------------------------

def test_bad_cluster_arguments_fail_before_any_work(tmp_path):
    config = tiny("darcy")
    with pytest.raises(ValueError, match="writes a zarr store.*ssmpde convert"):
        generate("darcy", num_samples=2, out=tmp_path / "d.nc", workers=2, progress=False,
                 **config)
    with pytest.raises(ValueError, match="writes a zarr store, got no out"):
        generate("darcy", num_samples=2, scheduler="local", progress=False, **config)
    with pytest.raises(ValueError, match="workers sizes the local cluster only"):
        generate("darcy", num_samples=2, out=tmp_path / "d.zarr", workers=2,
                 scheduler="tcp://127.0.0.1:8786", progress=False, **config)
    with pytest.raises(ValueError, match="scheduler must be 'local', the address"):
        generate("darcy", num_samples=2, out=tmp_path / "d.zarr", scheduler="my cluster",
                 progress=False, **config)
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        generate("darcy", num_samples=2, out=tmp_path / "d.zarr", workers=0, progress=False,
                 **config)
    assert list(tmp_path.iterdir()) == []


def test_an_unreachable_scheduler_is_one_clear_error(tmp_path, capsys):
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        status = main(["generate", "darcy", "--samples", "2", "--resolution", "9",
                       "--simulation-resolution", "17", "--out", str(tmp_path / "d.zarr"),
                       "--scheduler", "tcp://127.0.0.1:9", "--no-progress"])
    assert status == 2
    err = capsys.readouterr().err
    assert "cannot reach the dask scheduler at 'tcp://127.0.0.1:9'" in err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing laid out for a cluster never reached


def test_a_store_of_another_config_or_not_ssmpde_is_refused(tmp_path, client):
    crash = CrashNS(**tiny("navier-stokes"))
    crash.bad = 2
    ns = tmp_path / "ns.zarr"
    with pytest.raises(RuntimeError, match="sample 2"):
        generate(crash, num_samples=4, batch_size=2, out=ns, scheduler=client, progress=False)
    with pytest.raises(ValueError, match="different configuration.*delete that store.*"
                                         r"--overwrite \(overwrite=True\)"):
        generate("navier-stokes", num_samples=4, seed=1, batch_size=2, out=ns,
                 scheduler=client, progress=False, **tiny("navier-stokes"))
    fresh = generate("navier-stokes", num_samples=4, seed=1, batch_size=2, out=ns,
                     scheduler=client, overwrite=True, progress=False, **tiny("navier-stokes"))
    assert_same_dataset(fresh, generate("navier-stokes", num_samples=4, seed=1,
                                        progress=False, **tiny("navier-stokes")))
    fresh.close()
    # a finished store needs overwrite; a directory ssmpde did not write is never replaced
    with pytest.raises(FileExistsError, match="already exists"):
        generate("navier-stokes", num_samples=4, seed=1, out=ns, scheduler=client,
                 progress=False, **tiny("navier-stokes"))
    out = tmp_path / "d.zarr"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="directory that ssmpde did not write"):
        generate("darcy", num_samples=2, out=out, scheduler=client, overwrite=True,
                 progress=False, **tiny("darcy"))
    assert (out / "notes.txt").read_text() == "mine"


def test_a_region_that_does_not_fit_the_layout_is_not_written(tmp_path):
    out = tmp_path / "d.zarr"
    with generate("darcy", num_samples=3, seed=0, out=out, progress=False,
                  **tiny("darcy")) as ds:
        ds.load()
    batch = ds.isel(sample=slice(0, 2))
    with pytest.raises(DatasetFileError, match="no zarr store being written"):
        write_store_region(batch, out, run_id="x")  # finished: not a store in progress
    record = StoreProgress(config={}, history="h", run_id="a" * 32, num_samples=3,
                           batch_size=2)
    update_store_progress(out, record)
    with pytest.raises(DatasetFileError, match="laid out again by another run"):
        write_store_region(batch, out, run_id="b" * 32)
    with pytest.raises(DatasetFileError, match="u.*the store has"):
        write_store_region(batch.assign(u=batch.u.astype(np.float32)), out,
                           run_id="a" * 32)
    with pytest.raises(DatasetFileError, match="consecutive"):
        write_store_region(ds.isel(sample=[0, 2]), out, run_id="a" * 32)


# ------------------------------------------------------------------------------------------
# The progress record
# ------------------------------------------------------------------------------------------

@given(num_samples=st.integers(1, 60), batch_size=st.integers(1, 9), data_=st.data())
def test_progress_ranges_merge_in_any_completion_order(num_samples, batch_size, data_):
    from ssmpde.generation._batches import _missing

    record = StoreProgress(config={}, history="", run_id="r", num_samples=num_samples,
                           batch_size=batch_size)
    batches = list(_missing([], num_samples, batch_size))
    assert record.batch_counts() == (0, len(batches))
    order = data_.draw(st.permutations(batches))
    for count, (start, stop) in enumerate(order, 1):
        record = record.with_complete(start, stop)
        assert record.batch_counts() == (count, len(batches))
        assert list(_missing(list(record.complete), num_samples, batch_size)) == \
            sorted(set(batches) - set(order[:count]))
        assert StoreProgress.from_json(record.to_json()) == record
    assert record.is_complete and record.complete == ((0, num_samples),)


def test_a_corrupt_progress_record_is_a_clear_error(tmp_path):
    # The text of decode_json (a61fa65) names what is wrong: "is not valid JSON".
    with pytest.raises(DatasetFileError, match="record .* of 'x.zarr' is not valid JSON .*"
                                               "--overwrite"):
        StoreProgress.from_json("{", "x.zarr")
    bad = StoreProgress(config={}, history="", run_id="r", num_samples=4, batch_size=1,
                        complete=((2, 3), (0, 1)))
    with pytest.raises(DatasetFileError, match="not sorted, disjoint"):
        StoreProgress.from_json(bad.to_json(), "x.zarr")
    record = StoreProgress(config={}, history="", run_id="r", num_samples=80,
                           batch_size=8, complete=((0, 24),))
    assert record.summary() == "3 of 10 batches complete (24 of 80 samples, batches of 8)"


def test_four_samples_on_two_workers_are_two_batches_of_two(tmp_path, client):
    # The default batch size (8) would make one batch, on one worker: the batches are cut
    # so that every worker gets one, and the values do not depend on it.
    calls = tmp_path / "calls"
    calls.mkdir()
    counting = CountingDarcy(**tiny("darcy"))
    counting.calls = str(calls)
    store = generate(counting, num_samples=4, seed=5, out=tmp_path / "d.zarr",
                     scheduler=client, progress=False)
    assert sorted(path.name.split("-")[0] for path in calls.iterdir()) == ["2", "2"]
    single = generate(counting, num_samples=4, seed=5, progress=False)  # in this process
    assert_same_dataset(store, single)
    store.close()


def test_a_cluster_run_prints_its_duration_and_counts_whole_samples(tmp_path, client,
                                                                    capsys):
    capsys.readouterr()
    store = generate("navier-stokes", num_samples=3, seed=0, batch_size=1,
                     out=tmp_path / "ns.zarr", scheduler=client, **SLOW_NS_CONFIG)
    store.close()
    err = capsys.readouterr().err
    assert "batches of 1 sample, " in err
    assert "this run will take about" in err and "3 samples at about" in err
    assert ", 2 at once; timed on " in err  # two workers of one thread
    assert "3/3" in err and not re.search(r"\d\.\d+/\d", err)
