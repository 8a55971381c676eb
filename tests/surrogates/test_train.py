"""Training pipeline: learning, exact resume, torchrun, self-contained checkpoints, evaluation
round trips, and clear errors on bad input."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from ssmpde.cli import main
from ssmpde.data import load_dataset, open_dataset, save
from ssmpde.generation import generate
from ssmpde.surrogates.datasets import Normalizer, TaskDataset, infer_task, relative_l2
from ssmpde.surrogates.train import TrainConfig, evaluate, load_checkpoint, train

TINY = dict(width=8, depth=1, state_size=4)


@pytest.fixture(scope="module")
def darcy_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("darcy")
    train_file, test_file = root / "train.nc", root / "test.nc"
    generate("darcy", num_samples=8, seed=0, out=train_file, resolution=29,
             simulation_resolution=57, progress=False)
    generate("darcy", num_samples=4, seed=1, out=test_file, resolution=29,
             simulation_resolution=57, progress=False)
    return train_file, test_file


@pytest.fixture(scope="module")
def ns_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ns") / "ns.nc"
    generate("navier-stokes", num_samples=4, seed=0, out=path, resolution=16,
             simulation_resolution=32, final_time=0.6, record_interval=0.1, time_step=0.01,
             viscosity=(1e-3, 2e-3), progress=False)
    return path


def weights(run):
    return load_file(Path(run) / "weights.safetensors")


# ---------------------------------------------------------------------------------------
# Learning.
# ---------------------------------------------------------------------------------------
@pytest.mark.slow  # 34 s on 2 cores: the default suite keeps the resume and increment tests
def test_overfits_four_small_darcy_samples(tmp_path):
    # A learning check: 4 samples at 17², one layer, 120 epochs; measured 0.021 (an
    # untrained model is at about 1).
    data = tmp_path / "darcy.nc"
    generate("darcy", num_samples=4, seed=0, out=data, resolution=17, simulation_resolution=33,
             progress=False)
    metrics = train("geomano", data, test_data=data, out=tmp_path / "run", preset="darcy",
                    model_overrides=dict(width=32, depth=1, latent_grid=(9, 9)),
                    config=TrainConfig(epochs=120, batch_size=2, lr=3e-3,
                                       gradient_loss_weight=0.0), progress=False)
    assert metrics["test_rel_l2"] < 0.05


@pytest.mark.slow
def test_overfits_eight_darcy_samples(darcy_files, tmp_path):
    train_file, _ = darcy_files
    metrics = train("geomano", train_file, test_data=train_file, out=tmp_path / "run",
                    preset="darcy", model_overrides=dict(width=48, depth=2),
                    config=TrainConfig(epochs=150, batch_size=2, lr=3e-3,
                                       gradient_loss_weight=0.0),
                    progress=False)
    assert metrics["test_rel_l2"] < 0.02


def test_normaliser_statistics_come_from_the_training_split(darcy_files):
    train_file, _ = darcy_files
    with open_dataset(train_file) as ds:
        task = infer_task(ds)
        a = ds["a"].values[:6]
    from ssmpde.surrogates.datasets import fit_normalizers

    normalizers = fit_normalizers(TaskDataset(train_file, task, np.arange(6)))
    np.testing.assert_allclose(normalizers["inputs"].mean, [a.mean()], rtol=1e-6)
    np.testing.assert_allclose(normalizers["inputs"].std, [a.std()], rtol=1e-5)
    x = torch.from_numpy(a[:, None]).double()
    n = normalizers["inputs"]
    torch.testing.assert_close(n.decode(n.encode(x)), x)
    # A constant channel (one viscosity for every sample) encodes to zero, not NaN.
    constant = Normalizer.fit([np.full((1, 4, 4), 3.0), np.full((1, 4, 4), 3.0)])
    assert constant.std == [1.0] and constant.mean == [3.0]


def test_relative_l2_is_per_sample():
    target = torch.ones(2, 1, 3, 3)
    prediction = torch.stack([torch.ones(1, 3, 3), torch.zeros(1, 3, 3)])
    torch.testing.assert_close(relative_l2(prediction, target), torch.tensor([0.0, 1.0]))


# ---------------------------------------------------------------------------------------
# Variable roles (regressions: per-sample amplitudes were broadcast onto the grid, and the
# time-dependent forcing became a predicted state).
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def torus_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("torus")
    files = {}
    for forcing in ("torus-vis", "torus-vis-force"):
        files[forcing] = root / f"{forcing}.nc"
        generate("navier-stokes", num_samples=3, seed=0, out=files[forcing], resolution=16,
                 simulation_resolution=16, final_time=0.5, record_interval=0.1,
                 time_step=0.01, viscosity=(1e-3, 2e-3), forcing=forcing, progress=False)
    return files


@pytest.mark.parametrize("model", ["fno", "geomano"])
@pytest.mark.parametrize("forcing", ["torus-vis", "torus-vis-force"])
def test_torus_datasets_train_with_the_forcing_field_as_input(model, forcing, torus_files,
                                                               tmp_path):
    data = torus_files[forcing]
    with open_dataset(data) as ds:
        task = infer_task(ds, window=2)
        forcing_values = ds.forcing.values
    assert task.fields == ("vorticity",)  # the forcing is not predicted
    assert task.conditioning == ("viscosity", "forcing")  # amplitudes: through the forcing
    assert task.time_dependent == (("forcing",) if forcing == "torus-vis-force" else ())
    # The conditioning of each step is the forcing at the window's last frame.
    item = TaskDataset(data, dataclasses.replace(task, horizon=2), [1])[1]
    expected = forcing_values[1, 2:4] if forcing == "torus-vis-force" else \
        np.stack([forcing_values[1]] * 2)
    np.testing.assert_allclose(item["conditioning"][:, 1].numpy(), expected, rtol=1e-6)
    overrides = dict(width=8, depth=1) | (dict(modes=(4, 4)) if model == "fno" else
                                          dict(state_size=4))
    preset = "navier-stokes"
    metrics = train(model, data, out=tmp_path / "run", preset=preset, model_overrides=overrides,
                    config=TrainConfig(epochs=1, batch_size=2, window=2, horizon=2,
                                       num_test=1), progress=False)
    assert np.isfinite(metrics["test_rel_l2"])
    _, record = load_checkpoint(tmp_path / "run")
    assert record["model_config"]["in_channels"] == 2 * 1 + 2
    result = evaluate(tmp_path / "run", data)
    assert len(result["rel_l2_per_step"]) == 6 - 2


def test_operator_task_from_frames_of_a_trajectory(ns_file, tmp_path):
    # Burgers-style u0 -> u(T): explicit selectors on a time-dependent variable.
    with open_dataset(ns_file) as ds:
        task = infer_task(ds, inputs=("vorticity@0", "viscosity"), outputs=("vorticity@-1",))
        last = ds.vorticity.values[:, -1]
    assert task.kind == "operator" and task.in_channels == 2
    item = TaskDataset(ns_file, task, [2])[0]
    np.testing.assert_allclose(item["y"][0].numpy(), last[2], rtol=1e-6)
    assert main(["train", "fno", "--data", str(ns_file), "--inputs", "vorticity@0",
                 "--outputs", "vorticity@-1", "--epochs", "1", "--batch-size", "2",
                 "--out", str(tmp_path / "run"), "--no-progress",
                 "--model-option", "width=8", "--model-option", "modes=[4,4]"]) == 0
    out = tmp_path / "pred.nc"
    evaluate(tmp_path / "run", ns_file, out=out)
    with open_dataset(out) as predicted:
        assert predicted.vorticity.dims == ("sample", "y", "x")
    with open_dataset(ns_file) as ds, pytest.raises(ValueError, match="pick a frame"):
        infer_task(ds, inputs=("vorticity",), outputs=("vorticity@-1",))


def test_loss_is_relative_l2_per_field_averaged():
    # Two fields of very different size: each counts equally.
    target = torch.stack([torch.ones(2, 4, 4), 1000 * torch.ones(2, 4, 4)], dim=1)
    prediction = target.clone()
    prediction[:, 0] *= 1.1  # 10 % off on the small field only
    per_field = relative_l2(prediction, target, fields=True)
    torch.testing.assert_close(per_field, torch.full((2,), 0.05))
    assert relative_l2(prediction, target).max() < 1e-3  # pooled, the small field drowns


def test_cosine_schedule(darcy_files, tmp_path):
    metrics = train("geomano", darcy_files[0], out=tmp_path / "run", preset="darcy",
                    model_overrides=TINY, config=TrainConfig(epochs=2, batch_size=4, lr=1e-3,
                                                             schedule="cosine"),
                    progress=False)
    assert metrics["lr"] == pytest.approx(0.0, abs=1e-12)  # annealed to zero at the end
    with pytest.raises(ValueError, match="schedule must be one of"):
        TrainConfig(schedule="linear")


# ---------------------------------------------------------------------------------------
# Resume.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("task", ["operator", "rollout"])
def test_resume_is_bit_exact(task, darcy_files, ns_file, tmp_path):
    data = darcy_files[0] if task == "operator" else ns_file
    extra = ({} if task == "operator" else
             dict(window=2, horizon=2, mode="autoregressive", noise_std=0.01))
    config = lambda epochs: TrainConfig(epochs=epochs, batch_size=2, lr=1e-3,  # noqa: E731
                                        num_test=1, **extra)
    preset = "darcy" if task == "operator" else "navier-stokes"
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    train("geomano", data, out=straight, preset=preset, model_overrides=TINY,
          config=config(4), progress=False)
    # "Stop" after 2 of 4 epochs: the schedule is the 4-epoch one, cut off by a time limit.
    train("geomano", data, out=halves, preset=preset, model_overrides=TINY, config=config(4),
          progress=False, time_limit=0.0)
    train("geomano", data, out=halves, preset=preset, model_overrides=TINY, config=config(4),
          progress=False, time_limit=0.0, resume=True)
    assert json.loads((halves / "training_state.json").read_text())["epoch"] == 2
    train("geomano", data, out=halves, preset=preset, model_overrides=TINY, config=config(4),
          progress=False, resume=True)
    a, b = weights(straight), weights(halves)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    lines = lambda run: [json.loads(x)["train_loss"]  # noqa: E731
                         for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines(straight) == lines(halves)


def test_resume_refuses_a_different_model(darcy_files, tmp_path):
    run = tmp_path / "run"
    train("geomano", darcy_files[0], out=run, preset="darcy", model_overrides=TINY,
          config=TrainConfig(epochs=1, batch_size=4), progress=False)
    with pytest.raises(ValueError, match="different model config"):
        train("geomano", darcy_files[0], out=run, preset="darcy",
              model_overrides={**TINY, "width": 16}, config=TrainConfig(epochs=2, batch_size=4),
              progress=False, resume=True)
    with pytest.raises(ValueError, match="already holds a run"):
        train("geomano", darcy_files[0], out=run, preset="darcy", model_overrides=TINY,
              config=TrainConfig(epochs=1, batch_size=4), progress=False)


# ---------------------------------------------------------------------------------------
# Distributed: torchrun with two CPU processes (gloo) against one process.
# ---------------------------------------------------------------------------------------
@pytest.mark.slow  # two torchrun processes start torch twice: about 25 s on 2 cores
def test_torchrun_two_processes_match_one(darcy_files, tmp_path):
    train_file, _ = darcy_files
    args = ["train", "geomano", "--data", str(train_file), "--preset", "darcy",
            "--epochs", "3", "--batch-size", "4", "--lr", "1e-3", "--num-test", "0",
            "--time-limit", "3600",
            "--no-progress", "--model-option", "width=8", "--model-option", "depth=1",
            "--model-option", "state_size=4"]
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", "-m", "ssmpde.cli", *args, "--out", str(tmp_path / "two")],
        env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    losses = {run: [json.loads(x)["train_loss"] for x in
                    (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
              for run in ("one", "two")}
    assert len(losses["two"]) == 3  # rank 0 alone wrote the log
    # With a test split, rank 0 evaluates alone after each epoch and the ranks still agree.
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", "-m", "ssmpde.cli", "train", "geomano", "--data", str(train_file), "--preset",
         "darcy", "--epochs", "1", "--batch-size", "2", "--num-test", "2", "--time-limit",
         "3600", "--no-progress", "--model-option", "width=8", "--model-option", "depth=1",
         "--out", str(tmp_path / "eval")],
        env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "test_rel_l2" in json.loads((tmp_path / "eval" / "metrics.jsonl").read_text())
    # Same global batch, gradients averaged by DDP: the same curve up to summation order.
    np.testing.assert_allclose(losses["two"], losses["one"], rtol=1e-4)


# ---------------------------------------------------------------------------------------
# Checkpoints and evaluation.
# ---------------------------------------------------------------------------------------
def test_checkpoint_is_self_contained_and_predictions_round_trip(darcy_files, tmp_path):
    train_file, test_file = darcy_files
    run = tmp_path / "run"
    assert main(["train", "geomano", "--data", str(train_file), "--preset", "darcy",
                 "--epochs", "2", "--batch-size", "4", "--out", str(run), "--no-progress",
                 "--model-option", "width=8", "--model-option", "depth=1"]) == 0
    alone = tmp_path / "copied"
    alone.mkdir()
    for name in ("config.json", "weights.safetensors"):  # nothing else, no pickle
        shutil.copy(run / name, alone / name)
    model, record = load_checkpoint(alone)
    assert record["task"]["kind"] == "operator" and record["normalizers"]["outputs"]["std"]
    out = tmp_path / "pred.nc"
    result = evaluate(alone, test_file, out=out)
    with open_dataset(out) as predicted, open_dataset(test_file) as truth:
        assert predicted.u.dims == truth.u.dims
        errors = relative_l2(torch.from_numpy(predicted.u.values[:, None]),
                             torch.from_numpy(truth.u.values[:, None]))
    np.testing.assert_allclose(errors.numpy(), result["rel_l2_per_sample"], rtol=1e-5)


def test_rollout_evaluation_writes_the_predicted_frames(ns_file, tmp_path):
    run = tmp_path / "run"
    train("geomano", ns_file, out=run, preset="navier-stokes", model_overrides=TINY,
          config=TrainConfig(epochs=1, batch_size=2, window=3, horizon=1, num_test=1),
          progress=False)
    out = tmp_path / "rollout.nc"
    result = evaluate(run, ns_file, out=out)
    with open_dataset(out) as predicted, open_dataset(ns_file) as truth:
        assert predicted.vorticity.shape == (4, 4, 16, 16)  # 7 frames - window 3
        np.testing.assert_array_equal(predicted.time.values, truth.time.values[3:])
    assert len(result["rel_l2_per_step"]) == 4


# ---------------------------------------------------------------------------------------
# Bad input.
# ---------------------------------------------------------------------------------------
def test_dataset_without_the_needed_variables(darcy_files, tmp_path):
    ds = load_dataset(darcy_files[0]).drop_vars("u")
    path = tmp_path / "no_u.nc"
    save(ds, path)
    with pytest.raises(ValueError, match=r"needs variables \['u'\]"):
        train("geomano", path, out=tmp_path / "run", preset="darcy", progress=False)


def test_model_channels_that_do_not_fit_the_data(darcy_files, tmp_path, capsys):
    status = main(["train", "geomano", "--data", str(darcy_files[0]), "--out",
                   str(tmp_path / "run"), "--model-option", "in_channels=3"])
    assert status == 2
    assert "in_channels=3 does not fit the data, which needs in_channels=1" in (
        capsys.readouterr().err)


def test_window_longer_than_the_trajectory(ns_file, tmp_path):
    with pytest.raises(ValueError, match="only 7"):
        train("geomano", ns_file, out=tmp_path / "run", preset="navier-stokes",
              config=TrainConfig(window=10, horizon=1), progress=False)


def test_unreadable_checkpoints(darcy_files, tmp_path):
    run = tmp_path / "run"
    train("geomano", darcy_files[0], out=run, preset="darcy", model_overrides=TINY,
          config=TrainConfig(epochs=1, batch_size=4), progress=False)
    (run / "weights.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="unreadable checkpoint weights"):
        load_checkpoint(run)
    (run / "config.json").write_text("{ broken")
    with pytest.raises(ValueError, match="checkpoint config .*config.json is not valid JSON"):
        load_checkpoint(run)
    with pytest.raises(ValueError, match="is not a checkpoint: config.json is missing"):
        load_checkpoint(tmp_path)


@pytest.mark.slow
def test_learns_darcy_from_64_samples(tmp_path):
    # The acceptance run: 64 training samples at 29² (16 more to test), GeoMaNO (darcy preset
    # at width 32, depth 4), 50 epochs -- about 80 s on two CPU cores.
    train_file, test_file = tmp_path / "train.nc", tmp_path / "test.nc"
    generate("darcy", num_samples=64, seed=0, out=train_file, resolution=29, progress=False)
    generate("darcy", num_samples=16, seed=1, out=test_file, resolution=29, progress=False)
    metrics = train("geomano", train_file, test_data=test_file, out=tmp_path / "run",
                    preset="darcy", model_overrides=dict(width=32, depth=4),
                    config=TrainConfig(epochs=50, batch_size=4, lr=2e-3), progress=False)
    assert metrics["test_rel_l2"] < 0.1


def test_toml_config_and_command_line_precedence(darcy_files, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('[model]\nwidth = 8\ndepth = 1\nstate_size = 4\n\n'
                      '[train]\nepochs = 1\nbatch_size = 2\nlr = 0.01\n')
    run = tmp_path / "run"
    assert main(["train", "geomano", "--data", str(darcy_files[0]), "--preset", "darcy",
                 "--config", str(config), "--epochs", "2", "--out", str(run),
                 "--no-progress"]) == 0
    record = json.loads((run / "config.json").read_text())
    assert record["model_config"]["width"] == 8 and record["model_config"]["depth"] == 1
    assert record["train_config"]["epochs"] == 2  # the command line wins
    assert record["train_config"]["lr"] == 0.01
    bad = tmp_path / "bad.toml"
    bad.write_text("[trian]\nepochs = 1\n")
    assert main(["train", "geomano", "--data", str(darcy_files[0]), "--config", str(bad),
                 "--out", str(tmp_path / "x")]) == 2


def test_a_model_that_predicts_increments(ns_file, tmp_path):
    """target="increment": the checkpoint stores the increments' normaliser, and a step is the
    last frame plus the decoded prediction (a model that outputs zeros predicts the
    increments' mean added to the last frame)."""
    from ssmpde.coupling import SurrogateStepper
    from ssmpde.surrogates.checkpoint import normalised_model

    run = tmp_path / "run"
    train("fno", ns_file, out=run, preset="navier-stokes",
          model_overrides=dict(width=4, depth=1, modes=(2, 2)),
          config=TrainConfig(epochs=1, batch_size=2, window=1, num_test=1,
                             target="increment"), progress=False)
    model, record = load_checkpoint(run)
    increments = record["normalizers"]["increments"]
    with open_dataset(ns_file) as ds:
        w = ds.vorticity.isel(sample=slice(0, 3)).values  # the training samples
    diffs = np.diff(w, axis=1)
    assert increments["mean"][0] == pytest.approx(diffs.mean(), rel=1e-9, abs=1e-12)
    assert increments["std"][0] == pytest.approx(diffs.std(), rel=1e-9)
    wrapped = normalised_model(model, record)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        window = torch.tensor(w[:2, :1, None], dtype=torch.float32)
        cond = torch.zeros(2, 2, 16, 16)
        step = wrapped.step(window, cond)
    torch.testing.assert_close(step, window[:, -1] + increments["mean"][0])
    stepper = SurrogateStepper.from_checkpoint(run)  # a loaded run keeps the target
    assert stepper._wrapped.increments is not None
    with pytest.raises(ValueError, match="target must be one of"):
        TrainConfig(target="delta")
