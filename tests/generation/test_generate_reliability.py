"""generate() reliability: the memory limit is checked before anything is allocated, the
bookkeeping of finished parts does not grow with num_samples, the output lock keeps two
writers apart, a kill during the final merge leaves nothing that blocks the rerun, a failed
run's leftovers give way to --overwrite, and --overwrite never deletes what ssmpde did not
write."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ssmpde.data import OutputLockedError, open_dataset
from ssmpde.generation import generate, parts_directory
from ssmpde.solvers import get_solver

from .helpers import assert_same_dataset

ROOT = pathlib.Path(__file__).resolve().parents[2]
DARCY = dict(resolution=9, simulation_resolution=17)
NS = dict(resolution=16, simulation_resolution=16, viscosity=1e-4, final_time=0.2,
          record_interval=0.1, time_step=0.01)
SIZE = r"[\d.e+-]+ (?:B|[KMGTP]iB)"  # ssmpde.core.format_bytes
LIMIT_MESSAGE = (rf"needs about {SIZE} at once \(.*\), more than the limit of "
                 rf"{SIZE}: lower (--batch-size or )?the resolution.*raise --max-memory "
                 r"/ SSMPDE_MAX_MEMORY")


@pytest.fixture(autouse=True)
def no_memory_limit_from_the_environment(monkeypatch):
    monkeypatch.delenv("SSMPDE_MAX_MEMORY", raising=False)


def python(script: str, *args: str, **kwargs) -> subprocess.Popen:
    """Run ``script`` in a fresh interpreter with the repository importable."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)


def finish(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """Wait for ``process``; kill it (and fail) if it runs past ``timeout`` seconds."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        pytest.fail(f"the subprocess ran past {timeout} s and was killed: {stderr[-2000:]}")



def leftovers(directory: pathlib.Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


class Counting:
    """Wraps a solver's solve_batch: counts calls, optionally fails on the n-th one."""

    def __init__(self, solver, fail_on=None):
        self.solver, self.fail_on, self.calls = solver, fail_on, 0
        self.original = solver.solve_batch
        solver.solve_batch = self

    def __call__(self, inputs, progress=None):
        self.calls += 1
        if self.fail_on is not None and self.calls >= self.fail_on:
            raise RuntimeError("injected failure")
        return self.original(inputs, progress=progress)


# ------------------------------------------------------------------------------------------
# Memory: refused before any allocation; bookkeeping O(batches)
# ------------------------------------------------------------------------------------------

HUGE = """
    import json, pathlib, resource, sys, time, tracemalloc
    import psutil
    from ssmpde.generation import generate
    from ssmpde.solvers import get_solver

    tmp = pathlib.Path(sys.argv[1])
    darcy = dict(resolution=9, simulation_resolution=17)
    process = psutil.Process()
    # A regression that builds per-sample lists for 10**9 samples hits MemoryError here
    # instead of eating the machine's memory.
    resource.setrlimit(resource.RLIMIT_AS, (process.memory_info().vms + 2 ** 31,
                                            resource.getrlimit(resource.RLIMIT_AS)[1]))

    def measure(call):
        rss = process.memory_info().rss
        tracemalloc.start()
        start = time.perf_counter()
        try:
            call()
            error = None
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return {"error": error, "seconds": seconds, "traced_peak": peak,
                "rss_growth": process.memory_info().rss - rss}

    def failing(fail_on, seen):
        solver = get_solver("darcy", **darcy)
        original, calls = solver.solve_batch, [0]
        def solve(inputs, progress=None):
            calls[0] += 1
            seen.append(int(inputs["a"].shape[0]))
            if calls[0] >= fail_on:
                raise RuntimeError("injected failure")
            return original(inputs, progress=progress)
        solver.solve_batch = solve
        return solver

    # Warm up (first netCDF write, first solve) outside the measurements.
    (tmp / "warm").mkdir()
    generate("darcy", num_samples=1, out=tmp / "warm" / "warm.nc", progress=False,
             **darcy).close()
    results = {}
    results["in_memory"] = measure(lambda: generate(
        "darcy", num_samples=10 ** 9, progress=False, **darcy))
    results["too_many"] = measure(lambda: generate(
        "darcy", num_samples=10 ** 9 + 1, progress=False, **darcy))
    results["resolution"] = measure(lambda: generate(
        "navier-stokes", num_samples=1, out=tmp / "ns.nc", progress=False,
        simulation_resolution=65536, resolution=32768))
    results["resolution_files"] = sorted(p.name for p in tmp.iterdir() if p.name != "warm")
    # With a file, 10**9 tiny samples fit the memory limit (and, told so, the disk): the run
    # starts at once, and a failure in its third batch comes back at once (two parts saved)
    seen = []
    results["to_file"] = measure(lambda: generate(
        failing(3, seen), num_samples=10 ** 9, batch_size=4, out=tmp / "big.nc",
        progress=False, max_disk="100T"))
    results["parts"] = sorted(p.name for p in (tmp / ".big.nc.parts").iterdir())
    # ... and the rerun finds its way from the two parts to the next batch as fast.
    results["resumed"] = measure(lambda: generate(
        failing(1, seen), num_samples=10 ** 9, batch_size=4, out=tmp / "big.nc",
        progress=False, max_disk="100T"))
    results["batches"] = seen
    print(json.dumps(results))
"""


def test_huge_runs_fail_fast_with_little_memory(tmp_path):
    process = python(HUGE, str(tmp_path))
    stdout, stderr = finish(process, timeout=30)
    assert process.returncode == 0, stderr
    results = json.loads(stdout.splitlines()[-1])
    for case in ("in_memory", "too_many", "resolution", "to_file", "resumed"):
        result = results[case]
        assert result["seconds"] < 2.0, (case, result)
        assert result["traced_peak"] < 50 * 2 ** 20, (case, result)
        assert result["rss_growth"] < 200 * 2 ** 20, (case, result)
    assert results["in_memory"]["error"].startswith("ValueError: this run needs about")
    assert "1_000_000_000 samples" in results["in_memory"]["error"]
    assert "write to a file" in results["in_memory"]["error"]
    assert "num_samples must be at most 1_000_000_000" in results["too_many"]["error"]
    error = results["resolution"]["error"]
    assert error.startswith("ValueError: one sample of this configuration needs about")
    assert "lower the resolution, or raise --max-memory / SSMPDE_MAX_MEMORY" in error
    assert results["resolution_files"] == []  # refused before the lock or any folder
    assert results["to_file"]["error"] == "RuntimeError: injected failure"
    assert results["parts"] == ["manifest.json", "part-00000000-00000004.nc",
                                "part-00000004-00000008.nc"]
    assert results["resumed"]["error"] == "RuntimeError: injected failure"
    assert results["batches"] == [4, 4, 4, 4]  # the rerun started at sample 8


def test_max_memory_is_respected(tmp_path, monkeypatch):
    solver = get_solver("darcy", **DARCY)
    per_sample = solver.bytes_per_sample()
    assert per_sample > solver.stored_bytes_per_sample() > 0
    limit = 3 * per_sample  # a batch of 8 does not fit, a batch of 2 does
    start = time.perf_counter()
    with pytest.raises(ValueError, match=LIMIT_MESSAGE) as error:
        generate("darcy", num_samples=16, batch_size=8, out=tmp_path / "d.nc",
                 max_memory=limit, progress=False, **DARCY)
    assert "batch of 8 x" in str(error.value)
    with pytest.raises(ValueError, match="one sample of this configuration needs about"):
        generate("darcy", num_samples=1, out=tmp_path / "d.nc", max_memory=per_sample - 1,
                 progress=False, **DARCY)
    assert time.perf_counter() - start < 1.0
    assert list(tmp_path.iterdir()) == []
    ds = generate("darcy", num_samples=16, batch_size=2, out=tmp_path / "d.nc",
                  max_memory=limit, progress=False, **DARCY)
    assert ds.sizes["sample"] == 16
    ds.close()
    # a batch is never larger than the run: 2 samples with batch_size 8 fit
    ds = generate("darcy", num_samples=2, batch_size=8, out=tmp_path / "two.nc",
                  max_memory=limit, progress=False, **DARCY)
    ds.close()
    # The environment variable sets the default limit, with suffixes; the argument wins.
    monkeypatch.setenv("SSMPDE_MAX_MEMORY", "1K")
    with pytest.raises(ValueError, match=LIMIT_MESSAGE):
        generate("darcy", num_samples=1, progress=False, **DARCY)
    assert generate("darcy", num_samples=1, progress=False, max_memory="1G",
                    **DARCY).sizes["sample"] == 1
    monkeypatch.setenv("SSMPDE_MAX_MEMORY", "512M")
    assert generate("darcy", num_samples=1, progress=False, **DARCY).sizes["sample"] == 1
    monkeypatch.setenv("SSMPDE_MAX_MEMORY", "lots")
    with pytest.raises(ValueError, match="memory size 'lots'"):
        generate("darcy", num_samples=1, progress=False, **DARCY)


def test_memory_estimates_of_the_builtin_solvers():
    # Stored bytes match the variables of a real dataset; working memory scales with the
    # simulation grid; estimating a huge configuration allocates nothing.
    for name, config in (("darcy", DARCY), ("navier-stokes", dict(NS, forcing="torus-vis-force",
                                                                  viscosity=(1e-4, 1e-3)))):
        solver = get_solver(name, **config)
        ds = generate(solver, num_samples=3, progress=False)
        stored = sum(8 * var.size for var in ds.data_vars.values()) // 3
        assert solver.stored_bytes_per_sample() == stored
    small = get_solver("navier-stokes", simulation_resolution=64, resolution=64)
    large = get_solver("navier-stokes", simulation_resolution=128, resolution=64)
    assert large.bytes_per_sample() - small.bytes_per_sample() == 16 * (128 ** 2 - 64 ** 2) * 8
    huge = get_solver("navier-stokes", simulation_resolution=65536, resolution=32768,
                      final_time=1e6, record_interval=1e-3)
    assert huge.bytes_per_sample() > 2 ** 60
    lu = get_solver("darcy", simulation_resolution=421, resolution=85)
    pcg = get_solver("darcy", simulation_resolution=421, resolution=85, linear_solver="pcg")
    assert 85 * 421 ** 2 * 8 < lu.bytes_per_sample() - pcg.bytes_per_sample()


# ------------------------------------------------------------------------------------------
# A kill during the final merge
# ------------------------------------------------------------------------------------------

KILLED_MERGE = """
    import os, pathlib, signal, sys
    from ssmpde.data import files
    from ssmpde.generation import generate

    out = pathlib.Path(sys.argv[1])
    write = files._write_netcdf

    def write_and_die(ds, path):
        if path.parent == out.parent and path.name.startswith(f".{out.stem}.tmp-"):
            write(ds, path)  # the merged temporary, not a part: half of it, then SIGKILL
            with open(path, "r+b") as handle:
                handle.truncate(path.stat().st_size // 2)
            os.kill(os.getpid(), signal.SIGKILL)
        write(ds, path)

    files._write_netcdf = write_and_die
    generate("darcy", num_samples=5, seed=3, batch_size=2, out=out, progress=False,
             resolution=9, simulation_resolution=17)
"""


def test_sigkill_during_the_final_merge_then_the_same_command_finishes(tmp_path):
    out = tmp_path / "killed.nc"
    process = python(KILLED_MERGE, str(out))
    _, stderr = finish(process, timeout=60)
    assert process.returncode == -signal.SIGKILL, stderr
    left = leftovers(tmp_path)
    assert not out.exists()
    assert ".killed.nc.parts" in left and ".killed.nc.lock" in left
    assert any(name.startswith(".killed.tmp-") for name in left), left
    ds = generate("darcy", num_samples=5, seed=3, batch_size=2, out=out, progress=False,
                  **DARCY)
    clean = generate("darcy", num_samples=5, seed=3, batch_size=5, out=tmp_path / "clean.nc",
                     progress=False, **DARCY)
    assert_same_dataset(ds, clean)
    ds.close()
    clean.close()
    assert sorted(os.listdir(tmp_path)) == ["clean.nc", "killed.nc"]


# ------------------------------------------------------------------------------------------
# Leftovers of failed runs, and --overwrite
# ------------------------------------------------------------------------------------------

def test_a_corrected_command_after_a_diverged_run_needs_no_overwrite(tmp_path):
    # A divergence is the run's own input: the same settings would diverge again and other
    # settings cannot resume its parts, so it leaves nothing that blocks the corrected one.
    out = tmp_path / "ns.nc"
    with pytest.raises(Exception, match="non-finite"):
        generate("navier-stokes", num_samples=2, out=out, progress=False,
                 **dict(NS, sigma=1e5))
    assert os.listdir(tmp_path) == []
    ds = generate("navier-stokes", num_samples=2, out=out, progress=False, **NS)
    assert_same_dataset(ds, generate("navier-stokes", num_samples=2, progress=False, **NS))
    ds.close()
    assert os.listdir(tmp_path) == ["ns.nc"]


def test_the_parts_of_a_failure_that_may_pass_need_overwrite_for_other_settings(tmp_path):
    out = tmp_path / "d.nc"
    fail_in_second_batch(out)  # an error that is not the input's: the part is kept
    with pytest.raises(ValueError, match="different configuration.*or pass --overwrite "
                                         r"\(overwrite=True\) to discard it"):
        generate("darcy", num_samples=4, seed=2, batch_size=2, out=out, progress=False,
                 **DARCY)


def fail_in_second_batch(out):
    """A Darcy run of 4 samples to ``out`` that fails in its second batch (one part saved)."""
    failing = Counting(get_solver("darcy", **DARCY), fail_on=2)
    with pytest.raises(RuntimeError, match="injected"):
        generate(failing.solver, num_samples=4, seed=1, batch_size=2, out=out, progress=False)


def test_overwrite_discards_the_parts_of_a_run_with_another_config(tmp_path):
    out = tmp_path / "d.nc"
    fail_in_second_batch(out)
    parts = parts_directory(out)
    assert sorted(p.name for p in parts.iterdir()) == ["manifest.json",
                                                       "part-00000000-00000002.nc"]
    # the corrected command (another seed) discards the stale part and computes everything
    fresh = Counting(get_solver("darcy", **DARCY))
    ds = generate(fresh.solver, num_samples=4, seed=2, batch_size=2, out=out, overwrite=True,
                  progress=False)
    assert fresh.calls == 2
    assert_same_dataset(ds, generate("darcy", num_samples=4, seed=2, progress=False, **DARCY))
    ds.close()
    assert os.listdir(tmp_path) == ["d.nc"]


def test_resume_removes_what_a_killed_part_write_left(tmp_path):
    out = tmp_path / "d.nc"
    fail_in_second_batch(out)
    stale = parts_directory(out) / f".part-00000002-00000004.tmp-{'0' * 32}.nc"
    stale.write_bytes(b"half a part")
    resumed = Counting(get_solver("darcy", **DARCY))
    seen, solve = [], resumed.original

    def look(inputs, progress=None):  # is the stale temporary gone when work starts?
        seen.append(stale.exists())
        return solve(inputs, progress=progress)

    resumed.original = look
    ds = generate(resumed.solver, num_samples=4, seed=1, batch_size=2, out=out,
                  progress=False)
    assert resumed.calls == 1 and seen == [False]
    assert_same_dataset(ds, generate("darcy", num_samples=4, seed=1, progress=False, **DARCY))
    ds.close()
    assert os.listdir(tmp_path) == ["d.nc"]


def test_overwrite_never_deletes_a_parts_folder_holding_other_files(tmp_path):
    out = tmp_path / "d.nc"
    parts = parts_directory(out)
    parts.mkdir()
    (parts / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="missing or unreadable.*or pass --overwrite"):
        generate("darcy", num_samples=1, out=out, progress=False, **DARCY)
    with pytest.raises(ValueError, match="ssmpde did not write \\(notes.txt\\): refusing"):
        generate("darcy", num_samples=1, out=out, overwrite=True, progress=False, **DARCY)
    assert (parts / "notes.txt").read_text() == "mine"
    # a folder of part files only (no manifest) is ssmpde's: --overwrite discards it
    (parts / "notes.txt").unlink()
    (parts / "part-00000000-00000001.nc").write_text("stale")
    ds = generate("darcy", num_samples=1, out=out, overwrite=True, progress=False, **DARCY)
    assert ds.sizes["sample"] == 1
    ds.close()
    assert os.listdir(tmp_path) == ["d.nc"]


@pytest.mark.parametrize("name", ["data.zarr", "data.nc"])
def test_overwrite_refuses_a_directory_ssmpde_did_not_write(tmp_path, name):
    out = tmp_path / name
    out.mkdir()
    (out / "sentinel.txt").write_text("keep me")
    counter = Counting(get_solver("darcy", **DARCY))
    with pytest.raises(ValueError, match="directory that ssmpde did not write"):
        generate(counter.solver, num_samples=2, out=out, overwrite=True, progress=False)
    assert (out / "sentinel.txt").read_text() == "keep me"
    assert counter.calls == 0  # refused before any work
    assert sorted(os.listdir(tmp_path)) == [name]


# ------------------------------------------------------------------------------------------
# Two writers of the same output
# ------------------------------------------------------------------------------------------

SLOW_WRITER = """
    import pathlib, sys, time
    from ssmpde.generation import generate
    from ssmpde.solvers import get_solver

    out, started = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    solver = get_solver("darcy", resolution=9, simulation_resolution=17)
    solve = solver.solve_batch

    def slow(inputs, progress=None):
        started.touch()
        time.sleep(1.5)
        return solve(inputs, progress=progress)

    solver.solve_batch = slow
    generate(solver, num_samples=3, seed=7, out=out, progress=False).close()
"""


def test_a_second_writer_of_the_same_output_fails_at_once(tmp_path):
    out = tmp_path / "d.nc"
    started = tmp_path / "started"
    process = python(SLOW_WRITER, str(out), str(started))
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert started.exists(), "the first writer never started its batch"
        counter = Counting(get_solver("darcy", **DARCY))
        begin = time.perf_counter()
        with pytest.raises(OutputLockedError, match=f"PID {process.pid}\\b"):
            generate(counter.solver, num_samples=3, seed=7, out=out, overwrite=True,
                     progress=False)
        assert time.perf_counter() - begin < 1.0
        assert counter.calls == 0
        assert process.poll() is None, "the first writer finished before the second tried"
    finally:
        _, stderr = finish(process, timeout=60)
    assert process.returncode == 0, stderr
    started.unlink()
    with open_dataset(out) as ds:
        assert_same_dataset(ds, generate("darcy", num_samples=3, seed=7, progress=False,
                                         **DARCY))
    assert os.listdir(tmp_path) == ["d.nc"]
