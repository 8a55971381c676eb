"""The SSD benchmark (benchmarks/bench_ssd.py) runs end to end at tiny sizes."""

import json

import pytest


@pytest.mark.e2e
def test_ssd_benchmark_runs(tmp_path):
    from benchmarks import bench_ssd

    out = tmp_path / "ssd.json"
    result = bench_ssd.main(["--quick", "--out", str(out)])
    written = json.loads(out.read_text())
    assert written["speedup_vs_selective_scan"] == result["speedup_vs_selective_scan"] > 0
    assert written["speedup_vs_reference"] > 0
    assert set(written["seconds_forward_backward"]) == {"ssd_scan", "selective_scan", "ssd_ref"}
    assert written["shape"]["length"] == bench_ssd.QUICK["length"]
    assert len(written["load_average_1_5_15min"]["before"]) == 3
    # the three paths compute the same function: float32 paths against the float64 loop, in
    # the output and the gradient of every input
    for pair, differences in written["max_relative_difference"].items():
        assert set(differences) == {"output", *(f"grad_{k}" for k in bench_ssd.INPUTS)}
        assert max(differences.values()) < 1e-5, (pair, differences)
