"""The Kolmogorov resolution study (benchmarks/bench_kolmogorov_resolution.py) runs end to end
at tiny sizes, and its choice follows the convergence it measured."""

import json

import pytest

from benchmarks import bench_kolmogorov_resolution as study


def test_quick_study(tmp_path):
    out = tmp_path / "study.json"
    result = study.main(["--quick", "--out", str(out)])
    saved = json.loads(out.read_text())
    entry = saved["reynolds"]["1000"]
    assert [(p["coarse"], p["fine"]) for p in entry["pairs"]] == [(16, 32), (32, 64)]
    for pair in entry["pairs"]:
        assert 0 <= pair["time_95_min"] <= pair["time_95_mean"] <= 1.0 + 1e-9
        assert pair["time_95_mean"] <= pair["time_80_mean"]
        assert len(pair["correlation"]) == 11 and pair["rel_l2_at_1"] > 0
    # the coarser pair is the further from converged
    assert entry["pairs"][0]["rel_l2_at_1"] > entry["pairs"][1]["rel_l2_at_1"]
    assert {(c["grid"], c["stable"]) for c in entry["time_steps"]} == {(16, True), (32, True)}
    assert all(c["cpu_seconds_per_time_unit"] > 0 for c in entry["grids"].values())
    assert result["choice"]["reynolds"] is None  # no 128² or 256² grid in a quick study


def test_the_choice_is_the_largest_converged_reynolds_number():
    def entry(time_95):
        return {"viscosity": 1.0, "grids": {"128": {"time_step": 5e-3},
                                            "256": {"time_step": 2.5e-3}},
                "spin_up": {"grid": 128, "time": 50.0, "settle": {"time": 1.0}},
                "pairs": [{"coarse": 256, "fine": 512, "samples": 2,
                           "time_95_min": time_95}]}

    result = {"reynolds": {"1000": entry(3.0), "500": entry(7.5), "250": entry(10.0)}}
    choice = study.choose(result, useful=5.0, horizon=10.0)
    assert (choice["reynolds"], choice["reference_grid"], choice["horizon"]) == (500.0, 256, 7.0)
    assert study.choose(result, useful=20.0, horizon=10.0)["reynolds"] is None


def test_viscosity_is_kochkovs_on_the_unit_torus():
    from ssmpde.solvers.navier_stokes import NavierStokes2D

    preset = NavierStokes2D.PRESETS["kolmogorov-re1000"]["viscosity"]
    assert study.viscosity(1000) == pytest.approx(preset, rel=1e-12)
