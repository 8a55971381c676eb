"""The Burgers benchmark (benchmarks/bench_burgers.py) runs end to end at tiny sizes."""

import json

import pytest


@pytest.mark.e2e
def test_burgers_benchmark_runs(tmp_path):
    from benchmarks import bench_burgers

    out = tmp_path / "burgers.json"
    result = bench_burgers.main(["--resolution", "64", "--final-time", "0.1", "--samples", "2",
                                 "--tolerances", "1e-6", "1e-9", "--out", str(out)])
    assert json.loads(out.read_text())["speedup_vs_scipy"] == result["speedup_vs_scipy"] > 0
    assert result["numpy_reference_difference"] < 1e-12
