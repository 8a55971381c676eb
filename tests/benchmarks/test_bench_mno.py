"""The MNO benchmark (benchmarks/bench_mno.py) runs end to end at tiny sizes."""

import json

import numpy as np
import pytest


def test_bench_mno_help(capsys):
    from benchmarks import bench_mno

    with pytest.raises(SystemExit) as exit_info:
        bench_mno.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "--budget" in text and "--backbones" in text and "--mixers" in text


@pytest.mark.e2e
def test_bench_mno_trains_two_tiny_models_and_writes_the_table(tmp_path, capsys):
    from benchmarks import bench_mno
    from ssmpde.generation import generate

    data = tmp_path / "darcy.nc"
    generate("darcy", num_samples=6, seed=0, out=data, resolution=9, simulation_resolution=17,
             progress=False)
    out = tmp_path / "mno.json"
    options = ["width=8", "depth=1", "heads=2", "state_size=4", "regressor_width=4"]
    result = bench_mno.main(["--data", str(data), "--num-test", "2", "--budget", "0.01",
                             "--backbones", "galerkin", "--mixers", "mamba", "attention",
                             "--probe-samples", "2", "--runs", str(tmp_path / "runs"),
                             "--out", str(out)]
                            + [arg for option in options for arg in ("--model-option", option)])
    written = json.loads(out.read_text())
    assert written["models"].keys() == {"galerkin-mamba", "galerkin-attention"}
    assert written["data"] == "darcy.nc"  # outside the repository: the name, not /tmp/...
    (row,) = bench_mno.rows(written)  # the table's row: mamba against attention
    assert row.startswith("| MNO galerkin on pdebench-like Darcy 64², mamba vs attention")
    assert written["table"] == result["table"]
    assert written["table"] in capsys.readouterr().out
    for row in written["models"].values():
        assert row["epochs_done"] == 1 and row["parameters"] > 0
        assert 1 <= row["train_samples"] <= 4  # a budget this small buys a subset
        assert row["seconds_per_epoch"] > 0
        assert row["model_config"]["mixer"] == row["mixer"]
        assert all(0 < row[key] < 10 for key in ("rmse", "nrmse", "rel_l2",
                                                 "released_code_rmse"))
        # |error| / (|true| + 1e-9) is huge at the u = 0 boundary nodes of this grid.
        assert row["released_code_nrmse"] > 0
        # One output field: PDEBench's nRMSE is the relative L2 of the trainer's evaluate().
        np.testing.assert_allclose(row["nrmse"], row["rel_l2"], rtol=1e-5)
    assert written["paper_table1"]["gnot/mamba"]["rel_l2"] == 0.0297


def test_scores_follow_the_pdebench_definitions(tmp_path):
    # Two samples with known errors: RMSE and nRMSE per sample, then the mean.
    import xarray as xr

    from benchmarks.bench_mno import scores

    true = np.array([[[1.0, 1.0], [1.0, 1.0]], [[2.0, 0.0], [0.0, 0.0]]])
    predicted = true + np.array([[[1.0, -1.0], [1.0, -1.0]], [[0.0, 0.0], [0.0, 2.0]]])
    paths = []
    for name, values in (("pred", predicted), ("true", true)):
        path = tmp_path / f"{name}.nc"
        xr.Dataset({"u": (("sample", "x", "y"), values)}).to_netcdf(path)
        paths.append(path)
    got = scores(*paths, ["u"])
    np.testing.assert_allclose(got["rmse"], (1.0 + 1.0) / 2)          # sqrt(4/4), sqrt(4/4)
    np.testing.assert_allclose(got["nrmse"], (2.0 / 2.0 + 2.0 / 2.0) / 2)
    np.testing.assert_allclose(got["released_code_rmse"], (4 + 2) / 8)
