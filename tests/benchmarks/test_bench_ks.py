"""The Kuramoto–Sivashinsky benchmark (benchmarks/bench_ks.py) runs end to end at tiny sizes."""

import json


def test_ks_benchmark_runs(tmp_path):
    from benchmarks import bench_ks

    out = tmp_path / "ks.json"
    result = bench_ks.main(["--resolution", "32", "--final-time", "0.2", "--batch", "2",
                            "--radau-batch", "1", "--reference-step", "0.001", "--steps", "0.05",
                            "0.01", "--sweep-repeats", "1", "--out", str(out)])
    radau = json.loads(out.read_text())["radau_comparison"]
    assert radau["ssmpde_sweep"] == result["radau_comparison"]["ssmpde_sweep"]
    assert radau["radau"]["rel_l2_error_max"] < 1e-6  # Radau and ETDRK4 solve the same system
    assert all(row["rel_l2_error_max"] < 1e-3 for row in radau["ssmpde_sweep"])
    assert len(bench_ks.rows(result)) == (radau["chosen_time_step"] is not None)
