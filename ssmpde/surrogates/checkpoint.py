"""Checkpoints: run directories saved and loaded, and the normalised model around them.

A checkpoint is a directory with ``config.json`` (model name and config, task, normaliser
statistics, dataset facts, versions) and ``weights.safetensors``; a training run adds its
optimiser state (``training_state.safetensors`` / ``training_state.json``). No pickles. The
coupling imports this module, not the trainer.

:class:`NormalisedModel` is a model with its task's normalisers around it, in physical units:
the one place that assembles model inputs (history folded into channels, or kept as a history
for temporal-memory models, conditioning appended) and the one autoregressive rollout of a
model (:func:`ssmpde.core.autoregressive`) used by training, evaluation and coupling.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ssmpde import data as schema
from ssmpde.core import autoregressive

from . import model_from_json
from .datasets import Normalizer, Task

__all__ = ["CONFIG", "WEIGHTS", "NormalisedModel", "checkpoint_record", "load_checkpoint",
           "normalised_model", "normalizers_of", "save_run"]

CONFIG, WEIGHTS = "config.json", "weights.safetensors"
STATE_TENSORS, STATE_JSON = "training_state.safetensors", "training_state.json"


def _write_text(path: Path, text: str) -> None:
    with schema.atomic_path(path) as tmp:
        tmp.write_text(text)


def _write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    with schema.atomic_path(path) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, tmp)


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside DistributedDataParallel (or the model itself)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _versions() -> dict[str, str]:
    import ssmpde

    return {"ssmpde": ssmpde.__version__, "torch": torch.__version__}


def checkpoint_record(model, task: Task, normalizers, train_config, dataset_facts) -> dict:
    """The ``config.json`` of a run (without the epoch)."""
    inner = unwrap(model)
    return {
        "model": inner.name, "model_config": dataclasses.asdict(inner.config),
        "task": task.to_dict(),
        "normalizers": {k: dataclasses.asdict(v) for k, v in normalizers.items()},
        "train_config": dataclasses.asdict(train_config),
        "dataset": dataset_facts, "versions": _versions(),
    }


def _optimizer_tensors(optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Optimiser state as flat tensors (safetensors) and the rest as JSON."""
    state = optimizer.state_dict()
    tensors, scalars = {}, {}
    for index, values in state["state"].items():
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{index}.{key}"] = value
            else:
                scalars[f"{index}.{key}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def optimizer_state(tensors: dict[str, torch.Tensor], record: dict) -> dict:
    """The optimiser state dict from :func:`save_run`'s two files."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if name.startswith("optimizer."):
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = value
    for name, value in record["scalars"].items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    return {"state": state, "param_groups": record["param_groups"]}


def save_run(out: Path, model, optimizer, scheduler, record: dict, epoch: int,
             step: int) -> None:
    """Write the checkpoint and the training state of a finished epoch, atomically per file
    (weights and state first, config.json last, so a config always has its weights)."""
    out.mkdir(parents=True, exist_ok=True)
    _write_tensors(out / WEIGHTS, unwrap(model).state_dict())
    tensors, optimizer_record = _optimizer_tensors(optimizer)
    _write_tensors(out / STATE_TENSORS, tensors or {"empty": torch.zeros(0)})
    _write_text(out / STATE_JSON, json.dumps({
        "epoch": epoch, "step": step, "optimizer": optimizer_record,
        "scheduler": scheduler.state_dict()}, indent=1))
    _write_text(out / CONFIG, json.dumps({**record, "epoch": epoch}, indent=2))


def load_checkpoint(path, *, device: str | torch.device = "cpu"):
    """(model in eval mode, record) from a run directory: ``config.json`` and
    ``weights.safetensors`` only. Raises ValueError naming what is wrong with a broken one."""
    path = Path(path)
    config_path, weights_path = path / CONFIG, path / WEIGHTS
    for p in (config_path, weights_path):
        if not p.exists():
            raise ValueError(f"{path} is not a checkpoint: {p.name} is missing (a run "
                             "directory written by 'ssmpde train' has config.json and "
                             "weights.safetensors)")
    try:
        record = json.loads(config_path.read_text())
        model = model_from_json(json.dumps({"model": record["model"],
                                            "config": record["model_config"]}))
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"unreadable checkpoint config {config_path}: {error}") from error
    try:
        weights = load_file(weights_path)
    except Exception as error:  # safetensors raises its own error types
        raise ValueError(f"unreadable checkpoint weights {weights_path}: {error}") from error
    try:
        model.load_state_dict(weights)
    except RuntimeError as error:
        raise ValueError(f"the weights in {weights_path} do not fit the model in "
                         f"{config_path}: {error}") from error
    return model.to(device).eval(), record


def normalizers_of(record: dict) -> dict[str, Normalizer]:
    """The normalisers stored in a checkpoint record (``config.json``)."""
    return {k: Normalizer(**v) for k, v in record["normalizers"].items()}


def normalised_model(model, record: dict) -> NormalisedModel:
    """A loaded checkpoint's model wrapped with its task's normalisers (physical units in
    and out); what evaluation and the coupling steppers call."""
    return NormalisedModel(model, Task.from_dict(record["task"]), normalizers_of(record))


class NormalisedModel:
    """A model with the task's normalisers around it: physical units in and out.

    Parameters
    ----------
    model : torch.nn.Module
        A registered model (or DistributedDataParallel around one); its config's
        ``input_layout`` says how rollout inputs are laid out.
    task : Task
    normalizers : dict
        ``inputs``/``outputs`` (operator) or ``fields``/``conditioning`` (rollout).
    """

    def __init__(self, model, task: Task, normalizers: dict[str, Normalizer]):
        self.model, self.task = model, task
        self.layout = getattr(unwrap(model).config, "input_layout", "channels")
        if task.kind == "operator":
            self.inputs, self.outputs = normalizers["inputs"], normalizers["outputs"]
        else:
            f, c = normalizers["fields"], normalizers["conditioning"]
            self.inputs = Normalizer(f.mean * task.window + c.mean, f.std * task.window + c.std)
            self.outputs = f

    def __call__(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Operator tasks: ``[batch, inputs, *grid]`` → ``[batch, outputs, *grid]``."""
        encoded = self.inputs.encode(x)
        if noise is not None:
            encoded = encoded + noise
        return self.outputs.decode(self.model(encoded))

    def step(self, window: torch.Tensor, conditioning: torch.Tensor,
             noise: torch.Tensor | None = None) -> torch.Tensor:
        """One rollout step: ``window [batch, window, fields, *grid]`` and ``conditioning
        [batch, k, *grid]`` → the next frame ``[batch, fields, *grid]``.

        ``noise`` (on the normalised inputs, channels layout) perturbs the frames only.
        """
        x = self.inputs.encode(torch.cat([window.flatten(1, 2), conditioning], dim=1))
        if noise is not None:
            x = x + noise
        if self.layout == "history":
            frames = window.shape[1]
            history = x[:, :frames * window.shape[2]].unflatten(1, (frames, window.shape[2]))
            extra = x[:, frames * window.shape[2]:].unsqueeze(1)
            x = torch.cat([history, extra.expand(-1, frames, *extra.shape[2:])], dim=2)
        return self.outputs.decode(self.model(x))

    def rollout(self, history: torch.Tensor, conditioning: torch.Tensor, *,
                feed: Callable | None = None,
                noise: Callable[[int, torch.Tensor], torch.Tensor | None] | None = None
                ) -> torch.Tensor:
        """Autoregressive rollout: ``history [batch, window, fields, *grid]``,
        ``conditioning [batch, steps, k, *grid]`` (one per step) → ``[batch, steps, fields,
        *grid]``. ``feed(k, frame)`` picks what enters the window (teacher forcing,
        pushforward); ``noise(k, inputs)`` draws the input noise of step ``k``."""

        def step(k: int, window: torch.Tensor) -> torch.Tensor:
            cond = conditioning[:, k]
            drawn = None
            if noise is not None:
                drawn = noise(k, torch.cat([window.flatten(1, 2), cond], dim=1))
            return self.step(window, cond, drawn)

        return autoregressive(step, history, conditioning.shape[1], feed=feed)
