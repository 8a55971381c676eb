"""The KS learning benchmark (benchmarks/bench_ks_learning.py) runs end to end at tiny sizes."""

import json

import pytest


@pytest.mark.slow  # trains, evaluates and rolls out a model: about 15 s
def test_ks_learning_benchmark_runs(tmp_path):
    from benchmarks import bench_ks_learning
    from ssmpde.generation import generate

    generate("kuramoto-sivashinsky", preset="lpsda-nu0.1", num_samples=4, seed=0,
             out=tmp_path / "ks_nu0.1.nc", final_time=0.6, progress=False)
    out = tmp_path / "ks.json"
    result = bench_ks_learning.main(["--data-dir", str(tmp_path), "--budget", "1", "--train",
                                     "2", "--test", "2", "--window", "2", "--jobs", "1",
                                     "--viscosities", "0.1", "--models", "fno_1d",
                                     "--runs", str(tmp_path / "runs"), "--out", str(out)])
    (row,) = json.loads(out.read_text())["rows"]
    assert row == result["rows"][0] and row["model"] == "fno_1d" and row["epochs_done"] >= 1
    assert 0 < row["test_rel_l2_trajectory"] < 100
