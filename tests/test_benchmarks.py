"""The benchmark scripts run end to end at tiny sizes and write their JSON."""

import json

import pytest


def test_navier_stokes_benchmark_runs(tmp_path):
    from benchmarks import bench_navier_stokes

    out = tmp_path / "ns.json"
    result = bench_navier_stokes.main(["--resolution", "32", "--batch", "2", "--steps", "2",
                                       "--repeats", "1", "--cfl-time", "0.05", "--out", str(out)])
    assert json.loads(out.read_text())["speedup_vs_numpy"] == result["speedup_vs_numpy"] > 0
    assert result["max_abs_difference_relative"] < 1e-12


def test_darcy_benchmark_runs(tmp_path):
    from benchmarks import bench_darcy

    out = tmp_path / "darcy.json"
    result = bench_darcy.main(["--resolution", "21", "--repeats", "1", "--samples", "2",
                               "--out", str(out)])
    assert json.loads(out.read_text())["seconds_per_sample"] == result["seconds_per_sample"]
    assert max(result["max_difference_vs_baseline_relative"].values()) < 1e-10


def test_geomano_benchmark_runs(tmp_path):
    from benchmarks import bench_geomano

    out = tmp_path / "geomano.json"
    result = bench_geomano.main(["--tiny", "--batch-size", "2", "--out", str(out)])
    assert json.loads(out.read_text())["speedup"] == result["speedup"] > 0
    # float32 CPU scans against the float64 reference loops, same weights
    assert result["output_difference"] < 1e-5


def test_training_benchmark_runs(tmp_path):
    from benchmarks import bench_training
    from ssmpde.solvers import generate

    data = tmp_path / "darcy.nc"
    generate("darcy", num_samples=6, seed=0, out=data, resolution=17,
             simulation_resolution=33, progress=False)
    out = tmp_path / "training.json"
    result = bench_training.main(["--task", "darcy", "--data", str(data), "--num-test", "2",
                                  "--budget", "2", "--model-option", "width=8",
                                  "--model-option", "depth=1", "--runs", str(tmp_path / "runs"),
                                  "--out", str(out)])
    assert json.loads(out.read_text())["models"].keys() == {"lamo", "geomano", "fno"}
    for row in result["models"].values():
        assert 0 < row["test_rel_l2"] < 10 and row["epochs_done"] >= 1
        # a 2 s budget buys less than an epoch of 4 samples: one epoch over fewer samples
        assert 1 <= row["train_samples"] <= 4


def test_results_table_has_a_row_per_result_with_date_and_machine():
    from benchmarks.__main__ import table

    text = table()
    lines = text.splitlines()
    assert lines[0].startswith("| benchmark | ssmpde | reference | ratio | measured |")
    assert any("2D scan" in line for line in lines) and any("Darcy" in line for line in lines)
    assert all(line.count("|") == 6 for line in lines)


def test_ks_benchmark_runs(tmp_path):
    import importlib.util

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


def test_burgers_benchmark_runs(tmp_path):
    from benchmarks import bench_burgers

    out = tmp_path / "burgers.json"
    result = bench_burgers.main(["--resolution", "64", "--final-time", "0.1", "--samples", "2",
                                 "--tolerances", "1e-6", "1e-9", "--out", str(out)])
    assert json.loads(out.read_text())["speedup_vs_scipy"] == result["speedup_vs_scipy"] > 0
    assert result["numpy_reference_difference"] < 1e-12


def test_ssno_benchmark_runs(tmp_path):
    from benchmarks import bench_ssno

    out = tmp_path / "ssno.json"
    result = bench_ssno.main(["--tiny", "--batch", "2", "--repeats", "1", "--out", str(out)])
    assert json.loads(out.read_text())["speedup"] == result["speedup"] > 0
    assert result["max_relative_difference"] < 1e-5  # float32 FFT against the float64 loop


@pytest.mark.slow  # trains, evaluates and rolls out a model: about 15 s
def test_ks_learning_benchmark_runs(tmp_path):
    from benchmarks import bench_ks_learning
    from ssmpde.solvers import generate

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
