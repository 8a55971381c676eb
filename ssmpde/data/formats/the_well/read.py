"""Opening The Well's files lazily as ssmpde datasets, and recognising them."""

from __future__ import annotations

import datetime
import functools
import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import CachingFileManager

from ssmpde import __version__

from ...schema import (BOUNDARY_CONDITIONS, CONVENTIONS, ROLE, SAMPLE, SPATIAL_DIMS, TIME,
                       VECTOR, VECTOR_COMPONENT, DatasetFileError, format_boundary_conditions,
                       sample_coordinate, time_coordinate)
from ..hdf5 import LazyArray, is_hdf5
from .header import _read_file, _WellFile
from .layout import (_FROM_WELL_BC, _GROUPS, _METADATA_VERSION, _REEXPORT, _REFERENCES,
                     _WELL_DIMS, METADATA, NAME, DamagedLayoutError, _attrs_from_json, _files,
                     _from_json_value, _h5py, _json_value)


def sniff(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file, split directory or dataset directory of The Well.

    Looks at the HDF5 signature and the root of one file (the attribute ``n_trajectories`` and
    the groups ``dimensions`` and ``t0_fields``); reads no data. Without h5py it answers False.
    """
    path = pathlib.Path(os.fspath(path)).expanduser()
    try:
        files = _files(path)
    except DamagedLayoutError:
        return True  # The Well's layout, damaged: open names the damage
    except (OSError, ValueError):
        return False
    first = files[0]
    if not is_hdf5(first):
        return False
    try:
        h5py = _h5py()
    except ImportError:
        return False
    try:
        with h5py.File(first, "r") as f:
            return "n_trajectories" in f.attrs and "dimensions" in f and "t0_fields" in f
    except OSError:
        # An HDF5 signature that HDF5 cannot open: in a Well directory layout, a damaged
        # file of The Well (open names it), not a directory of no known format.
        return path.is_dir()


def _read_piece(managers: Sequence[CachingFileManager], dataset: str, index: int,
                key: tuple) -> np.ndarray:
    """What :class:`~ssmpde.data.formats.hdf5.LazyArray` reads: ``dataset`` of file ``index``
    at ``key``."""
    with managers[index].acquire_context() as f:
        return np.asarray(f[dataset][key])


class _Reader:
    """Builds the variables of an ssmpde dataset from the files of one Well dataset."""

    def __init__(self, h5py, files: list[_WellFile]):
        self.files = files
        self.first = files[0]
        self.managers = [CachingFileManager(h5py.File, str(f.path), mode="r") for f in files]
        self.counts = [f.n for f in files]
        self.total = sum(self.counts)
        well = self.first.spatial_dims
        # The Well's dims in array order become x (and y): its first axis is x.
        self.names = dict(zip(well, _WELL_DIMS[len(well)]))
        self.ours = SPATIAL_DIMS[len(well)]

    def close(self) -> None:
        for manager in self.managers:
            manager.close()

    def field(self, name: str, component: tuple[int, ...], dims: Sequence[str] | None = None,
              *, broadcast: bool = True) -> xr.Variable:
        """A field (one component of it) as a lazily read variable, dims in ``dims`` order
        (default ``[sample?, time?, y?, x]``). A field without a sample axis read from several
        files gets one if ``broadcast`` (each file's array for each of its samples); without,
        it is read from the first file."""
        info = self.first.fields[name]
        file_dims = ([SAMPLE] if info.sample_varying else []) + \
            ([TIME] if info.time_varying else []) + \
            [self.names[d] for d, used in zip(self.first.spatial_dims, info.dim_varying) if used]
        sampled = info.sample_varying or (broadcast and len(self.files) > 1)
        if not info.sample_varying and sampled:
            file_dims = [SAMPLE] + file_dims
        if dims is None:
            dims = [d for d in (SAMPLE, TIME, *self.ours) if d in file_dims]
        axes = tuple(file_dims.index(d) for d in dims)
        sizes = {SAMPLE: self.total, TIME: len(self.first.time),
                 **{self.names[d]: len(v) for d, v in self.first.coords.items()}}
        shape = tuple(sizes[d] for d in dims)
        # The file axes: [sample?, time?, *space (Well order)], then the component's axes.
        read = functools.partial(_read_piece, tuple(self.managers),
                                 f"{_GROUPS[info.order]}/{name}")
        array = LazyArray(read, shape=shape, dtype=info.dtype, axes=axes,
                          fixed={len(axes) + i: c for i, c in enumerate(component)},
                          counts=self.counts if sampled else None,
                          piece_sample=info.sample_varying)
        return array.variable(dims)

    def scalar(self, name: str) -> tuple[tuple[str, ...], np.ndarray]:
        """A scalar's dims and values over all files (small: read eagerly)."""
        sample_varying, time_varying, _ = self.first.scalars[name]
        values = [f.scalars[name][2] for f in self.files]
        if sample_varying:
            return ((SAMPLE,) + ((TIME,) if time_varying else ()), np.concatenate(values))
        dims = (TIME,) if time_varying else ()
        if all(np.array_equal(v, values[0]) for v in values[1:]):
            return dims, values[0]
        return (SAMPLE, *dims), np.concatenate(
            [np.broadcast_to(v, (n,) + v.shape) for v, n in zip(values, self.counts)])


def _check_consistent(files: list[_WellFile]) -> None:
    first = files[0]
    for other in files[1:]:
        problems = []
        if other.spatial_dims != first.spatial_dims or any(
                not np.array_equal(other.coords[d], first.coords[d]) for d in first.spatial_dims):
            problems.append("different grids")
        if not np.array_equal(other.time, first.time):
            problems.append("different time axes")
        if {k: (v.order, v.sample_varying, v.time_varying, v.dim_varying, v.shape[-v.order:]
                if v.order else ()) for k, v in other.fields.items()} != \
                {k: (v.order, v.sample_varying, v.time_varying, v.dim_varying, v.shape[-v.order:]
                     if v.order else ()) for k, v in first.fields.items()}:
            problems.append("different fields")
        if set(other.scalars) != set(first.scalars):
            problems.append("different scalars")
        if (other.metadata is None) != (first.metadata is None) or (
                other.metadata is not None and other.metadata["variables"]
                != first.metadata["variables"]):
            problems.append("different ssmpde metadata")
        if problems:
            raise DatasetFileError(f"'{other.path}' and '{first.path}' have {' and '.join(problems)}"
                                   ": ssmpde opens files of one grid, time axis and set of fields "
                                   "together; open them one at a time")


def _open_ssmpde(reader: _Reader, metadata: dict) -> xr.Dataset:
    """Our own export: every name, attribute and coordinate as it was."""
    if metadata.get("version") != _METADATA_VERSION:
        raise DatasetFileError(f"'{reader.first.path}' was written by ssmpde "
                               f"{metadata.get('ssmpde_version')} with metadata version "
                               f"{metadata.get('version')}; this ssmpde reads version "
                               f"{_METADATA_VERSION}: open it with that version")
    coords = {}
    for name, entry in metadata["coords"].items():
        dtype = np.dtype(entry["dtype"])
        if name == SAMPLE:
            samples = [f.samples if f.samples is not None else np.arange(f.n)
                       for f in reader.files]
            values = np.concatenate(samples)
        elif name == TIME:
            values = reader.first.time
        elif name in reader.ours:
            well = {ours: well for well, ours in reader.names.items()}[name]
            values = reader.first.coords[well]
        else:
            values = _from_json_value(entry["values"])
        coords[name] = xr.Variable(tuple(entry["dims"]), np.asarray(values, dtype=dtype),
                                   _attrs_from_json(entry["attrs"]))
    variables = {}
    for name, entry in metadata["variables"].items():
        dims = tuple(entry["dims"])
        attrs = _attrs_from_json(entry["attrs"])
        if "field" in entry:
            component = () if entry["component"] is None else (entry["component"],)
            variables[name] = reader.field(entry["field"], component, dims, broadcast=False)
            variables[name].attrs.update(attrs)
            continue
        lead = tuple(d for d in (SAMPLE, TIME) if d in dims)
        extra = tuple(d for d in dims if d not in lead)
        parts = []
        for scalar in entry["scalars"]:
            scalar_dims, values = reader.scalar(scalar)
            if scalar_dims != lead:
                raise DatasetFileError(f"'{reader.first.path}': the scalar '{scalar}' has dims "
                                       f"{scalar_dims}, its ssmpde metadata says {lead}: the "
                                       "file was changed after ssmpde wrote it")
            parts.append(np.asarray(values))
        values = parts[0] if not extra else \
            np.stack(parts, axis=-1).reshape(parts[0].shape + tuple(entry["shape"]))
        variable = xr.Variable(lead + extra, values.astype(np.dtype(entry["dtype"]), copy=False),
                               attrs)
        variables[name] = variable.transpose(*dims)
    return xr.Dataset(variables, coords=coords, attrs=_attrs_from_json(metadata["attrs"]))


def _boundary_text(reader: _Reader, field: str, dims: Sequence[str]) -> str | None:
    """The ssmpde boundary_conditions text of a field of a Well file (The Well's default for
    a boundary it does not name is OPEN, i.e. outflow)."""
    info = reader.first.fields[field]
    used = [d for d, varies in zip(reader.first.spatial_dims, info.dim_varying) if varies]
    kinds = {d: ["outflow", "outflow"] for d in used}
    for boundary in reader.first.boundaries:
        if boundary["type"] not in _FROM_WELL_BC:
            continue
        if boundary["fields"] and field not in boundary["fields"]:
            continue
        kind = _FROM_WELL_BC[boundary["type"]]
        mask = boundary["mask"]
        aggregate = np.all if boundary["type"] == "WALL" else np.any
        for axis, dim in enumerate(boundary["dims"]):
            if dim not in kinds or mask.ndim != len(boundary["dims"]):
                continue
            for side, index in ((0, 0), (1, -1)):
                if mask.shape[axis] and aggregate(np.take(mask, index, axis=axis)):
                    kinds[dim][side] = kind
    conditions = {}
    for dim in dims:
        well = {ours: w for w, ours in reader.names.items()}.get(dim)
        if well in kinds:
            lower, upper = kinds[well]
            if "periodic" in (lower, upper):
                lower = upper = "periodic"  # periodicity belongs to the axis, both ends
            conditions[dim] = (lower, upper)
    return format_boundary_conditions(conditions) if conditions else None


def _open_well(reader: _Reader, source: pathlib.Path) -> xr.Dataset:
    """A genuine Well dataset: names from its field names, roles from its flags."""
    first = reader.first
    variables: dict[str, xr.Variable] = {}
    note = "units not recorded by The Well"
    for name, info in first.fields.items():
        role = "state" if info.sample_varying and info.time_varying else "forcing"
        well_dims = first.spatial_dims
        components = list(np.ndindex(*(len(well_dims),) * info.order))
        for component in components:
            suffix = "".join(reader.names[well_dims[c]] for c in component)
            label = f"{name}_{suffix}" if suffix else name
            if label in variables:
                raise DatasetFileError(f"'{first.path}': the field '{label}' appears twice")
            variable = reader.field(name, tuple(component))
            attrs = {"long_name": name if not suffix else f"{name} ({suffix} component)",
                     "units": "1", "comment": note, ROLE: role}
            if info.order == 1:
                attrs[VECTOR] = name
                attrs[VECTOR_COMPONENT] = reader.names[well_dims[component[0]]]
            text = _boundary_text(reader, name, variable.dims)
            if text is not None:
                attrs[BOUNDARY_CONDITIONS] = text
            variable.attrs.update(attrs)
            variables[label] = variable
    for name in first.scalars:
        if name in variables:
            raise DatasetFileError(f"'{first.path}': '{name}' is both a field and a scalar")
        dims, values = reader.scalar(name)
        role = "diagnostic" if TIME in dims else "parameter"
        variables[name] = xr.Variable(dims, values, {"long_name": name, "units": "1",
                                                     "comment": note, ROLE: role})
    parameters: dict[str, Any] = {}
    for name in first.parameters:
        values = [f.parameters.get(name) for f in reader.files]
        parameters[name] = [_json_value(np.asarray(v).reshape(-1)[0]) if np.asarray(v).size == 1
                            else _json_value(np.asarray(v)) for v in values]
        if name in variables or not all(np.asarray(v).size == 1 and np.asarray(v).dtype.kind
                                         in "iuf" for v in values):
            continue
        per_sample = np.concatenate([np.full(n, np.asarray(v).reshape(()))
                                     for v, n in zip(values, reader.counts)])
        variables[name] = xr.Variable((SAMPLE,), per_sample,
                                      {"long_name": f"simulation parameter {name}", "units": "1",
                                       "comment": note, ROLE: "parameter"})
    coords = {SAMPLE: sample_coordinate(reader.total),
              TIME: time_coordinate(first.time, units="1")}
    for well, values in first.coords.items():
        ours = reader.names[well]
        coords[ours] = xr.Variable((ours,), values,
                                   {"units": "1", "axis": ours.upper(),
                                    "long_name": f"{ours} coordinate (The Well's '{well}')",
                                    "comment": note})
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {"format": NAME, "dataset_name": first.name,
              "files": [str(f.path.relative_to(source)) if f.path != source else f.path.name
                        for f in reader.files],
              "simulation_parameters": parameters}
    attrs = {"Conventions": CONVENTIONS, "title": f"The Well: {first.name}",
             "source": f"The Well dataset '{first.name}', read by ssmpde {__version__}",
             "history": f"{stamp}: opened from The Well's files at {source} by ssmpde "
                        f"{__version__}",
             "ssmpde_equation": first.name,
             "ssmpde_config": json.dumps(config, sort_keys=True),
             "references": _REFERENCES}
    return xr.Dataset(variables, coords=coords, attrs=attrs)


def open(path: str | os.PathLike, chunks: Any = None) -> xr.Dataset:  # noqa: A001
    """Open a file or directory of The Well as an ssmpde dataset, lazily.

    Parameters
    ----------
    path : str or os.PathLike
        One ``.hdf5``/``.h5`` file, a split directory (``.../data/train``) or a dataset
        directory (its ``data/train``, ``data/valid`` and ``data/test`` files are read in that
        order, one after the other along ``sample``).
    chunks : optional
        None: lazily indexed arrays (values are read when used); ``{}``: dask arrays of one
        sample per chunk; anything else is passed to :meth:`xarray.Dataset.chunk`.

    Returns
    -------
    xarray.Dataset
        For a dataset ssmpde exported, the original dataset exactly (names, attributes, dtypes,
        coordinates, sample indices). For any other Well data: one variable per field and
        component (``velocity_x``, ``velocity_y`` with ``vector`` attributes; tensors as
        ``stress_xy`` ...), time-varying per-sample fields with role ``state``, other fields
        ``forcing``, per-sample scalars and the numeric simulation parameters ``parameter``,
        time series of scalars ``diagnostic``; the boundary groups as ``boundary_conditions``
        (PERIODIC → periodic, WALL → reflective, OPEN and unnamed boundaries → outflow); units
        ``"1"`` (The Well records none). The Well's first spatial dimension becomes ``x``, its
        second ``y``; arrays are ``[sample, time, y, x]``. Close it with ``ds.close()``.

    Raises
    ------
    FileNotFoundError
        If nothing exists at ``path``.
    DatasetFileError
        If it is not The Well's format, holds 3D grids, or its files do not fit together
        (different grids, time axes or fields).
    ImportError
        Without h5py.
    """
    source = pathlib.Path(os.fspath(path)).expanduser()
    h5py = _h5py()
    files = [_read_file(h5py, p) for p in _files(source)]
    _check_consistent(files)
    reader = _Reader(h5py, files)
    try:
        metadata = files[0].metadata
        ds = _open_ssmpde(reader, metadata) if metadata is not None else \
            _open_well(reader, source)
    except (KeyError, TypeError, AttributeError, IndexError) as error:
        reader.close()
        if files[0].metadata is None:
            raise
        # Our export's metadata, a JSON object of the right keys with damaged entries inside.
        raise DatasetFileError(f"'{files[0].path}': the dataset '{METADATA}' is damaged "
                               f"({type(error).__name__}: {error}): {_REEXPORT}") from None
    except BaseException:
        reader.close()
        raise
    if chunks is not None:
        ds = ds.chunk({SAMPLE: 1} if chunks == {} and SAMPLE in ds.dims else chunks)
    ds.set_close(reader.close)
    return ds
