"""The Euler benchmark (benchmarks/bench_euler.py) runs end to end at tiny sizes."""

import json

import pytest

TINY = ["--sod-grids", "32", "--sod-aspect", "8", "--sod-time", "0.1", "--kh-grids", "16",
        "--kh-time", "0.05", "--ce-rm-resolution", "32", "--ce-rm-fraction", "0.05",
        "--repeats", "1"]


def test_euler_benchmark_runs_ssmpde_alone(tmp_path):
    from benchmarks import bench_euler

    out = tmp_path / "euler.json"
    result = bench_euler.main(TINY + ["--skip-pyro", "--out", str(out)])
    assert json.loads(out.read_text())["rows"] == result["rows"]
    sod, kh = result["rows"]
    assert (sod["problem"], sod["nx"], sod["ny"], kh["problem"], kh["nx"]) == ("sod", 32, 4,
                                                                               "kh", 16)
    for row in (sod, kh):
        assert "pyro" not in row and row["ssmpde"]["steps"] >= 1
        assert row["ssmpde"]["cell_updates_per_second"] > 0
    assert 0 < sod["ssmpde"]["density_l1_error"] < 0.05  # 32 cells, t = 0.1
    ce_rm = result["ce_rm_sample"]  # one record interval of 20 at 32² -> 16²
    assert ce_rm["fraction_of_final_time"] == pytest.approx(0.05) and ce_rm["seconds"] > 0
    assert ce_rm["config"]["simulation_resolution"] == 32


def test_euler_benchmark_runs_against_pyro(tmp_path):
    pytest.importorskip("pyro.pyro_sim")
    from benchmarks import bench_euler

    out = tmp_path / "euler.json"
    result = bench_euler.main(TINY + ["--out", str(out)])
    assert json.loads(out.read_text())["versions"]["pyro-hydro"]
    for row in result["rows"]:
        assert row["initial_state_max_difference"] < 1e-12  # both start from the same state
        assert row["pyro"]["final_time_reached"] == pytest.approx(row["final_time"])
        assert row["rate_ratio"] > 0
        assert row["density_l1_difference"] < 0.05  # the same flow, two schemes
    sod = result["rows"][0]
    assert 0 < sod["pyro"]["density_l1_error"] < 0.05
