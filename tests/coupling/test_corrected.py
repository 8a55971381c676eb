"""A coarse solver corrected by a trained model (``ssmpde.coupling.corrected``) and its
training data (``ssmpde.surrogates.correction``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pytest
import torch

from ssmpde.coupling.corrected import CorrectedStepper, stepper_from_checkpoint
from ssmpde.coupling.steps import Conditions, rollout
from ssmpde.data import open_dataset
from ssmpde.generation import generate
from ssmpde.solvers.base import TimeDependentSolver, register_solver
from ssmpde.solvers.semilinear import sine_series
from ssmpde.surrogates.correction import coarse_predictions, coarse_solver
from ssmpde.surrogates.train import TrainConfig, train


# -- a linear PDE whose fine-minus-coarse map is known in closed form -----------------------
@dataclasses.dataclass(frozen=True)
class ExplicitHeatConfig:
    resolution: int = 16
    simulation_resolution: int = 16
    diffusivity: float = 0.02
    final_time: float = 0.4
    record_interval: float = 0.1
    time_step: float = 0.01


class ExplicitHeat(TimeDependentSolver):
    """u_t = D u_xx on [0, 1), periodic: second-order differences, forward Euler steps.

    The scheme is linear and diagonal in Fourier space: mode k is multiplied by
    g(h) = 1 - 4 D h / Δx² sin²(π k / N) per step h, so one record interval of the solver
    with step h multiplies it by g(h)^(interval / h), and the exact fine-minus-coarse map of
    a time coarsening is diagonal with entries g(h)^n - g(T h)^(n / T).
    """

    Config = ExplicitHeatConfig
    fields = ("u",)
    field_units = {"u": ("u", "1")}

    def initial_condition(self, seed, indices):
        return sine_series(seed, indices, self.config.simulation_resolution, 1.0, 5)

    def start(self, initial, parameters):
        return {"u": initial.copy()}

    def advance(self, state, time):
        cfg = self.config
        steps = int(round(cfg.record_interval / cfg.time_step))
        a = cfg.diffusivity * cfg.time_step * cfg.simulation_resolution ** 2
        u = state["u"]
        for _ in range(steps):
            u = u + a * (np.roll(u, 1, axis=-1) - 2 * u + np.roll(u, -1, axis=-1))
        state["u"] = u

    def observe(self, state):
        return state["u"].copy()

    def multiplier(self, time_step: float) -> np.ndarray:
        """One record interval in Fourier space, per rfft mode (the exact map)."""
        cfg = self.config
        n = cfg.simulation_resolution
        k = np.arange(n // 2 + 1)
        g = 1 - 4 * cfg.diffusivity * time_step * n ** 2 * np.sin(np.pi * k / n) ** 2
        return g ** int(round(cfg.record_interval / time_step))


@pytest.fixture(scope="module")
def explicit_heat():
    """The heat solver, registered for this module's tests only: the registry smoke tests
    run every registered solver through the package's whole contract."""
    from ssmpde.solvers import base

    register_solver("test-explicit-heat")(ExplicitHeat)
    yield ExplicitHeat
    base._SOLVERS._classes.pop("test-explicit-heat", None)


@pytest.fixture(scope="module")
def heat_data(explicit_heat, tmp_path_factory):
    path = tmp_path_factory.mktemp("heat") / "heat.nc"
    generate("test-explicit-heat", num_samples=48, seed=0, out=path, progress=False)
    return path


@pytest.mark.e2e
def test_corrector_learns_the_exact_fine_minus_coarse_map_of_a_linear_pde(heat_data, tmp_path):
    run = tmp_path / "run"
    train("fno", heat_data, out=run, preset="burgers", progress=False,
          model_overrides={"width": 16, "depth": 1, "modes": [9]},
          config=TrainConfig(epochs=40, batch_size=16, window=1, lr=5e-3, num_test=8,
                             target="correction", coarse="1x5", schedule="cosine"))
    stepper = stepper_from_checkpoint(run)
    assert isinstance(stepper, CorrectedStepper) and stepper.label == "corrected 1x5"
    fine = ExplicitHeat()
    with open_dataset(heat_data) as ds:
        states = ds["u"].values[40:].reshape(-1, 1, 16)  # held-out samples, every frame
    exact = np.fft.irfft(np.fft.rfft(states) * fine.multiplier(0.01), n=16)
    coarse = np.fft.irfft(np.fft.rfft(states) * fine.multiplier(0.05), n=16)
    # The closed form is the solver: the exact correction is known.
    np.testing.assert_allclose(fine.step(states[:, None]), exact, atol=1e-12)
    np.testing.assert_allclose(stepper.coarse.step(states[:, None]), coarse, atol=1e-12)
    corrected = stepper.step(states[:, None])
    coarse_error = np.linalg.norm(coarse - exact) / np.linalg.norm(exact)
    error = np.linalg.norm(corrected - exact) / np.linalg.norm(exact)
    assert coarse_error > 2e-2  # there is something to learn
    assert error <= 1e-3, (error, coarse_error)


def _zero_output(model: torch.nn.Module) -> None:
    with torch.no_grad():
        last = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv1d,
                                                              torch.nn.Conv2d))][-1]
        last.weight.zero_()
        if last.bias is not None:
            last.bias.zero_()


@pytest.fixture(scope="module")
def ks_corrector(ks_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "ks-2x5"
    train("fno", ks_data, out=run, preset="burgers", progress=False,
          model_overrides={"width": 8, "depth": 1, "modes": [8]},
          config=TrainConfig(epochs=1, batch_size=8, window=1, num_test=2,
                             target="correction", coarse="2x5"))
    return run


def _assert_a_zero_corrector_is_its_coarse_solver(stepper, ks_data) -> None:
    """With its output zeroed, ``stepper`` rolls out the coarse solver's trajectory, bit for
    bit."""
    _zero_output(stepper.model)
    stepper._wrapped.corrections.mean = [0.0] * len(stepper.fields)
    with open_dataset(ks_data) as ds:
        history = ds["u"].values[:, :1, None]
        conditions = Conditions.from_dataset(ds)
    corrected = rollout(stepper, history, 5, parameters=conditions)
    coarse = rollout(stepper.coarse, history, 5, parameters=conditions)
    np.testing.assert_array_equal(corrected, coarse)


def test_zero_corrector_is_the_coarse_solver_bit_for_bit(ks_data, ks_corrector):
    stepper = stepper_from_checkpoint(ks_corrector)
    _assert_a_zero_corrector_is_its_coarse_solver(stepper, ks_data)
    assert stepper.coarse.simulation_grid == (64,)  # the state stays on the coarse grid
    assert stepper.coarse.config.time_step == pytest.approx(5 * 0.01)


def test_checkpoint_records_the_coarsening(ks_corrector):
    record = json.loads((ks_corrector / "config.json").read_text())
    assert record["correction"] == {"coarsening": "2x5"}
    assert record["task"]["correction"] is True
    assert set(record["normalizers"]) >= {"fields", "conditioning", "corrections"}
    assert (ks_corrector / "correction_cache" / "train" / "manifest.json").exists()


def test_coarse_cache_matches_the_coarse_solver_and_resumes_after_a_kill(ks_data, tmp_path):
    cache = tmp_path / "cache"

    def interrupt(block):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        coarse_predictions(ks_data, "2x5", cache, block=2, on_block=interrupt)
    assert sorted(p.name for p in cache.glob("block_*.npy")) == ["block_00000.npy"]
    assert not list(cache.glob(".*tmp*"))  # nothing half-written
    resumed = coarse_predictions(ks_data, "2x5", cache, block=2)
    assert resumed.computed == [1, 2]  # the finished block is not recomputed
    fresh = coarse_predictions(ks_data, "2x5", tmp_path / "fresh", block=2)
    np.testing.assert_array_equal(resumed.values, fresh.values)  # reproducible
    with open_dataset(ks_data) as ds:
        coarse = coarse_solver(ds, "2x5")
        u = ds["u"].values
        viscosity = ds["viscosity"].values if "viscosity" in ds else None
    expected = coarse.step(u[:, 3:4, None], time=0.3, parameters=None if viscosity is None
                           else {"viscosity": viscosity})
    np.testing.assert_array_equal(resumed.values[:, 3], expected.astype(np.float32))
    with pytest.raises(ValueError, match="other data or another coarsening"):
        coarse_predictions(ks_data, "2x2", cache, block=2)


def test_a_damaged_cache_block_is_computed_again_not_trained_on(ks_data, tmp_path):
    cache = tmp_path / "cache"
    fresh = coarse_predictions(ks_data, "2x5", cache, block=2)
    names = [f"block_{i:05d}.npy" for i in range(3)]
    manifest = json.loads((cache / "manifest.json").read_text())
    assert sorted(manifest["blocks"]) == names  # a SHA-256 of every block
    zeroed, short, pickled = (cache / name for name in names)
    raw = bytearray(zeroed.read_bytes())
    raw[128:] = bytes(len(raw) - 128)  # the header intact, the values zeros (a torn write)
    zeroed.write_bytes(bytes(raw))
    short.write_bytes(short.read_bytes()[:200])  # truncated
    # Not an .npy at all, its digest recorded as if it were: still never unpickled.
    pickled.write_bytes(b"\x80\x04\x95" + bytes(64))
    manifest["blocks"][pickled.name] = hashlib.sha256(pickled.read_bytes()).hexdigest()
    (cache / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match="correction cache block .* is damaged") as caught:
        again = coarse_predictions(ks_data, "2x5", cache, block=2)
    assert again.computed == [0, 1, 2]
    np.testing.assert_array_equal(again.values, fresh.values)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 3 and not any("pickle" in m for m in messages), messages
    assert "it holds 67 bytes, not the" in messages[2]  # refused by its size, never loaded
    # Repaired: the next call computes nothing and warns about nothing.
    assert coarse_predictions(ks_data, "2x5", cache, block=2).computed == []


def test_a_block_written_but_not_recorded_is_computed_again(ks_data, tmp_path):
    # A kill between a block's write and its digest's: the block is not trusted.
    cache = tmp_path / "cache"
    fresh = coarse_predictions(ks_data, "2x5", cache, block=2)
    manifest = json.loads((cache / "manifest.json").read_text())
    del manifest["blocks"]["block_00001.npy"]
    (cache / "manifest.json").write_text(json.dumps(manifest))
    (cache / "block_00001.npy").write_bytes(np.lib.format.MAGIC_PREFIX + bytes(8))
    again = coarse_predictions(ks_data, "2x5", cache, block=2)
    assert again.computed == [1]
    np.testing.assert_array_equal(again.values, fresh.values)


@pytest.mark.parametrize("content, words", [
    ("{bad", "is not valid JSON"), ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"digest": ' + "1" * 5000 + "}", "number too long"),
    ("[]", "must hold a JSON object, got array"),
    ('{"digest": 5}', "'digest' must be a JSON string"),
    ('{"digest": "x", "blocks": {"block_00000.npy": 1}}', "'blocks' must map"),
], ids=["invalid", "deep", "long-number", "array", "digest-number", "blocks-numbers"])
def test_a_bad_cache_manifest_is_named(ks_data, tmp_path, content, words):
    manifest = tmp_path / "cache" / "manifest.json"
    manifest.parent.mkdir()
    manifest.write_text(content)
    with pytest.raises(ValueError, match=words) as error:
        coarse_predictions(ks_data, "2x5", manifest.parent, block=2)
    message = str(error.value)
    assert message.startswith(str(manifest)) and "remove" in message
    assert "set_int_max_str_digits" not in message and "recursion" not in message


def test_bad_coarsenings_get_one_clear_error(ks_data, tmp_path):
    with open_dataset(ks_data) as ds:
        with pytest.raises(ValueError, match="bad coarsening 3x1.*does not divide"):
            coarse_solver(ds, "3x1")
        with pytest.raises(ValueError, match="bad coarsening 4x1.*does not divide"):
            coarse_solver(ds, "4x1")
        with pytest.raises(ValueError, match="stored on \\[64\\].*space factor 2"):
            coarse_solver(ds, "1x5")
        with pytest.raises(ValueError, match="bad coarsening 'fast'"):
            coarse_solver(ds, "fast")
    # A time step far beyond the explicit flux's limit blows up in one record interval.
    long_records = tmp_path / "ks-long-records.nc"
    generate("kuramoto-sivashinsky", num_samples=2, seed=0, out=long_records, preset="lpsda",
             resolution=64, simulation_resolution=128, final_time=4.0, record_interval=2.0,
             progress=False)
    with pytest.raises(ValueError, match="coarse solver 2x50 diverges.*smaller coarsening"):
        coarse_predictions(long_records, "2x50", tmp_path / "cache")
    with pytest.raises(ValueError, match="target='correction' and coarse='SxT' go together"):
        TrainConfig(target="correction")
    with pytest.raises(ValueError, match="horizon > 1, mode autoregressive"):
        TrainConfig(target="correction", coarse="2x5", horizon=2)


def test_unrolled_training_is_the_deployed_corrected_rollout(ks_data, tmp_path):
    """Variant (c): the unrolled loss is the error of the very rollout the corrected stepper
    makes (float32 against float64), and its gradient reaches the model through the
    differentiable coarse steps."""
    from ssmpde.core import relative_l2
    from ssmpde.solvers.differentiable import differentiable_step
    from ssmpde.surrogates.checkpoint import load_checkpoint, normalised_model
    from ssmpde.surrogates.train import rollout_loss

    run = tmp_path / "unrolled"
    config = TrainConfig(epochs=1, batch_size=4, window=1, num_test=2, horizon=3,
                         mode="autoregressive", pushforward=False, target="correction",
                         coarse="2x5")
    metrics = train("fno", ks_data, out=run, preset="burgers", progress=False,
                    model_overrides={"width": 4, "depth": 1, "modes": [4]}, config=config)
    assert np.isfinite(metrics["train_loss"]) and "test_rel_l2" in metrics
    stepper = stepper_from_checkpoint(run)
    assert isinstance(stepper, CorrectedStepper)
    assert stepper.label == "corrected 2x5, unrolled 3"
    model, record = load_checkpoint(run)
    wrapped = normalised_model(model, record)
    with open_dataset(ks_data) as ds:
        u = ds["u"].values[:4, :4, None]
        viscosity = ds["viscosity"].values[:4]
        coarse_step = differentiable_step(coarse_solver(ds, "2x5"))
    frames = rollout(stepper, u[:, :1], 3, parameters={"viscosity": viscosity})
    expected = np.mean([relative_l2(frames[:, k], u[:, k + 1], fields=True).mean()
                        for k in range(3)])
    batch = {"history": torch.as_tensor(u[:, :1], dtype=torch.float32),
             "target": torch.as_tensor(u[:, 1:], dtype=torch.float32),
             "conditioning": torch.as_tensor(viscosity, dtype=torch.float32).reshape(
                 4, 1, 1, 1).expand(4, 3, 1, 64)}
    loss = rollout_loss(wrapped, batch, config, None, coarse_step)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-4)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    assert all(torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)


def test_cli_trains_a_corrector_and_rolls_it_out_with_no_extra_flags(ks_data, tmp_path,
                                                                     capsys):
    from ssmpde.cli import main

    run = tmp_path / "corrector"
    assert main(["train", "fno", "--data", str(ks_data), "--out", str(run), "--preset",
                 "burgers", "--epochs", "1", "--window", "1", "--num-test", "2",
                 "--target", "correction", "--coarse", "2x5", "--model-option", "width=4",
                 "--model-option", "depth=1", "--model-option", "modes=[4]",
                 "--no-progress"]) == 0
    capsys.readouterr()
    pareto = tmp_path / "pareto.png"
    assert main(["rollout", "--checkpoint", str(run), "--steps", "3", "--schedule",
                 "surrogate", "--coarse", "2x5", "--samples", "0:2", "--pareto",
                 str(pareto)]) == 0
    out = capsys.readouterr().out
    assert "| corrected 2x5 | corrected |" in out
    assert "| coarse 2x5 (grid 64, dt 0.05) | coarse |" in out
    assert pareto.exists()
    assert main(["evaluate", str(run), "--data", str(ks_data)]) == 2
    assert "evaluated in the loop of that solver" in capsys.readouterr().err
    assert main(["train", "fno", "--data", str(ks_data), "--out", str(tmp_path / "bad"),
                 "--target", "correction", "--coarse", "3x1", "--window", "1",
                 "--no-progress"]) == 2
    assert "bad coarsening 3x1" in capsys.readouterr().err


def test_run_rollout_puts_corrected_rows_beside_the_surrogate_and_the_coarse_solvers(
        ks_data, ks_corrector, tmp_path):
    from ssmpde.coupling.baseline import against_coarse
    from ssmpde.coupling.run import run_rollout

    surrogate = tmp_path / "surrogate"
    train("fno", ks_data, out=surrogate, preset="burgers", progress=False,
          model_overrides={"width": 4, "depth": 1, "modes": [4]},
          config=TrainConfig(epochs=1, batch_size=8, window=1, num_test=2))
    rows = run_rollout(surrogate, steps=3, schedules=["surrogate"], data=ks_data,
                       samples="0:2", coarse=["2x5", "2x2"], correctors=[ks_corrector])
    kinds = {r["schedule"]: r["kind"] for r in rows}
    assert kinds["corrected 2x5"] == "corrected" and kinds["surrogate"] == "surrogate"
    corrected = next(r for r in rows if r["kind"] == "corrected")
    assert 0 < corrected["correlation_time"] <= 3 * 0.1 + 1e-12
    verdict = against_coarse(rows)  # judged by the same rule as the other learned rows
    judged = verdict["best"] or verdict["closest"]
    assert judged["kind"] in ("surrogate", "corrected")
    with pytest.raises(ValueError, match="not a corrector"):
        run_rollout(surrogate, steps=1, schedules=["surrogate"], data=ks_data,
                    correctors=[surrogate])


# -- the correction inside the step (a source term of the coarse solver) --------------------
@pytest.fixture(scope="module")
def ks_source_corrector(ks_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "ks-2x5-source"
    train("fno", ks_data, out=run, preset="burgers", progress=False,
          model_overrides={"width": 8, "depth": 1, "modes": [8]},
          config=TrainConfig(epochs=1, batch_size=4, window=1, num_test=2,
                             target="correction", coarse="2x5", correction_mode="source"))
    return run


def test_zero_source_corrector_is_the_coarse_solver_bit_for_bit(ks_data, ks_source_corrector):
    stepper = stepper_from_checkpoint(ks_source_corrector)
    assert stepper.mode == "source" and stepper.label == "corrected 2x5, in-step"
    _assert_a_zero_corrector_is_its_coarse_solver(stepper, ks_data)


def test_source_training_is_the_deployed_in_step_rollout(ks_data, ks_source_corrector):
    """The source corrector's training loss (through the differentiable coarse step, the
    correction entering its right-hand side) is the error of the rollout the stepper makes
    with the numba solver, and its gradient reaches the model."""
    from ssmpde.core import relative_l2
    from ssmpde.solvers.differentiable import differentiable_step
    from ssmpde.surrogates.checkpoint import load_checkpoint, normalised_model
    from ssmpde.surrogates.train import rollout_loss

    model, record = load_checkpoint(ks_source_corrector)
    assert record["task"]["correction_mode"] == "source"
    wrapped = normalised_model(model, record)
    stepper = stepper_from_checkpoint(ks_source_corrector)
    with open_dataset(ks_data) as ds:
        u = ds["u"].values[:4, :2, None]
        viscosity = ds["viscosity"].values[:4]
        coarse_step = differentiable_step(coarse_solver(ds, "2x5"))
    frames = rollout(stepper, u[:, :1], 1, parameters={"viscosity": viscosity})
    plain = rollout(stepper.coarse, u[:, :1], 1, parameters={"viscosity": viscosity})
    assert not np.array_equal(frames, plain)  # the source did something
    expected = relative_l2(frames[:, 0], u[:, 1], fields=True).mean()
    batch = {"history": torch.as_tensor(u[:, :1], dtype=torch.float32),
             "target": torch.as_tensor(u[:, 1:], dtype=torch.float32),
             "conditioning": torch.as_tensor(viscosity, dtype=torch.float32).reshape(
                 4, 1, 1, 1).expand(4, 1, 1, 64)}
    config = TrainConfig(window=1, target="correction", coarse="2x5", correction_mode="source")
    loss = rollout_loss(wrapped, batch, config, None, coarse_step)
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-4)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    assert all(torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)


def test_bad_correction_modes_get_one_clear_line():
    with pytest.raises(ValueError,
                       match=r"correction_mode must be one of \('after', 'source', 'flux'\)"):
        TrainConfig(target="correction", coarse="2x1", correction_mode="inside")
    with pytest.raises(ValueError, match="correction_mode='source' is for correctors"):
        TrainConfig(correction_mode="source")


def test_the_curriculum_reaches_the_configured_horizon(ks_data, tmp_path):
    run = tmp_path / "curriculum"
    config = TrainConfig(epochs=3, batch_size=4, window=1, num_test=2, horizon=3,
                         curriculum=(1, 2, 3), truncation=2, mode="autoregressive",
                         pushforward=False, target="correction", coarse="2x5",
                         correction_mode="source")
    train("conv-corrector", ks_data, out=run, preset="ks", progress=False,
          model_overrides={"width": 4, "depth": 1}, config=config)
    log = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [entry["horizon"] for entry in log] == [1, 2, 3]
    assert all(np.isfinite(entry["train_loss"]) for entry in log)
    stepper = stepper_from_checkpoint(run)
    assert stepper.label == "corrected 2x5, in-step, unrolled 3"


@pytest.mark.parametrize("options, message", [
    (dict(horizon=4, curriculum=(1, 4, 2)), "increasing horizons ending at horizon 4"),
    (dict(horizon=4, curriculum=(1, 2)), "ending at horizon 4"),
    (dict(horizon=4, curriculum=(1, 2, 4), epochs=2), "at least as many epochs"),
    (dict(truncation=-1), "truncation must be an integer >= 0"),
])
def test_bad_curricula_get_one_clear_line(options, message):
    base = dict(mode="autoregressive", target="correction", coarse="2x1")
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{**base, "horizon": 2, **options})


@pytest.mark.parametrize("mode", ["after", "source"])
def test_on_policy_items_are_the_states_the_corrected_solver_visits(ks_data, tmp_path, mode):
    """Variant without gradients through the solver: the training states are those of the
    deployed corrected rollout (numba solver, current model), each paired with its true next
    frame; a run trains on them."""
    from ssmpde.surrogates.checkpoint import load_checkpoint, normalised_model
    from ssmpde.surrogates.datasets import TaskDataset
    from ssmpde.surrogates.correction_training import on_policy_items

    run = tmp_path / f"on-policy-{mode}"
    config = TrainConfig(epochs=2, batch_size=4, window=1, num_test=2, horizon=3,
                         mode="autoregressive", target="correction", coarse="2x5",
                         correction_mode=mode, on_policy=1)
    metrics = train("conv-corrector", ks_data, out=run, preset="ks", progress=False,
                    model_overrides={"width": 4, "depth": 1}, config=config)
    assert np.isfinite(metrics["train_loss"]) and "test_rel_l2" in metrics
    model, record = load_checkpoint(run)
    wrapped = normalised_model(model, record)
    stepper = stepper_from_checkpoint(run)
    assert stepper.label.endswith(", on-policy 3")
    task = dataclasses.replace(wrapped.task, horizon=3)
    trajectories = TaskDataset(ks_data, task, np.arange(2))
    items = on_policy_items(wrapped, trajectories, stepper.coarse, batch_size=8)
    with open_dataset(ks_data) as ds:
        u = ds["u"].values[:2, :, None]
        viscosity = ds["viscosity"].values[:2]
    starts = len(trajectories) // 2
    frames = rollout(stepper, u[:, :1], 3, parameters={"viscosity": viscosity})
    # item order: per batch of trajectory items, step k, then the batch; sample 0 starts at 0
    history = items.items["history"].numpy()
    for k in range(3):
        state = u[0, 0] if k == 0 else frames[0, k - 1]
        np.testing.assert_allclose(history[k * len(trajectories)], state[None], rtol=1e-5,
                                   atol=1e-5)
        np.testing.assert_array_equal(items.items["target"].numpy()[k * len(trajectories), 0],
                                      u[0, k + 1].astype(np.float32))
    assert starts >= 1 and len(items) == 3 * len(trajectories)


def test_runtime_training_and_on_policy_steps_are_the_one_corrected_step(
        ks_data, ks_source_corrector, monkeypatch):
    """The runtime stepper, unrolled training, on-policy collection and the one-step loss all
    step through :func:`~ssmpde.surrogates.correction_training.corrected_step`, each with its
    kind of coarse step (numba solver, differentiable copy, cached prediction)."""
    import ssmpde.coupling.corrected as runtime
    import ssmpde.surrogates.correction_training as training
    from ssmpde.solvers.differentiable import differentiable_step
    from ssmpde.surrogates.datasets import TaskDataset
    from ssmpde.surrogates.train import rollout_loss

    one, seen = training.corrected_step, []

    def spy(wrapped, coarse_step, *args, **kwargs):
        seen.append(type(coarse_step).__name__)
        return one(wrapped, coarse_step, *args, **kwargs)

    monkeypatch.setattr(training, "corrected_step", spy)
    monkeypatch.setattr(runtime, "corrected_step", spy)
    stepper = stepper_from_checkpoint(ks_source_corrector)
    wrapped = stepper._wrapped
    with open_dataset(ks_data) as ds:
        u = ds["u"].values[:2, :3, None]
        viscosity = ds["viscosity"].values[:2]
        coarse_step = differentiable_step(coarse_solver(ds, "2x5"))
    frame = stepper.step(u[:, :1], parameters={"viscosity": viscosity})
    assert seen == ["SolverStep"]
    conditioning = torch.as_tensor(viscosity, dtype=torch.float32).reshape(2, 1, 1, 1)
    batch = {"history": torch.as_tensor(u[:, :1], dtype=torch.float32),
             "target": torch.as_tensor(u[:, 1:], dtype=torch.float32),
             "conditioning": conditioning.expand(2, 2, 1, 64)}
    config = TrainConfig(window=1, horizon=2, mode="autoregressive", target="correction",
                         coarse="2x5", correction_mode="source")
    rollout_loss(wrapped, batch, config, None, coarse_step)
    assert seen[1:] == [type(coarse_step).__name__] * 2
    task = dataclasses.replace(wrapped.task, horizon=2)
    items = training.on_policy_items(wrapped, TaskDataset(ks_data, task, np.arange(1)),
                                     stepper.coarse, batch_size=8)
    assert seen[3:] == ["SolverStep"] * 2
    training.corrected(wrapped, items[0:1])  # an item's cached coarse prediction
    assert seen[5:] == ["HeldStep"]
    # the runtime stepper's first frame is the first state on-policy collection visits next
    np.testing.assert_allclose(items.items["history"][len(items) // 2].numpy(),
                               frame[:1].astype(np.float32), rtol=1e-6, atol=1e-6)
