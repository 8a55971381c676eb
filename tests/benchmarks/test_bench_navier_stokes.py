"""The Navier–Stokes benchmark (benchmarks/bench_navier_stokes.py) runs end to end at tiny
sizes and formats its table row."""

import json


def test_navier_stokes_benchmark_runs(tmp_path):
    from benchmarks import bench_navier_stokes

    out = tmp_path / "ns.json"
    result = bench_navier_stokes.main(["--resolution", "32", "--batch", "2", "--steps", "2",
                                       "--repeats", "1", "--cfl-time", "0.05", "--out", str(out)])
    assert json.loads(out.read_text())["speedup_vs_numpy"] == result["speedup_vs_numpy"] > 0
    assert result["max_abs_difference_relative"] < 1e-12
    (row,) = bench_navier_stokes.rows(result)
    assert row.startswith("| Navier–Stokes faithful step, 32², batch 2 |")
