"""The training benchmark (benchmarks/bench_training.py) runs end to end at tiny sizes."""

import json

import pytest


@pytest.mark.e2e
def test_training_benchmark_runs(tmp_path):
    from benchmarks import bench_training
    from ssmpde.generation import generate

    data = tmp_path / "darcy.nc"
    generate("darcy", num_samples=6, seed=0, out=data, resolution=17,
             simulation_resolution=33, progress=False)
    out = tmp_path / "training.json"
    result = bench_training.main(["--task", "darcy", "--data", str(data), "--num-test", "2",
                                  "--budget", "2", "--model-option", "width=8",
                                  "--model-option", "depth=1", "--runs", str(tmp_path / "runs"),
                                  "--out", str(out)])
    written = json.loads(out.read_text())
    assert written["models"].keys() == {"lamo", "geomano", "fno"}
    assert written["data"] == "darcy.nc"  # outside the repository: the name, not /tmp/...
    for row in result["models"].values():
        assert 0 < row["test_rel_l2"] < 10 and row["epochs_done"] >= 1
        # a 2 s budget buys less than an epoch of 4 samples: one epoch over fewer samples
        assert 1 <= row["train_samples"] <= 4
    lines = bench_training.rows(written)
    # the training is read from the runs' recorded train_config: the package's defaults with
    # the benchmark's lr
    recipe = ("; both trained with ssmpde defaults and the benchmark's lr (AdamW, OneCycle, "
              "lr 1e-3, batch 4, weight decay 1e-4, clip 1, relative L2 + 0.1 × its gradients, "
              "Gaussian normalisation)")
    assert [line.split(" | ")[0] for line in lines] == [
        "| darcy: lamo vs FNO, 2 s CPU training each (test rel. L2; papers, 500 epochs: lamo "
        "0.0039, fno 0.0108)" + recipe,
        "| darcy: geomano vs FNO, 2 s CPU training each (test rel. L2; papers, 500 epochs: "
        "geomano 0.0036, fno 0.0108)" + recipe]
    # each model's preset, its layout and the benchmark's overrides
    assert "(darcy preset, width=8, depth=1; " in lines[0]
    assert ("(darcy preset with this package's options, not paper-darcy, width=8, "
            "depth=1; ") in lines[1]
    assert all("(FNO darcy preset, width=8, depth=1; " in line for line in lines)
