"""The Darcy benchmark (benchmarks/bench_darcy.py) runs end to end at tiny sizes."""

import json


def test_darcy_benchmark_runs(tmp_path):
    from benchmarks import bench_darcy

    out = tmp_path / "darcy.json"
    result = bench_darcy.main(["--resolution", "21", "--repeats", "1", "--samples", "2",
                               "--out", str(out)])
    assert json.loads(out.read_text())["seconds_per_sample"] == result["seconds_per_sample"]
    assert max(result["max_difference_vs_baseline_relative"].values()) < 1e-10
    assert [len(t) for t in result["all_times"].values()] == [1, 1, 1]
    assert len(bench_darcy.rows(result)) == 2  # direct and pcg
