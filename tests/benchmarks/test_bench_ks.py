"""The Kuramoto–Sivashinsky benchmark (benchmarks/bench_ks.py) runs end to end at tiny sizes."""

import importlib.util
import json


def test_ks_benchmark_runs(tmp_path):
    from benchmarks import bench_ks

    out = tmp_path / "ks.json"
    has_exponax = importlib.util.find_spec("exponax") is not None
    result = bench_ks.main(["--resolution", "32", "--final-time", "0.2", "--batch", "2",
                            "--radau-batch", "1", "--reference-step", "0.001", "--steps", "0.05",
                            "0.01", "--repeats", "1", "--sweep-repeats", "1",
                            "--exponax-batch", "2", "--exponax-steps", "2", "--check-steps", "2",
                            "--out", str(out)] + ([] if has_exponax else ["--skip-exponax"]))
    radau = json.loads(out.read_text())["radau_comparison"]
    assert radau["ssmpde_sweep"] == result["radau_comparison"]["ssmpde_sweep"]
    assert radau["radau"]["rel_l2_error_max"] < 1e-6  # Radau and ETDRK4 solve the same system
    assert all(row["rel_l2_error_max"] < 1e-3 for row in radau["ssmpde_sweep"])
    if has_exponax:  # same equation and scheme: round-off apart, band matched to ssmpde's
        assert result["exponax_comparison"]["rel_l2_difference_max_matched_band"] < 1e-10
    assert len(bench_ks.rows(result)) == (radau["chosen_time_step"] is not None) + has_exponax
