"""What escaped the first round of input checks: outputs that replaced files ssmpde did not
write, failed runs that blocked the corrected command, rollout outputs checked only after the
work, internal names in messages, invalid values accepted and sizes past the estimate.

The command-line cases are in the bad-input table (tests/test_bad_input.py); these are the
focused checks of each rule.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import torch
from matplotlib.figure import Figure

from ssmpde.cli import main
from ssmpde.data import (FIGURE_FORMATS, check_output, figure_metadata, is_ssmpde_output,
                         load_dataset, output_lock, save)
from ssmpde.plotting import plot_pareto
from ssmpde.generation import generate, parts_directory
from ssmpde.generation.generate import _INPUT_ERRORS
from ssmpde.surrogates import get_model_class, instantiate
from ssmpde.surrogates.base import _count_parameters, _parameter_estimate

DARCY = dict(resolution=9, simulation_resolution=17)
ROWS = [{"schedule": "solver", "kind": "solver", "final_rel_l2": 0.0, "seconds": 1.0},
        {"schedule": "surrogate", "kind": "surrogate", "final_rel_l2": 0.1, "seconds": 0.1}]


@pytest.fixture(scope="module")
def darcy(tmp_path_factory):
    path = tmp_path_factory.mktemp("escapes") / "darcy.nc"
    generate("darcy", num_samples=2, seed=0, out=path, progress=False, **DARCY)
    return path


def one_error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ssmpde: error:"), lines
    return lines[0]


# ------------------------------------------------------------------------------------------
# What --overwrite may replace
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FIGURE_FORMATS)
def test_a_figure_ssmpde_drew_is_recognised_and_a_users_is_not(fmt, tmp_path):
    ours = plot_pareto(tmp_path / f"ours.{fmt}", ROWS, dpi=20)
    assert is_ssmpde_output(ours)
    theirs = tmp_path / f"theirs.{fmt}"
    figure = Figure()
    figure.add_subplot().plot([0, 1])
    figure.savefig(theirs, format=fmt, dpi=20)  # matplotlib's own metadata, not ssmpde's
    assert not is_ssmpde_output(theirs)
    # the marker is in the file, whatever its name says
    renamed = tmp_path / "renamed.bin"
    os.replace(ours, renamed)
    assert is_ssmpde_output(renamed)
    with pytest.raises(ValueError, match="file that ssmpde did not write"):
        check_output(theirs, overwrite=True, kind="figure")
    assert check_output(renamed.rename(tmp_path / f"again.{fmt}"), overwrite=True,
                        kind="figure").exists()


def test_figure_metadata_refuses_a_format_without_a_mark():
    assert figure_metadata("png")["Software"].startswith("ssmpde ")
    with pytest.raises(ValueError, match=r"\.png, \.pdf, \.svg"):
        figure_metadata("jpg")


def test_overwrite_never_replaces_what_ssmpde_did_not_write(darcy, tmp_path):
    text = tmp_path / "user.nc"
    text.write_text("my notes")
    plain = tmp_path / "plain.zarr"
    plain.write_text("not a store")
    foreign = tmp_path / "foreign.nc"
    ds = load_dataset(darcy)
    del ds.attrs["ssmpde_equation"]
    ds.to_netcdf(foreign)  # a valid netCDF file, written by someone else
    for path in (text, plain, foreign):
        assert not is_ssmpde_output(path)
        with pytest.raises(ValueError, match="file that ssmpde did not write.*even with"):
            check_output(path, overwrite=True, kind="dataset")
    assert text.read_text() == "my notes" and plain.read_text() == "not a store"
    assert is_ssmpde_output(darcy)
    assert check_output(darcy, overwrite=True, kind="dataset") == darcy


def test_a_run_directory_is_not_replaced_by_a_dataset(tmp_path):
    run = tmp_path / "run.zarr"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model": "fno"}))
    assert is_ssmpde_output(run)
    with pytest.raises(ValueError, match="a run directory ssmpde wrote, not a dataset"):
        check_output(run, overwrite=True, kind="dataset")


def test_the_training_data_of_a_run_is_an_input(darcy, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model": "fno",
                                                 "dataset": {"path": str(darcy.resolve())}}))
    with pytest.raises(ValueError, match="the dataset the run .* was trained on"):
        check_output(darcy, inputs=[tmp_path / "other.nc", run], overwrite=True,
                     kind="dataset")
    # an output that would replace a directory holding an input
    holder = tmp_path / "holder.zarr"
    holder.mkdir()
    (holder / "data.nc").write_text("x")
    with pytest.raises(ValueError, match="holds .*data.nc', one of the inputs"):
        check_output(holder, inputs=[holder / "data.nc"], overwrite=True)


def test_the_suffix_fits_the_kind_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="cannot tell the format"):
        check_output(tmp_path / "x.png", kind="dataset")
    with pytest.raises(ValueError, match="--pareto '.*x.nc': cannot write a figure as '.nc'"):
        check_output(tmp_path / "x.nc", kind="figure", flag="--pareto")
    with pytest.raises(ValueError, match="without a suffix"):
        check_output(tmp_path / "x", kind="figure")


def test_cli_overwrite_refuses_a_users_file(darcy, tmp_path, capsys):
    for name in ("user.nc", "plain.zarr"):
        path = tmp_path / name
        path.write_text("mine")
        argv = ["generate", "darcy", "--samples", "2", "--out", str(path), "--overwrite",
                "--no-progress", "--resolution", "9", "--simulation-resolution", "17"]
        assert main(argv) == 2
        assert "ssmpde did not write" in one_error_line(capsys)
        assert main(["convert", str(darcy), str(path), "--overwrite"]) == 2
        assert "ssmpde did not write" in one_error_line(capsys)
        assert path.read_text() == "mine"
    assert sorted(os.listdir(tmp_path)) == ["plain.zarr", "user.nc"]


# ------------------------------------------------------------------------------------------
# A run that failed on its own input leaves nothing that blocks the corrected one
# ------------------------------------------------------------------------------------------

def test_a_generation_that_fails_on_its_input_removes_its_parts(tmp_path, capsys):
    out = tmp_path / "d.nc"
    base = ["generate", "darcy", "--samples", "2", "--out", str(out), "--no-progress",
            "--resolution", "9", "--simulation-resolution", "17"]
    assert main([*base, "--alpha", "1e30"]) == 2
    assert "alpha" in one_error_line(capsys)
    assert os.listdir(tmp_path) == []
    assert main(base) == 0  # the corrected command, without --overwrite
    assert os.listdir(tmp_path) == ["d.nc"]


def test_an_interrupted_generation_keeps_its_parts(tmp_path, monkeypatch):
    from ssmpde.solvers import get_solver

    solver = get_solver("darcy", **DARCY)
    solve, calls = solver.solve_batch, []

    def second_batch_interrupted(inputs, progress=None):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return solve(inputs, progress=progress)

    solver.solve_batch = second_batch_interrupted
    out = tmp_path / "d.nc"
    with pytest.raises(KeyboardInterrupt):
        generate(solver, num_samples=2, batch_size=1, out=out, progress=False)
    assert sorted(p.name for p in parts_directory(out).iterdir()) == [
        "manifest.json", "part-00000000-00000001.nc"]


def test_a_failure_that_is_not_the_input_keeps_complete_parts(tmp_path):
    from ssmpde.solvers import get_solver

    assert not issubclass(MemoryError, _INPUT_ERRORS)
    solver = get_solver("darcy", **DARCY)
    solve, calls = solver.solve_batch, []

    def second_batch_out_of_memory(inputs, progress=None):
        calls.append(1)
        if len(calls) == 2:
            raise MemoryError("Unable to allocate 1 TiB")
        return solve(inputs, progress=progress)

    solver.solve_batch = second_batch_out_of_memory
    out = tmp_path / "d.nc"
    with pytest.raises(MemoryError):
        generate(solver, num_samples=2, batch_size=1, out=out, progress=False)
    assert "part-00000000-00000001.nc" in os.listdir(parts_directory(out))
    calls.clear()
    solver.solve_batch = solve
    generate(solver, num_samples=2, batch_size=1, out=out, progress=False).close()
    assert os.listdir(tmp_path) == ["d.nc"]


def test_a_training_run_that_fails_before_its_first_epoch_leaves_no_directory(
        darcy, tmp_path, capsys):
    out = tmp_path / "new" / "deeper" / "run"
    argv = ["train", "fno", "--data", str(darcy), "--out", str(out), "--no-progress",
            "--num-test", "1", "--model-option", "modes=[100,100]"]
    assert main(argv) == 2
    assert "at most [9, 9]" in one_error_line(capsys)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------
# Messages name the user's paths; memory errors say what to change
# ------------------------------------------------------------------------------------------

def test_a_lock_that_cannot_be_made_names_the_output(tmp_path, monkeypatch):
    target = tmp_path / "x.nc"
    (tmp_path / ".x.nc.lock").mkdir()
    with pytest.raises(OSError, match=r"cannot lock '.*x.nc' for writing: .* is a directory"):
        with output_lock(target):
            pass
    real_open = os.open

    def refused(path, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)
    with pytest.raises(PermissionError) as error:
        with output_lock(tmp_path / "y.nc"):
            pass
    assert str(error.value).startswith(f"cannot write '{tmp_path / 'y.nc'}'")
    assert ".lock" not in str(error.value) and "Permission denied" in str(error.value)
    assert error.value.errno == 13


def test_out_of_memory_is_one_plain_line(monkeypatch, capsys, darcy):
    import ssmpde.cli as cli

    def allocate(args):
        raise MemoryError("Unable to allocate 72.8 TiB for an array with shape "
                          "(10000000000001,) and data type float64")

    monkeypatch.setattr(cli, "_info", allocate)
    assert main(["info", str(darcy)]) == 2
    line = one_error_line(capsys)
    assert "out of memory (it asked for 72.8 TiB at once)" in line
    assert "shape" not in line and "float64" not in line


# ------------------------------------------------------------------------------------------
# Invalid values, and sizes past the estimate
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, -1e-9, True, False, "60"])
def test_time_limit_must_be_a_finite_number_of_seconds(value, darcy, tmp_path):
    from ssmpde.surrogates.train import train

    with pytest.raises(ValueError, match="time_limit"):
        train("fno", darcy, out=tmp_path / "run", time_limit=value, progress=False)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name, options", [
    ("geomano", dict(width=80, depth=66, state_size=4, grid=(9, 9), latent_grid=(9, 9))),
    ("fno", dict(width=70, grid=(150, 150), modes=(70, 70))),
    ("ssno", dict(width=70, state_size=100, grid=(64,))),
])
def test_the_parameter_estimate_is_a_lower_bound(name, options):
    cls = get_model_class(name)
    config = cls.Config(**options)
    estimate, exact = _parameter_estimate(cls, config)
    count = _count_parameters(cls, config)
    # a lower bound (never refuses a model that fits), and not a loose one
    assert not exact and count / 8 <= estimate <= count


@pytest.mark.parametrize("options", [dict(width=10 ** 10), dict(width=2 ** 62),
                                     dict(depth=10 ** 11), dict(state_size=10 ** 12)])
def test_absurd_sizes_are_refused_before_torch_builds_them(options):
    cls = get_model_class("geomano")
    config = cls.Config(grid=(9, 9), latent_grid=(9, 9), **options)
    started = time.perf_counter()
    with pytest.raises(ValueError, match="parameters and needs at least"):
        instantiate("geomano", config)
    assert time.perf_counter() - started < 20  # depth 10**11 was an endless meta build


def test_an_overflowing_tensor_is_a_value_error():
    cls = get_model_class("fno")
    with pytest.raises(ValueError, match="too large for any machine"):
        _count_parameters(cls, cls.Config(grid=(9, 9), modes=(5, 5), width=2 ** 40))
    assert torch.get_default_device() == torch.device("cpu")
