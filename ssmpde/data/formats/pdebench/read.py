"""Reading PDEBench files: recognising them, checking them before reading, opening them lazily."""

from __future__ import annotations

import functools
import math
import pathlib
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import netCDF4
import numpy as np
import xarray as xr
from xarray.backends.locks import HDF5_LOCK

from ssmpde import __version__
from ssmpde.core import check_json_keys, decode_json

from ...schema import (BOUNDARY_CONDITIONS, ROLE, SAMPLE, SPATIAL_DIMS, TIME, X, Y,
                       DatasetFileError, build_dataset, sample_coordinate, spatial_coordinate,
                       time_coordinate)
from .. import check_declared_memory
from ..hdf5 import HDF5_SUFFIXES, LazyArray, is_hdf5
from .layout import _CFD, _DARCY, _GROUPS, _ODD_TENSOR, _STACKED_1D, METADATA_ATTR, REFERENCE
from .unwritten import _refuse_unwritten

# PDEBench's compressible-flow datasets and the ssmpde names of the same fields.
_CFD_NAMES = {"density": "density", "pressure": "pressure", "Vx": "velocity_x",
              "Vy": "velocity_y"}
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


def _read_path(file: _File, paths: Sequence[str], piece: int, key: tuple) -> np.ndarray:
    """What :class:`~ssmpde.data.formats.hdf5.LazyArray` reads: ``paths[piece]`` at ``key``."""
    return file.read(paths[piece], key)


def _lazy(file: _File, paths: Sequence[str], dims: Sequence[str], *, stacked: bool = False,
          axes: Sequence[int] | None = None, fixed: Mapping[int, int] | None = None,
          attrs: Mapping | None = None) -> xr.Variable:
    """An :class:`xarray.Variable` backed by the file, nothing read yet.

    ``axes[i]`` is the file axis of the variable's axis ``i`` (after the stacked sample axis,
    if any: one path per sample); file axes in ``fixed`` are read at one index (Darcy's time
    axis of length 1, the channel of a per-sample ``data``).
    """
    variable = _numeric(file, paths[0])
    fixed = {int(k): int(v) for k, v in (fixed or {}).items()}
    own = [axis for axis in range(variable.ndim) if axis not in fixed]
    axes = tuple(own if axes is None else axes)
    shape = tuple(variable.shape[axis] for axis in axes)
    read = functools.partial(_read_path, file, tuple(paths))
    if stacked:  # the sample axis in front of each path's axes, one sample per path
        array = LazyArray(read, shape=(len(paths), *shape), dtype=variable.dtype,
                          axes=(0, *(axis + 1 for axis in axes)),
                          fixed={axis + 1: index for axis, index in fixed.items()},
                          counts=[1] * len(paths), piece_sample=False)
    else:
        array = LazyArray(read, shape=shape, dtype=variable.dtype, axes=axes, fixed=fixed)
    return array.variable(dims, attrs)


# --------------------------------------------------------------------------------------------
# Recognising files
# --------------------------------------------------------------------------------------------

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
    if not path.is_file() or not is_hdf5(path):
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
    """Refuse a file whose header declares more samples and coordinates than memory holds, or
    chunks larger than it.

    The coordinates (and the sample indices) are read whole when the file opens; a header
    that declares 10⁹ samples (a tiny damaged or hand-made file) would exhaust memory there.
    A chunk is decompressed whole to read any of its values.
    """
    nc = file.nc
    for name, variable in nc.variables.items():
        chunking = variable.chunking()
        if chunking != "contiguous" and isinstance(variable.dtype, np.dtype):
            # HDF5 decompresses a chunk whole to read any value of it: a compressed file of
            # megabytes can declare a chunk of gigabytes.
            check_declared_memory(path, f"chunks of {list(chunking)} values in '{name}'",
                                  math.prod(chunking) * variable.dtype.itemsize)
    if METADATA_ATTR in nc.ncattrs():
        return  # our export: its coordinates are in the metadata, already read
    arrays = [v for v in nc.variables.values() if v.ndim >= 2]
    samples = len(nc.groups) if not arrays else max(v.shape[0] for v in arrays)
    frames = max((v.shape[1] for v in arrays), default=0)
    one_d = sum(v.size for v in nc.variables.values() if v.ndim <= 1)
    need = 16 * samples + 8 * (frames + one_d)
    check_declared_memory(path, f"{samples} samples" if samples > frames
                          else f"{frames} frames", need)


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
            ds = _open_export(file, _metadata(file, path))
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


# What each coordinate and variable of an export's metadata holds, by JSON type.
_META_ENTRIES = {"coords": {"dims": list, "dtype": str, "values": (list, int, float, str),
                            "attrs": dict},
                 "variables": {"path": str, "stacked": bool, "dims": list, "axes": list,
                               "fixed": dict, "attrs": dict}}


def _metadata(file: _File, path: pathlib.Path) -> dict:
    """The metadata of an ssmpde export, its JSON types checked down to each coordinate and
    variable: wrong ones are one DatasetFileError naming the entry (they were an internal
    error, AttributeError, when read)."""
    fix = f"its global attribute '{METADATA_ATTR}' is damaged: convert the source data again"
    where = f"'{path}': the global attribute '{METADATA_ATTR}'"
    meta = decode_json(where, text=file.nc.getncattr(METADATA_ATTR), error=DatasetFileError,
                       keys={"attrs": dict, "coords": dict, "variables": dict}, fix=fix)
    groups = meta.get("groups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise DatasetFileError(f"{where}: 'groups' must be a JSON array of strings: {fix}")
    for section, keys in _META_ENTRIES.items():
        for name, entry in meta[section].items():
            inside = f"{where}, {section} '{name}'"
            check_json_keys(entry, keys, where=inside, error=DatasetFileError, fix=fix)
            lists = {"dims": str, "axes": int}
            for key, kind in lists.items():
                if key in entry and not all(isinstance(v, kind) and not isinstance(v, bool)
                                            for v in entry[key]):
                    raise DatasetFileError(f"{inside}: '{key}' must hold "
                                           f"{'strings' if kind is str else 'integers'}: {fix}")
            if section == "variables" and not all(
                    k.isdigit() and isinstance(v, int) and not isinstance(v, bool)
                    for k, v in entry["fixed"].items()):
                raise DatasetFileError(f"{inside}: 'fixed' must map axes to indices (integers): "
                                       f"{fix}")
    return meta


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
    for suffix in HDF5_SUFFIXES:
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
