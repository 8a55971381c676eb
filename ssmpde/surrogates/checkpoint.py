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
import math
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from ssmpde.core import autoregressive, decode_json, format_bytes, memory_limit
from ssmpde.data import atomic_path, disk_space

from . import build_model
from .datasets import Normalizer, Task

__all__ = ["CONFIG", "WEIGHTS", "NormalisedModel", "TornRunError", "check_consistent",
           "checkpoint_record", "load_checkpoint", "normalised_model", "normalizers_of",
           "read_record", "recover", "save_run", "validate_record"]

CONFIG, WEIGHTS = "config.json", "weights.safetensors"
STATE_TENSORS, STATE_JSON = "training_state.safetensors", "training_state.json"
METRICS = "metrics.jsonl"


#: The journal of a save in progress: every file of the epoch, then the COMPLETE marker.
PENDING, COMPLETE = ".pending", "COMPLETE"
RUN_FILES = (WEIGHTS, STATE_TENSORS, STATE_JSON, METRICS, CONFIG)
#: The files that carry the epoch they were written at.
STAMPED = (WEIGHTS, STATE_TENSORS, STATE_JSON, CONFIG)


class TornRunError(ValueError):
    """The files of a run directory come from different epochs."""


_DAMAGED = "the run directory is damaged; start a new run"
_UNREAD = object()  # a stamp not read yet (None is a file without one)
_WRITTEN_BY = ("a run's config.json is written by 'ssmpde train': restore the run directory, "
               "or train it again")


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside DistributedDataParallel (or the model itself)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _versions() -> dict[str, str]:
    import ssmpde

    return {"ssmpde": ssmpde.__version__, "torch": torch.__version__}


def checkpoint_record(model, task: Task, normalizers, train_config, dataset_facts) -> dict:
    """The ``config.json`` of a run (without the epoch). A corrector's record also holds
    ``correction``: the coarsening of the solver it corrects, which with the dataset's
    generator config rebuilds the corrected stepper."""
    inner = unwrap(model)
    record = {
        "model": inner.name, "model_config": dataclasses.asdict(inner.config),
        "task": task.to_dict(),
        "normalizers": {k: dataclasses.asdict(v) for k, v in normalizers.items()},
        "train_config": dataclasses.asdict(train_config),
        "dataset": dataset_facts, "versions": _versions(),
    }
    if task.correction:
        record["correction"] = {"coarsening": train_config.coarse}
    return record


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
             step: int, metrics: dict | None = None) -> None:
    """Write the checkpoint, training state and metrics log of a finished epoch as a unit.

    Every file is written into the journal ``out/.pending/`` and stamped with the epoch; the
    ``COMPLETE`` marker (written atomically) commits the save; then the files move into
    ``out`` (:func:`recover`). A kill before the marker leaves the previous epoch intact (the
    journal is dropped on recovery); a kill after it is finished by recovery. Either way the
    run directory holds one consistent epoch. A full disk drops the journal and raises
    :class:`ssmpde.data.DiskFullError`: the previous epoch stays, and ``--resume`` continues
    from it once space is freed.
    """
    out.mkdir(parents=True, exist_ok=True)
    pending = out / PENDING
    if pending.exists():
        shutil.rmtree(pending)
    stamp = {"epoch": str(epoch)}
    weights = {k: v.detach().cpu().contiguous() for k, v in unwrap(model).state_dict().items()}
    tensors, optimizer_record = _optimizer_tensors(optimizer)
    log = (out / METRICS).read_text() if (out / METRICS).exists() else ""
    if metrics is not None:
        log += json.dumps(metrics) + "\n"
    # The tensors as stored, the metrics log, and room for headers and the JSON records.
    needed = sum(t.numel() * t.element_size() for t in [*weights.values(), *tensors.values()]) \
        + len(log) + 2 ** 20
    hint = (f"the run keeps its last complete epoch ({epoch - 1}); free some space, then "
            "continue it with the same `ssmpde train` command and --resume (resume=True)"
            if epoch > 1 else "no epoch was saved; free some space, then run the same "
                              "command again")
    with disk_space(out, needed=needed, hint=hint,
                    cleanup=lambda: shutil.rmtree(pending, ignore_errors=True)):
        pending.mkdir()
        save_file(weights, pending / WEIGHTS, metadata=stamp)
        save_file(tensors or {"empty": torch.zeros(0)}, pending / STATE_TENSORS, metadata=stamp)
        (pending / STATE_JSON).write_text(json.dumps({
            "epoch": epoch, "step": step, "optimizer": optimizer_record,
            "scheduler": scheduler.state_dict()}, indent=1))
        (pending / METRICS).write_text(log)
        (pending / CONFIG).write_text(json.dumps({**record, "epoch": epoch}, indent=2))
        with atomic_path(pending / COMPLETE) as tmp:
            tmp.write_text(str(epoch))
    recover(out)


def recover(out: Path) -> None:
    """Finish or drop an interrupted save in ``out`` (call under the run's lock)."""
    pending = Path(out) / PENDING
    if not pending.exists():
        return
    if (pending / COMPLETE).exists():
        for name in RUN_FILES:
            if (pending / name).exists():
                os.replace(pending / name, Path(out) / name)
    shutil.rmtree(pending)


def _epoch_of(path: Path, stamp: Any = _UNREAD) -> int | None:
    """The epoch stamp of a run file (None for files written before stamps existed);
    ``stamp``: its value where the caller has read the file already."""
    try:
        if stamp is not _UNREAD:
            value = stamp
        elif path.suffix == ".safetensors":
            with safe_open(path, framework="pt") as handle:
                value = (handle.metadata() or {}).get("epoch")
        else:
            value = decode_json(path, error=TornRunError, fix=_DAMAGED).get("epoch")
        return None if value is None else int(value)
    except TornRunError:
        raise
    except Exception as error:  # safetensors raises its own error types
        raise TornRunError(f"{path} is unreadable ({error}): {_DAMAGED}") from error


def check_consistent(out: Path, names=STAMPED, *, stamps: dict[str, Any] | None = None
                     ) -> int | None:
    """The epoch every file in ``names`` of ``out`` was written at; TornRunError otherwise.
    ``stamps``: file name → its epoch stamp, for files the caller has read already (so that
    none is decoded twice)."""
    out = Path(out)
    if (out / PENDING / COMPLETE).exists():
        raise TornRunError(f"{out} was interrupted while saving an epoch: resume it "
                           "(ssmpde train --resume) to finish the save")
    stamps = stamps or {}
    epochs = {name: _epoch_of(out / name, stamps.get(name, _UNREAD)) for name in names
              if (out / name).exists()}
    stamped = {e for e in epochs.values() if e is not None}
    if len(stamped) > 1:
        listing = ", ".join(f"{name}: epoch {e}" for name, e in epochs.items())
        raise TornRunError(f"the files in {out} come from different epochs ({listing}): the "
                           "run was damaged outside ssmpde; start a new run")
    return stamped.pop() if stamped else None


def _problems(record) -> list[str]:
    if not isinstance(record, dict):
        return [f"it holds a {type(record).__name__}, not a JSON object"]
    problems = []

    def need(container, key, kind, where=""):
        if not isinstance(container, dict) or key not in container:
            problems.append(f"{where}{key!r} is missing")
            return None
        if not isinstance(container[key], kind):
            problems.append(f"{where}{key!r} must be {getattr(kind, '__name__', kind)}, got "
                            f"{type(container[key]).__name__}")
            return None
        return container[key]

    need(record, "model", str)
    need(record, "model_config", dict)
    need(record, "dataset", dict)
    task = need(record, "task", dict)
    if task is not None:
        kind = need(task, "kind", str, "task ")
        if kind is not None and kind not in ("operator", "rollout"):
            problems.append(f"task 'kind' must be 'operator' or 'rollout', got {kind!r}")
        for key in ("inputs", "outputs", "grid"):
            need(task, key, list, "task ")
        problems += _task_problems(task)
    normalizers = need(record, "normalizers", dict)
    expected = {"operator": ("inputs", "outputs"), "rollout": ("fields", "conditioning")}
    if normalizers is not None and isinstance(task, dict) and task.get("kind") in expected:
        optional = tuple(name for name in ("increments", "corrections")
                         if task["kind"] == "rollout" and name in normalizers)
        for name in expected[task["kind"]] + optional:
            entry = need(normalizers, name, dict, "normalizers ")
            if entry is None:
                continue
            for key in ("mean", "std"):
                values = need(entry, key, list, f"normalizers[{name!r}] ")
                if values is not None and not all(
                        isinstance(v, (int, float)) and math.isfinite(v) for v in values):
                    problems.append(f"normalizers[{name!r}] {key!r} must hold finite numbers")
            if isinstance(entry.get("std"), list) and any(
                    isinstance(v, (int, float)) and v <= 0 for v in entry["std"]):
                problems.append(f"normalizers[{name!r}] 'std' must be positive")
    if not problems and isinstance(task, dict) and task.get("kind") == "rollout":
        channels = {"fields": len(task["inputs"]), "increments": len(task["inputs"]),
                    "corrections": len(task["inputs"]),
                    "conditioning": len(task.get("conditioning", []))}
        for name, count in channels.items():
            for key in ("mean", "std"):
                values = normalizers.get(name, {}).get(key, [])
                if name in normalizers and len(values) != count:
                    problems.append(f"normalizers[{name!r}] {key!r} must hold {count} values "
                                    f"(one per channel of the task), got {len(values)}")
    if isinstance(task, dict) and task.get("correction"):
        if not isinstance(normalizers, dict) or "corrections" not in normalizers:
            problems.append("a corrector's 'normalizers' need 'corrections'")
        coarsening = record.get("correction", {})
        if not isinstance(coarsening, dict) or not isinstance(coarsening.get("coarsening"), str):
            problems.append("a corrector needs 'correction' with its 'coarsening' (e.g. '2x5')")
    return problems


def read_record(path: Path) -> dict:
    """The checkpoint record in ``path`` (a run's ``config.json``), decoded and checked
    (:func:`validate_record`); one ValueError naming the file for anything wrong with it."""
    return validate_record(decode_json(f"checkpoint config {path}", text=Path(path).read_bytes(),
                                       fix=_WRITTEN_BY), path)


#: The task keys of a record (:class:`~ssmpde.surrogates.datasets.Task`) and their JSON types.
_TASK_KEYS = {"kind": str, "inputs": list, "outputs": list, "grid": list, "conditioning": list,
              "window": int, "horizon": int, "dt": (int, float), "time_dependent": list,
              "correction": bool, "correction_mode": str}
_REQUIRED_TASK_KEYS = ("kind", "inputs", "outputs", "grid")  # typed by _problems' need()


def _task_problems(task: dict) -> list[str]:
    """Types and ranges of a record's task beyond its required keys (checked by the caller):
    names are strings, sizes positive integers, ``dt`` finite."""
    problems = [f"task has the unknown key {key!r}" for key in task if key not in _TASK_KEYS]
    for key, kind in _TASK_KEYS.items():
        value = task.get(key)
        if key in task and key not in _REQUIRED_TASK_KEYS and (not isinstance(value, kind)
                            or (isinstance(value, bool) and kind is not bool)):
            name = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            problems.append(f"task {key!r} must be {name}, got {type(value).__name__}")
        elif key in ("inputs", "outputs", "conditioning", "time_dependent") and \
                isinstance(value, list) and not all(isinstance(v, str) for v in value):
            problems.append(f"task {key!r} must hold variable names (strings)")
    mode = task.get("correction_mode", "after")
    if isinstance(mode, str) and mode not in ("after", "source", "flux"):
        problems.append(f"task 'correction_mode' must be 'after', 'source' or 'flux', got "
                        f"{mode!r}")
    grid = task.get("grid")
    if isinstance(grid, list) and (not 1 <= len(grid) <= 2 or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in grid)):
        problems.append(f"task 'grid' must hold one or two positive integers, got {grid}")
    for key in ("window", "horizon"):
        value = task.get(key, 1)
        if isinstance(value, int) and value < 1:
            problems.append(f"task {key!r} must be at least 1, got {value}")
    dt = task.get("dt", 0.0)
    if isinstance(dt, (int, float)) and not (math.isfinite(dt) and dt >= 0):
        problems.append(f"task 'dt' must be a finite number >= 0, got {dt}")
    return problems


def _task_memory_problem(task: dict) -> str | None:
    """The memory one sample of a (well-typed) task needs, against
    :func:`ssmpde.core.memory_limit`: a crafted ``window`` or ``grid`` is refused here, before
    the normalisers or the frames of that size are allocated."""
    fields, extra = len(task["inputs"]), len(task.get("conditioning", [])) + 1
    frames = task.get("window", 1) + task.get("horizon", 1)
    # float32 frames of every channel, and the per-channel statistics (Python lists of
    # 8-byte pointers, mean and std) repeated once per window frame.
    needed = frames * (fields + extra) * (math.prod(task["grid"]) * 4 + 16)
    limit = memory_limit()
    if needed > limit:
        return (f"its task (window {task.get('window', 1)}, horizon {task.get('horizon', 1)}, "
                f"{fields + extra - 1} channels, grid {task['grid']}) needs at least "
                f"{format_bytes(needed)} for one sample, more than the limit of "
                f"{format_bytes(limit)}: the file was changed after training (restore it), "
                "or raise SSMPDE_MAX_MEMORY")
    return None


def validate_record(record, path) -> dict:
    """Check a checkpoint record (``config.json``) as a whole; ValueError naming every missing
    or ill-typed key, then one for a task whose sample would not fit in memory."""
    problems = _problems(record)
    if problems:
        raise ValueError(f"checkpoint config {path} is not a valid ssmpde checkpoint: "
                         + "; ".join(problems) + " (it is written by 'ssmpde train')")
    memory = _task_memory_problem(record["task"])
    if memory is not None:
        raise ValueError(f"checkpoint config {path}: {memory}")
    return record


def load_checkpoint(path, *, device: str | torch.device = "cpu"):
    """(model in eval mode, record) from a run directory: ``config.json`` and
    ``weights.safetensors`` only. Raises ValueError naming what is wrong with a broken one."""
    path = Path(path)
    config_path, weights_path = path / CONFIG, path / WEIGHTS
    if not path.is_dir():
        raise ValueError(f"{path} is not a checkpoint: it is not a directory (a run directory "
                         "written by 'ssmpde train' has config.json and weights.safetensors)")
    for p in (config_path, weights_path):
        if not p.exists():
            raise ValueError(f"{path} is not a checkpoint: {p.name} is missing (a run "
                             "directory written by 'ssmpde train' has config.json and "
                             "weights.safetensors)")
    record = read_record(config_path)
    try:
        model = build_model(record["model"], **record["model_config"])
    except (KeyError, TypeError) as error:
        raise ValueError(f"unreadable checkpoint config {config_path}: {error}") from error
    try:  # the tensors and the epoch stamp in one read
        with safe_open(weights_path, framework="pt") as handle:
            stamp = (handle.metadata() or {}).get("epoch")
            weights = {name: handle.get_tensor(name) for name in handle.keys()}
    except Exception as error:  # safetensors raises its own error types
        raise ValueError(f"unreadable checkpoint weights {weights_path}: {error}") from error
    check_consistent(path, (WEIGHTS, CONFIG),
                     stamps={WEIGHTS: stamp, CONFIG: record.get("epoch")})
    try:
        model.load_state_dict(weights)
    except RuntimeError as error:
        raise ValueError(f"the weights in {weights_path} do not fit the model in "
                         f"{config_path}: {error}") from error
    if not all(torch.isfinite(w).all() for w in weights.values() if w.is_floating_point()):
        raise ValueError(f"the weights in {weights_path} are not finite (NaN or inf): the run "
                         "diverged; retrain it")
    return model.to(device).eval(), record


def normalizers_of(record: dict) -> dict[str, Normalizer]:
    """The normalisers stored in a checkpoint record (``config.json``)."""
    return {k: Normalizer(**v) for k, v in record["normalizers"].items()}


def normalised_model(model, record: dict, *, conservative=None) -> NormalisedModel:
    """A loaded checkpoint's model wrapped with its task's normalisers (physical units in
    and out); what evaluation and the coupling steppers call. A flux corrector takes the
    ``conservative`` form of the caller's coarse solver, or one built from the record; any
    other model ignores it."""
    task = Task.from_dict(record["task"])
    flux = task.correction and task.correction_mode == "flux"
    if flux and conservative is None:
        from .correction import conservative_form_of

        conservative = conservative_form_of(record)
    return NormalisedModel(model, task, normalizers_of(record),
                           conservative=conservative if flux else None)


class NormalisedModel:
    """A model with the task's normalisers around it: physical units in and out.

    Parameters
    ----------
    model : torch.nn.Module
        A registered model (or DistributedDataParallel around one); its config's
        ``input_layout`` says how rollout inputs are laid out.
    task : Task
    normalizers : dict
        ``inputs``/``outputs`` (operator) or ``fields``/``conditioning`` (rollout), and for
        a model that predicts increments (``TrainConfig.target``) ``increments``: the next
        frame is then the last input frame plus the decoded prediction; for a corrector of a
        coarse solver (``task.correction``) ``corrections``: :meth:`correction` decodes the
        model's output with them.
    conservative : ConservativeForm, optional
        A flux-form corrector's (``task.correction_mode == "flux"``) map between the fields
        and the conserved densities: its model predicts one correction flux per conserved
        density and grid axis (:meth:`flux_change`).
    """

    def __init__(self, model, task: Task, normalizers: dict[str, Normalizer],
                 conservative=None):
        self.model, self.task = model, task
        if task.correction and task.correction_mode == "flux" and conservative is None:
            raise ValueError("a flux-form corrector needs its solver's conservative form "
                             "(ConservativeForm): pass conservative=solver.conservative_form()")
        self.conservative = conservative
        self.layout = getattr(unwrap(model).config, "input_layout", "channels")
        if task.kind == "operator":
            self.inputs, self.outputs = normalizers["inputs"], normalizers["outputs"]
        else:
            f, c = normalizers["fields"], normalizers["conditioning"]
            # A corrector also sees the coarse prediction: one more frame of the fields.
            frames = task.window + (1 if task.correction else 0)
            self.inputs = Normalizer(f.mean * frames + c.mean, f.std * frames + c.std)
            self.outputs = f
        self.increments = normalizers.get("increments")
        self.corrections = normalizers.get("corrections")

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
        if self.task.correction:
            raise ValueError("this model corrects a coarse solver's step: call correction() "
                             "with the coarse prediction, or use the corrected stepper "
                             "(ssmpde.coupling.stepper_from_checkpoint)")
        out = self.model(self._inputs(window, conditioning, noise))
        if self.increments is not None:
            return window[:, -1] + self.increments.decode(out)
        return self.outputs.decode(out)

    def correction(self, window: torch.Tensor, coarse: torch.Tensor,
                   conditioning: torch.Tensor) -> torch.Tensor:
        """A corrector's output in physical units: ``window [batch, window, fields, *grid]``,
        the coarse solver's prediction of the next frame ``coarse [batch, fields, *grid]``
        and ``conditioning [batch, k, *grid]`` → the correction ``[batch, fields, *grid]``
        (next frame − coarse prediction). A flux-form corrector's is the change of the fields
        that its conserved correction :meth:`flux_change` makes, exactly zero for zero
        fluxes."""
        if self.conservative is not None:
            form = self.conservative
            conserved = form.to_conserved(coarse)
            change = self.flux_change(window, coarse, conditioning).to(coarse.dtype)
            return form.to_primitive(conserved + change) - form.to_primitive(conserved)
        return self.corrections.decode(self.model(self._inputs(
            window, torch.cat([coarse, conditioning], dim=1))))

    def flux_change(self, window: torch.Tensor, coarse: torch.Tensor,
                    conditioning: torch.Tensor, dtype: torch.dtype | None = None
                    ) -> torch.Tensor:
        """A flux-form corrector's change of the conserved densities ``[batch, field,
        *grid]``: the model's outputs, one per density and grid axis scaled by the density's
        correction scale, are face fluxes whose discrete divergence is the change
        (:func:`~ssmpde.surrogates.correction.flux_divergence`): the domain totals are
        conserved to round-off (of ``dtype``: the model's output is cast to it before the
        divergence; the corrected stepper asks for float64)."""
        from .correction import flux_divergence

        out = self.model(self._inputs(window, torch.cat([coarse, conditioning], dim=1)))
        if dtype is not None:
            out = out.to(dtype)
        fields, ndim = len(self.task.inputs), len(self.task.grid)
        fluxes = out.unflatten(1, (fields, ndim))
        scale = torch.tensor(self.corrections.std, dtype=out.dtype,
                             device=out.device).reshape(1, fields, 1, *[1] * ndim)
        return flux_divergence(fluxes * scale, self.conservative.periodic)

    def source(self, window: torch.Tensor, conditioning: torch.Tensor) -> torch.Tensor:
        """An in-step corrector's source term ``[batch, fields, *grid]``: the correction δ it
        predicts from ``window`` (the current frame standing in the coarse prediction's
        channels), spread over the record interval, S = δ / dt. The solver adds S to its
        right-hand side, so its implicit or exact linear part and its dealiasing act on it."""
        return self.correction(window, window[:, -1], conditioning) / self.task.dt

    def _inputs(self, window: torch.Tensor, extra: torch.Tensor,
                noise: torch.Tensor | None = None) -> torch.Tensor:
        """The normalised model input: the window's frames, then the per-sample ``extra``
        channels (a corrector's coarse prediction, the conditioning), laid out as the model
        wants (``history``: the extra channels repeated on every frame)."""
        x = self.inputs.encode(torch.cat([window.flatten(1, 2), extra], dim=1))
        if noise is not None:
            x = x + noise
        if self.layout == "history":
            frames = window.shape[1]
            history = x[:, :frames * window.shape[2]].unflatten(1, (frames, window.shape[2]))
            rest = x[:, frames * window.shape[2]:].unsqueeze(1)
            x = torch.cat([history, rest.expand(-1, frames, *rest.shape[2:])], dim=2)
        return x

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
