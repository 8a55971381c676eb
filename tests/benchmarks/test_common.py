"""The benchmarks' shared helpers (benchmarks/common.py): the one timing loop, thread counts,
portable paths, table rows and the words for which model and training a row ran."""

import numpy as np
import pytest
import torch

from benchmarks.common import (REPO, Timings, cuda_seconds, fixed_threads, interleaved,
                               model_configuration, portable_path, seconds, table_row,
                               training_recipe, when)


def test_interleaved_warms_up_then_alternates_and_keeps_the_last_results():
    calls = []

    def call(name):
        def run():
            calls.append(name)
            return len(calls)

        return run

    timings = interleaved({"a": call("a"), "b": call("b")}, repeats=3, warmup=2)
    assert calls == ["a", "a", "b", "b"] + ["a", "b"] * 3
    assert [len(t) for t in timings.times.values()] == [3, 3]
    assert all(t >= 0 for t in timings.times["a"] + timings.times["b"])
    assert timings.results == {"a": 9, "b": 10}


def test_interleaved_uses_the_clock_it_is_given():
    ticks = iter([0.5, 2.0, 1.5, 4.0, 2.5, 6.0])

    def clock(function):
        return next(ticks), function()

    timings = interleaved({"fast": lambda: "f", "slow": lambda: "s"}, repeats=3, clock=clock)
    assert timings.times == {"fast": [0.5, 1.5, 2.5], "slow": [2.0, 4.0, 6.0]}
    assert timings.medians() == {"fast": 1.5, "slow": 4.0}
    np.testing.assert_allclose(timings.ratios("slow", "fast"), [4.0, 8 / 3, 2.4])
    assert timings.results == {"fast": "f", "slow": "s"}


def test_interleaved_with_no_rounds_times_nothing():
    timings = interleaved({"a": lambda: 1}, repeats=0)
    assert timings == Timings({"a": []}, {}) and timings.medians() == {}


def test_seconds_returns_the_elapsed_time_and_the_result():
    elapsed, result = seconds(lambda: sum(range(1000)))
    assert result == 499500 and 0 <= elapsed < 10


def test_fixed_threads_sets_and_restores_numba_and_torch():
    import numba

    before = numba.get_num_threads(), torch.get_num_threads()
    with fixed_threads(1):
        assert (numba.get_num_threads(), torch.get_num_threads()) == (1, 1)
    assert (numba.get_num_threads(), torch.get_num_threads()) == before
    with fixed_threads(None):
        assert (numba.get_num_threads(), torch.get_num_threads()) == before
    seen = []
    interleaved({"a": lambda: seen.append(torch.get_num_threads())}, repeats=1, warmup=1,
                threads=1)
    assert seen == [1, 1] and torch.get_num_threads() == before[1]


def test_portable_paths_hold_no_folder_of_the_machine(tmp_path):
    assert portable_path(REPO / "docs" / "images" / "pareto_ks.png") == "docs/images/pareto_ks.png"
    assert portable_path(tmp_path / "data" / "ns.nc") == "ns.nc"  # outside the repository
    assert portable_path(tmp_path / "ks" / "train.nc", tmp_path) == "ks/train.nc"


def test_table_cells():
    result = {"date": "2026-11-23T10:00:00+00:00",
              "machine": {"processor": "AMD EPYC", "cpus": 2}}
    assert when(result) == "2026-11-23, 2 × AMD EPYC"
    assert when({"date": "2026-11-23T10:00:00+00:00"}) == "2026-11-23, ? × CPU"
    assert table_row("a", "b", "c") == "| a | b | c |"


@pytest.mark.gpu
def test_cuda_seconds_times_a_kernel():
    x = torch.randn(256, 256, device="cuda")
    elapsed, y = cuda_seconds(lambda: x @ x)
    assert elapsed > 0 and y.shape == (256, 256)


def test_a_baseline_revision_leaves_this_package_s_accessor_in_place(tmp_path):
    """A baseline registers its own ``ds.ssmpde`` on xarray's shared classes; left there,
    every later ``ds.ssmpde`` in the process ran the baseline's code (a test of the accessor
    failed with the baseline's SchemaError when it shared a worker with a benchmark test)."""
    import xarray as xr

    import ssmpde.data.accessor as ours
    from benchmarks.common import import_revision

    import importlib

    baseline = import_revision("HEAD", tmp_path).__name__.split(".")[0]
    importlib.import_module(f"{baseline}.data.accessor")
    assert getattr(xr.Dataset, baseline).__module__ == f"{baseline}.data.accessor"
    assert xr.Dataset.ssmpde is ours.SsmpdeAccessor
    assert type(xr.Dataset().ssmpde).__module__ == "ssmpde.data.accessor"


#: A result measured before the papers' layouts and --recipe, and one after.
BEFORE, AFTER = {"date": "2026-11-23T08:15:23+00:00"}, {"date": "2026-11-30T00:00:00+00:00"}


def test_a_row_names_the_layout_its_preset_had_when_measured():
    # SS-NO: from the date, or from a recorded config (`lifting` without `layout`: the earlier)
    assert model_configuration("ssno", "ks", BEFORE) == 'ks preset, layout="ssmpde"'
    assert model_configuration("ssno", "ks", AFTER) == 'ks preset, layout="paper"'
    assert model_configuration("ssno", "ks", AFTER, {"lifting": 128}).endswith('"ssmpde"')
    assert model_configuration("ssno", "ks", BEFORE, {"layout": "paper"}).endswith('"paper"')
    # MNO: the Galerkin head and OFormer's feed-forwards changed; GNOT and the 1D model did not
    assert model_configuration("mno", "galerkin", BEFORE) == (
        "galerkin preset, earlier layout (64-wide regressor head)")
    assert model_configuration("mno", "oformer", BEFORE) == (
        "oformer preset, earlier layout (plain GELU feed-forwards)")
    assert model_configuration("mno", "gnot", BEFORE) == "gnot preset"
    assert model_configuration("mno", "1d", BEFORE) == "1d preset"
    assert model_configuration("mno", "galerkin", AFTER) == "galerkin preset"
    # GeoMaNO: this package's options unless the config is the paper's
    assert model_configuration("geomano", "darcy", BEFORE, {"width": 64}) == (
        "darcy preset with this package's options, not paper-darcy")
    assert model_configuration("geomano", "1d", BEFORE) == (
        "1d preset with this package's options")
    paper = {"input_coordinates": False, "geometric_prior": False, "point_skip": False,
             "norm_activation": True}
    assert model_configuration("geomano", "darcy", AFTER, paper) == "darcy preset"
    assert model_configuration("geomano", "paper-darcy", AFTER) == "paper-darcy preset"
    assert model_configuration("lamo", "darcy", BEFORE, overrides={"width": 8}) == (
        "darcy preset, width=8")


def test_a_row_names_the_training_it_had():
    settings = {"lr": 1e-3, "batch_size": 2, "window": 10, "mode": "teacher-forcing"}
    assert training_recipe(BEFORE, {}, settings, rollout=True) == (
        "ssmpde defaults and the benchmark's lr and batch (AdamW, OneCycle, lr 1e-3, batch 2, "
        "weight decay 1e-4, clip 1, relative L2, Gaussian normalisation, teacher forcing, "
        "window 10), before --recipe existed")
    # a run that records its training (config.json's train_config and recipe) is read from it
    import dataclasses

    from ssmpde.surrogates.train import TrainConfig

    config = TrainConfig(lr=5e-4, weight_decay=1e-5, gradient_loss_weight=0.1,
                         max_grad_norm=0.025)
    recorded = {"train_config": dataclasses.asdict(config),
                "recipe": {"name": "paper", "variant": "darcy"}}
    assert training_recipe(AFTER, recorded, {}) == (
        "--recipe paper (darcy) (AdamW, OneCycle, lr 5e-4, batch 4, weight decay 1e-5, "
        "clip 0.025, relative L2 + 0.1 × its gradients, Gaussian normalisation)")
    # a later result that records nothing is not guessed at
    assert training_recipe(AFTER, {}, settings) == "training not recorded"


def test_the_committed_training_rows_say_which_model_and_training_they_had():
    from benchmarks.__main__ import rows_of

    for name in ("training_darcy", "training_navier-stokes", "mno", "ks_learning",
                 "training_darcy_gpu"):
        for row in rows_of(name):
            assert " preset" in row and "before --recipe existed" in row, row
            assert "`" not in row  # the benchmarks page shows the rows' text as it is
    assert all('layout="ssmpde"' in row for row in rows_of("ks_learning") + rows_of("ssno"))
    assert all("not paper-" in row for row in rows_of("training_darcy") if "geomano" in row)
