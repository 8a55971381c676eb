"""Training: from an ssmpde dataset to a self-contained checkpoint.

The defaults follow the SSM operator papers (``docs/models/training.md``): AdamW with
OneCycleLR, relative L2 loss on un-normalised fields (plus, for Darcy, 0.1 × the relative L2
of the central-difference gradients), gradient clipping; unit Gaussian normalisers fitted on
the training split. Time-dependent data train with teacher forcing, or autoregressive
unrolling with pushforward (gradients only through the last step) and Gaussian input noise.
Each paper's own recipe is one option, ``recipe="paper"`` (:mod:`ssmpde.surrogates.recipes`);
the options the caller gives win over it.

A run directory holds:

* ``config.json`` and ``weights.safetensors``: the checkpoint (model, task, normalisers,
  dataset facts, versions), all :class:`ssmpde.coupling` needs; no pickles;
* ``training_state.safetensors`` / ``training_state.json``: optimiser and schedule state,
  for exact resume;
* ``metrics.jsonl``: one JSON line per epoch: the training loss, the test error as the
  per-frame mean (``test_rel_l2``) and as the papers pool it over the output horizon
  (``test_pooled_rel_l2``, :func:`ssmpde.core.pooled_relative_l2`), and the best epoch so far
  by the pooled error (``best_epoch``, ``best_test_pooled_rel_l2``).

Files are replaced atomically, so an interrupted run leaves the last complete epoch behind
and ``resume=True`` continues from it. With ``torchrun`` the same code runs data parallel
(DistributedDataParallel; gloo on CPU, NCCL on GPU); only rank 0 writes.

This module holds the training loop; the options are :class:`TrainConfig`
(:mod:`ssmpde.surrogates.train_config`), the torchrun plumbing is in
:mod:`ssmpde.surrogates.distributed`, what only correctors need in
:mod:`ssmpde.surrogates.correction_training`, and :func:`evaluate` in
:mod:`ssmpde.surrogates.evaluation`. ``TrainConfig``, ``evaluate``, ``load_checkpoint`` and
``process_rank`` are importable from here too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from ssmpde.core import decode_json
from ssmpde.data import SAMPLE, check_path, config_of, open_dataset, output_lock
from ssmpde.solvers.base import positive_finite
from ssmpde.threads import entry_point

from . import config_from_dict, get_model_class, instantiate
from .batching import _batches, _collate
from .checkpoint import (CONFIG, STATE_JSON, STATE_TENSORS, WEIGHTS, NormalisedModel,
                         check_consistent, checkpoint_record, load_checkpoint, normalizers_of,
                         optimizer_state, read_record, recover, save_run)
from .compiled import CompiledOnFirstCall, compile_backend
from .correction import cache_directory, coarse_solver, fit_corrections
from .correction_training import (_correction_data, _unrolled_correction_loss, corrected,
                                  on_policy_items)
from .datasets import Task, TaskDataset, fit_normalizers, infer_task, relative_l2, \
    split_samples
from .distributed import (_distributed, _leave, _mean_across, _rank_device, _stop_everywhere,
                          process_rank)
from .evaluation import _evaluate_split, _require_samples, best_so_far, evaluate
from .recipes import PROBLEM, ResolvedRecipe, get_recipe, parse_recipe, resolve_recipe
from .train_config import LOSSES, OPTIMIZERS, TrainConfig, check_device, horizon_at

# TrainConfig, evaluate, load_checkpoint and process_rank stay importable from here (``from
# ssmpde.surrogates.train import TrainConfig, train, evaluate``); each is documented once, in
# the module that defines it.
__all__ = ["train"]


class TrainingDivergedError(FloatingPointError):
    """The loss or the weights became non-finite; the last good checkpoint is kept."""


# ---------------------------------------------------------------------------------------
# Losses.
# ---------------------------------------------------------------------------------------
def _central_gradients(u: torch.Tensor) -> list[torch.Tensor]:
    """Central differences along each grid axis (interior points), in grid units."""
    grads = []
    for axis in range(2, u.dim()):
        n = u.shape[axis]
        if n >= 3:
            grads.append((u.narrow(axis, 2, n - 2) - u.narrow(axis, 0, n - 2)) / 2)
    return grads


def operator_loss(prediction, target, gradient_weight: float,
                  loss: str = "relative-l2") -> torch.Tensor:
    """The per-sample ``loss`` (:data:`~ssmpde.surrogates.train_config.LOSSES`; relative L2
    per field, averaged over fields) averaged over the batch, plus ``gradient_weight`` × the
    same for the central-difference gradients (the Darcy loss of GeoMaNO's recipe)."""
    per_sample = LOSSES[loss]
    value = per_sample(prediction, target).mean()
    if gradient_weight:
        pairs = zip(_central_gradients(prediction), _central_gradients(target))
        value = value + gradient_weight * sum(per_sample(p, t).mean() for p, t in pairs)
    return value


def rollout_loss(wrapped: NormalisedModel, batch: dict[str, torch.Tensor],
                 config: TrainConfig, generator: torch.Generator | None,
                 coarse_step=None, horizon: int | None = None) -> torch.Tensor:
    """The mean over the horizon of each step's loss (``config.loss``: the relative L2 per
    field by default), teacher-forced or unrolled (with pushforward: gradients only through
    the last step); a corrector's (relative L2 always): of its corrected
    coarse step, or of its steps unrolled through ``coarse_step`` (a
    :class:`~ssmpde.solvers.differentiable.DifferentiableStep`). ``horizon``: only the
    batch's first steps (a curriculum's phase)."""
    if horizon is not None and horizon < batch["target"].shape[1]:
        batch = {**batch, "target": batch["target"][:, :horizon],
                 "conditioning": batch["conditioning"][:, :horizon]}
    target = batch["target"]
    if wrapped.task.correction and "coarse" in batch:
        return relative_l2(corrected(wrapped, batch)[:, 0], target[:, 0], fields=True).mean()
    if wrapped.task.correction:
        return _unrolled_correction_loss(wrapped, batch, config, coarse_step)
    steps = target.shape[1]
    fields = wrapped.task.window * len(wrapped.task.inputs)

    def noise(k, x):
        if not (config.noise_std and generator is not None):
            return None
        drawn = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
        drawn[:, fields:] = 0  # not the parameters
        return drawn * config.noise_std

    def feed(k, frame):
        if config.mode == "teacher-forcing":
            return target[:, k]
        last = k == steps - 1
        return frame.detach() if config.pushforward and not last else frame

    frames = wrapped.rollout(batch["history"], batch["conditioning"], feed=feed, noise=noise)
    per_sample = LOSSES[config.loss]
    losses = [per_sample(frames[:, k], target[:, k]).mean() for k in range(steps)]
    if config.mode == "autoregressive" and config.pushforward:
        return losses[-1]
    return torch.stack(losses).mean()


# ---------------------------------------------------------------------------------------
# Training, step by step.
# ---------------------------------------------------------------------------------------
def _model_config(model_name: str, preset: str | None, overrides: dict, task: Task) -> Any:
    """The model config for a task (see ``ModelConfig.for_task``): channels and grid from the
    data, the rest from the preset and the user's options (which must agree with the data)."""
    layout = get_model_class(model_name).Config.input_layout
    needed = {"in_channels": task.input_channels(layout), "out_channels": task.out_channels,
              "grid": task.grid}
    for key, value in needed.items():
        if key in overrides and tuple(np.atleast_1d(overrides[key])) != tuple(
                np.atleast_1d(value)):
            raise ValueError(f"the model's {key}={overrides[key]} does not fit the data, "
                             f"which needs {key}={value}")
    config = config_from_dict(model_name, overrides, preset=preset, task=task)
    # A preset's sizes are capped at what the data's grid holds (one preset fits any grid);
    # a size the user asked for is refused instead, with the most the grid allows.
    for name in type(config).spatial_fields:
        if name not in overrides:
            continue
        asked = tuple(int(v) for v in np.atleast_1d(overrides[name]))
        if len(asked) != len(task.grid):
            asked = asked[:1] * len(task.grid)
        if asked == tuple(getattr(config, name)):
            continue
        widest = {**overrides, name: [max(task.grid) + 1] * len(task.grid)}
        most = list(getattr(config_from_dict(model_name, widest, preset=preset, task=task),
                            name))
        raise ValueError(f"the model option {name}={list(asked)} is more than the data's "
                         f"{'x'.join(map(str, task.grid))} grid holds: at most {most} for "
                         f"{model_name}; choose {name} within that")
    return config


def _datasets(data, test_data, config: TrainConfig, inputs, outputs):
    """(task, training set, test set, dataset facts for the checkpoint). A correction's task
    is marked as one here; its coarse predictions come later (:func:`_with_coarse_predictions`),
    once the model's config is known to fit the data."""
    def task_of(ds):
        return infer_task(ds, window=config.window, horizon=config.horizon,
                          inputs=tuple(inputs) if inputs else None,
                          outputs=tuple(outputs) if outputs else None)

    with open_dataset(data) as ds:
        _require_samples(ds, data, "train on")
        task = task_of(ds)
        num_samples = ds.sizes[SAMPLE]
        facts = {"path": str(Path(data).resolve()), "equation": ds.attrs.get("ssmpde_equation"),
                 "fields": list(task.fields), "dt": task.dt, "grid": list(task.grid),
                 "generator_config": config_of(ds)}
    if test_data is not None:
        train_samples = np.arange(num_samples)
        with open_dataset(test_data) as ds:
            _require_samples(ds, test_data, "test on")
            test_task = task_of(ds)
            if (test_task.grid, test_task.inputs) != (task.grid, task.inputs):
                raise ValueError(f"the test data ({test_task.inputs} on {test_task.grid}) do "
                                 f"not match the training data ({task.inputs} on {task.grid})")
            test_set = TaskDataset(test_data, task, np.arange(ds.sizes[SAMPLE]))
    else:
        train_samples, test_samples = split_samples(num_samples, config.num_test)
        test_set = TaskDataset(data, task, test_samples)
    if config.target == "correction":
        task = dataclasses.replace(task, correction=True,
                                   correction_mode=config.correction_mode)
        if task.horizon > 1 and task.time_dependent:
            raise ValueError("unrolling through the coarse solver does not take time-dependent "
                             f"forcing ({list(task.time_dependent)}): train one step at a time "
                             "(horizon 1)")
    return task, TaskDataset(data, task, train_samples), test_set, facts


def _scheduler(optimizer, config: TrainConfig, total_steps: int):
    if config.schedule == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=config.lr, total_steps=total_steps, div_factor=config.div_factor,
        final_div_factor=config.final_div_factor, pct_start=config.pct_start)


def _check_run_directory(out: Path, resume: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out '{out}' is a file; a run is a directory: choose another path")
    if (out / CONFIG).exists() and not resume:
        raise ValueError(f"{out} already holds a run; pass resume=True (--resume) to continue "
                         "it, or choose another --out")
    # The coarse predictions of a correction run that stopped before its first epoch are
    # kept: the same command goes on from them.
    cache = cache_directory(out).parent
    if not resume and out.is_dir() and any(p != cache for p in out.iterdir()):
        raise ValueError(f"--out '{out}' is a directory with other files in it: a run needs a "
                         "new or empty directory")
    if resume:
        recover(out)
        if not (out / STATE_JSON).exists():
            hint = (" (it holds only the coarse predictions of an interrupted correction run: "
                    "run the same command without --resume to go on from them)"
                    if cache.exists() else "")
            raise ValueError(f"nothing to resume in {out}: no {STATE_JSON}{hint}")
        check_consistent(out)


def _restore_model(out: Path, model, model_name: str, model_config, config) -> dict:
    """Load the weights of the run in ``out``; return its record. Refuses a different model
    or different training options (they would make a different run, not a resumed one)."""
    record = read_record(out / CONFIG)
    if (record["model"] != model_name or record["model_config"]
            != json.loads(json.dumps(dataclasses.asdict(model_config)))):
        raise ValueError(f"the run in {out} was trained with a different model config; "
                         "resume with the same model and options")
    stored = record.get("train_config", {})
    now = json.loads(json.dumps(dataclasses.asdict(config)))
    # an option added after the run was written had its default value then
    defaults = json.loads(json.dumps(dataclasses.asdict(TrainConfig())))
    changed = [f"{key} {stored.get(key, defaults[key])!r} (now {value!r})"
               for key, value in now.items() if key not in ("device", "compile")
               and stored.get(key, defaults[key]) != value]
    if changed:
        raise ValueError(f"the run in {out} was started with other training options: "
                         f"{'; '.join(changed)}. Resume with the run's options (the schedule is "
                         "built for its epochs), or start a new run to train differently")
    model.load_state_dict(load_file(out / WEIGHTS))
    return record


def _restore_optimizer(out: Path, optimizer, scheduler) -> tuple[int, int]:
    """Load the optimiser and schedule state; return (epochs done, steps done)."""
    state = decode_json(out / STATE_JSON, keys={"epoch": int, "step": int, "optimizer": dict,
                                                "scheduler": dict},
                        fix="the run directory is damaged; start a new run")
    optimizer.load_state_dict(optimizer_state(load_file(out / STATE_TENSORS),
                                              state["optimizer"]))
    scheduler.load_state_dict(state["scheduler"])
    return state["epoch"], state["step"]


def _train_epoch(wrapped, model, train_set, optimizer, scheduler, config, gradient_weight,
                 generator, rank, world, device, bar, epoch, coarse_step=None
                 ) -> tuple[float, int, int]:
    """One pass over the training set; returns (mean loss, items, optimiser steps)."""
    order = torch.randperm(len(train_set), generator=generator).numpy()
    total, count, steps, started = 0.0, 0, 0, time.perf_counter()
    for indices in _batches(order, config.batch_size, rank, world):
        batch = {k: v.to(device) for k, v in _collate(train_set, indices).items()}
        if train_set.task.kind == "operator":
            x, noise = batch["x"], None
            if config.noise_std:
                noise = config.noise_std * torch.randn(x.shape, generator=generator)
                noise = noise.to(x.device)
            loss = operator_loss(wrapped(x, noise), batch["y"], gradient_weight, config.loss)
        else:
            loss = rollout_loss(wrapped, batch, config, generator, coarse_step,
                                horizon=horizon_at(config, epoch))
        loss_value = _mean_across(float(loss.detach()), world)
        if not math.isfinite(loss_value):
            raise TrainingDivergedError(
                f"the training loss became {loss_value} at epoch {epoch + 1}, batch "
                f"{steps + 1}: lower --lr, check the data for constant or extreme fields; the "
                "last good epoch is kept in the run directory")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if config.max_grad_norm:
            nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        steps += 1
        total += loss_value * len(indices) * world
        count += len(indices) * world
        bar.update(len(indices) * world)
        bar.set_postfix(loss=f"{loss_value:.4f}",
                        items_per_s=f"{count / (time.perf_counter() - started):.1f}")
    return total / max(count, 1), count, steps


def _explicit_options(config: TrainConfig | Mapping | None) -> dict[str, Any]:
    """The training options a caller set: a mapping's keys, or the fields of a TrainConfig
    that differ from the defaults (a default value passed in a TrainConfig cannot be told
    from one left out: pass a dict to insist on it)."""
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return dict(config)
    defaults = TrainConfig()
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(TrainConfig)
            if getattr(config, f.name) != getattr(defaults, f.name)}


def _recipe_config(model_name: str, recipe: str, config, data, preset, model_overrides
                   ) -> tuple[TrainConfig, ResolvedRecipe, dict[str, Any]]:
    """(the run's TrainConfig, the resolved recipe, the caller's options) for ``recipe``
    (``"NAME"`` or ``"NAME:VARIANT"``): the recipe's fields, the caller's options winning.
    The variant is the one named, else the data's equation (a recipe by problem; one it
    does not cover is refused with the ones it does) or the model config's field the recipe
    is chosen by (MNO's backbone)."""
    name, variant = parse_recipe(recipe)
    entry = get_recipe(model_name, name)
    if variant is None and entry.chosen_by == PROBLEM:
        with open_dataset(data) as ds:  # the schema requires the attribute
            variant = ds.attrs["ssmpde_equation"]
    elif variant is None:
        model_config = config_from_dict(model_name, dict(model_overrides or {}), preset=preset)
        variant = getattr(model_config, entry.chosen_by)
    resolved = resolve_recipe(model_name, name, variant=variant)
    explicit = _explicit_options(config)
    return TrainConfig(**{**resolved.fields, **explicit}), resolved, explicit


@entry_point("train")
def train(model_name: str, data, *, out, preset: str | None = None,
          model_overrides: dict | None = None, config: TrainConfig | Mapping | None = None,
          recipe: str | None = None, test_data=None, resume: bool = False,
          progress: bool = True, time_limit: float | None = None, inputs=None, outputs=None,
          threads: int | None = None) -> dict[str, Any]:
    """Train ``model_name`` on the dataset file ``data`` and write a run directory ``out``.

    Parameters
    ----------
    model_name : str
        A registered model (``ssmpde.surrogates.list_models()``).
    data, test_data : path
        ssmpde dataset files (netCDF or zarr). Without ``test_data``, the last
        ``config.num_test`` samples of ``data`` are held out.
    out : path
        Run directory (created). Must not hold a run unless ``resume``.
    preset, model_overrides
        Model preset and options; channels and grid come from the data.
    config : TrainConfig or mapping of its fields
        The training options (a mapping: of the fields it names, the rest default).
    recipe : str, optional
        A training recipe of the model (:mod:`ssmpde.surrogates.recipes`): ``"paper"``, the
        paper's (or its released code's), for the problem the data hold (their
        ``ssmpde_equation``) or MNO's backbone; ``"paper:darcy"`` names the variant. The
        options in ``config`` win over it: a mapping's keys, or a TrainConfig's fields that
        differ from the defaults. The resolved recipe is printed (with ``progress``) and
        recorded in the run's ``config.json`` (``recipe``: name, variant, fields).
    resume : bool
        Continue the run in ``out`` from its last completed epoch, bit for bit.
    time_limit : float, optional
        Stop after the epoch during which this many seconds have passed (a wall-clock
        budget, finite and >= 0: 0 stops after one epoch); the run stays resumable.
    inputs, outputs : sequence of str, optional
        An operator task's variables (``name`` or ``name@frame``, e.g. Burgers
        ``["u@0"] → ["u@-1"]``); by default the task follows the variables' roles
        (see :func:`ssmpde.surrogates.datasets.infer_task`).
    threads : int, optional
        torch and numba threads (default ``SSMPDE_THREADS``, else as the process started:
        every core, or ``OMP_NUM_THREADS``; see :mod:`ssmpde.threads`). Not part of the run:
        a resumed run may use another count.

    Returns
    -------
    dict
        The last epoch's metrics: ``train_loss``; with a test set ``test_rel_l2`` (the
        per-frame mean), ``test_pooled_rel_l2`` (pooled over the output horizon, the papers'
        rollout error), for rollouts ``test_rel_l2_per_step``, and the best epoch so far by
        the pooled error, ``best_epoch`` and ``best_test_pooled_rel_l2`` (the run keeps the
        last epoch's weights).
    """

    # 0 is a budget too: stop after the first epoch.
    if time_limit is not None and not (positive_finite(time_limit) or (
            time_limit == 0 and not isinstance(time_limit, (bool, np.bool_)))):
        raise ValueError(f"time_limit (--time-limit) must be a finite number of seconds >= 0 "
                         f"(0: stop after one epoch), got {time_limit!r}; leave it out to "
                         "train every epoch")
    resolved, explicit = None, {}
    if recipe is not None:
        config, resolved, explicit = _recipe_config(model_name, recipe, config, data, preset,
                                                    model_overrides)
    elif isinstance(config, Mapping):
        config = TrainConfig(**config)
    config = config or TrainConfig()
    out = Path(out)
    rank, world, started_group = _distributed()
    if config.batch_size % world:
        raise ValueError(f"batch_size {config.batch_size} must be a multiple of the number of "
                         f"processes ({world})")
    device = _rank_device(check_device(config.device), world)
    for source in (data, test_data):
        if source is not None:
            check_path(Path(source))  # a FIFO, a link that loops or leads nowhere: named
        if source is not None and Path(source).resolve() == out.resolve():
            raise ValueError(f"--out '{out}' is one of the inputs: choose another path")
    # The directories this call creates, deepest first: a run that fails before it wrote
    # anything (bad options, a loss that is NaN in the first epoch) leaves none of them.
    created = [path for path in (out, *out.parents) if not path.exists()]
    try:
        with contextlib.ExitStack() as stack:
            if rank == 0:  # one writer per run directory; a second one fails at once
                out.parent.mkdir(parents=True, exist_ok=True)
                stack.enter_context(output_lock(out))
            _check_run_directory(out, resume)
            metrics = _train(model_name, data, out, preset, model_overrides, config,
                             test_data, resume, progress, time_limit, inputs, outputs, rank,
                             world, device, (resolved, explicit))
    except Exception:  # an interrupt keeps everything, for --resume
        if rank == 0:
            _remove_empty(created)
        raise
    _leave(started_group)
    return metrics


def _remove_empty(directories: list[Path]) -> None:
    """Remove ``directories`` (deepest first) while they are empty: what a failed run made
    and never filled. A directory holding anything (a completed epoch, the coarse
    predictions a correction run reuses) stops it."""
    for directory in directories:
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            return


def _train(model_name, data, out, preset, model_overrides, config, test_data, resume, progress,
           time_limit, inputs, outputs, rank, world, device, recipe) -> dict[str, Any]:
    """The body of :func:`train`, under the run's lock; ``recipe``: (the resolved recipe or
    None, the caller's options that win over it)."""
    from tqdm.auto import tqdm

    resolved, explicit = recipe
    if resolved is not None and progress and rank == 0:
        tqdm.write(resolved.describe(explicit))
    task, train_set, test_set, facts = _datasets(data, test_data, config, inputs, outputs)
    # The model's options are checked against the data first: a corrector's coarse
    # predictions take a coarse solve of every stored frame (hours at benchmark sizes).
    model_config = _model_config(model_name, preset, dict(model_overrides or {}), task)
    with open_dataset(data) as ds:  # what the fields are, for options that need one kind
        model_config.check_data(task, {name: dict(ds[name].attrs) for name in task.fields})
    # A corrector's coarse predictions (the corrections' statistics), and the differentiable
    # coarse step it is unrolled through (horizon > 1); neither goes into the checkpoint.
    coarse_values = coarse_step = conservative = None
    if task.correction:
        train_set, test_set, coarse_values, coarse_step, conservative = _correction_data(
            task, train_set, test_set, config, data, out, progress and rank == 0)

    torch.manual_seed(config.seed)
    model = instantiate(model_name, model_config).to(device)
    if resume:
        normalizers = normalizers_of(_restore_model(out, model, model_name, model_config,
                                                    config))
    else:
        if config.target == "increment" and task.kind != "rollout":
            raise ValueError("target='increment' is for rollout tasks (trajectories); an "
                             "operator task maps inputs to outputs: use target='state'")
        normalizers = fit_normalizers(train_set, increments=config.target == "increment",
                                      kind=config.normalization)
        if task.correction:
            normalizers["corrections"] = fit_corrections(train_set, coarse_values,
                                                         conservative)
    gradient_weight = config.gradient_loss_weight
    if gradient_weight is None:
        gradient_weight = 0.1 if task.kind == "operator" and len(task.grid) == 2 else 0.0
    record = checkpoint_record(model, task, normalizers, config, facts)
    if resolved is not None:
        record["recipe"] = resolved.to_dict()

    # Evaluation (rank 0 only) uses the bare module: DDP's forward may start collectives
    # that the other ranks would never join.
    evaluator = NormalisedModel(model, task, normalizers, conservative=conservative)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    wrapped = NormalisedModel(model, task, normalizers, conservative=conservative)
    backend = compile_backend(config.compile)
    if backend is not None:
        wrapped.model = CompiledOnFirstCall(model, backend)
        evaluator.model = CompiledOnFirstCall(evaluator.model, backend)
    optimizer = OPTIMIZERS[config.optimizer](model.parameters(), lr=config.lr,
                                             weight_decay=config.weight_decay)
    trajectories, solver = train_set, None
    if config.on_policy:  # one-step items on each visited state: horizon per trajectory item
        with open_dataset(data) as ds:
            solver = coarse_solver(ds, config.coarse)
    items_per_epoch = len(train_set) * (config.horizon if config.on_policy else 1)
    steps_per_epoch = math.ceil(items_per_epoch / config.batch_size)
    scheduler = _scheduler(optimizer, config, config.epochs * steps_per_epoch)
    # The run directory appears with the first checkpoint (save_run): a run that fails in its
    # first epoch (a damaged sample of the data) leaves nothing behind.
    first_epoch, step = _restore_optimizer(out, optimizer, scheduler) if resume else (0, 0)
    # The best epoch by the pooled test error, carried in every line of the metrics log.
    best = best_so_far(out) if resume else {}

    started = time.perf_counter()
    metrics: dict[str, Any] = {}
    model.train()
    for epoch in range(first_epoch, config.epochs):
        # The data order and the noise of epoch e depend on (seed, e) only: resuming needs
        # no random-number state.
        generator = torch.Generator().manual_seed(config.seed * 1_000_003 + epoch)
        if config.on_policy and (epoch % config.on_policy == 0 or epoch == first_epoch):
            # the states the corrected solver visits now (a resumed run regenerates them
            # from its resumed weights)
            train_set = on_policy_items(evaluator, trajectories, solver, config.batch_size)
        bar = tqdm(total=len(train_set), desc=f"epoch {epoch + 1}/{config.epochs}",
                   unit="item", disable=not progress or rank != 0, leave=False)
        epoch_start = time.perf_counter()
        loss, _, steps = _train_epoch(wrapped, model, train_set, optimizer, scheduler, config,
                                      gradient_weight, generator, rank, world, device, bar,
                                      epoch, coarse_step)
        if not all(torch.isfinite(p).all() for p in model.parameters()):
            raise TrainingDivergedError(
                f"the weights became non-finite in epoch {epoch + 1}: lower --lr; the last "
                "good epoch is kept in the run directory")
        bar.close()
        step += steps
        metrics = {"epoch": epoch + 1, "step": step, "train_loss": loss,
                   "horizon": horizon_at(config, epoch),
                   "lr": scheduler.get_last_lr()[0],
                   "seconds": time.perf_counter() - epoch_start}
        if rank == 0:
            metrics.update(_evaluate_split(evaluator, test_set, config.batch_size, device,
                                           coarse_step))
            pooled = metrics.get("test_pooled_rel_l2")
            if pooled is not None and (not best or pooled < best["best_test_pooled_rel_l2"]):
                best = {"best_epoch": epoch + 1, "best_test_pooled_rel_l2": pooled}
            metrics.update(best)
            save_run(out, model, optimizer, scheduler, record, epoch + 1, step, metrics)
            if progress:
                shown = {k: (round(v, 5) if isinstance(v, float) else v)
                         for k, v in metrics.items() if not isinstance(v, list)}
                tqdm.write(json.dumps(shown))
        if time_limit is not None and _stop_everywhere(
                time.perf_counter() - started > time_limit, world):
            break
    trajectories.close()
    if train_set is not trajectories:
        train_set.close()
    test_set.close()
    return metrics
