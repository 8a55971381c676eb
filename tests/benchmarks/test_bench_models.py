"""The model benchmark (benchmarks/bench_models.py): its FLOP counts against hand counts, and
an end-to-end run at tiny sizes."""

import json
import math
import subprocess
import sys

import pytest
import torch

from benchmarks.common import REPO


def _has_git_history() -> bool:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "HEAD"],
                          capture_output=True)
    return done.returncode == 0


def test_fft_and_scan_flops_are_counted_by_the_stated_formulas():
    from torch.utils.flop_counter import FlopCounterMode

    from benchmarks.bench_models import Counter
    from ssmpde.kernels import selective_scan

    counter = Counter()
    x = torch.randn(3, 2, 16, 32)
    with FlopCounterMode(display=False, custom_mapping=counter.mapping()) as mode:
        spectrum = torch.fft.rfft2(x)              # 6 real transforms of 512 points
        torch.fft.irfft2(spectrum, s=(16, 32))     # and back
        torch.fft.fft(spectrum, dim=-2)            # 6 · 17 complex transforms of 16 points
    assert counter.extra["fft2d"] == 2 * int(2.5 * 512 * 9 * 6)
    assert counter.extra["fft1d"] == int(5.0 * 16 * 4 * 6 * 17)
    assert sum(mode.get_flop_counts()["Global"].values()) == sum(counter.extra.values())

    batch, channels, length, state = 2, 4, 10, 3
    # with a gradient to keep, the scan runs as its operator, which the counter sees
    u = torch.randn(batch, channels, length, requires_grad=True)
    delta = torch.rand(batch, channels, length)
    A = -torch.rand(channels, state)
    B, C = torch.randn(batch, state, length), torch.randn(batch, state, length)
    counter = Counter()
    with FlopCounterMode(display=False, custom_mapping=counter.mapping()):
        selective_scan(u, delta, A, B, C, D=torch.randn(channels), backend="cpu")
    # 9 B·D·L·N (mamba-ssm's count) plus B·D·L for D
    assert counter.extra["scan"] == 9 * batch * channels * length * state \
        + batch * channels * length


def test_bound_uses_the_rate_of_each_kind():
    from benchmarks.bench_models import bound_seconds

    rates = {"matmul": 100.0, "fft1d": 10.0, "fft2d": 5.0}
    seconds = bound_seconds({"matmul": 100e9, "scan": 100e9, "fft1d": 10e9, "fft2d": 5e9},
                            rates)
    assert math.isclose(seconds, 1 + 1 + 1 + 1)


@pytest.mark.e2e
def test_models_benchmark_runs(tmp_path):
    from benchmarks import bench_models

    out = tmp_path / "models.json"
    result = bench_models.main(["--quick", "--out", str(out)])
    written = json.loads(out.read_text())
    assert written["wall_seconds"] == result["wall_seconds"] > 0
    assert {m["model"] for m in written["models"]} == {"fno", "geomano"}
    assert all(v > 0 for v in written["roofline"]["gflops"].values())
    for entry in written["models"]:
        forward = entry["flops_batch1"]["forward"]["kinds"]
        assert forward["matmul"] > 0
        assert ("fft1d" if entry["model"] == "fno" else "scan") in forward
        assert 0 < entry["float16_batch1"]["rel_l2_vs_float32"] < 1e-2
        for batch, row in entry["batches"].items():
            assert set(row["seconds"]) >= {"forward", "forward_bfloat16", "forward_backward"}
            assert row["flops"]["forward_backward"] > row["flops"]["forward"] > 0
            assert all(r > 0 for r in row["ratio_to_bound"].values())
            assert 0 < row["rel_l2_vs_float32"]["forward_bfloat16"] < 5e-2
            assert set(row["peak_mib"]) == set(row["seconds"])
    # FLOPs scale with the batch
    fno = next(m for m in written["models"] if m["model"] == "fno")
    assert fno["batches"]["2"]["flops"]["forward"] == 2 * fno["batches"]["1"]["flops"][
        "forward"]
    compiled = fno["batches"]["2"]["compiled"]
    assert compiled["status"] == "compiled", compiled
    assert fno["batches"]["2"]["rel_l2_vs_float32"]["forward_compiled"] < 1e-6
    table = bench_models.readme_table(written, batch=2)
    assert table.count("\n") == 1 + len(written["models"])
    for line in bench_models.rows({**written, "models": [
            {**m, "batches": {"4": m["batches"]["2"]}} for m in written["models"]]}):
        assert line.count("|") == 6


@pytest.mark.skipif(not _has_git_history(), reason="needs the git repository for --baseline")
def test_models_benchmark_times_a_baseline_revision_side_by_side(tmp_path, monkeypatch):
    from benchmarks import bench_models

    # The FNO alone: the baseline's numba kernels (GeoMaNO's scan) would compile cold in the
    # extracted package, a minute on two cores.
    monkeypatch.setattr(bench_models, "QUICK", {("fno", "burgers"): bench_models.QUICK[
        ("fno", "burgers")]})
    search_path = list(sys.path)
    result = bench_models.main(["--quick", "--no-compile", "--baseline", "HEAD", "--clock",
                                "cpu", "--out", str(tmp_path / "models.json")])
    assert sys.path == search_path
    assert result["baseline"] == "HEAD" and result["clock"] == "cpu"
    for entry in result["models"]:
        for row in entry["batches"].values():
            old = row["baseline"]
            assert set(old["seconds"]) == set(old["speedup"]) == {"forward", "forward_backward"}
            assert all(v > 0 for v in old["seconds"].values())
            for kind, seconds in old["seconds"].items():
                assert math.isclose(old["ratio_to_bound"][kind],
                                    seconds / row["bound_seconds"][kind])
            # the same weights and input: the committed package agrees with this checkout
            assert old["rel_l2_vs_current"] < 1e-5
            # the baseline's calls are kept apart from this checkout's
            assert not any(k.startswith("baseline") for k in row["seconds"])
    table = bench_models.readme_table(result, batch=2)
    assert table.splitlines()[0].endswith("fwd+bwd / bound at HEAD |")
    lines = bench_models.rows({**result, "models": [
        {**m, "batches": {"4": m["batches"]["2"]}} for m in result["models"]]})
    assert lines and all("at HEAD" in line and line.count("|") == 6 for line in lines)
