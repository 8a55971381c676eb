"""Every example script runs, at tiny sizes, and leaves what it promises."""

import numpy as np
import pytest

from ssmpde.data import open_dataset


@pytest.mark.e2e
def test_demo_runs_the_whole_loop_and_leaves_its_files(tmp_path, monkeypatch, capsys):
    from examples import demo

    calls = []

    def train(*args, **kwargs):
        calls.append(kwargs)
        return real_train(*args, **kwargs)

    real_train = demo.train
    monkeypatch.setattr(demo, "train", train)
    result = demo.main(["--out", str(tmp_path), "--tiny"])
    # Every training runs its epochs whatever the machine's load (no time limit), and says so.
    assert len(calls) == 6 and all(call.get("time_limit") is None for call in calls)
    announced = [line for line in capsys.readouterr().out.splitlines()
                 if line.startswith("training ")]
    assert announced == [f"training {what}: {call['config'].epochs} epochs"
                         for what, call in zip(
                             ["darcy: geomano", "darcy: fno", "navier-stokes: geomano",
                              "navier-stokes: fno", "kuramoto-sivashinsky: geomano 1d",
                              "euler kh: flux corrector"], calls)]
    with open_dataset(tmp_path / "navier_stokes.nc") as ds:
        assert ds.vorticity.shape == (6, 7, 16, 16)
        assert np.all(np.isfinite(ds.vorticity.values))
    for name in ("darcy.nc", "predictions_darcy_geomano.nc", "predictions_darcy_fno.nc",
                 "predictions_navier-stokes_geomano.nc", "predictions_navier-stokes_fno.nc",
                 "rollout.nc"):
        with open_dataset(tmp_path / name) as ds:  # each validates against the schema
            assert ds.sizes["sample"] > 0
    with open_dataset(tmp_path / "kuramoto_sivashinsky.nc") as ds:
        assert ds.u.dims == ("sample", "time", "x") and ds.u.shape == (6, 11, 32)
    with open_dataset(tmp_path / "ks_rollout.nc") as ds:
        assert ds.u.dims == ("sample", "time", "x")
    for name in ("navier_stokes_vorticity.png", "rollout.png", "kuramoto_sivashinsky.png",
                 "ks_rollout.png", "ks_pareto.png", "rollout_pareto.png"):
        png = (tmp_path / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    for run in ("darcy-geomano", "darcy-fno", "navier-stokes-geomano", "navier-stokes-fno",
                "euler-kh-corrector"):
        assert (tmp_path / "runs" / run / "weights.safetensors").exists()
    summary = (tmp_path / "summary.md").read_text()
    assert "darcy warm start" in summary and "rollout: adaptive" in summary
    # the learned correction: the Euler corrector against the plain solvers, and a verdict
    assert "euler kh: corrected 8², flux" in summary and "euler kh: plain 16² (2x finer)" in \
        summary and "euler kh: verdict" in summary
    assert "ks rollout: surrogate:4,solver:1" in summary
    assert "ks rollout: parareal:1:1" in summary and "ks rollout: adaptive:0.001" in summary
    assert "ks rollout: verdict" in summary and "coarse" in summary
    assert result["summary"] in summary


@pytest.mark.e2e
def test_generate_datasets_example(tmp_path):
    from examples import generate_datasets

    result = generate_datasets.main(["--out", str(tmp_path), "--tiny"])
    assert result["enstrophy"].shape == (4, 3) and np.all(result["enstrophy"] > 0)
    with open_dataset(result["darcy"]) as ds:
        assert set(ds.data_vars) == {"a", "u"}


@pytest.mark.e2e
def test_train_surrogate_example(tmp_path):
    from examples import train_surrogate

    result = train_surrogate.main(["--out", str(tmp_path), "--tiny"])
    assert (result["run"] / "config.json").exists()
    assert 0 < result["evaluation"]["rel_l2"] < 10
    with open_dataset(tmp_path / "darcy_predictions.nc") as ds:
        assert ds.u.shape == (12, 9, 9)


@pytest.mark.e2e
def test_hybrid_rollout_example(tmp_path):
    from examples import hybrid_rollout

    result = hybrid_rollout.main(["--out", str(tmp_path), "--tiny"])
    assert result["result"].source == ["surrogate", "surrogate", "solver"] * 2
    with open_dataset(result["path"]) as ds:
        assert list(ds.source.values) == [1, 1, 0, 1, 1, 0]


@pytest.mark.e2e
def test_kuramoto_sivashinsky_example(tmp_path):
    from examples import kuramoto_sivashinsky

    result = kuramoto_sivashinsky.main(["--out", str(tmp_path), "--tiny"])
    rows = {r["schedule"]: r for r in result["rollout"]}
    assert {s for s, r in rows.items() if r["kind"] != "coarse"} == {
        "solver, one run", "solver", "surrogate", "surrogate:4,solver:1"}
    assert any(r["kind"] == "coarse" for r in rows.values())  # the honest baseline
    assert rows["solver, one run"]["final_rel_l2"] == 0.0  # the reference
    # Restarted from the coarser stored grid every step, the solver loses the modes above
    # it at each hand-over (about 3 % here), far less than the surrogate.
    assert 0 < rows["solver"]["final_rel_l2"] < rows["surrogate"]["final_rel_l2"]
    assert (tmp_path / "ks_rollout.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.e2e
def test_euler_ce_rm_example(tmp_path):
    """Multi-field 2D data end to end: a surrogate of ρ, u, v, p conditioned on the tracer's
    first frame, evaluated per field, and rolled out with the solver re-anchoring it."""
    from examples import euler_ce_rm

    result = euler_ce_rm.main(["--out", str(tmp_path), "--tiny"])
    assert set(result["evaluation"]["rel_l2_per_field"]) == set(euler_ce_rm.FIELDS)
    with open_dataset(tmp_path / "ce_rm.nc") as ds:
        assert {"density", "velocity_x", "velocity_y", "pressure", "tracer"} <= set(ds.data_vars)
    with open_dataset(tmp_path / "ce_rm_rollout.nc") as ds:
        assert ds.density.dims == ("sample", "time", "y", "x") and "tracer" in ds
    rows = {row["schedule"]: row for row in result["rollout"]}
    assert rows["solver, one run"]["final_rel_l2"] == 0.0  # the reference
    assert rows["solver"]["final_rel_l2"] < 1e-12  # restarts at the simulation grid
    assert rows["surrogate:3,solver:1"]["solver"] == 0  # 3 steps: all surrogate
    for name in ("ce_rm.png", "ce_rm_rollout.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
