"""Disk space: generate refuses a run the disk cannot hold before writing anything, keeps its
part files few and large without changing a bit, warns about a run that will take hours, and
every writer (generate's parts and merge, a cluster's store, training checkpoints, evaluate,
rollout, convert) turns a full disk into one line and exit 2, leaves nothing partial, and
resumes to the same bits once space is freed.

A full disk is simulated by an ``OSError(ENOSPC)`` (or netCDF-C's ``NetCDF: HDF error`` on a
file system with nothing free) injected at the write; where the tests run as root, a small
tmpfs mounted by the test fills up for real.
"""

import contextlib
import errno
import importlib
import json
import os
import pathlib
import pickle
import subprocess
import sys
import warnings

import pytest
import torch
from safetensors.torch import load_file

from ssmpde.cli import main
from ssmpde.data import DiskFullError, disk_usage, open_dataset
from ssmpde.data import files as data_files
from ssmpde.data import outputs
from ssmpde.data.files import format_of_suffix
from ssmpde.generation import _batches
from ssmpde.generation import generate as generate_function
from ssmpde.solvers import get_solver
from ssmpde.surrogates import checkpoint
from ssmpde.surrogates.train import TrainConfig, train

from generation.helpers import assert_same_dataset

gen = importlib.import_module("ssmpde.generation.generate")
DARCY = dict(resolution=9, simulation_resolution=17)
DARCY_FLAGS = ["--resolution", "9", "--simulation-resolution", "17"]
NS = dict(resolution=16, simulation_resolution=16, final_time=0.4, record_interval=0.1,
          time_step=0.01, viscosity=1e-3)
SMALL = dict(width=8, depth=1, state_size=4)


@pytest.fixture(autouse=True)
def no_limits_from_the_environment(monkeypatch):
    monkeypatch.delenv("SSMPDE_MAX_DISK", raising=False)
    monkeypatch.delenv("SSMPDE_MAX_MEMORY", raising=False)


def cli(argv, capsys) -> tuple[int, list[str]]:
    """Run the command line in-process: (exit status, the non-empty lines of stderr)."""
    status = main([str(a) for a in argv])
    err = capsys.readouterr().err
    return status, [line for line in err.splitlines() if line.strip()]


def assert_one_disk_line(status, lines, *words):
    assert status == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("ssmpde: error: no space left on the disk to write"), lines
    for word in words:
        assert word in lines[0], (word, lines[0])


def temporaries(root: pathlib.Path) -> list[str]:
    """What an atomic write leaves while it runs: must be gone after any failure."""
    return sorted(str(p) for p in root.rglob("*") if ".tmp-" in p.name or p.name == ".pending"
                  or p.name.endswith(".partial"))



class FullDisk:
    """Makes ``owner.name``, a writer whose second argument is the path it writes, fill the
    disk at its ``on``-th call for which ``which(path)`` holds: it writes half of its output,
    then fails as a full disk does (``kind`` "errno": ``OSError(ENOSPC)``; "hdf": netCDF-C's
    ``RuntimeError('NetCDF: HDF error')`` with nothing free on the file system)."""

    def __init__(self, monkeypatch, owner, name, *, on=1, which=lambda path: True,
                 kind="errno"):
        self.original, self.on, self.which, self.kind = getattr(owner, name), on, which, kind
        self.calls, self.failed = 0, []
        self.monkeypatch = monkeypatch
        monkeypatch.setattr(owner, name, self)

    def __call__(self, *args, **kwargs):
        path = pathlib.Path(args[1])
        if self.which(path):
            self.calls += 1
            if self.calls == self.on:
                self.failed.append(path)
                self.original(*args, **kwargs)
                if path.is_file():
                    with open(path, "r+b") as handle:
                        handle.truncate(path.stat().st_size // 2)
                if self.kind == "hdf":
                    self.monkeypatch.setattr(outputs, "free_space", lambda path: 0)
                    raise RuntimeError("NetCDF: HDF error")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return self.original(*args, **kwargs)


# ------------------------------------------------------------------------------------------
# The estimate: an upper bound, checked before anything is written
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
@pytest.mark.parametrize("equation, config", [
    ("darcy", DARCY), ("navier-stokes", NS),
    ("burgers", dict(resolution=32, final_time=0.1, record_interval=0.05)),
], ids=["darcy", "navier-stokes", "burgers"])
def test_the_disk_estimate_bounds_what_a_run_writes(equation, config, suffix, tmp_path,
                                                    monkeypatch):
    # Small parts (the byte rule) and a measurement at the peak: every part and the merged
    # file on disk at once, just before the parts are removed.
    solver = get_solver(equation, **config)
    monkeypatch.setattr(gen, "PART_BYTES", 3 * solver.stored_bytes_per_sample())
    peak = []
    remove = gen._Parts.remove

    def measure_then_remove(parts):
        peak.append(disk_usage(parts.directory) + disk_usage(out))
        remove(parts)

    monkeypatch.setattr(gen._Parts, "remove", measure_then_remove)
    out = tmp_path / f"data{suffix}"
    run_config = _batches._run_config(solver, 20, 0)
    plan = gen._DiskPlan.of(solver, out, format_of_suffix(out), 20, 2, run_config,
                            in_place=False)
    ds = generate_function(solver, num_samples=20, batch_size=2, out=out, progress=False)
    ds.close()
    assert 0 < peak[0] <= plan.needed([])
    assert disk_usage(out) <= plan.output
    # the bound is a bound, not a wild guess: within a small factor of what was written
    assert plan.needed([]) < 40 * peak[0]


def test_a_run_the_disk_cannot_hold_is_refused_before_anything_is_written(tmp_path,
                                                                          monkeypatch):
    calls = []
    solver = get_solver("darcy", **DARCY)
    solve = solver.solve_batch
    solver.solve_batch = lambda inputs, progress=None: calls.append(1) or solve(inputs)
    out = tmp_path / "d.nc"
    plan = gen._DiskPlan.of(solver, out, "netcdf", 64, 8, _batches._run_config(solver, 64, 0),
                            in_place=False)
    monkeypatch.setattr(gen, "free_space", lambda path: plan.needed([]) - 1)
    with pytest.raises(ValueError, match=r"this run needs up to .* more disk space \(64 "
                                         r"samples x up to .* in part files, then the merged "
                                         r"'d.nc' .*free on the file system of .*--max-disk / "
                                         r"SSMPDE_MAX_DISK"):
        generate_function(solver, num_samples=64, out=out, progress=False)
    assert list(tmp_path.iterdir()) == [] and calls == []
    # A limit replaces the free-space check: one large enough lets the run start ...
    ds = generate_function(solver, num_samples=64, out=out, progress=False, max_disk="1G")
    ds.close()
    # ... and one too small refuses it, however much is free (the environment variable too).
    monkeypatch.setattr(gen, "free_space", lambda path: 2 ** 50)
    monkeypatch.setenv("SSMPDE_MAX_DISK", "64K")
    with pytest.raises(ValueError, match=r"more than the limit of 64 KiB \(--max-disk / "
                                         "SSMPDE_MAX_DISK\\)"):
        generate_function(solver, num_samples=64, out=tmp_path / "e.nc", progress=False)
    with pytest.raises(ValueError, match="cannot read the disk size 'lots'"):
        generate_function(solver, num_samples=64, out=tmp_path / "e.nc", progress=False,
                          max_disk="lots")
    assert sorted(os.listdir(tmp_path)) == ["d.nc"]


def test_a_resumed_run_needs_only_what_it_has_not_written(tmp_path, monkeypatch):
    out = tmp_path / "d.nc"
    solver = get_solver("darcy", **DARCY)
    solve, calls = solver.solve_batch, []

    def fail_third(inputs, progress=None):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return solve(inputs)

    solver.solve_batch = fail_third
    with pytest.raises(KeyboardInterrupt, match="16 of 40 samples are saved"):
        generate_function(solver, num_samples=40, batch_size=8, out=out, progress=False)
    plan = gen._DiskPlan.of(solver, out, "netcdf", 40, 8, _batches._run_config(solver, 40, 0),
                            in_place=False)
    done = [(0, 8), (8, 16)]
    used = disk_usage(gen.parts_directory(out))
    assert plan.needed(done) < plan.needed([])
    with pytest.raises(ValueError, match=r"\(24 samples x up to .*, .* of it already written"):
        generate_function("darcy", num_samples=40, batch_size=8, out=out, progress=False,
                          max_disk=used + plan.needed(done) - 1, **DARCY)
    ds = generate_function("darcy", num_samples=40, batch_size=8, out=out, progress=False,
                           max_disk=used + plan.needed(done), **DARCY)
    assert_same_dataset(ds, generate_function("darcy", num_samples=40, progress=False,
                                              **DARCY))
    ds.close()


# ------------------------------------------------------------------------------------------
# Part files: few and large, the same bits
# ------------------------------------------------------------------------------------------

def test_parts_double_up_to_the_byte_target_and_keep_every_bit(tmp_path, monkeypatch):
    solver = get_solver("darcy", **DARCY)
    stored = solver.stored_bytes_per_sample()
    monkeypatch.setattr(gen, "PART_BYTES", 20 * stored)  # 20 samples: 5 batches of 4
    names = []
    original = data_files._write_netcdf
    monkeypatch.setattr(data_files, "_write_netcdf",
                        lambda ds, path: names.append(ds.sizes["sample"]) or original(ds, path))
    out = tmp_path / "d.nc"
    ds = generate_function(solver, num_samples=70, batch_size=4, out=out, progress=False)
    # parts of 1, 2, 4 batches, then of 20 samples (the byte target), then the rest; the
    # merged file last
    assert names == [4, 8, 16, 20, 20, 2, 70]
    assert_same_dataset(ds, generate_function("darcy", num_samples=70, batch_size=1,
                                              progress=False, **DARCY))
    ds.close()


def test_ctrl_c_saves_the_batches_held_for_a_part(tmp_path):
    solver = get_solver("darcy", **DARCY)
    solve, calls = solver.solve_batch, []

    def interrupt_third(inputs, progress=None):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return solve(inputs)

    solver.solve_batch = interrupt_third
    out = tmp_path / "d.nc"
    # batch 1 is a part of its own; batch 2, held for a part of two, is saved by Ctrl-C
    with pytest.raises(KeyboardInterrupt, match="4 of 10 samples are saved"):
        generate_function(solver, num_samples=10, batch_size=2, out=out, progress=False)
    assert sorted(p.name for p in gen.parts_directory(out).glob("part-*")) == [
        "part-00000000-00000002.nc", "part-00000002-00000004.nc"]


def test_huge_runs_write_few_parts():
    # The 10**9 Darcy samples: parts by bytes (8 MiB), not by 8 samples.
    solver = get_solver("darcy", resolution=8, simulation_resolution=29)
    plan = gen._DiskPlan.of(solver, pathlib.Path("big.nc"), "netcdf", 10 ** 9, 8,
                            _batches._run_config(solver, 10 ** 9, 0), in_place=False)
    assert plan.parts(10 ** 9, 1) < 10 ** 9 * solver.stored_bytes_per_sample() / 2 ** 23 + 40


# ------------------------------------------------------------------------------------------
# A run that will take hours says so
# ------------------------------------------------------------------------------------------

def test_a_long_run_gets_one_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(_batches, "LONG_RUN_SECONDS", 1e-9)
    with pytest.warns(_batches.LongRunWarning, match=r"this run will take about .* more "
                                                     r"\(6 samples left at about .* samples/s"):
        generate_function("darcy", num_samples=10, batch_size=2, progress=False, **DARCY)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # one batch: nothing is left to project
        generate_function("darcy", num_samples=2, batch_size=2, progress=False, **DARCY)
        monkeypatch.setattr(_batches, "LONG_RUN_SECONDS", 3600.0)
        generate_function("darcy", num_samples=10, batch_size=2, progress=False, **DARCY)


def show_on_stderr(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def test_the_long_run_warning_is_one_line_on_the_command_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_batches, "LONG_RUN_SECONDS", 1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show_on_stderr  # as Python does outside pytest
        status, lines = cli(["generate", "darcy", "--samples", "6", "--batch-size", "2",
                             "--no-progress", "--out", tmp_path / "d.nc", *DARCY_FLAGS],
                            capsys)
    assert status == 0, lines
    assert len(lines) == 1 and lines[0].startswith("ssmpde: warning: this run will take "
                                                   "about"), lines


# ------------------------------------------------------------------------------------------
# A full disk: one line, exit 2, nothing partial, resumable to the same bits
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["errno", "hdf"])
def test_generate_fills_the_disk_in_a_part_then_resumes(kind, tmp_path, monkeypatch, capsys):
    out = tmp_path / "d.nc"
    argv = ["generate", "darcy", "--samples", "30", "--batch-size", "4", "--no-progress",
            "--out", out, *DARCY_FLAGS]
    full = FullDisk(monkeypatch, data_files, "_write_netcdf", on=3,
                    which=lambda path: path.parent == gen.parts_directory(out), kind=kind)
    status, lines = cli(argv, capsys)
    assert_one_disk_line(status, lines, f"'{full.failed[0].parent}", "it needs up to",
                         "12 of 30 samples are saved", "run the same command again to resume")
    assert temporaries(tmp_path) == [] and not out.exists()
    assert sorted(p.name for p in gen.parts_directory(out).glob("part-*")) == [
        "part-00000000-00000004.nc", "part-00000004-00000012.nc"]
    monkeypatch.undo()  # space is freed
    status, lines = cli(argv, capsys)
    assert status == 0 and lines == [], lines
    with open_dataset(out) as ds:
        assert_same_dataset(ds, generate_function("darcy", num_samples=30, progress=False,
                                                  **DARCY))
    assert sorted(os.listdir(tmp_path)) == ["d.nc"]


@pytest.mark.parametrize("suffix, writer", [(".nc", "_write_netcdf"), (".zarr", "_write_zarr")])
def test_generate_fills_the_disk_in_the_merge_then_only_merges(suffix, writer, tmp_path,
                                                               monkeypatch, capsys):
    out = tmp_path / f"d{suffix}"
    argv = ["generate", "darcy", "--samples", "6", "--batch-size", "2", "--no-progress",
            "--out", out, *DARCY_FLAGS]
    FullDisk(monkeypatch, data_files, writer,
             which=lambda path: path.name.startswith(f".{out.stem}.tmp-"))
    status, lines = cli(argv, capsys)
    assert_one_disk_line(status, lines, f"'{out}'", "6 of 6 samples are saved")
    assert temporaries(tmp_path) == [] and not out.exists()
    monkeypatch.undo()
    solver = get_solver("darcy", **DARCY)
    solver.solve_batch = lambda inputs, progress=None: pytest.fail("recomputed a sample")
    ds = generate_function(solver, num_samples=6, batch_size=2, out=out, progress=False)
    assert_same_dataset(ds, generate_function("darcy", num_samples=6, progress=False,
                                              **DARCY))
    ds.close()
    assert sorted(os.listdir(tmp_path)) == [out.name]


def test_a_full_disk_on_a_cluster_is_one_error_and_resumes(tmp_path, monkeypatch):
    import distributed

    from ssmpde.generation import scale_out

    out = tmp_path / "d.zarr"
    FullDisk(monkeypatch, scale_out, "write_store_region", on=2)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=1,
                            dashboard_address=":0") as client:
        with pytest.raises(DiskFullError) as caught:
            generate_function("darcy", num_samples=6, batch_size=2, out=out,
                              scheduler=client, progress=False, **DARCY)
        message = str(caught.value)
        assert "\n" not in message and f"'{out}'" in message
        assert "of 6 samples are saved" in message and "to resume" in message
        assert str(pickle.loads(pickle.dumps(caught.value))) == message  # crosses processes
        assert temporaries(tmp_path) == []
        monkeypatch.undo()
        ds = generate_function("darcy", num_samples=6, batch_size=2, out=out,
                               scheduler=client, progress=False, **DARCY)
    assert_same_dataset(ds, generate_function("darcy", num_samples=6, progress=False,
                                              **DARCY))
    ds.close()


@pytest.fixture(scope="module")
def darcy(tmp_path_factory):
    path = tmp_path_factory.mktemp("disk") / "darcy.nc"
    generate_function("darcy", num_samples=5, seed=0, out=path, progress=False, **DARCY)
    return path


@pytest.fixture(scope="module")
def ns_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ns")
    generate_function("navier-stokes", num_samples=3, seed=0, out=root / "ns.nc",
                      progress=False, **NS)
    train("geomano", root / "ns.nc", out=root / "run", preset="navier-stokes",
          model_overrides=SMALL, config=TrainConfig(epochs=1, batch_size=2, window=2),
          progress=False)
    return root / "run"


def test_a_full_disk_in_a_checkpoint_keeps_the_last_epoch_and_resumes(darcy, tmp_path,
                                                                     monkeypatch, capsys):
    argv = ["train", "geomano", "--data", darcy, "--preset", "darcy", "--epochs", "2",
            "--batch-size", "2", "--num-test", "1", "--no-progress",
            *[item for key, value in SMALL.items()
              for item in ("--model-option", f"{key}={value}")]]
    straight, run = tmp_path / "straight", tmp_path / "run"
    assert cli([*argv, "--out", straight], capsys)[0] == 0
    # the first file of epoch 2's save finds the disk full
    FullDisk(monkeypatch, checkpoint, "save_file", on=3)
    status, lines = cli([*argv, "--out", run], capsys)
    assert_one_disk_line(status, lines, f"'{run}'", "it needs up to",
                         "last complete epoch (1)", "--resume")
    assert temporaries(tmp_path) == []
    assert json.loads((run / "training_state.json").read_text())["epoch"] == 1
    monkeypatch.undo()
    assert cli([*argv, "--out", run, "--resume"], capsys)[0] == 0
    for a, b in ((straight, run),):
        wa, wb = load_file(a / "weights.safetensors"), load_file(b / "weights.safetensors")
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
        assert (a / "metrics.jsonl").read_text().count("\n") == 2
        assert [json.loads(line)["train_loss"] for line in (a / "metrics.jsonl").open()] == \
            [json.loads(line)["train_loss"] for line in (b / "metrics.jsonl").open()]


@pytest.mark.parametrize("command", ["evaluate", "rollout", "convert"])
@pytest.mark.parametrize("kind", ["errno", "hdf"])
def test_a_full_disk_in_an_output_is_one_line_and_the_rerun_writes_it(command, kind, darcy,
                                                                      ns_run, tmp_path,
                                                                      monkeypatch, capsys):
    out = tmp_path / "out.nc"
    argv = {"evaluate": ["evaluate", ns_run, "--data", ns_run.parent / "ns.nc"],
            "rollout": ["rollout", "--checkpoint", ns_run, "--steps", "2", "--schedule",
                        "surrogate", "--coarse", "none"],
            "convert": ["convert", darcy]}[command]
    argv = [*argv, out] if command == "convert" else [*argv, "--out", out]
    FullDisk(monkeypatch, data_files, "_write_netcdf", kind=kind)
    status, lines = cli(argv, capsys)
    assert_one_disk_line(status, lines, f"'{out}'", "it needs up to",
                         "run the same command again")
    assert os.listdir(tmp_path) == []  # nothing partial, no lock left
    monkeypatch.undo()
    status, _ = cli(argv, capsys)
    assert status == 0
    capsys.readouterr()
    with open_dataset(out) as written:
        assert written.sizes["sample"] >= 1
        if command == "convert":
            with open_dataset(darcy) as source:
                assert_same_dataset(written, source)


def test_the_full_disk_error_is_recognised_by_errno_anywhere_in_the_chain(tmp_path):
    target = tmp_path / "x.nc"
    for raised in (OSError(errno.ENOSPC, "full"), OSError(errno.EDQUOT, "quota"),
                   RuntimeError(f"wrapped: {os.strerror(errno.ENOSPC)}")):
        with pytest.raises(DiskFullError, match=f"'{target}'"):
            with outputs.atomic_path(target, needed=10 ** 6) as tmp:
                tmp.write_bytes(b"half")
                raise raised
        assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="not a disk problem"):  # passes through unchanged
        with outputs.atomic_path(target) as tmp:
            raise ValueError("not a disk problem")


# ------------------------------------------------------------------------------------------
# A real full disk: a small tmpfs mounted by the test (root only)
# ------------------------------------------------------------------------------------------

@contextlib.contextmanager
def small_disk(directory: pathlib.Path, size: str):
    """A tmpfs of ``size`` at ``directory``; skips the test where it cannot be mounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    directory.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(directory)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield lambda new: subprocess.run(["mount", "-o", f"remount,size={new}",
                                          str(directory)], check=True)
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def test_a_real_full_disk_in_process(tmp_path, capfd):
    disk = tmp_path / "disk"
    with small_disk(disk, "400k") as resize:
        out = disk / "d.nc"
        argv = ["generate", "darcy", "--samples", "400", "--batch-size", "50", "--no-progress",
                "--max-disk", "1G", "--out", out, *DARCY_FLAGS]
        status = main([str(a) for a in argv])
        lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
        assert_one_disk_line(status, lines, "samples are saved", "to resume")
        assert temporaries(disk) == [] and not out.exists()
        resize("64m")  # space is freed
        assert main([str(a) for a in argv]) == 0, capfd.readouterr().err
        with open_dataset(out) as ds:
            assert_same_dataset(ds, generate_function("darcy", num_samples=400,
                                                      progress=False, **DARCY))
        assert sorted(os.listdir(disk)) == ["d.nc"]


def test_a_real_full_disk_on_two_workers_is_one_line(tmp_path, capfd):
    import distributed

    disk = tmp_path / "disk"
    with small_disk(disk, "400k") as resize:
        out = disk / "d.zarr"
        status = main([str(a) for a in [
            "generate", "darcy", "--samples", "400", "--batch-size", "50", "--no-progress",
            "--max-disk", "1G", "--out", out, "--workers", "2", *DARCY_FLAGS]])
        lines = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
        assert_one_disk_line(status, lines, f"'{out}'", "samples are saved", "to resume")
        assert temporaries(disk) == []
        resize("64m")
        with distributed.Client(processes=False, n_workers=1, threads_per_worker=1,
                                dashboard_address=":0") as client:
            ds = generate_function("darcy", num_samples=400, batch_size=50, out=out,
                                   scheduler=client, progress=False, **DARCY)
        assert_same_dataset(ds, generate_function("darcy", num_samples=400, progress=False,
                                                  **DARCY))
        ds.close()
