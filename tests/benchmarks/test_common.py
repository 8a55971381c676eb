"""The benchmarks' shared helpers (benchmarks/common.py): the one timing loop, thread counts,
portable paths and table rows."""

import numpy as np
import pytest
import torch

from benchmarks.common import (REPO, Timings, cuda_seconds, fixed_threads, interleaved,
                               portable_path, seconds, table_row, when)


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
