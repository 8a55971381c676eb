"""Training data from ssmpde datasets: tasks, lazy torch datasets, normalisers.

Two kinds of task (``shared/specs/surrogates.md``, training conventions):

* **operator** pairs for steady problems: input variables → output variables of the same
  sample (Darcy ``a → u``);
* **rollout** windows for time-dependent ones: ``window`` frames of the evolving fields in,
  the next ``horizon`` frames out, conditioned on the sample's parameters (``viscosity``,
  ``forcing``, … every data variable without a ``time`` dimension).

Model inputs fold time into channels: ``[frame 0 fields, …, frame window-1 fields,
conditioning]``; a rollout model predicts one frame (``len(fields)`` channels) at a time.
Items are read lazily from the file, one sample per access (the files are chunked one sample
per chunk); the train/test split is by sample index.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch
import xarray as xr

from ssmpde import data as schema

__all__ = ["Normalizer", "Task", "TaskDataset", "infer_task", "split_samples"]

SAMPLE, TIME = schema.SAMPLE, schema.TIME


@dataclass(frozen=True)
class Task:
    """What a surrogate learns from a dataset.

    Attributes
    ----------
    kind : {"operator", "rollout"}
    inputs : tuple of str
        Operator: input variables. Rollout: the evolving fields (also the outputs).
    outputs : tuple of str
        Operator: output variables. Rollout: equal to ``inputs``.
    conditioning : tuple of str
        Rollout: per-sample parameters appended as channels (scalars broadcast over the grid).
    window, horizon : int
        Rollout: frames in, frames out.
    grid : tuple of int
        The spatial grid of the data.
    dt : float
        Rollout: the record interval between frames (the Stepper's dt).
    """

    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    grid: tuple[int, ...]
    conditioning: tuple[str, ...] = ()
    window: int = 1
    horizon: int = 1
    dt: float = 0.0

    @property
    def in_channels(self) -> int:
        if self.kind == "operator":
            return len(self.inputs)
        return self.window * len(self.inputs) + len(self.conditioning)

    @property
    def out_channels(self) -> int:
        return len(self.outputs)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, values: dict) -> Task:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def _spatial_dims(var: xr.DataArray) -> tuple[str, ...]:
    return tuple(d for d in var.dims if d not in (SAMPLE, TIME))


def infer_task(ds: xr.Dataset, *, window: int = 1, horizon: int = 1,
               inputs: tuple[str, ...] | None = None,
               outputs: tuple[str, ...] | None = None) -> Task:
    """The task a dataset defines, with clear errors when it cannot.

    Data with a ``time`` dimension gives a rollout task over every variable that has one,
    conditioned on every other per-sample variable; steady data gives an operator task,
    ``a → u`` for Darcy or the given ``inputs``/``outputs``.
    """
    grid_vars = [v for v in ds.data_vars if SAMPLE in ds[v].dims]
    if not grid_vars:
        raise ValueError("the dataset has no per-sample data variables to learn from")
    if TIME in ds.dims and any(TIME in ds[v].dims for v in grid_vars):
        fields = tuple(inputs or [v for v in grid_vars if TIME in ds[v].dims])
        conditioning = tuple(v for v in grid_vars if TIME not in ds[v].dims)
        missing = [v for v in fields if v not in ds.data_vars]
        if missing:
            raise ValueError(f"variables {missing} are not in the dataset; it has "
                             f"{sorted(ds.data_vars)}")
        frames = ds.sizes[TIME]
        if window < 1 or horizon < 1:
            raise ValueError(f"window and horizon must be at least 1, got {window} and {horizon}")
        if window + horizon > frames:
            raise ValueError(f"window {window} + horizon {horizon} = {window + horizon} frames, "
                             f"but the trajectories have only {frames}: shorten the window or "
                             "the horizon, or generate longer trajectories")
        times = ds[TIME].values
        dt = float(times[1] - times[0]) if frames > 1 else 0.0
        grid = tuple(ds.sizes[d] for d in _spatial_dims(ds[fields[0]]))
        return Task("rollout", fields, fields, grid, conditioning, window, horizon, dt)
    equation = ds.attrs.get("ssmpde_equation")
    if inputs is None and outputs is None and equation == "darcy":
        inputs, outputs = ("a",), ("u",)
    if not inputs or not outputs:
        raise ValueError("a steady dataset needs the input and output variables named "
                         f"(inputs=..., outputs=...); it has {sorted(ds.data_vars)}")
    missing = [v for v in (*inputs, *outputs) if v not in ds.data_vars]
    if missing:
        raise ValueError(f"the task needs variables {missing}, which the dataset does not have "
                         f"(it has {sorted(ds.data_vars)})")
    grid = tuple(ds.sizes[d] for d in _spatial_dims(ds[outputs[0]]))
    return Task("operator", tuple(inputs), tuple(outputs), grid)


def split_samples(num_samples: int, num_test: int) -> tuple[np.ndarray, np.ndarray]:
    """Train / test sample indices: the first ``num_samples - num_test`` train, the rest test."""
    if not 0 <= num_test < num_samples:
        raise ValueError(f"cannot hold out {num_test} test samples from {num_samples}")
    return np.arange(num_samples - num_test), np.arange(num_samples - num_test, num_samples)


class TaskDataset(torch.utils.data.Dataset):
    """Items of a task, read lazily from an ssmpde dataset file.

    Operator items: ``{"x": [in, *grid], "y": [out, *grid]}``. Rollout items:
    ``{"history": [window, fields, *grid], "target": [horizon, fields, *grid],
    "conditioning": [k, *grid]}``, one per (sample, start frame). Values are float32,
    not normalised (the trainer normalises batches).

    Parameters
    ----------
    path : str or Path
        netCDF file or zarr store written by ssmpde.
    task : Task
    samples : array of int
        Which samples (by position) this dataset serves.
    """

    def __init__(self, path, task: Task, samples):
        self.path = os.fspath(path)
        self.task = task
        self.samples = np.asarray(samples, dtype=np.int64)
        self._ds: xr.Dataset | None = None
        if task.kind == "rollout":
            with schema.open_dataset(self.path) as ds:
                frames = ds.sizes[TIME]
            self.starts = frames - task.window - task.horizon + 1
        else:
            self.starts = 1

    def _dataset(self) -> xr.Dataset:
        if self._ds is None:  # opened per process (DataLoader workers each open their own)
            self._ds = schema.open_dataset(self.path)
        return self._ds

    def __len__(self) -> int:
        return len(self.samples) * self.starts

    def _read(self, name: str, sample: int, times: slice | None = None) -> np.ndarray:
        var = self._dataset()[name].isel({SAMPLE: sample})
        if times is not None:
            var = var.isel({TIME: times})
        return np.asarray(var.values, dtype=np.float32)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        sample = int(self.samples[index // self.starts])
        task = self.task
        if task.kind == "operator":
            x = np.stack([self._read(v, sample) for v in task.inputs])
            y = np.stack([self._read(v, sample) for v in task.outputs])
            return {"x": torch.from_numpy(x), "y": torch.from_numpy(y)}
        start = index % self.starts
        frames = slice(start, start + task.window + task.horizon)
        fields = np.stack([self._read(v, sample, frames) for v in task.inputs], axis=1)
        conditioning = [np.broadcast_to(self._read(v, sample), task.grid)
                        for v in task.conditioning]
        cond = (np.stack(conditioning) if conditioning
                else np.zeros((0, *task.grid), np.float32))
        return {"history": torch.from_numpy(fields[: task.window].copy()),
                "target": torch.from_numpy(fields[task.window:].copy()),
                "conditioning": torch.from_numpy(np.ascontiguousarray(cond))}

    def close(self) -> None:
        if self._ds is not None:
            self._ds.close()
            self._ds = None

    def __getstate__(self):  # a DataLoader worker reopens the file
        state = self.__dict__.copy()
        state["_ds"] = None
        return state


@dataclass
class Normalizer:
    """Unit Gaussian per channel: ``(x - mean) / std`` over ``[batch, channel, *grid]``.

    Statistics come from the training split only and are stored in the checkpoint.
    """

    mean: list[float] = field(default_factory=list)
    std: list[float] = field(default_factory=list)

    def _stats(self, x: torch.Tensor):
        shape = (1, -1) + (1,) * (x.dim() - 2)
        mean = torch.tensor(self.mean, dtype=x.dtype, device=x.device).view(shape)
        std = torch.tensor(self.std, dtype=x.dtype, device=x.device).view(shape)
        return mean, std

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(x)
        return (x - mean) / std

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(x)
        return x * std + mean

    @classmethod
    def fit(cls, arrays) -> Normalizer:
        """Per-channel statistics of ``[channel, *grid]`` arrays, accumulated in float64.

        A constant channel (std 0, e.g. one viscosity for every sample) gets std 1, so it
        encodes to 0 instead of dividing by zero.
        """
        total = sq = None
        count = 0
        for a in arrays:
            a = np.asarray(a, dtype=np.float64).reshape(a.shape[0], -1)
            if total is None:
                total, sq = np.zeros(a.shape[0]), np.zeros(a.shape[0])
            total += a.sum(axis=1)
            sq += np.square(a).sum(axis=1)
            count += a.shape[1]
        if total is None:
            raise ValueError("cannot fit a normaliser on no data")
        mean = total / count
        var = np.maximum(sq / count - mean ** 2, 0.0)
        std = np.sqrt(var)
        std = np.where(std > 1e-12 * np.maximum(1.0, np.abs(mean)), std, 1.0)
        if not (np.isfinite(mean).all() and np.isfinite(std).all()):
            raise ValueError("the training data contain NaN or inf; regenerate or clean it")
        return cls([float(m) for m in mean], [float(s) for s in std])


def fit_normalizers(dataset: TaskDataset) -> dict[str, Normalizer]:
    """Normalisers of a task from its training dataset.

    Operator: ``inputs`` and ``outputs`` over the variables. Rollout: ``fields`` (per field,
    over every frame of the training samples) and ``conditioning``; the model's input
    normaliser repeats the field statistics once per window frame.
    """
    task = dataset.task
    if task.kind == "operator":
        items = [dataset[i] for i in range(len(dataset))]
        return {"inputs": Normalizer.fit(item["x"].numpy() for item in items),
                "outputs": Normalizer.fit(item["y"].numpy() for item in items)}
    ds = dataset._dataset()
    fields = Normalizer.fit(
        np.stack([np.asarray(ds[v].isel({SAMPLE: int(s)}).values, np.float64) for v in
                  task.inputs]).reshape(len(task.inputs), -1) for s in dataset.samples)
    cond = Normalizer()
    if task.conditioning:
        cond = Normalizer.fit(
            np.stack([np.broadcast_to(np.asarray(ds[v].isel({SAMPLE: int(s)}).values),
                                      task.grid) for v in task.conditioning])
            for s in dataset.samples)
    return {"fields": fields, "conditioning": cond}


def model_inputs(history: torch.Tensor, conditioning: torch.Tensor) -> torch.Tensor:
    """``[batch, window, fields, *grid]`` and ``[batch, k, *grid]`` → ``[batch, channels, *grid]``
    (time folded into channels, conditioning last)."""
    return torch.cat([history.flatten(1, 2), conditioning], dim=1)


def input_normalizer(task: Task, normalizers: dict[str, Normalizer]) -> Normalizer:
    """The normaliser of the model's input channels."""
    if task.kind == "operator":
        return normalizers["inputs"]
    f, c = normalizers["fields"], normalizers["conditioning"]
    return Normalizer(f.mean * task.window + c.mean, f.std * task.window + c.std)


def output_normalizer(task: Task, normalizers: dict[str, Normalizer]) -> Normalizer:
    """The normaliser of the model's output channels (one frame of the fields)."""
    return normalizers["outputs"] if task.kind == "operator" else normalizers["fields"]


def relative_l2(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """‖pred − true‖₂ / ‖true‖₂ per sample (over every non-batch axis), ``[batch]``."""
    difference = (prediction - target).flatten(1)
    norm = target.flatten(1).norm(dim=1)
    return difference.norm(dim=1) / norm.clamp_min(torch.finfo(target.dtype).tiny)


def grid_size(task: Task) -> int:
    return math.prod(task.grid)
