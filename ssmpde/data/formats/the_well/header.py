"""A Well file's header: its schema read and checked before any of its data is."""

from __future__ import annotations

import dataclasses
import math
import numbers
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ssmpde.core import decode_json

from ...schema import SPATIAL_DIMS, DatasetFileError
from .. import check_declared_memory
from ..hdf5 import is_hdf5
from .layout import _GROUPS, _REEXPORT, METADATA, SAMPLE_INDICES


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.shape in ((), (1,)):
        return _text(value.reshape(()).item())
    return str(value)


def _texts(value: Any) -> list[str]:
    if isinstance(value, (str, bytes)):
        return [_text(value)]
    return [_text(v) for v in np.asarray(value).ravel()]


def _flag(attrs, key: str, where: str) -> bool:
    if key not in attrs:
        raise DatasetFileError(f"{where} has no '{key}' attribute, which every entry of The "
                               "Well's schema carries: the file is not in The Well's format "
                               "(or is damaged); regenerate or re-download it")
    return bool(np.asarray(attrs[key]).reshape(-1)[0])


@dataclasses.dataclass
class _FileField:
    name: str
    order: int
    sample_varying: bool
    time_varying: bool
    dim_varying: tuple[bool, ...]
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclasses.dataclass
class _WellFile:
    path: pathlib.Path
    name: str
    n: int
    spatial_dims: tuple[str, ...]
    time: np.ndarray
    coords: dict[str, np.ndarray]
    fields: dict[str, _FileField]
    scalars: dict[str, tuple[bool, bool, np.ndarray]]
    parameters: dict[str, Any]
    boundaries: list[dict]
    metadata: dict | None
    samples: np.ndarray | None


def _read_file(h5py, path: pathlib.Path) -> _WellFile:
    if not is_hdf5(path):
        raise DatasetFileError(f"'{path}' is not an HDF5 file, so not a file of The Well: "
                               "check the path")
    try:
        handle = h5py.File(path, "r")
    except OSError as error:
        raise DatasetFileError(f"cannot read the Well file '{path}': it is truncated or "
                               f"corrupt HDF5 (underlying error: {error}); re-download or "
                               "regenerate it") from error
    with handle as f:
        missing = [g for g in ("dimensions", *_GROUPS, "scalars", "boundary_conditions")
                   if g not in f]
        missing += [a for a in ("dataset_name", "n_spatial_dims", "n_trajectories")
                    if a not in f.attrs]
        if missing:
            raise DatasetFileError(f"'{path}' is not a file of The Well: it lacks "
                                   f"{', '.join(missing)} (its root holds the attributes "
                                   "dataset_name, n_spatial_dims, n_trajectories and the groups "
                                   "dimensions, t0_fields, t1_fields, t2_fields, scalars, "
                                   "boundary_conditions)")
        n = _trajectories(f.attrs["n_trajectories"], path)
        dimensions = f["dimensions"]
        spatial_dims = tuple(_texts(dimensions.attrs.get("spatial_dims", [])))
        if len(spatial_dims) not in SPATIAL_DIMS:
            raise DatasetFileError(f"'{path}' has {len(spatial_dims)} spatial dimensions "
                                   f"{list(spatial_dims)}: ssmpde datasets are 1D or 2D grids")
        for dim in (*spatial_dims, "time"):
            if dim not in dimensions:
                raise DatasetFileError(f"'{path}' names the dimension '{dim}' but its "
                                       "'dimensions' group has no such dataset")
        _check_sizes(h5py, f, path, n, spatial_dims)
        time = dimensions["time"][()]
        if time.ndim == 2:
            if not np.all(time == time[:1]):
                raise DatasetFileError(f"'{path}' has a different time axis per trajectory: "
                                       "ssmpde datasets share one time axis")
            time = time[0]
        _check_axis(time, f"'{path}': dimensions/time")
        coords = {}
        for dim in spatial_dims:
            values = dimensions[dim][()]
            if values.ndim != 1:
                raise DatasetFileError(f"'{path}': the coordinate '{dim}' varies per sample or "
                                       "in time; ssmpde reads fixed grids only")
            _check_axis(values, f"'{path}': dimensions/{dim}")
            coords[dim] = values
        fields = {}
        for order, group_name in enumerate(_GROUPS):
            group = f[group_name]
            for name in _texts(group.attrs.get("field_names", [])):
                if name not in group:
                    raise DatasetFileError(f"'{path}' lists the field '{name}' in {group_name} "
                                           "but holds no such dataset")
                data = group[name]
                where = f"'{path}': {group_name}/{name}"
                dim_varying = tuple(bool(v) for v in np.asarray(
                    data.attrs.get("dim_varying", [True] * len(spatial_dims))).reshape(-1))
                fields[name] = _FileField(name, order, _flag(data.attrs, "sample_varying", where),
                                          _flag(data.attrs, "time_varying", where), dim_varying,
                                          tuple(data.shape), data.dtype)
                _check_field_shape(fields[name], where, n, len(time),
                                   [len(coords[d]) for d in spatial_dims])
        scalars = {}
        group = f["scalars"]
        for name in _texts(group.attrs.get("field_names", [])):
            data = group[name]
            where = f"'{path}': scalars/{name}"
            scalars[name] = (_flag(data.attrs, "sample_varying", where),
                             _flag(data.attrs, "time_varying", where), np.asarray(data[()]))
        parameters = {}
        for name in _texts(f.attrs.get("simulation_parameters", [])):
            if name in f.attrs:
                parameters[name] = f.attrs[name]
        boundaries = []
        for name, group in f["boundary_conditions"].items():
            where = f"'{path}': boundary_conditions/{name}"
            if "bc_type" not in group.attrs or "mask" not in group:
                raise DatasetFileError(f"{where} lacks 'bc_type' or 'mask'")
            mask = np.asarray(group["mask"][()], dtype=bool)
            lead = int(_flag(group.attrs, "sample_varying", where)) + \
                int(_flag(group.attrs, "time_varying", where))
            if lead:
                mask = mask.reshape((-1,) + mask.shape[lead:]).any(axis=0)
            boundaries.append({"type": _text(group.attrs["bc_type"]).upper(),
                               "dims": _texts(group.attrs.get("associated_dims", [])),
                               "fields": _texts(group.attrs.get("associated_fields", [])),
                               "mask": mask})
        metadata = None
        if METADATA in f:
            metadata = decode_json(f"'{path}': the dataset '{METADATA}'",
                                   text=_text(f[METADATA][()]), error=DatasetFileError,
                                   keys={"version": int, "attrs": dict, "coords": dict,
                                         "variables": dict}, fix=_REEXPORT)
        samples = None
        if SAMPLE_INDICES in f.attrs:
            samples = np.asarray(f.attrs[SAMPLE_INDICES], dtype=np.int64).reshape(-1)
        return _WellFile(path, _text(f.attrs["dataset_name"]), n, spatial_dims, time, coords,
                         fields, scalars, parameters, boundaries, metadata, samples)


def _trajectories(value: Any, path: pathlib.Path) -> int:
    """The ``n_trajectories`` attribute as a count, or an error naming the file."""
    raw = np.asarray(value)
    number = raw.reshape(()).item() if raw.size == 1 else None
    if isinstance(number, (bool, np.bool_)) or not isinstance(number, numbers.Real) \
            or not math.isfinite(number) or number < 0 or number != int(number):
        shown = _text(value) if raw.dtype.kind in "SUO" else repr(raw.tolist())
        raise DatasetFileError(f"'{path}': its n_trajectories attribute is {shown}, not a "
                               "number of trajectories (a whole number, 0 or more): the file "
                               "is damaged or was not written by The Well's tools; regenerate "
                               "or re-download it")
    return int(number)


def _check_sizes(h5py, f, path: pathlib.Path, n: int, spatial_dims: Sequence[str]) -> None:
    """Before anything is read: every sample-varying array holds ``n`` trajectories, and what
    opening reads whole (coordinates, scalars, masks, sample indices) and each field's chunk
    (decompressed whole to read any of it) fit in memory."""
    whole = [f["dimensions"][dim] for dim in (*spatial_dims, "time")]
    for group_name in (*_GROUPS, "scalars"):
        group = f[group_name]
        for name in _texts(group.attrs.get("field_names", [])):
            data = group.get(name)
            if not isinstance(data, h5py.Dataset):
                continue  # said by the reader, in its own words
            if data.chunks is not None:
                # HDF5 decompresses a chunk whole to read any value of it: a compressed file
                # of megabytes can declare a chunk of gigabytes.
                check_declared_memory(path, f"chunks of {list(data.chunks)} values in "
                                      f"{group_name}/{name}",
                                      math.prod(data.chunks) * data.dtype.itemsize)
            if group_name == "scalars":
                whole.append(data)
            flag = np.asarray(data.attrs.get("sample_varying", False)).reshape(-1)
            if flag.size and bool(flag[0]) and data.ndim and data.shape[0] != n:
                raise DatasetFileError(
                    f"'{path}': n_trajectories is {n}, but {group_name}/{name} holds "
                    f"{data.shape[0]} trajectories: the file is damaged; regenerate or "
                    "re-download it")
    for group in f["boundary_conditions"].values():
        if isinstance(group, h5py.Group) and isinstance(group.get("mask"), h5py.Dataset):
            whole.append(group["mask"])
    need = 16 * n + 8 * sum(int(data.size) for data in whole)
    check_declared_memory(path, f"{n} trajectories and {len(whole)} coordinates, scalars and "
                          "masks read whole", need)


def _check_field_shape(field: _FileField, where: str, n: int, frames: int,
                       grid: Sequence[int]) -> None:
    """A field's array has the shape its header gives it: [trajectories?, times?, *grid (the
    axes it varies along), then its component axes] (numpy's broadcast error, at the first
    read, was the only word of a field one frame short)."""
    lead = ([n] if field.sample_varying else []) + ([frames] if field.time_varying else []) \
        + [size for size, used in zip(grid, field.dim_varying) if used]
    if list(field.shape[:len(lead)]) != lead or len(field.shape) != len(lead) + field.order:
        parts = ", ".join((["trajectories"] if field.sample_varying else [])
                          + (["times"] if field.time_varying else []) + ["grid points"])
        raise DatasetFileError(
            f"{where} holds an array of shape {list(field.shape)}, but the file's "
            f"n_trajectories, dimensions/time and grid make it {lead} ({parts}) followed by "
            f"{field.order} component axes: the file is damaged or was cut short; regenerate "
            "or re-download it")


def _check_axis(values: np.ndarray, where: str) -> None:
    """A coordinate of a Well file: finite and strictly increasing, or an error naming it."""
    values = np.asarray(values)
    if values.dtype.kind not in "iuf":
        raise DatasetFileError(f"{where} holds {values.dtype} values, not numbers: the file is "
                               "damaged or not The Well's; regenerate or re-download it")
    if values.size and not np.isfinite(values).all():
        raise DatasetFileError(f"{where} has values that are not finite (NaN or infinity): the "
                               "file is damaged; regenerate or re-download it")
    if values.ndim == 1 and values.size > 1 and not (np.diff(values) > 0).all():
        raise DatasetFileError(f"{where} is not strictly increasing: ssmpde reads coordinates "
                               "that grow along their axis; check the file")
