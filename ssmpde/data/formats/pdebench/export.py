"""Writing ssmpde datasets as PDEBench files: the layout a dataset maps to, its conventional
name, and the writers of the stacked and per-sample-group layouts."""

from __future__ import annotations

import json
import math
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import netCDF4
import numpy as np
import xarray as xr

from .. import check_range
from ...streaming import sample_blocks
from ...schema import ROLE, SAMPLE, TIME, X, Y, boundary_conditions_of, config_of, vectors_of
from .layout import _CFD, _DARCY, _GROUPS, _STACKED_1D, EXTRAS_GROUP, METADATA_ATTR

_COMPRESSION = {"zlib": True, "complevel": 4, "shuffle": True}


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
        fields off the ``(sample, time, [y,] x)`` grid, no state field, non-numeric data, or
        values beyond float32's range (checked before anything is written).

    Notes
    -----
    Floating data variables are stored as float32 (PDEBench's precision); coordinates,
    integer variables and every attribute come back exactly.
    """
    layout, mapping = _layout_of(ds)
    _check_writable(ds)
    check_range(ds, np.float32, advice="PDEBench stores float32: convert to netCDF or zarr, "
                                       "which keep float64, or rescale the variable (other "
                                       "units)")
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
    """Write ``var`` (already in the file's axis order, less the fixed axes) in blocks of
    samples (:func:`~ssmpde.data.streaming.sample_blocks`: bounded memory, one read a block)."""
    if SAMPLE not in var.dims:
        values = _float32(var.values) if stored.dtype == np.float32 else np.asarray(var.values)
        stored[...] = values.reshape(stored.shape) if fixed else values
        return
    for block in sample_blocks(var):
        values = np.asarray(var.isel({SAMPLE: slice(block.start, block.stop)}).values)
        key = [slice(block.start, block.stop)] + [slice(None)] * (stored.ndim - 1)
        for axis, at in fixed.items():
            key[axis] = at
        stored[tuple(key)] = values.astype(stored.dtype, copy=False)


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
        for block in sample_blocks(ds[states[0]]):
            # One read a block of samples (not one a sample), then a group a sample.
            loaded = ds.isel({SAMPLE: slice(block.start, block.stop)}).compute()
            for index in block:
                group = nc.createGroup(groups[index])
                sample = loaded.isel({SAMPLE: index - block.start})
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
