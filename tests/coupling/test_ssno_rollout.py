"""SS-NO with temporal memory as a time-stepper: a KS checkpoint whose window holds several
frames runs every schedule of ``ssmpde rollout``, and the solver-only schedule still reproduces
the solver exactly."""

import numpy as np
import pytest

from ssmpde.cli import main
from ssmpde.coupling import SurrogateStepper, hybrid_rollout
from ssmpde.data import open_dataset
from ssmpde.generation import generate
from ssmpde.solvers import get_solver
from ssmpde.surrogates.train import TrainConfig, load_checkpoint, train

SOLVER = dict(resolution=32, simulation_resolution=32, domain_length=22.0, viscosity=1.0,
              final_time=1.0, record_interval=0.1, time_step=0.05)
WINDOW = 3


@pytest.fixture(scope="module")
def ks_ssno_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ks-ssno")
    data = root / "ks.nc"
    generate("kuramoto-sivashinsky", num_samples=3, seed=0, out=data, progress=False, **SOLVER)
    run = root / "run"
    train("ssno", data, out=run, preset="ks",
          model_overrides=dict(width=8, depth=2, state_size=4,
                               memory_state_size=4),
          config=TrainConfig(epochs=1, batch_size=4, window=WINDOW, num_test=1,
                             schedule="cosine", noise_std=0.001), progress=False)
    return data, run


def test_checkpoint_is_a_memory_model_with_a_window(ks_ssno_run):
    _, run = ks_ssno_run
    model, record = load_checkpoint(run)
    assert record["model"] == "ssno"
    assert model.config.memory and model.config.window == WINDOW
    assert SurrogateStepper.from_checkpoint(run).window == WINDOW


def test_rollout_cli_runs_every_schedule(ks_ssno_run, tmp_path, capsys):
    data, run = ks_ssno_run
    out, plot = tmp_path / "rollout.nc", tmp_path / "rollout.png"
    schedules = ["solver", "surrogate", "adaptive", "surrogate:2,solver:1"]
    argv = ["rollout", "--checkpoint", str(run), "--steps", "5", "--out", str(out),
            "--plot", str(plot)]
    for schedule in schedules:
        argv += ["--schedule", schedule]
    assert main(argv) in (0, None)
    printed = capsys.readouterr().out
    for schedule in schedules:
        assert schedule in printed
    with open_dataset(out) as ds:
        assert np.isfinite(ds["u"].values).all()
    assert plot.stat().st_size > 0


def test_solver_only_schedule_reproduces_the_solver(ks_ssno_run):
    data, run = ks_ssno_run
    solver = get_solver("kuramoto-sivashinsky", **SOLVER)
    surrogate = SurrogateStepper.from_checkpoint(run)
    with open_dataset(data) as ds:
        history = ds["u"].values[:, :WINDOW, None]
    start = WINDOW - 1
    result = hybrid_rollout(solver, surrogate, history, 4, schedule="solver",
                            time=start * 0.1, parameters=None, reference=None)
    state, own = history[:, -1:], []
    for k in range(4):
        state = solver.step(state, time=(start + k) * 0.1)[:, None]
        own.append(state[:, 0])
    np.testing.assert_array_equal(result.frames, np.stack(own, axis=1))
    assert result.source == ["solver"] * 4
