"""A LaMO Navier–Stokes checkpoint (history of 10 frames folded into channels) is a
time-stepper: ``ssmpde rollout`` runs every schedule with it."""

import numpy as np
import pytest

from ssmpde.cli import main
from ssmpde.data import open_dataset
from ssmpde.generation import generate
from ssmpde.surrogates.train import TrainConfig, load_checkpoint, train

SOLVER = dict(resolution=16, simulation_resolution=16, viscosity=1e-3, time_step=0.01,
              record_interval=0.1)
WINDOW = 10


@pytest.fixture(scope="module")
def ns_lamo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ns-lamo")
    data = root / "ns.nc"
    generate("navier-stokes", num_samples=3, seed=0, out=data, final_time=1.5,
             progress=False, **SOLVER)
    run = root / "run"
    train("lamo", data, out=run, preset="navier-stokes",
          model_overrides=dict(width=16, depth=1, state_size=8),
          config=TrainConfig(epochs=1, batch_size=2, window=WINDOW, num_test=1,
                             max_grad_norm=0.1, weight_decay=0.05, lr=5e-4),
          progress=False)
    return data, run


def test_lamo_checkpoint_runs_every_rollout_schedule(ns_lamo_run, tmp_path, capsys):
    data, run = ns_lamo_run
    _, record = load_checkpoint(run)
    assert record["model"] == "lamo" and record["task"]["window"] == WINDOW
    out, plot = tmp_path / "rollout.nc", tmp_path / "rollout.png"
    schedules = ["solver", "surrogate", "adaptive", "surrogate:2,solver:1"]
    argv = ["rollout", "--checkpoint", str(run), "--steps", "4", "--out", str(out),
            "--plot", str(plot)]
    for schedule in schedules:
        argv += ["--schedule", schedule]
    assert main(argv) in (0, None)
    printed = capsys.readouterr().out
    for schedule in schedules:
        assert f"| {schedule} |" in printed
    with open_dataset(out) as ds:
        assert np.isfinite(ds["vorticity"].values).all() and ds.sizes["time"] == 4
    assert plot.stat().st_size > 0
