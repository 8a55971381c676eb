"""PDEBench HDF5 files: read them as ssmpde datasets, write ssmpde datasets in their layout.

PDEBench (Takamoto et al., NeurIPS 2022 Datasets and Benchmarks) keeps its data in HDF5 files
of two layouts, read by its loaders as follows (written here from its documentation and
loaders; no PDEBench code is used).

*One file of stacked samples* (``.hdf5``; PDEBench's ``FNODatasetSingle``):

* 1D scalar PDEs (Burgers, advection, ...): ``tensor`` ``[N, nt, nx]`` with ``x-coordinate``
  ``[nx]`` and ``t-coordinate`` ``[nt + 1]`` (the frame times and one more record interval);
* Darcy flow: ``tensor`` ``[N, 1, nx, ny]`` (the solution) and ``nu`` ``[N, nx, ny]`` (the
  coefficient, the operator's input), ``x-coordinate`` and ``y-coordinate``;
* compressible flow: ``density``, ``pressure``, ``Vx`` (``Vy`` in 2D), each
  ``[N, nt, nx(, ny)]``, with ``x-coordinate``, ``y-coordinate`` and ``t-coordinate``.

*One group per sample* (``.h5``; ``FNODatasetMult``, 2D reaction-diffusion and shallow water):
groups ``"0000"``, ``"0001"``, ... each holding ``data`` ``[nt, nx(, ny), channels]`` and
``grid/x``, ``grid/y``, ``grid/t`` (``nt`` entries). The loaders take every top-level key as a
sample, so such a file holds nothing else at the top.

Spatial axes are x first (``[..., nx, ny]``, ``meshgrid(x, y, indexing="ij")``), the reverse
of ssmpde's ``(y, x)``; values are float32; parameters are file attributes (``Nu``, ``beta``,
``eta``, ``zeta``, ``M``) and parts of the file name (``1D_Burgers_Sols_Nu0.001.hdf5``,
``2D_DarcyFlow_beta1.0_Train.hdf5``, ``2D_CFD_Rand_M0.1_Eta0.01_Zeta0.01_periodic_128_Train.hdf5``,
``2D_diff-react_NA_NA.h5``).

ssmpde's datasets map to them as

=========================  ==========================================================
KS, Burgers, KdV (1D)      ``tensor`` (the one state field), ``x-``/``t-coordinate``
Darcy                      ``tensor`` (the solution ``u``), ``nu`` (the coefficient ``a``)
Euler (2D)                 ``density``, ``pressure``, ``Vx``, ``Vy``; the tracer beside them
Navier–Stokes (vorticity)  per-sample groups, ``data`` ``[nt, nx, ny, 1]``; the forcing
                           (time-dependent for ``torus-vis-force``) beside it in each group
=========================  ==========================================================

Whatever PDEBench has no dataset for (per-sample parameters, forcings, tracers) is written
beside the PDEBench datasets where its loaders do not look: in the group ``ssmpde`` of a
stacked file, inside each sample group of a per-sample file. The ssmpde attributes, roles,
coordinates and config are in one file attribute, :data:`METADATA_ATTR`, so an exported
dataset reads back exactly, its floating data variables as float32 (PDEBench's precision).
A PDEBench file without that attribute reads as a dataset named after the file
(``pdebench-1d-burgers``), with its parameters parsed from the name and attributes.

Everything goes through netCDF4 (a default dependency, which writes and reads HDF5): no h5py
needed. Reading is lazy: each variable reads from the file only what is indexed.
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import netCDF4
import numpy as np
import xarray as xr
from xarray.backends import BackendArray
from xarray.backends.locks import HDF5_LOCK
from xarray.core import indexing

from ssmpde import __version__
from ssmpde.core import decode_json

from ..integrity import DamagedChunk
from ..schema import (BOUNDARY_CONDITIONS, ROLE, SAMPLE, SPATIAL_DIMS, TIME, X, Y,
                      DatasetFileError, boundary_conditions_of, build_dataset, config_of,
                      sample_coordinate, spatial_coordinate, time_coordinate, vectors_of)
from . import check_declared_memory
from .backend import FormatBackendEntrypoint

__all__ = ["DESCRIPTION", "METADATA_ATTR", "NAME", "PDEBenchBackendEntrypoint",
           "conventional_name", "export", "is_export", "open", "sniff", "unwritten_chunks"]

NAME = "pdebench"
DESCRIPTION = "PDEBench HDF5: tensor/nu, density/pressure/Vx/Vy, or per-sample groups"
#: File attribute holding everything ssmpde needs to read its export back exactly (JSON).
METADATA_ATTR = "ssmpde_metadata"
#: Group of a stacked file holding the variables PDEBench has no dataset for.
EXTRAS_GROUP = "ssmpde"
REFERENCE = ("Takamoto et al., PDEBench: An Extensive Benchmark for Scientific Machine "
             "Learning, NeurIPS 2022 Datasets and Benchmarks")

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_STACKED_1D, _DARCY, _CFD, _GROUPS = "tensor-1d", "darcy", "cfd", "sample-groups"
# A `tensor` of a shape no PDEBench layout has: claimed, so that the refusal says the shapes.
_ODD_TENSOR = "odd-tensor"
# The name netCDF gives the HDF5 datasets it makes for dimensions without a variable.
_NETCDF_DIMENSION = b"This is a netCDF dimension but not a netCDF variable"
# `ssmpde info --check` lists unwritten samples one row of chunks a line up to this many
# rows, and in runs beyond it (a header that promises 10⁹ samples).
_LISTED_ROWS = 10_000
# PDEBench's compressible-flow datasets and the ssmpde names of the same fields.
_CFD_NAMES = {"density": "density", "pressure": "pressure", "Vx": "velocity_x",
              "Vy": "velocity_y"}
_COMPRESSION = {"zlib": True, "complevel": 4, "shuffle": True}
# A file name's parts: parameters (Nu0.001, beta1.0, M0.1, Eta1e-08, ...), the split, the
# boundary, the resolution; what is left names the problem.
_PARAMETER = re.compile(r"^(Nu|nu|beta|Beta|Rho|rho|M|Eta|Zeta|eta|zeta)"
                        r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)$")
_SPLITS = {"Train": "train", "Test": "test", "Valid": "valid", "Val": "valid"}
_BOUNDARIES = {"periodic": "periodic", "trans": "outflow"}
# The 1D problems PDEBench computes on periodic domains (its paper, section 3).
_PERIODIC_1D = ("burgers", "advection", "reacdiff")


# --------------------------------------------------------------------------------------------
# Lazy reading
# --------------------------------------------------------------------------------------------

#: Files whose :class:`_File` was garbage-collected while another thread held the HDF5 lock:
#: kept open here (so that netCDF4 does not close them unlocked) until the next holder of the
#: lock closes them.
_UNCLOSED: list[netCDF4.Dataset] = []


def _close_dropped() -> None:
    """Close the files of :data:`_UNCLOSED`; the caller holds the HDF5 lock."""
    while _UNCLOSED:
        nc = _UNCLOSED.pop()
        if nc.isopen():
            nc.close()


class _File:
    """One open file shared by the lazy variables of a dataset; every HDF5 call on it, its
    closing included, holds the HDF5 lock (HDF5 is not thread-safe)."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self.lock = threading.Lock()
        with HDF5_LOCK:
            _close_dropped()
            self.nc = netCDF4.Dataset(path, "r")
            # Raw values: PDEBench files have no fill values, and masks would make copies.
            self.nc.set_auto_maskandscale(False)

    def __del__(self):
        # A dataset dropped without ds.close(): netCDF4 would close the file on collection
        # without the lock, in whatever thread collects it, beside another thread's read (a
        # segmentation fault in a convert). Close it under the lock, or, if another thread
        # holds the lock (possibly the collecting thread itself), leave it to that holder.
        nc = getattr(self, "nc", None)
        if nc is None:
            return
        if HDF5_LOCK.acquire(blocking=False):
            try:
                if nc.isopen():
                    nc.close()
            finally:
                HDF5_LOCK.release()
        else:
            _UNCLOSED.append(nc)

    def variable(self, path: str) -> netCDF4.Variable:
        group = self.nc
        *groups, name = path.split("/")
        for part in groups:
            group = group.groups[part]
        return group.variables[name]

    def read(self, path: str, key: tuple) -> np.ndarray:
        with HDF5_LOCK, self.lock:
            _close_dropped()
            variable = self.variable(path)
            return np.asarray(variable[key] if key else variable[...])

    def close(self) -> None:
        with HDF5_LOCK:
            _close_dropped()
            if self.nc.isopen():
                self.nc.close()


class _LazyVariable(BackendArray):
    """A file variable (or one per sample, stacked) seen in ssmpde's axis order.

    ``axes[i]`` is the file axis of the array's axis ``i`` (after the stacked sample axis, if
    any); file axes in ``fixed`` are read at one index (Darcy's time axis of length 1, the
    channel of a per-sample ``data``).
    """

    def __init__(self, file: _File, paths: Sequence[str], *, stacked: bool,
                 axes: Sequence[int], fixed: Mapping[int, int], shape: tuple[int, ...],
                 dtype: np.dtype):
        self.file, self.paths, self.stacked = file, tuple(paths), stacked
        self.axes, self.fixed = tuple(axes), {int(k): int(v) for k, v in fixed.items()}
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC,
                                                  self._getitem)

    def _read_one(self, path: str, key: Sequence[slice]) -> np.ndarray:
        file_ndim = len(self.axes) + len(self.fixed)
        file_key: list[Any] = [slice(None)] * file_ndim
        for axis, index in self.fixed.items():
            file_key[axis] = index
        for position, axis in enumerate(self.axes):
            file_key[axis] = key[position]
        values = self.file.read(path, tuple(file_key))
        remaining = [axis for axis in range(file_ndim) if axis not in self.fixed]
        return values.transpose([remaining.index(axis) for axis in self.axes])

    def _getitem(self, key: tuple) -> np.ndarray:
        scalar_axes = tuple(i for i, k in enumerate(key) if not isinstance(k, slice))
        slices = [k if isinstance(k, slice) else slice(int(k), int(k) + 1) for k in key]
        if self.stacked:
            samples = range(*slices[0].indices(self.shape[0]))
            parts = [self._read_one(self.paths[i], slices[1:]) for i in samples]
            if parts:
                values = np.stack(parts)
            else:
                rest = [len(range(*s.indices(n))) for s, n in zip(slices[1:], self.shape[1:])]
                values = np.empty((0, *rest), dtype=self.dtype)
        else:
            values = self._read_one(self.paths[0], slices)
        if scalar_axes:
            values = values[tuple(0 if i in scalar_axes else slice(None)
                                  for i in range(values.ndim))]
        return values.astype(self.dtype, copy=False)


def _lazy(file: _File, paths: Sequence[str], dims: Sequence[str], *, stacked: bool = False,
          axes: Sequence[int] | None = None, fixed: Mapping[int, int] | None = None,
          attrs: Mapping | None = None) -> xr.Variable:
    """An :class:`xarray.Variable` backed by the file, nothing read yet."""
    variable = _numeric(file, paths[0])
    fixed = dict(fixed or {})
    own = [axis for axis in range(variable.ndim) if axis not in fixed]
    axes = tuple(own if axes is None else axes)
    shape = tuple(variable.shape[axis] for axis in axes)
    if stacked:
        shape = (len(paths), *shape)
    array = _LazyVariable(file, paths, stacked=stacked, axes=axes, fixed=fixed, shape=shape,
                          dtype=variable.dtype)
    return xr.Variable(tuple(dims), indexing.LazilyIndexedArray(array), dict(attrs or {}))


# --------------------------------------------------------------------------------------------
# Recognising files
# --------------------------------------------------------------------------------------------

def _is_hdf5(path: pathlib.Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(8) == _HDF5_SIGNATURE
    except OSError:
        return False


def _genuine_layout(nc: netCDF4.Dataset) -> str | None:
    """The PDEBench layout of a file without ssmpde metadata, or None."""
    names = set(nc.variables)
    if "tensor" in names:
        ndim = nc.variables["tensor"].ndim
        if ndim == 3:
            return _STACKED_1D
        if ndim == 4 and "nu" in names:
            return _DARCY
        return _ODD_TENSOR
    if {"density", "pressure", "Vx"} <= names:
        return _CFD
    groups = list(nc.groups.values())
    if groups and not names and all("data" in group.variables and "grid" in group.groups
                                    for group in groups):
        return _GROUPS
    return None


def sniff(path: pathlib.Path) -> bool:
    """Whether ``path`` is a PDEBench file: an ssmpde export, or one of PDEBench's layouts.

    Never true for ssmpde's own netCDF files (global attribute ``ssmpde_equation``).
    """
    if not path.is_file() or not _is_hdf5(path):
        return False
    try:
        with HDF5_LOCK, netCDF4.Dataset(path, "r") as nc:
            attrs = nc.ncattrs()
            if "ssmpde_equation" in attrs:
                return False
            return METADATA_ATTR in attrs or _genuine_layout(nc) is not None
    except (OSError, RuntimeError, ValueError, KeyError):
        return False


def is_export(path: pathlib.Path) -> bool:
    """Whether ``path`` is a PDEBench file that ssmpde wrote (it carries :data:`METADATA_ATTR`)."""
    try:
        with HDF5_LOCK, netCDF4.Dataset(path, "r") as nc:
            return METADATA_ATTR in nc.ncattrs()
    except (OSError, RuntimeError, ValueError):
        return False


# --------------------------------------------------------------------------------------------
# Checks before anything is read
# --------------------------------------------------------------------------------------------

def _hdf5_type(path: pathlib.Path, name: str) -> str | None:
    """The HDF5 type of a dataset as h5py names it (``float16``, ``bool``), if h5py is
    installed (netCDF has no name for the types it cannot read)."""
    try:
        import h5py
    except ImportError:
        return None
    try:
        with h5py.File(path, "r") as f:
            dtype = f[name].dtype
    except (OSError, KeyError, TypeError, ValueError):
        return None
    return "bool" if dtype == np.bool_ else str(dtype)


def _numeric(file: _File, name: str) -> netCDF4.Variable:
    """The file variable ``name``, refused unless it holds numbers netCDF reads as they are.

    netCDF reads an HDF5 boolean as an enumeration of 0 and 1 (which would train as values)
    and misreads HDF5 half floats as variable-length strings: reading those crashes the
    process (a segmentation fault in the netCDF library), so they are refused unread.
    """
    variable = file.variable(name)
    datatype = variable.datatype
    if isinstance(datatype, netCDF4.EnumType):
        if set(datatype.enum_dict) == {"FALSE", "TRUE"}:
            raise DatasetFileError(
                f"'{file.path}': the dataset '{name}' holds booleans, not numbers: read as "
                "field values they would be 0 and 1. If those are the values meant, store them "
                f"as float32 (h5py: f['{name}'][...].astype('float32')); PDEBench's datasets "
                "are float32")
        what = f"an enumeration ({', '.join(datatype.enum_dict)}), not numbers ssmpde can read"
    elif isinstance(variable.dtype, np.dtype) and variable.dtype.kind in "iuf" \
            and not isinstance(datatype, (netCDF4.VLType, netCDF4.CompoundType)):
        return variable
    else:
        stored = _hdf5_type(file.path, name)
        if stored == "float16":
            what = ("float16 values (HDF5 half precision), which the netCDF library that reads "
                    "PDEBench files misreads (reading them crashes it)")
        elif stored is not None:
            what = f"values of HDF5 type {stored}, not numbers ssmpde can read"
        else:
            what = f"values netCDF reads as {datatype!r}, not numbers ssmpde can read"
    raise DatasetFileError(
        f"'{file.path}': the dataset '{name}' holds {what}: store it as float32, PDEBench's "
        f"type (h5py: f['{name}'][...].astype('float32'))")


def _check_declared_sizes(file: _File, path: pathlib.Path) -> None:
    """Refuse a file whose header declares more samples and coordinates than memory holds.

    The coordinates (and the sample indices) are read whole when the file opens; a header
    that declares 10⁹ samples (a tiny damaged or hand-made file) would exhaust memory there.
    """
    nc = file.nc
    if METADATA_ATTR in nc.ncattrs():
        return  # our export: its coordinates are in the metadata, already read
    arrays = [v for v in nc.variables.values() if v.ndim >= 2]
    samples = len(nc.groups) if not arrays else max(v.shape[0] for v in arrays)
    frames = max((v.shape[1] for v in arrays), default=0)
    one_d = sum(v.size for v in nc.variables.values() if v.ndim <= 1)
    need = 16 * samples + 8 * (frames + one_d)
    check_declared_memory(path, f"{samples} samples" if samples > frames
                          else f"{frames} frames", need)


def _unwritten(path: pathlib.Path) -> tuple[list[tuple[DamagedChunk, int, int]], int, int] | None:
    """The never-written parts of a file's datasets, each with its number of chunks and its
    chunk length along ``sample`` (0 where it has none); the number of parts checked (a row
    of chunks along ``sample`` of a stacked dataset, else a whole dataset) and of datasets.
    None without h5py (netCDF reads an unwritten chunk as it reads a written one).

    HDF5 allocates storage for a chunk (or a contiguous dataset) when it is first written and
    reads one without storage as the fill value (zeros): a file whose writer stopped early
    reads as data. The sample of a chunk is known for the stacked datasets at the root (their
    first axis) and for the per-sample groups.
    """
    try:
        import h5py
    except ImportError:
        return None
    found: list[tuple[DamagedChunk, int, int]] = []
    total = datasets = 0
    with h5py.File(path, "r") as f:
        items: list[tuple[str, Any]] = []
        f.visititems(lambda name, obj: items.append((name, obj))
                     if isinstance(obj, h5py.Dataset) else None)
        for name, dataset in items:
            if dataset.size == 0 or dataset.is_virtual or dataset.external:
                continue  # nothing to hold, or held elsewhere
            label = dataset.attrs.get("NAME") if "NAME" in dataset.attrs else None
            if isinstance(label, bytes) and label.startswith(_NETCDF_DIMENSION):
                continue  # netCDF's stand-in for a dimension: never holds data
            datasets += 1
            top = name.split("/", 1)[0]
            group_sample = int(top) if "/" in name and top.isdigit() else None
            stacked = "/" not in name and dataset.ndim >= 2
            found.extend(_unwritten_parts(dataset, name, group_sample, stacked))
            chunks = dataset.chunks
            total += math.ceil(dataset.shape[0] / chunks[0]) if stacked and chunks else 1
    return found, total, datasets


def _unwritten_parts(dataset, name: str, group_sample: int | None,
                     stacked: bool) -> list[tuple[DamagedChunk, int, int]]:
    """The unwritten runs of one dataset: a run of samples each, else the whole dataset."""
    chunks = dataset.chunks
    allocated = dataset.id.get_storage_size() > 0
    samples = None if group_sample is None else (group_sample, group_sample + 1)
    if chunks is None:
        return [] if allocated else [(DamagedChunk(name, None, samples, _never(1)), 1, 0)]
    grid = [math.ceil(n / c) for n, c in zip(dataset.shape, chunks)]
    expected = math.prod(grid)
    present = dataset.id.get_num_chunks() if allocated else 0
    if present >= expected:
        return []
    if not stacked:
        missing = expected - present
        return [(DamagedChunk(name, None, samples, _never(missing)), missing, 0)]
    # Count the chunks present per row of chunks along the sample axis (bounded by what the
    # file holds); the rows not complete are unwritten, reported as runs of samples.
    per_row = expected // grid[0]
    rows: dict[int, int] = {}

    def count(info) -> None:
        row = info.chunk_offset[0] // chunks[0]
        rows[row] = rows.get(row, 0) + 1

    if present:
        if hasattr(dataset.id, "chunk_iter"):
            dataset.id.chunk_iter(count)
        else:  # pragma: no cover (h5py < 3.8)
            for index in range(present):
                count(dataset.id.get_chunk_info(index))
    complete = sorted(row for row, n in rows.items() if n == per_row)
    runs, start = [], 0
    for row in [*complete, grid[0]]:
        if row > start:
            runs.append((start, row))
        start = row + 1
    parts = []
    for first, stop in runs:
        missing = (stop - first) * per_row - sum(n for row, n in rows.items()
                                                 if first <= row < stop)
        span = (first * chunks[0], min(stop * chunks[0], dataset.shape[0]))
        parts.append((DamagedChunk(name, None, span, _never(missing)), missing, chunks[0]))
    return parts


def _never(count: int) -> str:
    chunks = "1 chunk" if count == 1 else f"{count} chunks"
    return f"never written ({chunks} without storage: HDF5 reads them as zeros)"


def unwritten_chunks(path: pathlib.Path) -> tuple[list[DamagedChunk], int, int] | None:
    """The never-written chunks of a PDEBench file, for ``ssmpde info --check``.

    Returns
    -------
    (list of DamagedChunk, int, int) or None
        The unwritten parts (problem ``"never written (...)"``: a run of samples of a stacked
        dataset, one sample group's dataset, or a whole dataset), the number of chunks and of
        datasets checked; None without h5py, which tells an unwritten chunk from a written
        one (netCDF reads both alike).
    """
    found = _unwritten(path)
    if found is None:
        return None
    parts, total, datasets = found
    listed: list[DamagedChunk] = []
    rows = sum(-(-(c.samples[1] - c.samples[0]) // step) for c, _, step in parts if step)
    for chunk, count, step in parts:
        if not step or rows > _LISTED_ROWS or count == 1:
            listed.append(chunk)
            continue
        # One line per row of chunks along `sample`, as zarr stores are listed.
        start, stop = chunk.samples
        for first in range(start, stop, step):
            span = (first, min(first + step, stop))
            listed.append(DamagedChunk(chunk.variable, None, span,
                                       "never written (no storage: HDF5 reads it as zeros)"))
    return listed, total, datasets


def _refuse_unwritten(path: pathlib.Path) -> None:
    found = _unwritten(path)
    if not found or not found[0]:
        return
    parts = found[0]
    first, count, _ = parts[0]
    where = "" if first.samples is None else f" ({_samples(first.samples)})"
    more = sum(n for _, n, _ in parts[1:])
    also = f", and {more} more chunk{'s' if more > 1 else ''} elsewhere" if more else ""
    raise DatasetFileError(
        f"'{path}': the dataset '{first.variable}'{where} was never written ({count} "
        f"chunk{'s' if count > 1 else ''} without storage{also}): HDF5 reads them as zeros, "
        "which are not data. The file is incomplete (its writer stopped early, or a copy was "
        f"cut short): regenerate or re-download it; `ssmpde info --check {path}` lists every "
        "unwritten chunk")


def _samples(span: tuple[int, int]) -> str:
    start, stop = span
    return f"sample {start}" if stop == start + 1 else f"samples {start}..{stop - 1}"


def _check_groups(file: _File, path: pathlib.Path, groups: Sequence[str]) -> None:
    """Refuse per-sample groups that do not share one shape, type and grid: ssmpde datasets
    hold every sample on one grid with one number of frames (read against the first group,
    a ragged file would lose frames or take another sample's grid)."""
    nc = file.nc
    first = nc.groups[groups[0]]
    data = first.variables["data"]
    grid_names = sorted(first.groups["grid"].variables)
    grid = {}
    for axis in grid_names:
        _numeric(file, f"{groups[0]}/grid/{axis}")
        grid[axis] = file.read(f"{groups[0]}/grid/{axis}", ())
    fix = ("ssmpde datasets hold every sample on one grid with one number of frames: split "
           "the file into files whose groups agree, and read those")
    for name in groups[1:]:
        group = nc.groups[name]
        other = group.variables["data"]
        if other.shape != data.shape:
            raise DatasetFileError(
                f"'{path}': the sample group '{name}' holds data of shape {list(other.shape)} "
                f"and the group '{groups[0]}' {list(data.shape)} ([frames, x(, y), "
                f"channels]): {fix}")
        if other.dtype != data.dtype:
            raise DatasetFileError(f"'{path}': the sample group '{name}' holds {other.dtype} "
                                   f"data and the group '{groups[0]}' {data.dtype}: {fix}")
        names = sorted(group.groups["grid"].variables)
        if names != grid_names:
            raise DatasetFileError(f"'{path}': the sample group '{name}' has grid {names} and "
                                   f"the group '{groups[0]}' {grid_names}: {fix}")
        for axis in grid_names:
            _numeric(file, f"{name}/grid/{axis}")
            values = file.read(f"{name}/grid/{axis}", ())
            if values.shape != grid[axis].shape or not np.array_equal(values, grid[axis]):
                raise DatasetFileError(f"'{path}': the sample group '{name}' has another grid/"
                                       f"{axis} than the group '{groups[0]}': {fix}")


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------

def open(path: pathlib.Path, chunks: Any) -> xr.Dataset:  # noqa: A001 (the registry's name)
    """Open a PDEBench file lazily as an ssmpde dataset.

    Parameters
    ----------
    path : pathlib.Path
        An ssmpde export (read back exactly, floating data variables as float32) or a
        PDEBench file (its equation named ``pdebench-<dim>-<problem>`` after the file name).
    chunks : None or mapping
        None: lazily indexed variables; ``{}``: dask arrays of one sample per chunk; a mapping
        of dimension to size: those dask chunks.

    Returns
    -------
    xarray.Dataset
        Backed by the open file; ``ds.close()`` closes it.

    Raises
    ------
    DatasetFileError
        If the file is neither an ssmpde export nor a PDEBench layout ssmpde can hold (3D
        data, a ``tensor`` of another shape, booleans, half floats, per-sample groups of
        different shapes or grids, ...), declares more samples than memory holds, or has
        chunks that were never written (checked with h5py, where installed); the message
        says which.
    """
    file = _File(path)
    try:
        _check_declared_sizes(file, path)
        _refuse_unwritten(path)
        attrs = file.nc.ncattrs()
        if METADATA_ATTR in attrs:
            ds = _open_export(file, decode_json(
                path, text=file.nc.getncattr(METADATA_ATTR), error=DatasetFileError,
                fix=f"its global attribute '{METADATA_ATTR}' is damaged: convert the source "
                    "data again"))
        else:
            ds = _open_genuine(file, path)
        empty = [f"{dim} (0)" for dim, size in ds.sizes.items() if size == 0]
        if empty:
            raise DatasetFileError(f"'{path}' holds no data: its arrays are empty along "
                                   f"{', '.join(empty)}. Check that the file is a complete "
                                   "PDEBench file")
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        file.close()
        if isinstance(exc, DatasetFileError):
            raise
        raise DatasetFileError(f"cannot read '{path}' as a PDEBench file: {exc}. Check that it "
                               "is a complete PDEBench HDF5 file or an ssmpde export") from exc
    except BaseException:
        file.close()
        raise
    if chunks is not None:
        ds = ds.chunk({SAMPLE: 1} if chunks == {} else chunks)
    ds.set_close(file.close)
    ds.encoding["source"] = str(path)
    return ds


def _decode_attr(value: Any) -> Any:
    if isinstance(value, dict) and "__numpy__" in value:
        return np.asarray(value["__numpy__"], dtype=value["dtype"])[()] \
            if value.get("scalar") else np.asarray(value["__numpy__"], dtype=value["dtype"])
    return value


def _decode_attrs(attrs: Mapping) -> dict:
    return {key: _decode_attr(value) for key, value in attrs.items()}


def _open_export(file: _File, meta: Mapping) -> xr.Dataset:
    coords = {}
    for name, spec in meta["coords"].items():
        values = np.asarray(spec["values"], dtype=spec["dtype"])
        coords[name] = xr.Variable(tuple(spec["dims"]), values, _decode_attrs(spec["attrs"]))
    groups = meta.get("groups", [])
    data_vars = {}
    for name, spec in meta["variables"].items():
        if spec["stacked"]:
            paths = [f"{group}/{spec['path']}" for group in groups]
        else:
            paths = [spec["path"]]
        data_vars[name] = _lazy(file, paths, spec["dims"], stacked=spec["stacked"],
                                axes=spec["axes"], fixed={int(k): v for k, v in
                                                          spec["fixed"].items()},
                                attrs=_decode_attrs(spec["attrs"]))
    return xr.Dataset(data_vars, coords=coords, attrs=_decode_attrs(meta["attrs"]))


def _file_attrs(nc: netCDF4.Dataset) -> dict[str, Any]:
    out = {}
    for key in nc.ncattrs():
        value = nc.getncattr(key)
        if isinstance(value, np.ndarray):
            value = value.tolist()
        elif isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        out[key] = value
    return out


def parse_name(name: str) -> tuple[str, dict[str, Any]]:
    """The problem and the parameters a PDEBench file name records.

    Parameters
    ----------
    name : str
        A file name such as ``2D_CFD_Rand_M0.1_Eta0.01_Zeta0.01_periodic_128_Train.hdf5``.

    Returns
    -------
    (str, dict)
        The equation name ssmpde gives it (``pdebench-2d-cfd-rand``) and the parameters
        (``{"M": 0.1, "Eta": 0.01, "Zeta": 0.01, "boundary": "periodic", "resolution": 128,
        "split": "train"}``). ``NA`` parts (PDEBench's "not applicable") are skipped.

    Examples
    --------
    >>> parse_name("1D_Burgers_Sols_Nu0.001.hdf5")
    ('pdebench-1d-burgers', {'Nu': 0.001})
    """
    stem = name
    for suffix in (".hdf5", ".h5", ".hdf", ".he5"):
        if stem.lower().endswith(suffix):
            stem = stem[:-len(suffix)]
            break
    words, parameters = [], {}
    for token in stem.split("_"):
        match = _PARAMETER.match(token)
        if match:
            parameters[match.group(1)] = float(match.group(2))
        elif token in _SPLITS:
            parameters["split"] = _SPLITS[token]
        elif token in _BOUNDARIES:
            parameters["boundary"] = token
        elif token.isdigit():
            parameters["resolution"] = int(token)
        elif token and token not in ("NA", "Sols"):
            words.append(token.lower())
    slug = "-".join(re.sub(r"[^a-z0-9.+-]+", "-", word).strip("-") for word in words)
    return f"pdebench-{slug or 'dataset'}", parameters


def _times(file: _File, path: str | None, count: int) -> np.ndarray:
    """The frame times: the first ``count`` entries of a PDEBench time coordinate."""
    if path is None:
        return np.arange(count, dtype=np.float64)
    _numeric(file, path)
    values = np.asarray(file.read(path, ()), dtype=np.float64).reshape(-1)
    if values.size < count:
        raise ValueError(f"'{path}' has {values.size} entries for {count} frames")
    return values[:count]


def _spatial(file: _File, path: str, dim: str, placement: str) -> xr.DataArray:
    _numeric(file, path)
    values = np.asarray(file.read(path, ()), dtype=np.float64).reshape(-1)
    where = "cell centres" if placement == "cell_centres" else "grid points"
    return spatial_coordinate(dim, values, placement=placement,
                              long_name=f"{dim} of the {where} (PDEBench {path})")


def _open_genuine(file: _File, path: pathlib.Path) -> xr.Dataset:
    nc = file.nc
    layout = _genuine_layout(nc)
    if layout is None:
        raise DatasetFileError(f"'{path}' is HDF5 but none of the PDEBench layouts ssmpde "
                               "reads (1D tensor, Darcy tensor + nu, 1D/2D density/pressure/"
                               "Vx/Vy, or per-sample groups of data + grid): 3D data and other "
                               "layouts cannot become ssmpde datasets")
    if layout == _ODD_TENSOR:
        shape = list(nc.variables["tensor"].shape)
        darcy = " and has no 'nu' beside it" if len(shape) == 4 else ""
        raise DatasetFileError(f"'{path}': its 'tensor' has shape {shape} (rank {len(shape)})"
                               f"{darcy}: PDEBench 1D files hold tensor [N, nt, nx], Darcy "
                               "files tensor [N, 1, nx, ny] beside nu [N, nx, ny]; ssmpde "
                               "reads those. Check that the file is a complete PDEBench file")
    equation, parameters = parse_name(path.name)
    attributes = _file_attrs(nc)
    for key, value in attributes.items():  # the file's attributes win over its name
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            parameters[key] = value
    coords: dict[str, Any] = {}
    data_vars: dict[str, xr.Variable] = {}
    boundary: str | None = None
    untimed = False  # no t-coordinate: frame indices stand for the times
    if layout == _STACKED_1D:
        tensor = nc.variables["tensor"]
        n, nt, _ = tensor.shape
        coords[X] = _spatial(file, "x-coordinate", X, "cell_centres")
        untimed = "t-coordinate" not in nc.variables
        coords[TIME] = time_coordinate(_times(file, None if untimed else "t-coordinate", nt))
        data_vars["u"] = _lazy(file, ["tensor"], (SAMPLE, TIME, X), attrs={
            "long_name": "solution (PDEBench tensor)", "units": "1", ROLE: "state"})
        if any(word in equation for word in _PERIODIC_1D):
            boundary = "periodic"
    elif layout == _DARCY:
        n = nc.variables["tensor"].shape[0]
        coords[X] = _spatial(file, "x-coordinate", X, "cell_centres")
        coords[Y] = _spatial(file, "y-coordinate", Y, "cell_centres")
        data_vars["nu"] = _lazy(file, ["nu"], (SAMPLE, Y, X), axes=(0, 2, 1), attrs={
            "long_name": "diffusion coefficient (PDEBench nu)", "units": "1", ROLE: "forcing"})
        u = _lazy(file, ["tensor"], (SAMPLE, Y, X), axes=(0, 3, 2), fixed={1: 0}, attrs={
            "long_name": "solution (PDEBench tensor)", "units": "1", ROLE: "state",
            BOUNDARY_CONDITIONS: "y: dirichlet x: dirichlet"})
        data_vars["u"] = u
    elif layout == _CFD:
        density = nc.variables["density"]
        if density.ndim not in (3, 4) or "Vz" in nc.variables:
            raise DatasetFileError(f"'{path}' holds 3D compressible flow: ssmpde datasets are "
                                   "1D or 2D")
        ndim = density.ndim - 2
        n, nt = density.shape[:2]
        spatial = SPATIAL_DIMS[ndim]
        coords[X] = _spatial(file, "x-coordinate", X, "cell_centres")
        if ndim == 2:
            coords[Y] = _spatial(file, "y-coordinate", Y, "cell_centres")
        untimed = "t-coordinate" not in nc.variables
        coords[TIME] = time_coordinate(_times(file, None if untimed else "t-coordinate", nt))
        axes = (0, 1, 3, 2) if ndim == 2 else (0, 1, 2)
        for pdebench_name, name in _CFD_NAMES.items():
            if pdebench_name not in nc.variables:
                continue
            attrs = {"long_name": f"{name.replace('_', ' ')} (PDEBench {pdebench_name})",
                     "units": "1", ROLE: "state"}
            if name.startswith("velocity_"):
                attrs.update(vector="velocity", vector_component=name[-1])
            data_vars[name] = _lazy(file, [pdebench_name], (SAMPLE, TIME, *spatial), axes=axes,
                                    attrs=attrs)
        boundary = _BOUNDARIES.get(parameters.get("boundary", ""))
    else:
        groups = sorted(nc.groups)
        first = nc.groups[groups[0]]
        data = first.variables["data"]
        ndim = data.ndim - 2
        if ndim not in SPATIAL_DIMS:
            raise DatasetFileError(f"'{path}' holds {ndim}D data per sample: ssmpde datasets "
                                   "are 1D or 2D")
        _check_groups(file, path, groups)
        n, nt, channels = len(groups), data.shape[0], data.shape[-1]
        spatial = SPATIAL_DIMS[ndim]
        grid = first.groups["grid"]
        coords[X] = _spatial(file, f"{groups[0]}/grid/x", X, "nodes")
        if ndim == 2:
            coords[Y] = _spatial(file, f"{groups[0]}/grid/y", Y, "nodes")
        untimed = "t" not in grid.variables
        coords[TIME] = time_coordinate(_times(file, None if untimed else f"{groups[0]}/grid/t",
                                              nt))
        axes = (0, 2, 1) if ndim == 2 else (0, 1)
        for channel in range(channels):
            name = "u" if channels == 1 else f"u_{channel}"
            data_vars[name] = _lazy(file, [f"{group}/data" for group in groups],
                                    (SAMPLE, TIME, *spatial), stacked=True, axes=axes,
                                    fixed={ndim + 1: channel}, attrs={
                                        "long_name": f"channel {channel} of PDEBench data",
                                        "units": "1", ROLE: "state"})
    if layout == _GROUPS:
        indices = [int(g) if g.isdigit() else i for i, g in enumerate(sorted(nc.groups))]
        if len(set(indices)) != len(indices):
            indices = list(range(len(indices)))
    else:
        indices = np.arange(n)
    coords[SAMPLE] = sample_coordinate(np.asarray(indices, dtype=np.int64))
    config = {"pdebench": {"file": path.name, "layout": layout, "parameters": parameters,
                           "attributes": attributes}}
    ds = build_dataset(
        {name: xr.DataArray(var) for name, var in data_vars.items()}, coords=coords,
        equation=equation, config=config,
        title=f"PDEBench {path.name}", references=REFERENCE,
        solver=f"PDEBench data read from {path.name}",
        history=f"read from the PDEBench file {path.name} by ssmpde {__version__}",
        boundary_conditions=boundary)
    if untimed:
        # Said where `ssmpde info` shows it: the time step is an assumption, not the file's.
        ds.attrs["comment"] = (f"{path.name} has no time coordinate (t-coordinate or grid/t): "
                               "time is the frame index 0, 1, 2, ... (a time step of 1 is "
                               "assumed, not read from the file)")
        ds[TIME].attrs["comment"] = "frame index: the file records no times"
    return ds


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

def _encode_attr(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"__numpy__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return {"__numpy__": value.item(), "dtype": str(value.dtype), "scalar": True}
    if isinstance(value, (list, tuple)):
        return [_encode_attr(item) for item in value]
    return value


def _encode_attrs(attrs: Mapping) -> dict:
    return {str(key): _encode_attr(value) for key, value in attrs.items()}


def _states(ds: xr.Dataset) -> list[str]:
    return [name for name, var in ds.data_vars.items() if var.attrs.get(ROLE) == "state"]


def _layout_of(ds: xr.Dataset) -> tuple[str, dict[str, str]]:
    """The PDEBench layout for ``ds`` and the PDEBench dataset of each variable it maps."""
    spatial = tuple(dim for dim in (Y, X) if dim in ds.dims)
    ndim = len(spatial)
    states = _states(ds)
    if SAMPLE not in ds.dims:
        raise ValueError("PDEBench stacks samples: the dataset has no 'sample' dimension")
    if ndim == 0:
        raise ValueError("PDEBench holds fields on a grid: the dataset has no x dimension")
    if not states:
        raise ValueError("no data variable has role 'state': PDEBench's datasets hold the "
                         "solution fields (set the roles, or regenerate the dataset)")
    grid = (SAMPLE, TIME, *spatial) if TIME in ds.dims else (SAMPLE, *spatial)
    odd = [name for name in states if tuple(ds[name].dims) != grid]
    if odd:
        raise ValueError(f"state variables {odd} are not on ({', '.join(grid)}): PDEBench's "
                         "datasets hold one value per sample, frame and grid point")
    if TIME not in ds.dims:
        forcings = [name for name, var in ds.data_vars.items()
                    if var.attrs.get(ROLE) == "forcing" and tuple(var.dims) == grid]
        if ndim == 2 and len(states) == 1 and len(forcings) == 1:
            return _DARCY, {states[0]: "tensor", forcings[0]: "nu"}
        raise ValueError("PDEBench holds a steady problem only as Darcy flow: one 2D solution "
                         "(tensor) and one 2D coefficient (nu, a variable with role "
                         f"'forcing'); this dataset has states {states} and no time axis")
    if ndim == 1 and len(states) == 1:
        return _STACKED_1D, {states[0]: "tensor"}
    vectors = vectors_of(ds)
    velocity = vectors.get("velocity", {})
    if not velocity:
        velocity = {dim: f"velocity_{dim}" for dim in spatial if f"velocity_{dim}" in states}
    if {"density", "pressure"} <= set(states) and set(velocity) == set(spatial):
        mapping = {"density": "density", "pressure": "pressure", velocity[X]: "Vx"}
        if ndim == 2:
            mapping[velocity[Y]] = "Vy"
        return _CFD, mapping
    missing = [name for name, var in ds.data_vars.items() if SAMPLE not in var.dims]
    if missing:
        raise ValueError(f"variables {missing} have no sample dimension: PDEBench's per-sample "
                         "groups hold only per-sample values")
    return _GROUPS, {name: f"data (channel {channel})" for channel, name in enumerate(states)}


def _number(value: float) -> str:
    """A parameter as PDEBench writes it in file names (``0.001``, ``1.0``)."""
    return repr(float(f"{value:.6g}"))


def _uniform(ds: xr.Dataset, name: str) -> float | None:
    if name not in ds.data_vars or ds[name].dims != (SAMPLE,):
        return None
    values = np.unique(np.asarray(ds[name].values, dtype=np.float64))
    return float(values[0]) if values.size == 1 else None


def _boundary_word(ds: xr.Dataset, names: Sequence[str]) -> str | None:
    """PDEBench's boundary word (``periodic``, ``trans``) if every side of ``names`` has it."""
    conditions = boundary_conditions_of(ds)
    kinds = {kind for name in names for pair in conditions.get(name, {}).values()
             for kind in pair}
    if kinds == {"periodic"}:
        return "periodic"
    if kinds == {"outflow"}:
        return "trans"
    return None


def _root_parameters(ds: xr.Dataset, layout: str) -> dict[str, float]:
    """PDEBench's file attributes (``Nu``, ``beta``, ``eta``, ``zeta``) that ``ds`` fixes."""
    equation = ds.attrs.get("ssmpde_equation", "")
    out: dict[str, float] = {}
    if layout == _STACKED_1D and equation == "burgers":
        viscosity = _uniform(ds, "viscosity")
        if viscosity is not None:
            out["Nu"] = math.pi * viscosity  # PDEBench's Burgers: u_t + (u²/2)_x = (Nu/π) u_xx
    if layout == _DARCY:
        forcing = config_of(ds).get("solver", {}).get("forcing")
        if isinstance(forcing, (int, float)) and not isinstance(forcing, bool):
            out["beta"] = float(forcing)
    if layout == _CFD and equation == "euler":
        out.update(eta=0.0, zeta=0.0)  # inviscid
    return out


def conventional_name(ds: xr.Dataset) -> str | None:
    """The file name PDEBench's conventions give ``ds`` (its loaders find files by name).

    ``1D_Burgers_Sols_Nu<Nu>.hdf5`` (``Nu`` = π ν: PDEBench's viscosity is ν/π),
    ``1D_<Equation>_Sols.hdf5`` for the other 1D PDEs, ``2D_DarcyFlow_beta<β>_Train.hdf5``,
    ``2D_CFD_<problem>_Eta0.0_Zeta0.0_<periodic|trans>_<nx>_Train.hdf5``, and
    ``2D_<equation>_NA_NA.h5`` for per-sample groups; ``NA`` where a value varies per sample.
    None if ``ds`` does not fit PDEBench.
    """
    try:
        layout, mapping = _layout_of(ds)
    except ValueError:
        return None
    equation = str(ds.attrs.get("ssmpde_equation", "dataset"))
    camel = "".join(part[:1].upper() + part[1:] for part in re.split(r"[-_\s]+", equation))
    parameters = _root_parameters(ds, layout)
    if layout == _STACKED_1D:
        if equation == "burgers":
            nu = _number(parameters["Nu"]) if "Nu" in parameters else "NA"
            return f"1D_Burgers_Sols_Nu{nu}.hdf5"
        return f"1D_{'KdV' if equation == 'kdv' else camel}_Sols.hdf5"
    if layout == _DARCY:
        beta = _number(parameters["beta"]) if "beta" in parameters else "NA"
        return f"2D_DarcyFlow_beta{beta}_Train.hdf5"
    if layout == _CFD:
        problem = config_of(ds).get("solver", {}).get("problem", equation)
        problem = str(problem).upper() if problem else "NA"
        boundary = _boundary_word(ds, list(mapping)) or "NA"
        size = ds.sizes[X]
        return (f"{len(_spatial_dims(ds))}D_CFD_{problem}_Eta0.0_Zeta0.0_{boundary}_{size}"
                "_Train.hdf5")
    return f"{len(_spatial_dims(ds))}D_{equation}_NA_NA.h5"


def _spatial_dims(ds: xr.Dataset) -> tuple[str, ...]:
    return tuple(dim for dim in (Y, X) if dim in ds.dims)


def _float32(values: Any) -> np.ndarray:
    array = np.asarray(values)
    return array.astype(np.float32) if array.dtype.kind == "f" else array


def _stored_dtype(var: xr.DataArray) -> np.dtype:
    return np.dtype(np.float32) if var.dtype.kind == "f" else var.dtype


def _create(group: netCDF4.Group, name: str, dtype: np.dtype, dims: Sequence[str],
            chunks: Sequence[int] | None = None) -> netCDF4.Variable:
    options: dict[str, Any] = {}
    if dims and np.dtype(dtype).kind in "iuf":
        options.update(_COMPRESSION)
        if chunks is not None:
            options["chunksizes"] = tuple(max(1, c) for c in chunks)
    return group.createVariable(name, np.dtype(dtype), tuple(dims), fill_value=False,
                                **options)


def _check_writable(ds: xr.Dataset) -> None:
    bad = [name for name, var in ds.variables.items() if var.dtype.kind not in "iuf"]
    if bad:
        raise ValueError(f"variables {bad} are not numbers: PDEBench files hold numbers only")


def export(ds: xr.Dataset, path: pathlib.Path) -> list[str]:
    """Write ``ds`` as a PDEBench file at ``path``; return what PDEBench cannot carry.

    Parameters
    ----------
    ds : xarray.Dataset
        An ssmpde dataset (read one sample at a time, so it may be larger than memory).
    path : pathlib.Path
        The file to create (it must not exist). Name stacked files ``.hdf5`` and per-sample
        files ``.h5``: PDEBench's loaders pick the layout by that suffix
        (:func:`conventional_name` gives the full conventional name).

    Returns
    -------
    list of str
        Notes of what PDEBench's loaders will not see (roles, units, parameters, forcings,
        the tracer, ...): all of it is kept where they do not look, so that ssmpde reads the
        file back exactly.

    Raises
    ------
    ValueError
        If PDEBench cannot hold the dataset: a steady problem other than Darcy flow, state
        fields off the ``(sample, time, [y,] x)`` grid, no state field, or non-numeric data.

    Notes
    -----
    Floating data variables are stored as float32 (PDEBench's precision); coordinates,
    integer variables and every attribute come back exactly.
    """
    layout, mapping = _layout_of(ds)
    _check_writable(ds)
    notes: list[str] = []
    suffix = path.suffix.lower()
    if layout == _GROUPS and suffix != ".h5":
        notes.append("PDEBench's loaders read per-sample groups from files named '.h5': "
                     "rename the file to end in .h5")
    elif layout != _GROUPS and suffix == ".h5":
        notes.append("PDEBench's loaders read a name ending in 'h5' as per-sample groups: "
                     "rename the file to end in .hdf5")
    spatial = _spatial_dims(ds)
    xy = tuple(reversed(spatial))  # PDEBench's axis order: x first
    if layout == _GROUPS:
        variables, groups = _write_groups(ds, path, mapping, xy)
    else:
        variables, groups = _write_stacked(ds, path, layout, mapping, xy), []
    meta = {"format": "ssmpde export to PDEBench", "version": 1, "layout": layout,
            "attrs": _encode_attrs(ds.attrs), "groups": groups, "variables": variables,
            "coords": {name: {"dims": list(var.dims), "dtype": str(var.dtype),
                              "values": np.asarray(var.values).tolist(),
                              "attrs": _encode_attrs(var.attrs)}
                       for name, var in ds.coords.items()}}
    with netCDF4.Dataset(path, "a") as nc:
        nc.setncattr_string(METADATA_ATTR, json.dumps(meta, allow_nan=False))
    cast = [name for name, var in ds.data_vars.items() if var.dtype.kind == "f"
            and var.dtype != np.float32]
    if cast:
        notes.append(f"{', '.join(cast)} stored as float32, PDEBench's precision")
    held = ", ".join(f"{name} as {target}" for name, target in mapping.items())
    notes.append(f"PDEBench's loaders see {held}; roles, units, long names, boundary "
                 f"conditions and the generator config are in the file attribute "
                 f"'{METADATA_ATTR}', which they ignore")
    extras = [name for name in ds.data_vars if name not in mapping]
    if extras:
        where = (f"in the group '{EXTRAS_GROUP}'" if layout != _GROUPS
                 else "inside each sample group")
        roles = ", ".join(f"{name} ({ds[name].attrs.get(ROLE, 'no role')})" for name in extras)
        notes.append(f"PDEBench has no dataset for {roles}: written {where}, which its "
                     "loaders ignore")
    if layout != _GROUPS and TIME in ds.dims:
        notes.append("t-coordinate has nt + 1 entries (PDEBench's convention): the last is "
                     "the last frame's time plus one record interval, not a frame")
    return notes


def _write_stacked(ds: xr.Dataset, path: pathlib.Path, layout: str, mapping: Mapping[str, str],
                   xy: tuple[str, ...]) -> dict[str, dict]:
    """Write the stacked-samples layout; return each variable's place in the file."""
    n = ds.sizes[SAMPLE]
    file_dim = {SAMPLE: SAMPLE, TIME: TIME, X: "x-coordinate", Y: "y-coordinate"}
    variables: dict[str, dict] = {}
    sizes = {file_dim.get(dim, dim): size for dim, size in ds.sizes.items()}
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        for key, value in _root_parameters(ds, layout).items():
            nc.setncattr(key, value)
        nc.createDimension(SAMPLE, n)
        _create(nc, SAMPLE, np.int64, (SAMPLE,))[:] = np.asarray(ds[SAMPLE].values)
        if TIME in ds.dims:
            times = np.asarray(ds[TIME].values, dtype=np.float64)
            nc.createDimension(TIME, times.size)
            _create(nc, TIME, np.float64, (TIME,))[:] = times
            step = times[-1] - times[-2] if times.size > 1 else 0.0
            nc.createDimension("t-coordinate", times.size + 1)
            _create(nc, "t-coordinate", np.float32, ("t-coordinate",))[:] = \
                np.append(times, times[-1] + step).astype(np.float32)
        else:
            nc.createDimension(TIME, 1)  # Darcy's tensor: [N, 1, nx, ny]
        for dim in xy:
            nc.createDimension(file_dim[dim], ds.sizes[dim])
            _create(nc, file_dim[dim], np.float32, (file_dim[dim],))[:] = \
                np.asarray(ds[dim].values, dtype=np.float32)
        extras = nc.createGroup(EXTRAS_GROUP) if any(name not in mapping
                                                     for name in ds.data_vars) else None
        for name, var in ds.data_vars.items():
            if name in mapping:
                target = mapping[name]
                file_dims = [SAMPLE, TIME, *(file_dim[dim] for dim in xy)]
                fixed = {}
                if layout == _DARCY:
                    if target == "tensor":
                        fixed = {1: 0}
                    else:
                        file_dims.remove(TIME)
                order = [dim for dim in (SAMPLE, TIME, *xy) if dim in var.dims]
                group, place = nc, target
            else:
                for dim in var.dims:
                    if dim not in file_dim and dim not in extras.dimensions:
                        extras.createDimension(dim, var.sizes[dim])
                file_dims = [file_dim.get(dim, dim) for dim in var.dims]
                order, fixed = list(var.dims), {}
                group, place = extras, f"{EXTRAS_GROUP}/{name}"
            stored = _create(group, place.rsplit("/", 1)[-1], _stored_dtype(var), file_dims,
                             chunks=[1 if dim == SAMPLE else sizes.get(dim, 1)
                                     for dim in file_dims])
            _write_by_sample(stored, var.transpose(*order), fixed)
            remaining = [axis for axis in range(len(file_dims)) if axis not in fixed]
            axes = [remaining[order.index(dim)] for dim in var.dims]
            variables[name] = {"path": place, "stacked": False, "dims": list(var.dims),
                               "axes": axes, "fixed": {str(k): v for k, v in fixed.items()},
                               "attrs": _encode_attrs(var.attrs)}
    return variables


def _write_by_sample(stored: netCDF4.Variable, var: xr.DataArray,
                     fixed: Mapping[int, int]) -> None:
    """Write ``var`` (already in the file's axis order, less the fixed axes) sample by sample."""
    if SAMPLE not in var.dims:
        values = _float32(var.values) if stored.dtype == np.float32 else np.asarray(var.values)
        stored[...] = values.reshape(stored.shape) if fixed else values
        return
    for index in range(var.sizes[SAMPLE]):
        values = np.asarray(var.isel({SAMPLE: index}).values).astype(stored.dtype, copy=False)
        key = [index] + [slice(None)] * (stored.ndim - 1)
        for axis, at in fixed.items():
            key[axis] = at
        stored[tuple(key)] = values


def _write_groups(ds: xr.Dataset, path: pathlib.Path, mapping: Mapping[str, str],
                  xy: tuple[str, ...]) -> tuple[dict[str, dict], list[str]]:
    """Write the per-sample-groups layout; return each variable's place and the groups."""
    n = ds.sizes[SAMPLE]
    width = max(4, len(str(n - 1)))  # names sort in sample order, as the loaders list them
    groups = [str(i).zfill(width) for i in range(n)]
    states = list(mapping)
    ndim = len(xy)
    axes = {1: (0, 1), 2: (0, 2, 1)}[ndim]  # ssmpde (time, y, x) ← data [t, x, y, c]
    variables = {name: {"path": "data", "stacked": True, "dims": list(ds[name].dims),
                        "axes": list(axes), "fixed": {str(ndim + 1): channel},
                        "attrs": _encode_attrs(ds[name].attrs)}
                 for channel, name in enumerate(states)}
    extras = [name for name in ds.data_vars if name not in mapping]
    for name in extras:
        dims = [dim for dim in ds[name].dims if dim != SAMPLE]
        if ds[name].dims[0] != SAMPLE:
            raise ValueError(f"variable '{name}' does not have 'sample' as its first dimension: "
                             "PDEBench's per-sample groups hold one value per sample")
        variables[name] = {"path": name, "stacked": True, "dims": list(ds[name].dims),
                           "axes": list(range(len(dims))), "fixed": {},
                           "attrs": _encode_attrs(ds[name].attrs)}
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        for index, group_name in enumerate(groups):
            group = nc.createGroup(group_name)
            sample = ds.isel({SAMPLE: index})
            for dim in (TIME, *xy):
                group.createDimension(dim, ds.sizes[dim])
                _create(group, dim, np.float64, (dim,))[:] = np.asarray(ds[dim].values,
                                                                          dtype=np.float64)
            group.createDimension("channel", len(states))
            data = _create(group, "data", np.float32, (TIME, *xy, "channel"),
                           chunks=[ds.sizes[TIME], *(ds.sizes[d] for d in xy), 1])
            data[...] = np.stack([np.asarray(sample[name].transpose(TIME, *xy).values,
                                             dtype=np.float32) for name in states], axis=-1)
            grid = group.createGroup("grid")
            for dim in xy:
                _create(grid, dim, np.float32, (dim,))[:] = np.asarray(ds[dim].values,
                                                                       dtype=np.float32)
            _create(grid, "t", np.float32, (TIME,))[:] = np.asarray(ds[TIME].values,
                                                                    dtype=np.float32)
            for name in extras:
                var = sample[name]
                for dim in var.dims:
                    if dim not in group.dimensions:
                        group.createDimension(dim, var.sizes[dim])
                stored = _create(group, name, _stored_dtype(var), var.dims)
                values = np.asarray(var.values).astype(stored.dtype, copy=False)
                stored[...] = values
    return variables, groups


# --------------------------------------------------------------------------------------------
# The xarray engine
# --------------------------------------------------------------------------------------------

class PDEBenchBackendEntrypoint(FormatBackendEntrypoint):
    """``xr.open_dataset(path, engine="pdebench")``: a PDEBench file as :func:`open` reads it.

    Name the engine: without it xarray's netCDF4 engine, which looks first, takes every HDF5
    file and shows PDEBench's raw datasets instead.
    """

    format_name = NAME
    description = DESCRIPTION
    url = "https://github.com/pdebench/PDEBench"
