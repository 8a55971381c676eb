"""The GeoMaNO step benchmark (benchmarks/bench_geomano.py) runs end to end at tiny sizes."""

import json

import pytest


@pytest.mark.e2e
def test_geomano_benchmark_runs(tmp_path):
    from benchmarks import bench_geomano

    out = tmp_path / "geomano.json"
    result = bench_geomano.main(["--tiny", "--batch-size", "2", "--out", str(out)])
    assert json.loads(out.read_text())["speedup"] == result["speedup"] > 0
    # float32 CPU scans against the float64 reference loops, same weights
    assert result["output_difference"] < 1e-5
