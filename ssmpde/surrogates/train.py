"""Training and evaluation: from an ssmpde dataset to a self-contained checkpoint.

The recipe of the SSM operator papers (``shared/specs/surrogates.md``): AdamW with OneCycleLR,
relative L2 loss on un-normalised fields (plus, for Darcy, 0.1 × the relative L2 of the
central-difference gradients), gradient clipping; unit Gaussian normalisers fitted on the
training split. Time-dependent data train with teacher forcing, or autoregressive unrolling
with pushforward (gradients only through the last step) and Gaussian input noise.

A run directory holds:

* ``config.json`` and ``weights.safetensors``: the checkpoint (model, task, normalisers,
  dataset facts, versions), all :class:`ssmpde.coupling` needs; no pickles;
* ``training_state.safetensors`` / ``training_state.json``: optimiser and schedule state,
  for exact resume;
* ``metrics.jsonl``: one JSON line per epoch.

Files are replaced atomically, so an interrupted run leaves the last complete epoch behind
and ``resume=True`` continues from it. With ``torchrun`` the same code runs data parallel
(DistributedDataParallel; gloo on CPU, NCCL on GPU); only rank 0 writes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file
from torch import nn

from ssmpde import data as schema

from . import config_from_dict, get_model_class, model_from_json
from .data import (
    Normalizer,
    Task,
    TaskDataset,
    fit_normalizers,
    infer_task,
    input_normalizer,
    model_inputs,
    output_normalizer,
    relative_l2,
    split_samples,
)

__all__ = ["TrainConfig", "evaluate", "load_checkpoint", "train"]

CONFIG, WEIGHTS = "config.json", "weights.safetensors"
STATE_TENSORS, STATE_JSON, METRICS = ("training_state.safetensors", "training_state.json",
                                      "metrics.jsonl")


@dataclass(frozen=True)
class TrainConfig:
    """How to train (the model's own config is separate).

    Attributes
    ----------
    epochs, batch_size : int
        ``batch_size`` is the global batch (split across processes under torchrun).
    lr : float
        Peak learning rate of OneCycleLR (initial lr of the papers, 3e-4 by default).
    weight_decay : float
        AdamW weight decay.
    max_grad_norm : float
        Gradient clipping norm (0 disables it).
    gradient_loss_weight : float or None
        Weight of the gradient term of the Darcy loss; None: 0.1 for operator tasks on 2D
        grids, 0 otherwise.
    window, horizon : int
        Rollout tasks: frames in, frames predicted per training item.
    mode : {"teacher-forcing", "autoregressive"}
        Rollout tasks: feed the true frames back, or the model's own predictions.
    pushforward : bool
        Autoregressive mode: gradients only through the last unrolled step.
    noise_std : float
        Standard deviation of the Gaussian noise added to the (normalised) input frames.
    num_test : int
        Samples held out from the training file when no test file is given.
    seed : int
        Seeds the model initialisation, the data order and the noise.
    device : str
        Torch device; under torchrun with CUDA, each rank takes ``cuda:LOCAL_RANK``.
    """

    epochs: int = 100
    batch_size: int = 4
    lr: float = 3e-4
    weight_decay: float = 1e-4
    max_grad_norm: float = 1.0
    gradient_loss_weight: float | None = None
    window: int = 10
    horizon: int = 1
    mode: str = "teacher-forcing"
    pushforward: bool = True
    noise_std: float = 0.0
    num_test: int = 0
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self):
        for name in ("epochs", "batch_size", "window", "horizon"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.mode not in ("teacher-forcing", "autoregressive"):
            raise ValueError(f"mode must be 'teacher-forcing' or 'autoregressive', got "
                             f"{self.mode!r}")
        if self.noise_std < 0 or self.max_grad_norm < 0 or self.num_test < 0:
            raise ValueError("noise_std, max_grad_norm and num_test must not be negative")


# ---------------------------------------------------------------------------------------
# Distributed helpers.
# ---------------------------------------------------------------------------------------
def _distributed() -> tuple[int, int]:
    """(rank, world size); initialises the process group under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _mean_across(value: float, world: int) -> float:
    if world == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor) / world


def _stop_everywhere(stop: bool, world: int) -> bool:
    """True on every rank if it is true on any (ranks must leave the loop together)."""
    if world == 1:
        return stop
    flag = torch.tensor([1.0 if stop else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


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


def operator_loss(prediction, target, gradient_weight: float) -> torch.Tensor:
    """Relative L2 (mean over the batch) plus ``gradient_weight`` × the relative L2 of the
    central-difference gradients (the Darcy loss of GeoMaNO's training recipe)."""
    loss = relative_l2(prediction, target).mean()
    if gradient_weight:
        pairs = zip(_central_gradients(prediction), _central_gradients(target))
        loss = loss + gradient_weight * sum(relative_l2(p, t).mean() for p, t in pairs)
    return loss


# ---------------------------------------------------------------------------------------
# Checkpoints.
# ---------------------------------------------------------------------------------------
def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _atomic_save_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, tmp)
    os.replace(tmp, path)


def _versions() -> dict[str, str]:
    import ssmpde

    return {"ssmpde": ssmpde.__version__, "torch": torch.__version__}


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _checkpoint_record(model, task: Task, normalizers, train_config, dataset_facts) -> dict:
    inner = _unwrap(model)
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


def _optimizer_state(tensors: dict[str, torch.Tensor], record: dict) -> dict:
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
    _atomic_save_tensors(out / WEIGHTS, _unwrap(model).state_dict())
    tensors, optimizer_record = _optimizer_tensors(optimizer)
    _atomic_save_tensors(out / STATE_TENSORS, tensors or {"empty": torch.zeros(0)})
    _atomic_write_text(out / STATE_JSON, json.dumps({
        "epoch": epoch, "step": step, "optimizer": optimizer_record,
        "scheduler": scheduler.state_dict()}, indent=1))
    _atomic_write_text(out / CONFIG, json.dumps({**record, "epoch": epoch}, indent=2))


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


# ---------------------------------------------------------------------------------------
# Training.
# ---------------------------------------------------------------------------------------
def _model_config(model_name: str, preset: str | None, overrides: dict, task: Task) -> Any:
    """The model config for a task: in/out channels and grid from the data, the rest from
    the preset and the user's overrides (which must agree with the data)."""
    values = {"in_channels": task.in_channels, "out_channels": task.out_channels,
              "grid": task.grid}
    for key in ("in_channels", "out_channels", "grid"):
        if key in overrides and tuple(np.atleast_1d(overrides[key])) != tuple(
                np.atleast_1d(values[key])):
            raise ValueError(f"the model's {key}={overrides[key]} does not fit the data, "
                             f"which needs {key}={values[key]}")
    cls = get_model_class(model_name)
    base = dict(cls.PRESETS.get(preset, {})) if preset else {}
    if preset and preset not in cls.PRESETS:
        config_from_dict(model_name, preset=preset)  # raises the unknown-preset error
    merged = {**base, **overrides, **values}
    # A preset's latent grid or Fourier modes may be larger than a small grid: cap them.
    for key in ("latent_grid", "modes"):
        if key in merged and len(merged[key]) == len(task.grid):
            merged[key] = tuple(min(int(m), n) for m, n in zip(merged[key], task.grid))
    return config_from_dict(model_name, merged)


def _batches(order: np.ndarray, batch_size: int, rank: int, world: int):
    """Global batches of ``batch_size`` from ``order``; each rank takes its share."""
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        yield batch[rank::world]


def _collate(dataset: TaskDataset, indices) -> dict[str, torch.Tensor]:
    items = [dataset[int(i)] for i in indices]
    return {key: torch.stack([item[key] for item in items]) for key in items[0]}


def normalizers_of(record: dict) -> dict[str, Normalizer]:
    """The normalisers stored in a checkpoint record (``config.json``)."""
    return {k: Normalizer(**v) for k, v in record["normalizers"].items()}


def normalised_model(model, record: dict) -> _Normalised:
    """A loaded checkpoint's model wrapped with its task's normalisers (physical units in
    and out); what evaluation and the coupling steppers call."""
    return _Normalised(model, Task.from_dict(record["task"]), normalizers_of(record))


class _Normalised:
    """The model with the task's normalisers around it: physical units in and out."""

    def __init__(self, model, task: Task, normalizers: dict[str, Normalizer]):
        self.model, self.task = model, task
        self.inputs = input_normalizer(task, normalizers)
        self.outputs = output_normalizer(task, normalizers)

    def __call__(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        encoded = self.inputs.encode(x)
        if noise is not None:
            encoded = encoded + noise
        return self.outputs.decode(self.model(encoded))

    def rollout_loss(self, history, target, conditioning, config: TrainConfig,
                     generator: torch.Generator | None):
        """Mean relative L2 over the horizon, teacher-forced or unrolled."""
        losses = []
        window = history
        for k in range(target.shape[1]):
            x = model_inputs(window, conditioning)
            noise = None
            if config.noise_std and generator is not None:
                noise = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
                noise[:, self.task.window * len(self.task.inputs):] = 0  # not the parameters
                noise = noise * config.noise_std
            frame = self(x, noise)
            losses.append(relative_l2(frame, target[:, k]).mean())
            if config.mode == "teacher-forcing":
                fed = target[:, k]
            else:
                last = k == target.shape[1] - 1
                fed = frame.detach() if config.pushforward and not last else frame
            window = torch.cat([window[:, 1:], fed.unsqueeze(1)], dim=1)
        if config.mode == "autoregressive" and config.pushforward:
            return losses[-1]  # gradients flow only through the last step
        return torch.stack(losses).mean()


def _evaluate_split(wrapped: _Normalised, dataset: TaskDataset, batch_size: int,
                    device) -> dict[str, Any]:
    """Test relative L2: operator pairs, or per step of an autoregressive rollout."""
    if len(dataset) == 0:
        return {}
    wrapped.model.eval()
    errors: list[torch.Tensor] = []
    with torch.no_grad():
        for start in range(0, len(dataset), batch_size):
            batch = _collate(dataset, range(start, min(start + batch_size, len(dataset))))
            batch = {k: v.to(device) for k, v in batch.items()}
            if dataset.task.kind == "operator":
                errors.append(relative_l2(wrapped(batch["x"]), batch["y"]))
                continue
            window, steps = batch["history"], []
            for k in range(batch["target"].shape[1]):
                frame = wrapped(model_inputs(window, batch["conditioning"]))
                steps.append(relative_l2(frame, batch["target"][:, k]))
                window = torch.cat([window[:, 1:], frame.unsqueeze(1)], dim=1)
            errors.append(torch.stack(steps, dim=1))
    wrapped.model.train()
    values = torch.cat(errors)
    if dataset.task.kind == "operator":
        return {"test_rel_l2": float(values.mean())}
    return {"test_rel_l2": float(values.mean()),
            "test_rel_l2_per_step": [float(v) for v in values.mean(dim=0)]}


def train(model_name: str, data, *, out, preset: str | None = None,
          model_overrides: dict | None = None, config: TrainConfig | None = None,
          test_data=None, resume: bool = False, progress: bool = True,
          time_limit: float | None = None) -> dict[str, Any]:
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
    config : TrainConfig
    resume : bool
        Continue the run in ``out`` from its last completed epoch, bit for bit.
    time_limit : float, optional
        Stop after the epoch during which this many seconds have passed (a wall-clock
        budget); the run stays resumable.

    Returns
    -------
    dict
        The last epoch's metrics.
    """
    from tqdm.auto import tqdm

    config = config or TrainConfig()
    overrides = dict(model_overrides or {})
    out = Path(out)
    rank, world = _distributed()
    if config.batch_size % world:
        raise ValueError(f"batch_size {config.batch_size} must be a multiple of the number of "
                         f"processes ({world})")
    device = torch.device(config.device)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))

    if (out / CONFIG).exists() and not resume:
        raise ValueError(f"{out} already holds a run; pass resume=True (--resume) to continue "
                         "it, or choose another --out")
    if resume and not (out / STATE_JSON).exists():
        raise ValueError(f"nothing to resume in {out}: no {STATE_JSON}")

    with schema.open_dataset(data) as ds:
        task = infer_task(ds, window=config.window, horizon=config.horizon)
        num_samples = ds.sizes[schema.SAMPLE]
        facts = {"path": str(Path(data).resolve()), "equation": ds.attrs.get("ssmpde_equation"),
                 "fields": list(task.outputs), "dt": task.dt, "grid": list(task.grid),
                 "generator_config": schema.config_of(ds)}
    if test_data is not None:
        train_samples, test_samples = np.arange(num_samples), None
        with schema.open_dataset(test_data) as ds:
            test_task = infer_task(ds, window=config.window, horizon=config.horizon)
            if (test_task.grid, test_task.inputs) != (task.grid, task.inputs):
                raise ValueError(f"the test data ({test_task.inputs} on {test_task.grid}) do "
                                 f"not match the training data ({task.inputs} on {task.grid})")
            test_set = TaskDataset(test_data, task, np.arange(ds.sizes[schema.SAMPLE]))
    else:
        train_samples, test_samples = split_samples(num_samples, config.num_test)
        test_set = TaskDataset(data, task, test_samples)
    train_set = TaskDataset(data, task, train_samples)

    torch.manual_seed(config.seed)
    model_config = _model_config(model_name, preset, overrides, task)
    model = get_model_class(model_name)(model_config).to(device)
    if resume:
        record = json.loads((out / CONFIG).read_text())
        if (record["model"] != model_name or record["model_config"]
                != json.loads(json.dumps(dataclasses.asdict(model_config)))):
            raise ValueError(f"the run in {out} was trained with a different model config; "
                             "resume with the same model and options")
        model.load_state_dict(load_file(out / WEIGHTS))
        normalizers = normalizers_of(record)
    else:
        normalizers = fit_normalizers(train_set)
    gradient_weight = config.gradient_loss_weight
    if gradient_weight is None:
        gradient_weight = 0.1 if task.kind == "operator" and len(task.grid) == 2 else 0.0
    record = _checkpoint_record(model, task, normalizers, config, facts)

    # Evaluation (rank 0 only) uses the bare module: DDP's forward may start collectives
    # that the other ranks would never join.
    evaluator = _Normalised(model, task, normalizers)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    wrapped = _Normalised(model, task, normalizers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr,
                                  weight_decay=config.weight_decay)
    steps_per_epoch = math.ceil(len(train_set) / config.batch_size)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=config.lr, total_steps=config.epochs * steps_per_epoch)
    first_epoch, step = 0, 0
    if resume:
        state = json.loads((out / STATE_JSON).read_text())
        tensors = load_file(out / STATE_TENSORS)
        optimizer.load_state_dict(_optimizer_state(tensors, state["optimizer"]))
        scheduler.load_state_dict(state["scheduler"])
        first_epoch, step = state["epoch"], state["step"]
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    metrics: dict[str, Any] = {}
    model.train()
    for epoch in range(first_epoch, config.epochs):
        # The data order and the noise of epoch e depend on (seed, e) only: resuming needs
        # no random-number state.
        generator = torch.Generator().manual_seed(config.seed * 1_000_003 + epoch)
        order = torch.randperm(len(train_set), generator=generator).numpy()
        bar = tqdm(total=len(train_set), desc=f"epoch {epoch + 1}/{config.epochs}",
                   unit="item", disable=not progress or rank != 0, leave=False)
        total, count, epoch_start = 0.0, 0, time.perf_counter()
        for indices in _batches(order, config.batch_size, rank, world):
            batch = {k: v.to(device) for k, v in _collate(train_set, indices).items()}
            if task.kind == "operator":
                x = batch["x"]
                noise = None
                if config.noise_std:
                    noise = config.noise_std * torch.randn(x.shape, generator=generator)
                    noise = noise.to(x.device)
                prediction = wrapped(x, noise)
                loss = operator_loss(prediction, batch["y"], gradient_weight)
            else:
                loss = wrapped.rollout_loss(batch["history"], batch["target"],
                                            batch["conditioning"], config, generator)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.max_grad_norm:
                nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            step += 1
            loss_value = _mean_across(float(loss.detach()), world)
            total += loss_value * len(indices) * world
            count += len(indices) * world
            bar.update(len(indices) * world)
            bar.set_postfix(loss=f"{loss_value:.4f}",
                            items_per_s=f"{count / (time.perf_counter() - epoch_start):.1f}")
        bar.close()
        metrics = {"epoch": epoch + 1, "step": step, "train_loss": total / max(count, 1),
                   "lr": scheduler.get_last_lr()[0],
                   "seconds": time.perf_counter() - epoch_start}
        if rank == 0:
            metrics.update(_evaluate_split(evaluator, test_set, config.batch_size, device))
            save_run(out, model, optimizer, scheduler, record, epoch + 1, step)
            with open(out / METRICS, "a") as log:
                log.write(json.dumps(metrics) + "\n")
            if progress:
                shown = {k: (round(v, 5) if isinstance(v, float) else v)
                         for k, v in metrics.items() if not isinstance(v, list)}
                tqdm.write(json.dumps(shown))
        if time_limit is not None and _stop_everywhere(
                time.perf_counter() - started > time_limit, world):
            break
    train_set.close()
    test_set.close()
    return metrics


# ---------------------------------------------------------------------------------------
# Evaluation.
# ---------------------------------------------------------------------------------------
def evaluate(run, data, *, out=None, batch_size: int = 8,
             device: str = "cpu") -> dict[str, Any]:
    """Relative L2 of a trained run on a dataset, and optionally its predictions as netCDF.

    Operator tasks predict every sample's outputs. Rollout tasks start from each sample's
    first ``window`` frames and roll out autoregressively to the end of the trajectory; the
    errors are per step and over the whole horizon.

    Returns
    -------
    dict
        ``rel_l2`` (mean over samples), ``rel_l2_per_sample``, and for rollouts
        ``rel_l2_per_step``.
    """
    model, record = load_checkpoint(run, device=device)
    task = Task.from_dict(record["task"])
    wrapped = normalised_model(model, record)
    with schema.open_dataset(data) as ds:
        missing = [v for v in (*task.inputs, *task.outputs, *task.conditioning)
                   if v not in ds.data_vars]
        if missing:
            raise ValueError(f"{data} lacks the variables {missing} the model was trained on "
                             f"(it has {sorted(ds.data_vars)})")
        num_samples = ds.sizes[schema.SAMPLE]
        grid_dims = schema.SPATIAL_DIMS[len(task.grid)]
        grid = tuple(ds.sizes[d] for d in grid_dims)
        if grid != task.grid:
            raise ValueError(f"the model was trained on a {task.grid} grid; {data} is {grid}")
        frames = ds.sizes.get(schema.TIME, 0)
    eval_task = task
    if task.kind == "rollout":
        if frames <= task.window:
            raise ValueError(f"the trajectories in {data} have {frames} frames; the model "
                             f"needs more than its window of {task.window}")
        eval_task = dataclasses.replace(task, horizon=frames - task.window)
    dataset = TaskDataset(data, eval_task, np.arange(num_samples))
    predictions, errors = [], []
    with torch.no_grad():
        for start in range(0, num_samples, batch_size):
            batch = _collate(dataset, range(start, min(start + batch_size, num_samples)))
            batch = {k: v.to(device) for k, v in batch.items()}
            if task.kind == "operator":
                pred = wrapped(batch["x"])
                errors.append(relative_l2(pred, batch["y"])[:, None])
            else:
                window, frames_out, step_errors = batch["history"], [], []
                for k in range(eval_task.horizon):
                    frame = wrapped(model_inputs(window, batch["conditioning"]))
                    frames_out.append(frame)
                    step_errors.append(relative_l2(frame, batch["target"][:, k]))
                    window = torch.cat([window[:, 1:], frame.unsqueeze(1)], dim=1)
                pred = torch.stack(frames_out, dim=1)
                errors.append(torch.stack(step_errors, dim=1))
            predictions.append(pred.cpu())
    dataset.close()
    errors_t = torch.cat(errors)
    result: dict[str, Any] = {"rel_l2": float(errors_t.mean()),
                              "rel_l2_per_sample": [float(v) for v in errors_t.mean(dim=1)]}
    if task.kind == "rollout":
        result["rel_l2_per_step"] = [float(v) for v in errors_t.mean(dim=0)]
    if out is not None:
        _write_predictions(out, torch.cat(predictions).numpy(), data, task, run, result)
    return result


def _write_predictions(out, values: np.ndarray, data, task: Task, run, result) -> None:
    """Predictions as an ssmpde dataset (same coordinates and attributes as ``data``)."""
    with schema.open_dataset(data) as ds:
        coords = {name: ds[name].copy() for name in ds.coords}
        if task.kind == "rollout":
            coords[schema.TIME] = ds[schema.TIME].isel({schema.TIME: slice(task.window, None)})
        variables = {}
        for c, name in enumerate(task.outputs):
            dims = ds[name].dims
            array = values[:, c] if task.kind == "operator" else values[:, :, c]
            variables[name] = (dims, array.astype(ds[name].dtype), dict(ds[name].attrs))
        attrs = {k: v for k, v in ds.attrs.items()}
    import xarray as xr

    predicted = xr.Dataset({k: xr.DataArray(v[1], dims=v[0], attrs=v[2])
                            for k, v in variables.items()}, coords=coords, attrs=attrs)
    predicted.attrs["title"] = f"Predictions of {Path(run).name} on {Path(data).name}"
    predicted.attrs["history"] = (f"{attrs.get('history', '')}\n"
                                  f"predicted by ssmpde run {Path(run).resolve()}").strip()
    predicted.attrs["ssmpde_predictions"] = json.dumps(
        {"run": str(Path(run).resolve()), "data": str(Path(data).resolve()),
         "rel_l2": result["rel_l2"]})
    schema.save(schema.validate(predicted), out, overwrite=True)
