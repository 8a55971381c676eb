"""Training data from ssmpde datasets: tasks read from variable roles, lazy torch datasets,
normalisers. (Not to be confused with :mod:`ssmpde.data`, the dataset schema and file IO.)

Two kinds of task (``docs/models/training.md``), both read from the roles the solver wrote
on each variable (:data:`ssmpde.data.ROLES`), never guessed from dims:

* **rollout** windows for time-dependent data: ``window`` frames of the ``state`` fields in,
  the next ``horizon`` frames out, conditioned on the sample's scalar ``parameter`` variables
  and its ``forcing`` fields (static, or time-dependent, taken at the time of the window's
  last frame). A non-scalar parameter reaches the model only through the grid variable named
  in its ``encoded_by`` attribute (F-FNO forcing amplitudes → the forcing field), never by
  broadcasting;
* **operator** pairs: input variables → output variables of the same sample. Steady data
  default to ``forcing`` (and scalar ``parameter``) inputs → ``state`` outputs (Darcy
  ``a → u``); any data take explicit selectors, where ``name@k`` is frame ``k`` of a
  time-dependent variable (Burgers ``u@0 → u@-1``).

Items are read lazily from the file, one sample per access (the files are chunked one sample
per chunk); the train/test split is by sample index.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
import xarray as xr

from ssmpde.core import relative_l2
from ssmpde.data import ENCODED_BY, SAMPLE, TIME, X, Y, config_of, open_dataset, roles_of

__all__ = ["NORMALIZATIONS", "Normalizer", "Task", "TaskDataset", "fit_normalizers",
           "infer_task", "relative_l2", "split_samples"]

LAYOUTS = ("channels", "history")


@dataclass(frozen=True)
class Task:
    """What a surrogate learns from a dataset.

    Attributes
    ----------
    kind : {"operator", "rollout"}
    inputs : tuple of str
        Operator: input selectors (``name`` or ``name@frame``). Rollout: the state fields
        (also the outputs).
    outputs : tuple of str
        Operator: output selectors. Rollout: equal to ``inputs``.
    grid : tuple of int
        The spatial grid of the data (``(ny, nx)`` or ``(nx,)``).
    conditioning : tuple of str
        Rollout: scalar parameters and forcing fields appended as channels.
    window, horizon : int
        Rollout: frames in, frames out.
    dt : float
        Rollout: the record interval between frames (the Stepper's dt).
    time_dependent : tuple of str
        Rollout: the conditioning variables that change with time (read at each step).
    correction : bool
        Rollout: the model corrects a coarse solver's step (``target="correction"``): it also
        sees the coarse prediction of the next frame, one channel per field, and predicts
        the correction (see :mod:`ssmpde.surrogates.correction`).
    correction_mode : {"after", "source", "flux"}
        A corrector's place: ``after`` the coarse step (the correction is added to its
        prediction), or inside it as a ``source`` term of the right-hand side over the
        interval (the model then sees the current frame in the coarse prediction's channels
        and its correction δ enters the solver as S = δ / dt), or after it in ``flux`` form
        (finite-volume solvers: the model predicts a correction flux per conserved density
        and face, whose divergence changes the conserved densities; the totals are
        conserved).
    """

    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    grid: tuple[int, ...]
    conditioning: tuple[str, ...] = ()
    window: int = 1
    horizon: int = 1
    dt: float = 0.0
    time_dependent: tuple[str, ...] = ()
    correction: bool = False
    correction_mode: str = "after"

    @property
    def in_channels(self) -> int:
        """Model input channels with the history folded into channels."""
        return self.input_channels("channels")

    def input_channels(self, layout: str) -> int:
        """Input channels of a model: all of them (``channels``), or per frame (``history``)."""
        if self.kind == "operator":
            return len(self.inputs)
        # A corrector's extra channels: the coarse prediction of the next frame.
        coarse = len(self.inputs) if self.correction else 0
        if layout == "history":
            return len(self.inputs) + coarse + len(self.conditioning)
        return self.window * len(self.inputs) + coarse + len(self.conditioning)

    @property
    def out_channels(self) -> int:
        """Model output channels: one per field; a flux-form corrector's one per field and
        grid axis (the faces' correction fluxes)."""
        if self.correction and self.correction_mode == "flux":
            return len(self.outputs) * len(self.grid)
        return len(self.outputs)

    @property
    def fields(self) -> tuple[str, ...]:
        """The variables the task predicts (selectors stripped of their frame)."""
        return tuple(parse_selector(s)[0] for s in self.outputs)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, values: dict) -> Task:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def parse_selector(selector: str) -> tuple[str, int | None]:
    """``"u@-1"`` → ``("u", -1)``; ``"a"`` → ``("a", None)``."""
    name, sep, frame = str(selector).partition("@")
    if not sep:
        return name, None
    try:
        return name, int(frame)
    except ValueError:
        raise ValueError(f"bad variable selector {selector!r}: use NAME or NAME@FRAME with an "
                         "integer frame index (u@0 is the first frame, u@-1 the last)") from None


def _spatial_dims(var: xr.DataArray) -> tuple[str, ...]:
    return tuple(d for d in var.dims if d in (Y, X))


def _grid_of(ds: xr.Dataset, name: str) -> tuple[int, ...]:
    return tuple(ds.sizes[d] for d in _spatial_dims(ds[name]))


def _check_selectors(ds: xr.Dataset, selectors, what: str) -> tuple[str, ...]:
    selectors = tuple(selectors)
    if not selectors:
        raise ValueError(f"the task needs at least one {what} variable")
    missing = [s for s in selectors if parse_selector(s)[0] not in ds.data_vars]
    if missing:
        raise ValueError(f"the task needs variables {[parse_selector(s)[0] for s in missing]}, "
                         f"which the dataset does not have (it has {sorted(ds.data_vars)})")
    for s in selectors:
        name, frame = parse_selector(s)
        var = ds[name]
        if frame is not None:
            if TIME not in var.dims:
                raise ValueError(f"{s!r} selects a frame, but {name!r} has no time axis")
            if not -var.sizes[TIME] <= frame < var.sizes[TIME]:
                raise ValueError(f"{s!r}: {name!r} has only {var.sizes[TIME]} frames")
        elif TIME in var.dims:
            raise ValueError(f"{name!r} changes in time: pick a frame, e.g. {name}@0 or "
                             f"{name}@-1")
    return selectors


def _conditioning(ds: xr.Dataset, roles: dict[str, str], states) -> tuple[tuple, tuple]:
    """Scalar parameters and forcing fields; non-scalar parameters by their encoding only."""
    chosen, skipped = [], []
    for name, role in roles.items():
        var = ds[name]
        if role == "forcing":
            chosen.append(name)
        elif role == "parameter":
            if var.dims == (SAMPLE,):
                chosen.append(name)
            elif var.attrs.get(ENCODED_BY) not in roles:
                skipped.append(name)
    if skipped:
        warnings.warn(f"parameters {skipped} are not scalars and declare no grid encoding "
                      f"({ENCODED_BY!r} attribute): the model does not see them",
                      stacklevel=3)
    for name in chosen:
        if _spatial_dims(ds[name]) and _grid_of(ds, name) != _grid_of(ds, states[0]):
            raise ValueError(f"forcing {name!r} is on a {_grid_of(ds, name)} grid, the states "
                             f"on {_grid_of(ds, states[0])}")
    time_dependent = tuple(n for n in chosen if TIME in ds[n].dims)
    return tuple(chosen), time_dependent


def _declared_roles(ds: xr.Dataset) -> dict[str, str]:
    """The roles the generating solver declares for its variables ({} if it is unknown)."""
    from ssmpde.solvers.base import solver_of

    try:
        solver = solver_of(ds)
    except ValueError:  # not written by a registered solver (a converted file, say)
        return {}
    return {name: spec.role for name, spec in solver.variables().items()}


def infer_task(ds: xr.Dataset, *, window: int = 1, horizon: int = 1,
               inputs: tuple[str, ...] | None = None,
               outputs: tuple[str, ...] | None = None) -> Task:
    """The task a dataset defines, from its variable roles, with clear errors when it cannot.

    Parameters
    ----------
    ds : xarray.Dataset
        An ssmpde dataset whose variables carry roles.
    window, horizon : int
        Rollout tasks: frames in and out per training item.
    inputs, outputs : sequence of str, optional
        Given ``outputs`` (or steady data), an operator task from these selectors
        (``name`` or ``name@frame``). Without ``outputs`` on time-dependent data, ``inputs``
        names the state fields of the rollout (default: every ``state`` variable); the other
        time-dependent states become conditioning through their first frame (``tracer@0``:
        Euler surrogates that predict ρ, u, v, p and see where the tracer started).
    """
    roles = roles_of(ds)
    states = [v for v, r in roles.items() if r == "state"]
    evolving = [v for v in states if TIME in ds[v].dims]
    if outputs is None and evolving:
        fields = tuple(inputs) if inputs else tuple(evolving)
        bad = [v for v in fields if v not in evolving]
        if bad:
            raise ValueError(f"rollout fields must be time-dependent state variables; {bad} "
                             f"are not (the states are {evolving})")
        frames = ds.sizes[TIME]
        if window < 1 or horizon < 1:
            raise ValueError(f"window and horizon must be at least 1, got {window} and {horizon}")
        if window + horizon > frames:
            raise ValueError(f"window {window} + horizon {horizon} = {window + horizon} frames, "
                             f"but the trajectories have only {frames}: shorten the window or "
                             "the horizon, or generate longer trajectories")
        times = ds[TIME].values
        dt = float(times[1] - times[0]) if frames > 1 else 0.0
        conditioning, time_dependent = _conditioning(ds, roles, fields)
        # Evolving states the model does not predict (a passive tracer) enter through their
        # first frame: static, so a rollout never needs frames the model did not make.
        context = tuple(f"{v}@0" for v in evolving if v not in fields)
        return Task("rollout", fields, fields, _grid_of(ds, fields[0]), conditioning + context,
                    window, horizon, dt, time_dependent)
    if inputs is None and outputs is None:
        inputs = tuple(v for v, r in roles.items() if r == "forcing"
                       or (r == "parameter" and ds[v].dims == (SAMPLE,)))
        outputs = tuple(states)
        missing = [v for v, r in _declared_roles(ds).items()
                   if r in ("state", "forcing") and v not in ds.data_vars]
        if missing:
            raise ValueError(f"the task needs variables {missing}, which the dataset does not "
                             f"have (it has {sorted(ds.data_vars)})")
        if not inputs or not outputs:
            raise ValueError("cannot tell this steady dataset's inputs and outputs from its "
                             f"roles {roles}: name them (inputs=..., outputs=...; "
                             "--inputs/--outputs)")
    if not inputs or not outputs:
        raise ValueError("an operator task needs both inputs and outputs named; the dataset "
                         f"has {sorted(ds.data_vars)}")
    inputs = _check_selectors(ds, inputs, "input")
    outputs = _check_selectors(ds, outputs, "output")
    grid = _grid_of(ds, parse_selector(outputs[0])[0])
    for s in (*inputs, *outputs):
        name = parse_selector(s)[0]
        if _spatial_dims(ds[name]) and _grid_of(ds, name) != grid:
            raise ValueError(f"{name!r} is on a {_grid_of(ds, name)} grid, the outputs on {grid}")
        if not _spatial_dims(ds[name]) and ds[name].dims != (SAMPLE,):
            raise ValueError(f"{name!r} is neither a grid field nor a per-sample scalar")
    return Task("operator", inputs, outputs, grid)


def split_samples(num_samples: int, num_test: int) -> tuple[np.ndarray, np.ndarray]:
    """Train / test sample indices: the first ``num_samples - num_test`` train, the rest test."""
    if not 0 <= num_test < num_samples:
        raise ValueError(f"cannot hold out {num_test} test samples from {num_samples}")
    return np.arange(num_samples - num_test), np.arange(num_samples - num_test, num_samples)


class TaskDataset(torch.utils.data.Dataset):
    """Items of a task, read lazily from an ssmpde dataset file.

    Operator items: ``{"x": [in, *grid], "y": [out, *grid]}``. Rollout items:
    ``{"history": [window, fields, *grid], "target": [horizon, fields, *grid],
    "conditioning": [horizon, k, *grid]}`` (the conditioning of each predicted step), one per
    (sample, start frame). Values are float32, not normalised (the trainer normalises batches).

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
            with open_dataset(self.path) as ds:
                frames = ds.sizes[TIME]
            self.starts = frames - task.window - task.horizon + 1
        else:
            self.starts = 1

    def _dataset(self) -> xr.Dataset:
        if self._ds is None:  # opened per process (DataLoader workers each open their own)
            self._ds = open_dataset(self.path)
        return self._ds

    def __len__(self) -> int:
        return len(self.samples) * self.starts

    def _read(self, selector: str, sample: int, times: slice | int | None = None,
              dtype=np.float32) -> np.ndarray:
        name, frame = parse_selector(selector)
        var = self._dataset()[name]
        if SAMPLE in var.dims:  # a field without one (The Well's constant fields) is shared
            var = var.isel({SAMPLE: sample})
        if frame is not None:
            var = var.isel({TIME: frame})
        elif times is not None and TIME in var.dims:
            var = var.isel({TIME: times})
        return np.asarray(var.values, dtype=dtype)

    def _grid_channel(self, selector: str, sample: int) -> np.ndarray:
        # Scalars (per-sample parameters) fill the grid: one value, one channel.
        return np.broadcast_to(self._read(selector, sample), self.task.grid)

    def conditioning(self, sample: int, frames: range, dtype=np.float32) -> np.ndarray:
        """``[len(frames), k, *grid]``: the conditioning for steps made from ``frames``."""
        task = self.task
        if not task.conditioning:
            return np.zeros((len(frames), 0, *task.grid), dtype)
        static = {name: np.broadcast_to(self._read(name, sample, dtype=dtype), task.grid)
                  for name in task.conditioning if name not in task.time_dependent}
        moving = {name: self._read(name, sample, slice(frames.start, frames.stop), dtype)
                  for name in task.time_dependent}
        return np.stack([np.stack([moving[name][i] if name in moving else static[name]
                                   for name in task.conditioning])
                         for i in range(len(frames))])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        sample = int(self.samples[index // self.starts])
        task = self.task
        if task.kind == "operator":
            x = np.stack([self._grid_channel(v, sample) for v in task.inputs])
            y = np.stack([self._grid_channel(v, sample) for v in task.outputs])
            return {"x": torch.from_numpy(x), "y": torch.from_numpy(y)}
        start = index % self.starts
        frames = slice(start, start + task.window + task.horizon)
        fields = np.stack([self._read(v, sample, frames) for v in task.inputs], axis=1)
        # Step k predicts frame start + window + k from the window ending one frame before.
        last = start + task.window - 1
        cond = self.conditioning(sample, range(last, last + task.horizon))
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


#: How a normaliser is fitted (:attr:`TrainConfig.normalization`): unit Gaussian per channel,
#: the channel's range mapped to [-1, 1], or no normalisation.
NORMALIZATIONS = ("gaussian", "range", "none")


@dataclass
class Normalizer:
    """A per-channel affine map ``(x - mean) / std`` over ``[batch, channel, *grid]``.

    ``mean`` and ``std`` are the offset and the scale; :meth:`fit` chooses them (one of
    :data:`NORMALIZATIONS`): the channel's mean and standard deviation (``gaussian``, unit
    Gaussian), its midpoint and half-range (``range``: the training data's values map onto
    [-1, 1]), or 0 and 1 (``none``). Statistics come from the training split only and are
    stored in the checkpoint as the two lists, whatever the kind.
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
    def fit(cls, arrays, *, names=None, kind: str = "gaussian") -> Normalizer:
        """Per-channel statistics of ``[channel, *grid]`` arrays, accumulated in float64.

        ``kind`` (:data:`NORMALIZATIONS`) picks the offset and scale: ``gaussian`` the mean
        and standard deviation; ``range`` the midpoint and half of max − min, so the values
        seen in training span [-1, 1] (centred on zero like the Gaussian's, so the two differ
        in scale only); ``none`` 0 and 1 (the statistics are still computed, to refuse data
        with NaN or inf). A constant channel (std 0, e.g. one viscosity for every sample)
        gets scale 1, so it encodes to 0 (``none``: stays as it is) instead of dividing by
        zero. With ``names`` (the channels a model must predict), a constant channel is an
        error instead: there is nothing to learn, and its relative error is undefined where
        it is zero.
        """
        if kind not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {kind!r}")
        total = sq = low = high = shift = None
        count = 0
        # The sums are of x - shift, shift being one value of the channel: sq/n - mean**2 of
        # the raw values cancels to a rounding residue (~1e-17 mean**2, so a std ~1e-9 mean)
        # for a constant channel, which then escaped the constant test below, and `range`
        # divided by its exact zero half-range (NaN). Shifted, a constant channel sums to 0.
        # NaN, infinity or overflow in the sums make the statistics non-finite, refused below
        # in one line (numpy's RuntimeWarnings would print before it).
        with np.errstate(invalid="ignore", over="ignore"):
            for a in arrays:
                a = np.asarray(a, dtype=np.float64).reshape(a.shape[0], -1)
                if total is None:
                    total, sq = np.zeros(a.shape[0]), np.zeros(a.shape[0])
                    low, high = np.full(a.shape[0], np.inf), np.full(a.shape[0], -np.inf)
                if not a.shape[1]:
                    continue
                if shift is None:
                    shift = a[:, 0].copy()
                centred = a - shift[:, None]
                total += centred.sum(axis=1)
                sq += np.square(centred).sum(axis=1)
                low, high = np.minimum(low, a.min(axis=1)), np.maximum(high, a.max(axis=1))
                count += a.shape[1]
            if total is None:
                raise ValueError("cannot fit a normaliser on no data")
            offset = total / count
            mean = offset + (0.0 if shift is None else shift)
            var = np.maximum(sq / count - offset ** 2, 0.0)
            std = np.sqrt(var)
        if not (np.isfinite(mean).all() and np.isfinite(std).all()):
            raise ValueError("the training data contain NaN or inf, or values too large for "
                             "float64 statistics (above ~1e154); regenerate or clean it")
        constant = std <= 1e-12 * np.maximum(1.0, np.abs(mean))
        if names is not None and constant.any():
            which = [f"{names[c]} (= {mean[c]:.6g})" for c in np.flatnonzero(constant)]
            raise ValueError(f"the training data's {', '.join(which)} never change: there is "
                             "nothing to learn; check the dataset or the --outputs")
        if kind == "range":
            mean, std = (high + low) / 2, (high - low) / 2
        elif kind == "none":
            mean, std = np.zeros_like(mean), np.ones_like(std)
        std = np.where(constant, 1.0, std)
        return cls([float(m) for m in mean], [float(s) for s in std])


def fit_normalizers(dataset: TaskDataset, *, increments: bool = False,
                    kind: str = "gaussian") -> dict[str, Normalizer]:
    """Normalisers of a task from its training dataset, each fitted as ``kind`` says
    (:data:`NORMALIZATIONS`; :meth:`Normalizer.fit`).

    Operator: ``inputs`` and ``outputs`` over the variables. Rollout: ``fields`` (per field,
    over every frame of the training samples) and ``conditioning`` (per channel, over every
    frame of the time-dependent ones); the model's input normaliser repeats the field
    statistics once per window frame. With ``increments``, also ``increments``: per field,
    over the differences of consecutive frames (a model that predicts increments).
    """
    task = dataset.task
    if task.kind == "operator":
        items = [dataset[i] for i in range(len(dataset))]
        outputs = Normalizer.fit((item["y"].numpy() for item in items), names=task.outputs,
                                 kind=kind)
        return {"inputs": Normalizer.fit((item["x"].numpy() for item in items), kind=kind),
                "outputs": outputs}
    ds = dataset._dataset()
    fields = Normalizer.fit(
        (np.stack([np.asarray(ds[v].isel({SAMPLE: int(s)}).values, np.float64) for v in
                   task.inputs]).reshape(len(task.inputs), -1) for s in dataset.samples),
        names=task.inputs, kind=kind)
    cond = Normalizer()
    if task.conditioning:
        frames = range(ds.sizes[TIME]) if task.time_dependent else range(1)
        cond = Normalizer.fit(
            (np.moveaxis(dataset.conditioning(int(s), frames, np.float64), 1, 0).reshape(
                len(task.conditioning), -1) for s in dataset.samples), kind=kind)
    result = {"fields": fields, "conditioning": cond}
    if increments:
        result["increments"] = Normalizer.fit(
            (np.diff(np.stack([np.asarray(ds[v].isel({SAMPLE: int(s)}).values, np.float64)
                               for v in task.inputs]), axis=1).reshape(len(task.inputs), -1)
             for s in dataset.samples), names=task.inputs, kind=kind)
    return result
