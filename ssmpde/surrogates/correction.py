r"""Training data of a learned correction of a coarse solver.

A corrector learns what a coarse solver misses in one record interval: for every stored
frame :math:`u_t` of a trajectory dataset, the coarse solver (the generating solver,
:meth:`~ssmpde.solvers.base.TimeDependentSolver.coarsened`) predicts
:math:`c_{t+1} = \mathcal{C}(u_t)`, and the model is trained on

.. math:: (u_{t-w+1}, \dots, u_t,\ c_{t+1},\ \text{conditioning}) \mapsto u_{t+1} - c_{t+1},

the correction, normalised by the corrections' own statistics (Um et al., "Solver-in-the-Loop:
Learning from Differentiable Physics to Interact with Iterative PDE-Solvers", NeurIPS 2020;
Kochkov et al., "Machine learning-accelerated computational fluid dynamics", PNAS 2021).

The data must be stored on the coarse solver's own simulation grid (a KS dataset simulated on
512 points and stored on 256 for a 2x coarsening): the corrected stepper's state then never
passes through a coarser grid between steps. The coarse predictions are computed once per
dataset and coarsening, in blocks of samples written atomically beside the run
(:func:`coarse_predictions`), so an interrupted build resumes with the blocks it has; the
manifest records each block's SHA-256, and a block that does not match it is computed again.
See ``docs/hybrid.md``.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import stat
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ssmpde.core import decode_json
from ssmpde.data import SAMPLE, TIME, atomic_path, config_of, open_dataset
from ssmpde.solvers.base import (ConservativeForm, SolverDivergedError, TimeDependentSolver,
                                 parse_coarsening, solver_of)

from .datasets import Normalizer, TaskDataset

__all__ = ["CoarseCache", "CorrectionDataset", "DamagedCacheWarning", "cache_directory",
           "coarse_predictions", "coarse_solver", "conservative_form_of", "fit_corrections",
           "flux_divergence"]

MANIFEST = "manifest.json"
#: Samples per cache block (one atomic file each).
BLOCK = 16


def coarse_solver(source, coarsening: str | tuple[int, int], *,
                  origin: str | None = None) -> TimeDependentSolver:
    """The generating solver of ``source`` (a dataset, or its generator config as a checkpoint
    records it: :func:`~ssmpde.solvers.base.solver_of`, ``origin`` naming it) coarsened by
    ``coarsening`` ("SxT"), checked to step the stored grid itself (no hand-over through a
    coarser grid)."""
    space, steps = (parse_coarsening(coarsening) if isinstance(coarsening, str)
                    else tuple(coarsening))
    fine = solver_of(source, origin=origin)
    if not isinstance(fine, TimeDependentSolver):
        raise ValueError(f"{fine.name} is a steady problem: a learned correction needs "
                         "trajectories of a time-dependent solver")
    try:
        coarse = fine.coarsened(space=space, time=steps)
    except ValueError as error:
        raise ValueError(f"bad coarsening {space}x{steps}: {error}") from None
    if tuple(coarse.simulation_grid) != tuple(fine.grid):
        raise ValueError(
            f"a {space}x{steps} coarsening simulates on {list(coarse.simulation_grid)} points, "
            f"but the data are stored on {list(fine.grid)}: a corrected stepper works on the "
            "coarse solver's own grid, so generate the data stored there (--resolution "
            f"{coarse.simulation_grid[0]} with --simulation-resolution "
            f"{fine.simulation_grid[0]}), or pick the space factor "
            f"{fine.simulation_grid[0] // fine.grid[0]}")
    return coarse


def _parameters(ds, solver: TimeDependentSolver, samples: slice) -> tuple[dict, dict]:
    """(static, time-dependent ``[batch, time, ...]``) solver parameters of ``samples``."""
    static, moving = {}, {}
    for name in solver.parameter_names:
        if name not in ds.data_vars:
            continue  # the config's default applies
        var = ds[name].isel({SAMPLE: samples}).transpose(SAMPLE, ...)
        (moving if TIME in var.dims else static)[name] = np.asarray(var.values, np.float64)
    return static, moving


@dataclass
class CoarseCache:
    """The coarse predictions of a whole dataset.

    Attributes
    ----------
    values : array ``[sample, time - 1, field, *grid]`` float32
        ``values[s, t]`` is the coarse solver's step from stored frame ``t`` of sample ``s``:
        its prediction of frame ``t + 1``.
    directory : Path
    computed : list of int
        The blocks this call computed (the others were on disk already).
    """

    values: np.ndarray
    directory: Path
    computed: list[int]


def _key(ds, coarse: TimeDependentSolver, coarsening: str) -> dict:
    fields = list(coarse.fields)
    return {"coarsening": coarsening, "coarse_config": coarse.config_dict(),
            "generator": config_of(ds), "samples": int(ds.sizes[SAMPLE]),
            "frames": int(ds.sizes[TIME]), "fields": fields,
            "grid": [int(n) for n in ds[fields[0]].shape[2:]]}


def coarse_predictions(data, coarsening: str, directory, *, block: int = BLOCK,
                       progress: bool = False,
                       on_block: Callable[[int], None] | None = None) -> CoarseCache:
    """Run the coarse solver one record interval from every stored frame of ``data``.

    Parameters
    ----------
    data : path
        An ssmpde trajectory dataset, stored on the coarse solver's simulation grid.
    coarsening : str
        ``"SxT"``: the generating solver's grid ``S`` times coarser, its step ``T`` times
        longer (see :func:`ssmpde.solvers.base.parse_coarsening`).
    directory : path
        The cache: ``manifest.json`` and one ``block_NNNNN.npy`` per ``block`` samples,
        each written atomically, then its SHA-256 recorded in the manifest. A second call (or
        a resumed run) computes only the blocks that are missing, unrecorded (a kill between
        the two writes) or damaged (not a regular file, another size, digest, shape or dtype:
        computed again, with a :class:`DamagedCacheWarning`; type and size are checked before
        a block is read, so a link to a device or a huge sparse file is never read); a cache
        built from other data or another coarsening is refused, and so is a manifest that is
        not one.
    on_block : callable, optional
        Called with each block's index after it is written (progress hooks, tests).

    Returns
    -------
    CoarseCache
    """
    directory = Path(directory)
    coarsening = "{}x{}".format(*parse_coarsening(coarsening))
    with open_dataset(data) as ds:
        coarse = coarse_solver(ds, coarsening)
        if TIME not in ds.dims or ds.sizes[TIME] < 2:
            raise ValueError(f"{data} holds no trajectories (a time axis of at least two "
                             "frames): a correction is learned from consecutive frames")
        key = _key(ds, coarse, coarsening)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        manifest = directory / MANIFEST
        if manifest.exists() or manifest.is_symlink():
            blocks_at_most = -(-ds.sizes[SAMPLE] // block)
            stored = _read_manifest(manifest, directory, _manifest_bytes(key, blocks_at_most))
            if stored["digest"] != digest:
                raise ValueError(f"the correction cache {directory} was built from other data "
                                 f"or another coarsening ({stored.get('coarsening')}); remove "
                                 "it or train into a new run directory")
            blocks = stored.get("blocks", {})  # none in a cache written before block digests
        else:
            _make_directory(directory)
            blocks = {}
            _write_manifest(manifest, {"digest": digest, **key, "blocks": blocks})
        num, frames, times = ds.sizes[SAMPLE], ds.sizes[TIME], ds[TIME].values
        starts = range(0, num, block)
        computed, parts = [], []
        from tqdm.auto import tqdm

        for index in tqdm(starts, desc=f"coarse {coarsening} predictions", unit="block",
                          disable=not progress, leave=False):
            path = directory / f"block_{index // block:05d}.npy"
            rows = slice(index, min(index + block, num))
            shape = (rows.stop - rows.start, frames - 1, len(coarse.fields), *key["grid"])
            values = _read_block(path, blocks.get(path.name), shape)
            if values is not None:
                parts.append(values)
                continue
            states = np.stack([np.asarray(ds[f].isel({SAMPLE: rows}).values, np.float64)
                               for f in coarse.fields], axis=2)
            static, moving = _parameters(ds, coarse, rows)
            out = np.empty((states.shape[0], frames - 1, *states.shape[2:]), np.float32)
            for t in range(frames - 1):
                given = {**static, **{k: v[:, t] for k, v in moving.items()}}
                try:
                    out[:, t] = coarse.step(states[:, t:t + 1], time=float(times[t]),
                                            parameters=given)
                except SolverDivergedError as error:
                    raise ValueError(
                        f"the coarse solver {coarsening} diverges in one record interval "
                        f"from frame {t} of samples {rows.start}..{rows.stop - 1} of {data} "
                        f"({error}): choose a smaller coarsening") from None
            buffer = io.BytesIO()
            np.save(buffer, out, allow_pickle=False)
            with atomic_path(path) as tmp:
                tmp.write_bytes(buffer.getvalue())
            # The block first, then its digest: a kill between the two leaves an unrecorded
            # block, which the next call computes again.
            blocks[path.name] = hashlib.sha256(buffer.getvalue()).hexdigest()
            _write_manifest(manifest, {"digest": digest, **key, "blocks": blocks})
            parts.append(out)
            computed.append(index // block)
            if on_block is not None:
                on_block(index // block)
    return CoarseCache(np.concatenate(parts), directory, computed)


def _make_directory(directory: Path) -> None:
    """Create the cache's directory, or say which part of its path is in the way (Python's
    '[Errno 17] File exists' or '[Errno 20] Not a directory' told nothing of the cache)."""
    for part in (directory, *directory.parents):
        if part.is_dir():
            break
        if part.exists() or part.is_symlink():
            raise ValueError(f"'{part}' is not a directory, but the correction cache "
                             f"{directory} needs one there: remove or rename it, or train into "
                             "a new run directory")
    directory.mkdir(parents=True, exist_ok=True)


def _manifest_bytes(key: dict, blocks: int) -> int:
    """More than the manifest of a cache with ``key`` and ``blocks`` blocks can take: the key,
    with room for its indentation, and a name and a digest a block."""
    return 4 * len(json.dumps(key)) + 256 * blocks + 2 ** 20


def _read_manifest(manifest: Path, directory: Path, limit: int) -> dict:
    """The cache's manifest, checked: ValueError naming it when it is not one (its type and
    size are checked before it is read: at most ``limit`` bytes)."""
    fix = f"the cache is damaged; remove {directory} and train again to rebuild it"
    text = _read_regular(manifest, limit, exact=False)
    if isinstance(text, str):
        raise ValueError(f"{manifest}: {text}: {fix}")
    stored = decode_json(manifest, text=text, keys={"digest": str}, fix=fix)
    blocks = stored.get("blocks", {})
    if not isinstance(blocks, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in blocks.items()):
        raise ValueError(f"{manifest}: 'blocks' must map block files to their SHA-256 digests "
                         f"(JSON strings): {fix}")
    return stored


def _write_manifest(manifest: Path, record: dict) -> None:
    with atomic_path(manifest) as tmp:
        tmp.write_text(json.dumps(record, indent=1))


class DamagedCacheWarning(UserWarning):
    """A block of a correction cache is damaged (its digest, size, type or contents): it is
    computed again. The command line prints it as one ``ssmpde: warning:`` line."""


def _block_bytes(shape: tuple[int, ...]) -> int:
    """The size of the ``.npy`` file ``np.save`` writes for float32 values of ``shape``."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                  "shape": tuple(shape)})
    return header.tell() + 4 * math.prod(shape)


def _read_regular(path: Path, size: int, *, exact: bool) -> bytes | str:
    """The bytes of ``path`` when it is a regular file (not a symbolic link, FIFO or device)
    of ``size`` bytes (``exact``) or at most ``size``; otherwise why not. Decided from the
    file's type and size before reading it: a link to /dev/zero or a sparse file of many
    gigabytes is never read, a FIFO never waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "it is a symbolic link, not a file the cache wrote"
        return f"it cannot be opened ({error.strerror})"
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            return "it is not a regular file (a FIFO, device, socket or directory)"
        if exact and info.st_size != size:
            return f"it holds {info.st_size} bytes, not the {size} its shape takes"
        if info.st_size > size:
            return f"it holds {info.st_size} bytes, more than the {size} it can need"
        data = file.read(size + 1)
    if len(data) > size or (exact and len(data) != size):
        return "it changed size while it was read"
    return data


def _read_block(path: Path, digest: str | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """The block in ``path`` if the manifest records its ``digest`` and it holds float32
    values of ``shape``; None (compute it again) otherwise, with a
    :class:`DamagedCacheWarning` for a damaged one. Its type and size are checked before it is
    read (:func:`_read_regular`). Never unpickles: a damaged file is replaced, not loaded
    another way."""
    if digest is None or not (path.exists() or path.is_symlink()):
        return None  # not written yet, or written but not recorded (a kill in between)
    data = _read_regular(path, _block_bytes(shape), exact=True)
    why = None
    if isinstance(data, str):
        why = data
    elif hashlib.sha256(data).hexdigest() != digest:
        why = "its SHA-256 differs from the one in the manifest"
    else:
        try:
            values = np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError):
            why = "it is not a NumPy array file"
        else:
            if values.dtype != np.float32 or values.shape != shape:
                why = (f"it holds {values.dtype} values of shape {values.shape}, not float32 "
                       f"of shape {shape}")
    if why is None:
        return values
    warnings.warn(f"the correction cache block {path} is damaged ({why}): computing it "
                  "again", DamagedCacheWarning, stacklevel=3)
    return None


class CorrectionDataset(TaskDataset):
    """Rollout items of a correction task (horizon 1) with the coarse prediction of the
    target frame: ``{"history", "target", "conditioning", "coarse": [1, fields, *grid]}``.

    Parameters
    ----------
    path, task, samples
        As :class:`~ssmpde.surrogates.datasets.TaskDataset` (``task.correction`` set).
    coarse : array ``[all samples of the file, time - 1, field, *grid]``
        :attr:`CoarseCache.values` of the same file.
    """

    def __init__(self, path, task, samples, coarse: np.ndarray):
        if task.horizon != 1:
            raise ValueError("a correction is trained one record interval at a time "
                             f"(horizon 1), got horizon {task.horizon}")
        super().__init__(path, task, samples)
        self.coarse = coarse

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        item = super().__getitem__(index)
        sample = int(self.samples[index // self.starts])
        frame = index % self.starts + self.task.window - 1  # the step from this frame
        item["coarse"] = torch.from_numpy(self.coarse[sample, frame:frame + 1])
        return item


def fit_corrections(dataset: TaskDataset, coarse: np.ndarray,
                    conservative: ConservativeForm | None = None) -> Normalizer:
    """Per-field statistics of the corrections (next frame − coarse prediction) over the
    training samples of ``dataset``, every frame; ``coarse`` is :attr:`CoarseCache.values` of
    its file. With a ``conservative`` form (a flux-form corrector) the corrections of the
    conserved densities instead: they set the scale of the predicted fluxes."""
    ds = dataset._dataset()
    task = dataset.task

    def corrections(sample: int) -> np.ndarray:
        frames = np.stack([np.asarray(ds[v].isel({SAMPLE: sample}).values, np.float64)
                           for v in task.inputs], axis=1)[1:]
        predicted = coarse[sample].astype(np.float64)
        if conservative is not None:
            frames, predicted = (conservative.to_conserved(frames),
                                 conservative.to_conserved(predicted))
        delta = frames - predicted
        return np.moveaxis(delta, 1, 0).reshape(len(task.inputs), -1)

    names = task.inputs if conservative is None else conservative.names
    return Normalizer.fit((corrections(int(s)) for s in dataset.samples), names=names)


def conservative_form_of(record: dict) -> ConservativeForm:
    """The conservative form of a flux-form corrector's coarse solver, from its checkpoint
    record (ValueError when the solver has none)."""
    coarse = coarse_solver(record["dataset"].get("generator_config"),
                           record["correction"]["coarsening"], origin="the checkpoint")
    return require_conservative(coarse)


def require_conservative(solver: TimeDependentSolver) -> ConservativeForm:
    """``solver``'s :class:`~ssmpde.solvers.base.ConservativeForm`, or a ValueError saying
    that the flux form is for finite-volume solvers."""
    form = solver.conservative_form()
    if form is None:
        raise ValueError(f"{solver.name} has no conservative (flux) form: the flux-form "
                         "correction is for finite-volume solvers (euler); use "
                         "--correction-mode after or source")
    return form


def flux_divergence(fluxes: torch.Tensor, periodic: tuple[bool, ...]) -> torch.Tensor:
    r"""The conserved densities' change from correction fluxes: ``fluxes [batch, field,
    ndim, *grid]`` (``fluxes[:, k, d, i]`` the flux of density ``k`` through the upper face
    of cell ``i`` along grid axis ``d``, in units of the density per step) →
    :math:`\Delta U_i = -\sum_d (F_{d,i} - F_{d,i-1})`, ``[batch, field, *grid]``.

    Each face's flux leaves one cell and enters its neighbour, so the domain totals of
    :math:`\Delta U` vanish to round-off; along a non-periodic axis the boundary faces carry
    no flux (the last cell's upper face is zeroed; it would wrap onto the first cell's lower
    face)."""
    ndim = fluxes.ndim - 3
    change = torch.zeros_like(fluxes[:, :, 0])
    for d in range(ndim):
        flux = fluxes[:, :, d]
        axis = 2 + d
        if not periodic[d]:
            keep = torch.ones(flux.shape[axis], dtype=flux.dtype, device=flux.device)
            keep[-1] = 0
            flux = flux * keep.reshape([-1] + [1] * (ndim - 1 - d))
        change = change - (flux - torch.roll(flux, 1, dims=axis))
    return change


def cache_directory(run: os.PathLike, name: str = "train") -> Path:
    """Where a run keeps the coarse predictions of its training (or test) data."""
    return Path(run) / "correction_cache" / name
