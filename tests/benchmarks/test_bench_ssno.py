"""The SS-NO benchmark (benchmarks/bench_ssno.py) runs end to end at tiny sizes."""

import json


def test_ssno_benchmark_runs(tmp_path):
    from benchmarks import bench_ssno

    out = tmp_path / "ssno.json"
    result = bench_ssno.main(["--tiny", "--batch", "2", "--repeats", "1", "--out", str(out)])
    assert json.loads(out.read_text())["speedup"] == result["speedup"] > 0
    assert result["max_relative_difference"] < 1e-5  # float32 FFT against the float64 loop
