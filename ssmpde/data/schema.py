"""Dataset schema and file IO: the one place that says what an ssmpde dataset is.

Every dataset the toolkit writes or reads is an :class:`xarray.Dataset` with

* dimensions ``sample``, ``time``, ``y``, ``x`` (1D problems have no ``y``; steady problems no
  ``time``), each with a coordinate variable that carries ``units``;
* one data variable per physical field or per-sample parameter, each with ``long_name`` and
  ``units``; extra non-standard dimensions (``forcing_mode``, ...) are allowed on data variables;
* the global attributes :data:`REQUIRED_GLOBAL_ATTRS`, with ``Conventions = "CF-1.10"`` and the
  full generator config as a JSON object in ``ssmpde_config``.

:func:`build_dataset` assembles such a dataset, :func:`validate` checks one and lists every
problem with its fix, :func:`save` writes netCDF4 or zarr atomically, :func:`open_dataset` and
:func:`load_dataset` read them back and validate, :func:`describe` summarises one for
``ssmpde info``, :func:`convert` copies one between netCDF4 and zarr.  The ``ds.ssmpde`` accessor
exposes the same operations on a dataset.

Parallel writers (dask workers of ``ssmpde generate --workers``) share one zarr store:
:func:`create_store` lays it out with every sample still missing, each worker fills its own
samples with :func:`write_store_region`, the one driver records finished sample ranges in the
store's :data:`PROGRESS_ATTR` attribute (:class:`StoreProgress`), and :func:`finish_store` marks
it complete. Readers refuse a store that still has a progress record.

Notes
-----
Time is a plain number with plain units (``"1"``, ``"s"``, ...), never a calendar date, so files
are always opened with ``decode_times=False`` and ``decode_timedelta=False``: the ``time``
coordinate comes back with the dtype, values and ``units`` attribute it was written with.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import json
import math
import numbers
import os
import pathlib
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import netCDF4
import numpy as np
import xarray as xr

from ssmpde import __version__

__all__ = [
    "CONVENTIONS",
    "REQUIRED_GLOBAL_ATTRS",
    "ROLE",
    "ROLES",
    "SAMPLE",
    "SPATIAL_DIMS",
    "TIME",
    "X",
    "Y",
    "DatasetFileError",
    "OutputLockedError",
    "PROGRESS_ATTR",
    "StoreProgress",
    "atomic_path",
    "check_output",
    "convert",
    "create_store",
    "finish_store",
    "SchemaError",
    "SsmpdeAccessor",
    "build_dataset",
    "config_of",
    "describe",
    "grid_coordinates",
    "load_dataset",
    "open_dataset",
    "output_lock",
    "remove_stale_temporaries",
    "roles_of",
    "sample_coordinate",
    "save",
    "store_progress",
    "time_coordinate",
    "update_store_progress",
    "validate",
    "write_store_region",
]

SAMPLE, TIME, Y, X = "sample", "time", "y", "x"
STANDARD_DIMS = (SAMPLE, TIME, Y, X)
SPATIAL_DIMS = {1: (X,), 2: (Y, X)}
CONVENTIONS = "CF-1.10"
REQUIRED_GLOBAL_ATTRS = ("Conventions", "title", "source", "history", "ssmpde_equation",
                         "ssmpde_config", "references")
#: The variable attribute that says what a variable is to the toolkit (declared by the solver).
ROLE = "role"
#: ``state``: advanced by a Stepper (``[sample, time, *grid]``) or the solution of a steady
#: problem; ``parameter``: per-sample scalars or small arrays (viscosity, forcing amplitudes);
#: ``forcing``: a known grid field, static ``[sample, *grid]`` or ``[sample, time, *grid]``
#: (Darcy's coefficient, a body force); ``diagnostic``: anything else (errors, flags).
ROLES = ("state", "parameter", "forcing", "diagnostic")
#: Attribute of a non-scalar parameter naming the grid variable that carries it to a model
#: (F-FNO amplitudes reach a model as the forcing field they generate, never broadcast).
ENCODED_BY = "encoded_by"

NETCDF_SUFFIXES = (".nc", ".nc4", ".netcdf")
ZARR_SUFFIXES = (".zarr",)
NETCDF_COMPRESSION = {"zlib": True, "complevel": 4, "shuffle": True}
# Zarr format 2 keeps stores readable by other zarr readers (zarr-python 3 reads and writes it), and
# consolidated metadata is part of the format 2 spec but not (yet) of format 3.
ZARR_FORMAT = 2
# Never decode numbers into dates or durations: ssmpde time is a plain number with plain units.
_DECODE_KWARGS = {"decode_times": False, "decode_timedelta": False}
# What a backend raises for a file it cannot parse; wrapped into DatasetFileError.
_READ_ERRORS = (OSError, ValueError, RuntimeError, KeyError)


class SchemaError(ValueError):
    """A dataset breaks the ssmpde schema.

    The message lists every problem found, each with its fix; :attr:`problems` holds them as a
    tuple of strings.
    """

    def __init__(self, message: str, problems: Sequence[str] = ()):
        super().__init__(message)
        self.problems = tuple(problems)

    def __reduce__(self):
        # Keep `problems` when the error crosses a process boundary (dask workers pickle it).
        return type(self), (str(self), self.problems)


class DatasetFileError(ValueError):
    """A dataset file or store cannot be read: truncated, corrupt, or not netCDF/zarr at all."""


def _schema_error(problems: Sequence[str], subject: str = "dataset") -> SchemaError:
    lines = "\n".join(f"  - {problem}" for problem in problems)
    return SchemaError(f"{subject} does not follow the ssmpde schema:\n{lines}", problems)


# --------------------------------------------------------------------------------------------
# Coordinates
# --------------------------------------------------------------------------------------------

def grid_coordinates(resolution: int | Sequence[int], *, ndim: int | None = None,
                     length: float | Sequence[float] = 1.0, endpoint: bool = False,
                     units: str = "1") -> dict[str, xr.DataArray]:
    """Return the spatial coordinates of a uniform grid (1D, square or rectangular 2D).

    With ``endpoint=False`` (periodic grids) the nodes are :math:`x_j = j L / N`,
    :math:`j = 0, \\dots, N-1`: the grid does **not** include the right boundary point, which
    is the same point as the left one.  With ``endpoint=True`` (Dirichlet or Neumann grids) the
    nodes are ``np.linspace(0, L, N)`` and include both boundaries.

    Parameters
    ----------
    resolution : int or sequence of int
        Number of nodes ``N`` per axis, at least 1: one int for every axis, or one per axis in
        the order of the dimensions (``(ny, nx)`` in 2D, ``(nx,)`` in 1D).
    ndim : {1, 2}, optional
        Number of spatial dimensions: 1 gives ``x`` only, 2 gives ``y`` and ``x``. Default:
        the length of ``resolution`` if it is a sequence, else 2.
    length : float or sequence of float
        Domain length ``L`` per axis (same order as ``resolution``), in ``units``.
    endpoint : bool
        Whether the last node lies on the right boundary (see above).
    units : str
        Units of the coordinates (``"1"`` for a dimensionless domain).

    Returns
    -------
    dict of str to xarray.DataArray
        ``{"y": y, "x": x}`` (2D) or ``{"x": x}`` (1D); each a float64 array of shape ``(N,)``
        with attributes ``units``, ``long_name`` and ``axis`` (``"Y"`` or ``"X"``).

    Examples
    --------
    >>> grid_coordinates(4, ndim=1)["x"].values
    array([0.  , 0.25, 0.5 , 0.75])
    >>> grid_coordinates(3, ndim=1, endpoint=True)["x"].values
    array([0. , 0.5, 1. ])
    >>> {k: v.size for k, v in grid_coordinates((2, 4), length=(1.0, 2.0)).items()}
    {'y': 2, 'x': 4}
    """
    sizes = (tuple(resolution) if isinstance(resolution, (tuple, list, np.ndarray))
             else None)
    if ndim is None:
        ndim = len(sizes) if sizes is not None else 2
    if ndim not in SPATIAL_DIMS:
        raise ValueError(f"ndim must be one of {sorted(SPATIAL_DIMS)}, got {ndim!r}")
    sizes = sizes if sizes is not None else (resolution,) * ndim
    lengths = (tuple(length) if isinstance(length, (tuple, list, np.ndarray))
               else (length,) * ndim)
    if len(sizes) != ndim or len(lengths) != ndim:
        raise ValueError(f"resolution {resolution!r} and length {length!r} must give one value "
                         f"per spatial dimension ({ndim})")
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"resolution must be an integer, got {type(n).__name__}")
        if n < 1:
            raise ValueError(f"resolution must be at least 1, got {n}")
    for value in lengths:
        if not (isinstance(value, numbers.Real) and math.isfinite(value) and value > 0):
            raise ValueError(f"length must be a positive finite number, got {value!r}")
    _check_units(units)
    kind = "including both boundaries" if endpoint else "periodic, right boundary excluded"
    coords = {}
    for dim, n, size in zip(SPATIAL_DIMS[ndim], sizes, lengths):
        n = int(n)
        values = (np.linspace(0.0, float(size), n) if endpoint
                  else np.arange(n, dtype=np.float64) * (float(size) / n))
        coords[dim] = xr.DataArray(values, dims=(dim,), name=dim,
                                   attrs={"units": units, "long_name": f"{dim} coordinate ({kind})",
                                          "axis": dim.upper()})
    return coords


def time_coordinate(times: Iterable[float] | np.ndarray, *, units: str = "1") -> xr.DataArray:
    """Return a ``time`` coordinate.

    Parameters
    ----------
    times : array_like, shape (time,)
        Strictly increasing, finite, real times (integers or floats; their dtype is kept).
        Calendar dates are refused: ssmpde time is a plain number with plain units.
    units : str
        Units of ``times``, e.g. ``"1"`` (dimensionless) or ``"s"``.

    Returns
    -------
    xarray.DataArray
        Shape ``(time,)``, with attributes ``units``, ``long_name="time"`` and ``axis="T"``.

    Examples
    --------
    >>> time_coordinate([0.0, 0.5, 1.0], units="s").attrs["axis"]
    'T'
    """
    _check_units(units)
    values = np.asarray(times)
    if values.ndim != 1:
        raise ValueError(f"times must be one-dimensional, got shape {values.shape}")
    if values.dtype.kind not in "iuf":
        raise TypeError(f"times must be real numbers, got dtype {values.dtype}; ssmpde time is a "
                        "plain number with units such as 's', not a date")
    if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
        raise ValueError("times must be finite")
    if values.size > 1 and not np.all(np.diff(values) > 0):
        raise ValueError("times must be strictly increasing")
    return xr.DataArray(values.copy(), dims=(TIME,), name=TIME,
                        attrs={"units": units, "long_name": "time", "axis": "T"})


def sample_coordinate(indices: int | Iterable[int] | np.ndarray) -> xr.DataArray:
    """Return a ``sample`` coordinate of integer sample indices.

    Parameters
    ----------
    indices : int or array_like of int, shape (sample,)
        Either the number of samples ``n`` (giving ``0, ..., n-1``) or the distinct,
        non-negative indices themselves (a resumed generation writes e.g. ``10, ..., 19``).

    Returns
    -------
    xarray.DataArray
        int64, shape ``(sample,)``, with attributes ``units="1"`` and ``long_name``.

    Examples
    --------
    >>> sample_coordinate(3).values
    array([0, 1, 2])
    """
    if isinstance(indices, numbers.Integral) and not isinstance(indices, bool):
        if indices < 0:
            raise ValueError(f"number of samples must be non-negative, got {indices}")
        values = np.arange(int(indices), dtype=np.int64)
    else:
        values = np.asarray(indices)
        if values.ndim != 1:
            raise ValueError(f"sample indices must be one-dimensional, got shape {values.shape}")
        if values.size and values.dtype.kind not in "iu":
            raise TypeError(f"sample indices must be integers, got dtype {values.dtype}")
        values = values.astype(np.int64)
        if values.size and values.min() < 0:
            raise ValueError("sample indices must be non-negative")
        if np.unique(values).size != values.size:
            raise ValueError("sample indices must be distinct")
    return xr.DataArray(values, dims=(SAMPLE,), name=SAMPLE,
                        attrs={"units": "1", "long_name": "sample index"})


def _check_units(units: object) -> None:
    if not isinstance(units, str) or not units:
        raise ValueError(f"units must be a non-empty string (use '1' for dimensionless), "
                         f"got {units!r}")


# --------------------------------------------------------------------------------------------
# Building datasets and their config
# --------------------------------------------------------------------------------------------

def _key_repr(path: str, key: object) -> str:
    return f"{path}[{key!r}]"


def _jsonable(value: Any, path: str) -> Any:
    """Return ``value`` as plain JSON types, or raise naming the offending key path."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (numbers.Integral, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            # Python's json writes NaN/Infinity, which is not JSON: other readers reject it.
            raise ValueError(f"{path} is {float(value)!r}; JSON has no NaN or infinity, "
                             "store a finite number, a string or null instead")
        return float(value)
    if isinstance(value, Mapping):
        result = {}
        for key, item in value.items():
            if not isinstance(key, str):
                # json.dumps would turn the key into a string and the config would not
                # round-trip; better to say so now.
                raise TypeError(f"{_key_repr(path, key)}: config keys must be strings, "
                                f"got {type(key).__name__}")
            result[key] = _jsonable(item, _key_repr(path, key))
        return result
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf" and value.dtype != object:
            raise TypeError(f"{path} is an array of dtype {value.dtype}, which JSON cannot "
                            "represent; convert it to a list of numbers or strings")
        return [_jsonable(item, f"{path}[{i}]") for i, item in enumerate(value.tolist())]
    if isinstance(value, (list, tuple)):
        return [_jsonable(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # Frozen config dataclasses are the house style; store their fields.
        return _jsonable({f.name: getattr(value, f.name) for f in dataclasses.fields(value)},
                         path)
    raise TypeError(f"{path} has type {type(value).__name__}, which JSON cannot represent; "
                    "convert it to a number, string, bool, None, list or dict "
                    "(e.g. str() for a path)")


def _config_json(config: Mapping) -> str:
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping, got {type(config).__name__}")
    return json.dumps(_jsonable(config, "config"), sort_keys=True, allow_nan=False)


def build_dataset(data_vars: Mapping[str, xr.DataArray], *, coords: Mapping[str, xr.DataArray],
                  equation: str, config: Mapping, title: str, references: str, solver: str,
                  history: str | None = None) -> xr.Dataset:
    """Assemble and validate an ssmpde dataset.

    Parameters
    ----------
    data_vars : mapping of str to xarray.DataArray
        The fields (e.g. ``vorticity`` with dims ``(sample, time, y, x)``) and per-sample
        parameters (e.g. ``viscosity`` with dims ``(sample,)``); each must already carry
        ``long_name`` and ``units`` attributes.
    coords : mapping of str to xarray.DataArray
        Coordinates, typically from :func:`sample_coordinate`, :func:`time_coordinate` and
        :func:`grid_coordinates`.
    equation : str
        Name of the PDE (stored as ``ssmpde_equation``).
    config : mapping
        The full generator config, seed included.  NumPy scalars and arrays, tuples and
        dataclasses are converted to plain JSON; anything else JSON cannot hold raises.
    title, references : str
        Stored as the global attributes of the same names.
    solver : str
        Solver description, recorded as ``source = "ssmpde <version>, solver <solver>"``.
    history : str, optional
        Provenance line; default ``"<UTC ISO timestamp>: created by ssmpde <version>"``.

    Returns
    -------
    xarray.Dataset
        A new dataset that passes :func:`validate`.

    Raises
    ------
    TypeError
        If ``config`` holds a value JSON cannot represent; the message names its key.
    ValueError
        If ``config`` holds NaN or infinity (not valid JSON).
    SchemaError
        If the assembled dataset breaks the schema (e.g. a field without ``units``).

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> grid = grid_coordinates(8, ndim=1)
    >>> u = xr.DataArray(np.zeros((2, 8)), dims=(SAMPLE, X),
    ...                  attrs={"long_name": "velocity", "units": "m s-1"})
    >>> ds = build_dataset({"u": u}, coords={SAMPLE: sample_coordinate(2), **grid},
    ...                    equation="burgers", config={"seed": 0}, title="demo",
    ...                    references="none", solver="spectral")
    >>> ds.ssmpde.config
    {'seed': 0}
    """
    config_text = _config_json(config)
    if history is None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        history = f"{stamp}: created by ssmpde {__version__}"
    attrs = {
        "Conventions": CONVENTIONS,
        "title": title,
        "source": f"ssmpde {__version__}, solver {solver}",
        "history": history,
        "ssmpde_equation": equation,
        "ssmpde_config": config_text,
        "references": references,
    }
    ds = xr.Dataset(dict(data_vars), coords=dict(coords), attrs=attrs)
    return validate(ds)


def config_of(ds: xr.Dataset) -> dict:
    """Return the generator config stored in ``ds.attrs["ssmpde_config"]``.

    Parameters
    ----------
    ds : xarray.Dataset

    Returns
    -------
    dict
        The parsed JSON object (a new dict each call).

    Raises
    ------
    SchemaError
        If the attribute is missing, not valid JSON, or not a JSON object.
    """
    problem = _config_problem(ds.attrs)
    if problem is not None:
        raise _schema_error([problem])
    return json.loads(ds.attrs["ssmpde_config"])


def roles_of(ds: xr.Dataset) -> dict[str, str]:
    """The role of every data variable (``state``, ``parameter``, ``forcing``, ``diagnostic``).

    Raises
    ------
    SchemaError
        Naming the variables without a ``role`` attribute (files written before roles
        existed): regenerate them, or set ``ds[name].attrs["role"]``.
    """
    missing = [name for name, var in ds.data_vars.items() if ROLE not in var.attrs]
    if missing:
        raise _schema_error([f"data variable '{name}' has no '{ROLE}' attribute: regenerate the "
                             f"dataset with this ssmpde version, or set ds['{name}'].attrs"
                             f"['{ROLE}'] to one of {', '.join(ROLES)}" for name in missing])
    _raise_if_invalid(ds)
    return {name: str(var.attrs[ROLE]) for name, var in ds.data_vars.items()}


def _config_problem(attrs: Mapping) -> str | None:
    fix = "rebuild the dataset with build_dataset(..., config=...)"
    if "ssmpde_config" not in attrs:
        return f"global attribute 'ssmpde_config' is missing: {fix}"
    text = attrs["ssmpde_config"]
    if not isinstance(text, str):
        return (f"global attribute 'ssmpde_config' must be a JSON string, got "
                f"{type(text).__name__}: {fix}")
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"global attribute 'ssmpde_config' is not valid JSON ({exc}): {fix}"
    if not isinstance(parsed, dict):
        return (f"global attribute 'ssmpde_config' must hold a JSON object, got "
                f"{type(parsed).__name__}: {fix}")
    return None


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------

def _has_text(attrs: Mapping, key: str) -> bool:
    value = attrs.get(key)
    return isinstance(value, str) and bool(value.strip())


def _schema_problems(ds: xr.Dataset, *, check_finite: bool) -> list[str]:
    problems = []
    dims = set(ds.dims)
    if SAMPLE not in dims:
        problems.append(f"there is no '{SAMPLE}' dimension: stack samples along "
                        f"'{SAMPLE}' (ds.expand_dims('{SAMPLE}') for a single sample)")
    for dim in STANDARD_DIMS:
        if dim in dims and dim not in ds.coords:
            helper = {SAMPLE: "sample_coordinate", TIME: "time_coordinate"}.get(
                dim, "grid_coordinates")
            problems.append(f"dimension '{dim}' has no coordinate variable: add one with "
                            f"ds.assign_coords({dim}=...) (see ssmpde.data.{helper})")
    for name, coord in ds.coords.items():
        if not _has_text(coord.attrs, "units"):
            problems.append(f"coordinate '{name}' has no 'units' attribute: set "
                            f"ds['{name}'].attrs['units'] (use '1' for dimensionless)")
    if Y in dims and X not in dims:
        problems.append(f"dimension '{Y}' is present without '{X}': 1D datasets use ('{X}',), "
                        f"2D datasets use ('{Y}', '{X}')")
    if not ds.data_vars:
        problems.append("there are no data variables: add at least one field, "
                        "e.g. ds['u'] = (dims, values, {'long_name': ..., 'units': ...})")
    for name, var in ds.data_vars.items():
        for key in ("long_name", "units"):
            if not _has_text(var.attrs, key):
                problems.append(f"data variable '{name}' has no '{key}' attribute: set "
                                f"ds['{name}'].attrs['{key}']")
        role = var.attrs.get(ROLE)
        if role is not None and role not in ROLES:
            problems.append(f"data variable '{name}' has role {role!r}: set "
                            f"ds['{name}'].attrs['{ROLE}'] to one of {', '.join(ROLES)}")
        encoded_by = var.attrs.get(ENCODED_BY)
        if encoded_by is not None and encoded_by not in ds.data_vars:
            problems.append(f"data variable '{name}' is encoded by {encoded_by!r}, which is not "
                            "in the dataset: add that variable or drop the attribute")
    for key in REQUIRED_GLOBAL_ATTRS:
        if key not in ds.attrs:
            problems.append(f"global attribute '{key}' is missing: set ds.attrs['{key}'] "
                            "(build_dataset() sets all of them)")
        elif key != "ssmpde_config" and not isinstance(ds.attrs[key], str):
            problems.append(f"global attribute '{key}' must be a string, got "
                            f"{type(ds.attrs[key]).__name__}: set ds.attrs['{key}'] to text")
    conventions = ds.attrs.get("Conventions")
    if isinstance(conventions, str) and conventions != CONVENTIONS:
        problems.append(f"global attribute 'Conventions' is {conventions!r}, expected "
                        f"{CONVENTIONS!r}: set ds.attrs['Conventions'] = {CONVENTIONS!r}")
    if "ssmpde_config" in ds.attrs:
        problem = _config_problem(ds.attrs)
        if problem is not None:
            problems.append(problem)
    equation = ds.attrs.get("ssmpde_equation")
    if isinstance(equation, str) and not equation.strip():
        problems.append("global attribute 'ssmpde_equation' is empty: set it to the PDE's name, "
                        "e.g. ds.attrs['ssmpde_equation'] = 'navier_stokes'")
    if check_finite:
        for name, var in ds.data_vars.items():
            if var.dtype.kind in "fc":
                bad = _count_nonfinite(var)
                if bad:
                    problems.append(f"data variable '{name}' has {bad} non-finite values "
                                    "(NaN or inf): regenerate it or drop the bad samples")
    return problems


def _count_nonfinite(var: xr.DataArray) -> int:
    # On the DataArray rather than its .data, so dask and lazily read variables work alike.
    return int(np.logical_not(np.isfinite(var)).sum())


def validate(ds: xr.Dataset, *, check_finite: bool = False) -> xr.Dataset:
    """Check that ``ds`` follows the ssmpde schema.

    All rules are checked before anything is raised, so one error lists every problem.

    Parameters
    ----------
    ds : xarray.Dataset
    check_finite : bool
        Also require every floating data variable to be free of NaN and inf.  This reads all
        the data, so it is off by default.

    Returns
    -------
    xarray.Dataset
        ``ds`` itself, unchanged, so calls can be chained.

    Raises
    ------
    SchemaError
        Listing each problem and its fix, e.g. ``data variable 'u' has no 'units' attribute:
        set ds['u'].attrs['units']``.
    TypeError
        If ``ds`` is not an :class:`xarray.Dataset`.

    Notes
    -----
    The rules: a ``sample`` dimension exists; each standard dimension present (``sample``,
    ``time``, ``y``, ``x``) has a coordinate variable; every coordinate has ``units``; ``y``
    implies ``x``; there is at least one data variable and each has ``long_name`` and
    ``units``; all :data:`REQUIRED_GLOBAL_ATTRS` are present, ``Conventions`` is
    :data:`CONVENTIONS`, ``ssmpde_config`` is a JSON object and ``ssmpde_equation`` is not
    empty.
    """
    _raise_if_invalid(ds, check_finite=check_finite)
    return ds


def _raise_if_invalid(ds: xr.Dataset, *, check_finite: bool = False,
                      subject: str = "dataset") -> None:
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"expected an xarray.Dataset, got {type(ds).__name__}")
    problems = _schema_problems(ds, check_finite=check_finite)
    if problems:
        raise _schema_error(problems, subject)


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

def _format_of_suffix(path: pathlib.Path) -> str:
    suffix = path.suffix.lower()
    if suffix in ZARR_SUFFIXES:
        return "zarr"
    if suffix in NETCDF_SUFFIXES:
        return "netcdf"
    accepted = ", ".join(ZARR_SUFFIXES + NETCDF_SUFFIXES)
    raise ValueError(f"cannot tell the format of '{path}' from its suffix "
                     f"{suffix or '(none)'!r}: use one of {accepted} "
                     "(.zarr for a zarr store, the others for netCDF4)")


def _attr_problem(value: Any) -> tuple[type[Exception], str] | None:
    """Why netCDF cannot store ``value`` as an attribute exactly, or None if it can."""
    if isinstance(value, str):
        if "\x00" in value:
            return ValueError, "contains a NUL character, which netCDF silently drops"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return ValueError, "is not encodable as UTF-8"
        return None
    if isinstance(value, (bool, np.bool_)):
        return TypeError, "is a bool, which netCDF cannot store"
    if isinstance(value, (numbers.Integral, np.integer, float, np.floating)):
        return None
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iuf":
            return TypeError, f"is an array of dtype {value.dtype}, which netCDF cannot store"
        if value.ndim == 0:
            return None
        if value.ndim > 1:
            return TypeError, f"is a {value.ndim}-dimensional array; netCDF stores only 1D ones"
        items: Sequence = list(value)
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        return TypeError, f"has type {type(value).__name__}, which netCDF cannot store"
    if len(items) < 2:
        # netCDF hands back a one-element list as a scalar and cannot hold an empty one.
        return TypeError, (f"is a sequence of length {len(items)}; netCDF would not give it "
                           "back as written (store a scalar instead)")
    if all(isinstance(item, str) for item in items):
        problems = (_attr_problem(item) for item in items)
        return next((problem for problem in problems if problem is not None), None)
    if all(isinstance(item, (numbers.Real, np.integer, np.floating))
           and not isinstance(item, (bool, np.bool_)) for item in items):
        return None
    return TypeError, "is a nested or mixed sequence, which netCDF cannot store"


def _check_storable_attrs(ds: xr.Dataset) -> None:
    owners = [("global attribute", "", ds.attrs)]
    owners += [("attribute", f" of '{name}'", var.attrs) for name, var in ds.variables.items()]
    for kind, owner, attrs in owners:
        for key, value in attrs.items():
            problem = _attr_problem(value)
            if problem is not None:
                error, reason = problem
                raise error(f"{kind} {key!r}{owner} {reason}: JSON-encode it "
                            f"(json.dumps) or store it as a string or number")


def _chunk_plan(ds: xr.Dataset) -> dict[str, tuple[int, ...]]:
    """One sample per chunk, full extent along every other dimension."""
    return {
        name: tuple(1 if dim == SAMPLE else max(1, size) for dim, size in var.sizes.items())
        for name, var in ds.data_vars.items()
    }


def _netcdf_encoding(ds: xr.Dataset) -> dict[str, dict]:
    # _FillValue None: no fill attribute is invented, so ints never decode to masked floats.
    encoding: dict[str, dict] = {name: {"_FillValue": None} for name in ds.variables}
    for name, chunks in _chunk_plan(ds).items():
        if ds[name].dtype.kind in "biuf" and ds[name].ndim > 0:
            encoding[name].update(NETCDF_COMPRESSION, chunksizes=chunks)
    return encoding


def _write_netcdf(ds: xr.Dataset, path: pathlib.Path) -> None:
    ds.to_netcdf(path, mode="w", engine="netcdf4", format="NETCDF4",
                 encoding=_netcdf_encoding(ds))


def _zarr_encoding(ds: xr.Dataset) -> dict[str, dict]:
    """No fill value (values round-trip exactly), data variables one sample per chunk."""
    encoding: dict[str, dict] = {name: {"_FillValue": None} for name in ds.variables}
    for name, chunks in _chunk_plan(ds).items():
        if ds[name].ndim > 0:
            encoding[name]["chunks"] = chunks
    return encoding


def _write_zarr(ds: xr.Dataset, path: pathlib.Path) -> None:
    if any(var.chunks is not None for var in ds.variables.values()):
        # Dask chunks that straddle zarr chunks would make parallel writes unsafe.
        ds = ds.chunk({dim: 1 if dim == SAMPLE else -1 for dim in ds.dims})
    ds.to_zarr(path, mode="w-", zarr_format=ZARR_FORMAT, consolidated=True,
               encoding=_zarr_encoding(ds))


def _remove(path: pathlib.Path, *, settle: float = 5.0) -> None:
    if not path.is_dir() or path.is_symlink():
        path.unlink(missing_ok=True)
        return
    # After an interrupt reaches the main thread, zarr's event-loop thread (and dask workers)
    # may still finish chunk writes for a moment, recreating files under `path`: delete until
    # the directory stays gone for two consecutive looks, for at most `settle` seconds.
    deadline = time.monotonic() + settle
    gone_before = False
    while time.monotonic() < deadline:
        shutil.rmtree(path, ignore_errors=True)
        gone = not path.exists()
        if gone and gone_before:
            return
        gone_before = gone
        time.sleep(0.02)


def _commit(tmp: pathlib.Path, target: pathlib.Path) -> None:
    """Move the finished ``tmp`` to ``target``, replacing whatever is there."""
    exists = target.exists() or target.is_symlink()
    if exists and (tmp.is_dir() or (target.is_dir() and not target.is_symlink())):
        # rename() cannot replace a non-empty directory (or a file by a directory): move the
        # old one aside, put the new one in place, and only then delete the old one.
        backup = target.with_name(f".{target.name}.old-{uuid.uuid4().hex}")
        os.replace(target, backup)
        try:
            os.replace(tmp, target)
        except BaseException:
            os.replace(backup, target)
            raise
        _remove(backup)
    else:
        os.replace(tmp, target)


class OutputLockedError(OSError):
    """Another process is writing the same output (it holds the lock)."""


def _lock_path(target: pathlib.Path) -> pathlib.Path:
    return target.parent / f".{target.name}.lock"


@contextlib.contextmanager
def output_lock(target: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Hold the write lock of ``target`` (a dataset, a run directory) for the block.

    The lock is an ``fcntl`` lock on a hidden ``.<name>.lock`` beside the target holding the
    writer's PID; the kernel drops it when the process dies, so a killed writer never leaves
    a stale lock. A second writer gets :class:`OutputLockedError` at once, naming the PID.
    """
    target = pathlib.Path(os.fspath(target)).expanduser()
    path = _lock_path(target)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"output directory '{path.parent}' does not exist; create it "
                                f"first (mkdir -p {path.parent})")
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise OutputLockedError(f"'{target}' is being written by another ssmpde process "
                                    f"(PID {holder}); wait for it to finish or choose another "
                                    "output") from None
        try:  # the file may have been unlinked by the previous holder: lock the live one
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def remove_stale_temporaries(target: str | os.PathLike) -> None:
    """Delete what an interrupted write of ``target`` left beside it (call under its lock)."""
    target = pathlib.Path(os.fspath(target))
    patterns = (f".{target.stem}.tmp-*{target.suffix}", f".{target.name}.old-*")
    for pattern in patterns:
        for leftover in target.parent.glob(pattern):
            _remove(leftover)


def is_ssmpde_output(path: str | os.PathLike) -> bool:
    """Whether ``path`` is something ssmpde writes: a dataset file or store with the ssmpde
    attributes, or a run directory (``config.json`` naming a model)."""
    path = pathlib.Path(os.fspath(path))
    if path.is_dir():
        config = path / "config.json"
        if config.is_file():
            try:
                return "model" in json.loads(config.read_text())
            except (OSError, ValueError):
                return False
        if not _is_zarr_store(path):
            return False
        if PROGRESS_ATTR in (_root_attributes(path) or {}):
            return True  # a store that `generate` is still writing
    try:
        with _open(path, None) as ds:
            return "ssmpde_equation" in ds.attrs
    except (OSError, DatasetFileError, ValueError):
        return False


def check_output(target: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = (),
                 overwrite: bool = False, flag: str = "--out") -> pathlib.Path:
    """The output policy of every command, checked before any work.

    Refuses a target that is one of the ``inputs``; an existing target unless ``overwrite``;
    and, even with ``overwrite``, an existing directory that ssmpde did not write (see
    :func:`is_ssmpde_output`), so a mistyped path never deletes the user's files.
    """
    target = pathlib.Path(os.fspath(target)).expanduser()
    for source in inputs:
        source = pathlib.Path(os.fspath(source)).expanduser()
        if target.resolve() == source.resolve() or (
                target.exists() and source.exists() and os.path.samefile(target, source)):
            raise ValueError(f"{flag} '{target}' is one of the inputs: choose another path "
                             "(outputs never replace their inputs)")
    if target.exists() or target.is_symlink():
        if not overwrite:
            raise FileExistsError(f"'{target}' already exists: pass --overwrite "
                                  "(overwrite=True) to replace it, or choose another path")
        if target.is_dir() and not target.is_symlink() and not is_ssmpde_output(target):
            raise ValueError(f"'{target}' is a directory that ssmpde did not write: refusing "
                             "to replace it; remove it yourself or choose another path")
    return target


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Write a file or directory under a temporary name; it becomes ``target`` only if the
    block completes.

    The one atomic-write helper of the package (datasets, checkpoints, manifests, figures).
    The temporary is a hidden ``.<name>.tmp-<hex>`` beside ``target`` (same file system, so
    the final rename is atomic) and keeps the target's suffix (writers pick formats by it).
    On any exception, ``KeyboardInterrupt`` included, the temporary is removed and an
    existing ``target`` is left as it was. A directory replaces a directory whole.

    Example
    -------
    >>> with atomic_path("notes.txt") as tmp:  # doctest: +SKIP
    ...     tmp.write_text("complete or absent")
    """
    target = pathlib.Path(os.fspath(target))
    tmp = target.parent / f".{target.stem}.tmp-{uuid.uuid4().hex}{target.suffix}"
    try:
        yield tmp
        _commit(tmp, target)
    except BaseException:
        _remove(tmp)
        raise


def save(ds: xr.Dataset, path: str | os.PathLike, *, overwrite: bool = False,
         validate: bool = True) -> pathlib.Path:
    """Write ``ds`` to netCDF4 or zarr, atomically.

    Parameters
    ----------
    ds : xarray.Dataset
        The dataset; its ``encoding`` is ignored (the layout below always applies).
    path : str or os.PathLike
        Target; the suffix picks the format: ``.zarr`` for a zarr store (a directory),
        ``.nc``, ``.nc4`` or ``.netcdf`` for a netCDF4 file.  Its directory must exist.
    overwrite : bool
        Replace an existing target.  Without it an existing target is an error.
    validate : bool
        Check the schema (:func:`validate`) before writing.

    Returns
    -------
    pathlib.Path
        The path written.

    Raises
    ------
    ValueError
        For an unknown suffix (the message lists the accepted ones).
    FileNotFoundError
        If the target's directory does not exist.
    FileExistsError
        If the target exists and ``overwrite`` is false.
    TypeError
        If an attribute cannot be stored in netCDF (dict, None, bool, nested list, ...); the
        message names it.  Checked for zarr as well, so every dataset can move between formats.
    SchemaError
        If ``validate`` and ``ds`` breaks the schema.

    Notes
    -----
    Layout: netCDF4 variables are zlib-compressed (level 4, with shuffle) and chunked one
    sample per chunk, full extent along other dimensions; zarr (format 2, consolidated
    metadata) uses the same chunks.  No ``_FillValue`` is added, so values and dtypes
    (float32, float64, int32, int64) round-trip exactly.

    The data go to a hidden temporary ``.<name>.tmp-<hex>`` beside the target, renamed into
    place once complete.  On any exception, ``KeyboardInterrupt`` included, the temporary is
    removed and an existing target is left as it was.

    Examples
    --------
    >>> save(ds, "navier_stokes.nc")  # doctest: +SKIP
    PosixPath('navier_stokes.nc')
    """
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"expected an xarray.Dataset, got {type(ds).__name__}")
    target = pathlib.Path(os.fspath(path)).expanduser()
    fmt = _format_of_suffix(target)
    parent = target.parent
    if not parent.exists():
        raise FileNotFoundError(f"output directory '{parent}' does not exist; create it first "
                                f"(mkdir -p {parent})")
    if not parent.is_dir():
        raise NotADirectoryError(f"cannot write '{target}': '{parent}' is not a directory")
    if (target.exists() or target.is_symlink()) and not overwrite:
        raise FileExistsError(f"'{target}' already exists: pass overwrite=True to replace it, "
                              "or choose another path")
    if target.is_dir() and not target.is_symlink() and not is_ssmpde_output(target):
        raise ValueError(f"'{target}' is a directory that ssmpde did not write: refusing to "
                         "replace it; remove it yourself or choose another path")
    _check_storable_attrs(ds)
    if validate:
        _raise_if_invalid(ds)
    out = ds.drop_encoding()
    with atomic_path(target) as tmp:
        if fmt == "zarr":
            _write_zarr(out, tmp)
        else:
            _write_netcdf(out, tmp)
    return target


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------

def _is_zarr_store(path: pathlib.Path) -> bool:
    return any((path / marker).is_file() for marker in (".zgroup", ".zmetadata", "zarr.json"))


def _open(path: pathlib.Path, chunks: Any, *, in_progress: bool = False) -> xr.Dataset:
    """Open without validation; a store still being written only with ``in_progress``."""
    if not (path.exists() or path.is_symlink()):
        raise FileNotFoundError(f"no dataset at '{path}': no such file or zarr store "
                                "(check the path)")
    if path.is_dir():
        if not _is_zarr_store(path):
            raise DatasetFileError(f"cannot read '{path}' as a zarr store: it is a directory "
                                   "without zarr metadata (.zgroup or zarr.json). Regenerate "
                                   "it or check the path.")
        progress = store_progress(path)
        if progress is not None and not in_progress:
            raise DatasetFileError(
                f"'{path}' is a zarr store still being written ({progress.summary()}), not a "
                "finished dataset: wait for its run to finish, or rerun the same `ssmpde "
                f"generate` command to resume it (`ssmpde info {path}` shows its state)")
        # Ask for consolidated metadata only where it is known to exist (format 2) or may exist
        # (format 3 keeps it inside zarr.json), so xarray does not warn about a fallback.
        if (path / ".zmetadata").is_file():
            consolidated: bool | None = True
        elif (path / "zarr.json").is_file():
            consolidated = None
        else:
            consolidated = False
        try:
            return xr.open_dataset(path, engine="zarr", chunks=chunks, consolidated=consolidated,
                                   **_DECODE_KWARGS)
        except _READ_ERRORS as exc:
            raise DatasetFileError(f"cannot read '{path}' as a zarr store: it is incomplete, "
                                   f"corrupt or not zarr (underlying error: {exc}). Regenerate "
                                   "it or check the path.") from exc
    try:
        return xr.open_dataset(path, engine="netcdf4", chunks=chunks, **_DECODE_KWARGS)
    except _READ_ERRORS as exc:
        raise DatasetFileError(f"cannot read '{path}' as a netCDF4 file: it is truncated, "
                               f"corrupt or not netCDF (underlying error: {exc}). Regenerate "
                               "it or check the path.") from exc


def open_dataset(path: str | os.PathLike, *, validate: bool = True,
                 chunks: Any = None) -> xr.Dataset:
    """Open a dataset lazily: values are read from disk only when used.

    Parameters
    ----------
    path : str or os.PathLike
        A directory is read as a zarr store, anything else as netCDF.
    validate : bool
        Check the schema and raise :class:`SchemaError` naming what is missing.
    chunks : optional
        Passed to :func:`xarray.open_dataset`: None for lazily indexed NumPy-backed
        variables, ``{}`` for dask arrays with the file's own chunks (one sample each).

    Returns
    -------
    xarray.Dataset
        Keeps the file open; close it with ``ds.close()`` or a ``with`` block.

    Raises
    ------
    FileNotFoundError
        If nothing exists at ``path``.
    DatasetFileError
        If the file or store cannot be read (truncated, corrupt, not netCDF/zarr).
    SchemaError
        If ``validate`` and the contents break the schema.

    Notes
    -----
    Times are never decoded into dates or durations (``decode_times=False``,
    ``decode_timedelta=False``), so ``time`` keeps its dtype and its ``units`` attribute.
    Corruption inside data chunks only shows when the values are read; :func:`load_dataset`
    reads everything and reports it as :class:`DatasetFileError`.
    """
    return _open_dataset(pathlib.Path(os.fspath(path)).expanduser(), validate=validate,
                         chunks=chunks)


def _open_dataset(source: pathlib.Path, *, validate: bool, chunks: Any,
                  in_progress: bool = False) -> xr.Dataset:
    ds = _open(source, chunks, in_progress=in_progress)
    objects = [name for name, var in ds.variables.items() if var.dtype == object]
    if objects:
        ds.close()
        raise DatasetFileError(f"'{source}' holds object-dtype arrays {objects}: ssmpde datasets "
                               "hold numbers only, and object arrays can run code when read. "
                               "Regenerate the dataset.")
    if validate:
        try:
            _raise_if_invalid(ds, subject=f"dataset '{source}'")
        except BaseException:
            ds.close()
            raise
    return ds


def load_dataset(path: str | os.PathLike, *, validate: bool = True) -> xr.Dataset:
    """Read a dataset fully into memory and close the file.

    Parameters
    ----------
    path : str or os.PathLike
        A directory is read as a zarr store, anything else as netCDF.
    validate : bool
        Check the schema (before reading the values) and raise :class:`SchemaError`.

    Returns
    -------
    xarray.Dataset
        NumPy-backed; the file is closed, so it may be overwritten or deleted.

    Raises
    ------
    FileNotFoundError, DatasetFileError, SchemaError
        As :func:`open_dataset`; unreadable data chunks also raise :class:`DatasetFileError`.
    """
    source = pathlib.Path(os.fspath(path)).expanduser()
    ds = open_dataset(source, validate=validate)
    kind = "a zarr store" if source.is_dir() else "a netCDF4 file"
    try:
        ds.load()
    except _READ_ERRORS as exc:
        raise DatasetFileError(f"cannot read the values in '{source}' as {kind}: it is "
                               f"truncated or corrupt (underlying error: {exc}). Regenerate it "
                               "or check the path.") from exc
    finally:
        ds.close()
    return ds


# --------------------------------------------------------------------------------------------
# Zarr stores written in parallel
# --------------------------------------------------------------------------------------------

#: Root attribute of a zarr store that is still being written: its :class:`StoreProgress` as
#: JSON. Present exactly while samples are missing, so every zarr reader can see it;
#: :func:`finish_store` removes it.
PROGRESS_ATTR = "ssmpde_progress"
# Temporaries zarr's LocalStore writes before renaming a chunk or metadata file into place: a
# worker killed during a write leaves one (the chunk itself is rewritten on resume).
_ZARR_PARTIAL = re.compile(r"\.[0-9a-f]{32}\.partial$")
# Sample coordinates are written in blocks of this many values, so a layout never holds all.
_COORDINATE_BLOCK = 2 ** 20


@dataclasses.dataclass(frozen=True)
class StoreProgress:
    """What a zarr store still being written records about itself.

    Parameters
    ----------
    config : dict
        The generator config of the run (``ssmpde_config``); a rerun resumes only with the same.
    history : str
        The run's ``history`` attribute (kept across resumes).
    run_id : str
        Random identifier of the store's layout: a batch computed for another layout (a run
        discarded with ``--overwrite`` whose tasks still run on a cluster) is never written.
    num_samples, batch_size : int
        Samples of the dataset, and samples per batch of the latest run.
    complete : tuple of (int, int)
        Sorted, disjoint, non-adjacent sample ranges ``[start, stop)`` whose values are written.
    """

    config: dict
    history: str
    run_id: str
    num_samples: int
    batch_size: int
    complete: tuple[tuple[int, int], ...] = ()

    @property
    def samples_complete(self) -> int:
        """Number of samples written."""
        return sum(stop - start for start, stop in self.complete)

    @property
    def is_complete(self) -> bool:
        """Whether every sample is written."""
        return self.complete == ((0, self.num_samples),)

    def batch_counts(self) -> tuple[int, int]:
        """``(complete, total)`` batches of :attr:`batch_size`: what is written, plus the
        batches still needed for the gaps. O(number of ranges), whatever ``num_samples``."""
        size = self.batch_size
        done = sum(-(-(stop - start) // size) for start, stop in self.complete)
        missing, position = 0, 0
        for start, stop in (*self.complete, (self.num_samples, self.num_samples)):
            missing += -(-max(0, start - position) // size)
            position = max(position, stop)
        return done, done + missing

    def summary(self) -> str:
        """E.g. ``"3 of 10 batches complete (24 of 80 samples, batches of 8)"``."""
        done, total = self.batch_counts()
        return (f"{done} of {total} batches complete ({self.samples_complete:_} of "
                f"{self.num_samples:_} samples, batches of {self.batch_size})")

    def with_complete(self, start: int, stop: int) -> StoreProgress:
        """A new record with samples ``[start, stop)`` written too (ranges merged)."""
        if not 0 <= start < stop <= self.num_samples:
            raise ValueError(f"sample range [{start}, {stop}) is outside 0..{self.num_samples}")
        merged: list[tuple[int, int]] = []
        for first, last in sorted((*self.complete, (start, stop))):
            if merged and first <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], last))
            else:
                merged.append((first, last))
        return dataclasses.replace(self, complete=tuple(merged))

    def to_json(self) -> str:
        record = dataclasses.asdict(self)
        record["complete"] = [list(piece) for piece in self.complete]
        return json.dumps(record, sort_keys=True)

    @classmethod
    def from_json(cls, text: Any, source: str | os.PathLike = "store") -> StoreProgress:
        """Parse a record; :class:`DatasetFileError` naming ``source`` if it is not one."""
        fix = (f"'{source}' cannot be resumed: delete it, or regenerate it with --overwrite "
               "(overwrite=True)")
        try:
            record = json.loads(text)
            complete = tuple((int(a), int(b)) for a, b in record.pop("complete"))
            progress = cls(complete=complete, **record)
        except (TypeError, ValueError, KeyError) as exc:
            raise DatasetFileError(f"the progress record ('{PROGRESS_ATTR}' attribute) of "
                                   f"'{source}' is unreadable ({exc}): {fix}") from None
        position = 0
        for start, stop in progress.complete:
            if not position <= start < stop <= progress.num_samples:
                raise DatasetFileError(f"the progress record of '{source}' lists the sample "
                                       f"ranges {list(progress.complete)}, which are not "
                                       f"sorted, disjoint ranges of 0..{progress.num_samples}: "
                                       f"{fix}")
            position = stop
        return progress


def _root_attributes(path: pathlib.Path) -> dict | None:
    """The root group's attributes of a zarr format 2 store, None where there are none."""
    try:
        attrs = json.loads((path / ".zattrs").read_text())
    except (OSError, ValueError):
        return None
    return attrs if isinstance(attrs, dict) else None


def store_progress(path: str | os.PathLike) -> StoreProgress | None:
    """The progress record of a zarr store still being written, None for anything else.

    Parameters
    ----------
    path : str or os.PathLike
        Any path: a finished store, a netCDF file or nothing at all give None.

    Returns
    -------
    StoreProgress or None

    Raises
    ------
    DatasetFileError
        If the store has a progress attribute that cannot be parsed.

    Examples
    --------
    >>> store_progress("ns.zarr").summary()  # doctest: +SKIP
    '3 of 10 batches complete (24 of 80 samples, batches of 8)'
    """
    path = pathlib.Path(os.fspath(path)).expanduser()
    if not (path.is_dir() and (path / ".zgroup").is_file()):
        return None
    attrs = _root_attributes(path)
    if attrs is None or PROGRESS_ATTR not in attrs:
        return None
    return StoreProgress.from_json(attrs[PROGRESS_ATTR], path)


def _zarr_group(path: pathlib.Path, mode: str):
    import zarr  # imported here: only the parallel-store functions talk to zarr directly

    return zarr.open_group(path, mode=mode, zarr_format=ZARR_FORMAT)


def create_store(template: xr.Dataset, path: str | os.PathLike,
                 progress: StoreProgress) -> pathlib.Path:
    """Lay out a zarr store for parallel writers, every sample still missing.

    Parameters
    ----------
    template : xarray.Dataset
        The finished dataset's structure: coordinates (``sample`` included, ``0 .. n-1``),
        attributes, and data variables of the final shape and dtype whose values are never
        read (lazy placeholders such as ``dask.array.empty`` with one chunk). The ``sample``
        coordinate may be a dask array without an index, so a huge layout holds no sample
        list in memory.
    path : str or os.PathLike
        The ``.zarr`` target. Whatever is there is replaced (the caller checks the output
        policy, :func:`check_output`, under :func:`output_lock`).
    progress : StoreProgress
        The record to start with, stored in the :data:`PROGRESS_ATTR` attribute.

    Returns
    -------
    pathlib.Path
        The store.

    Notes
    -----
    Same layout as :func:`save` (zarr format 2, one sample per chunk, no fill value), so a
    finished store reads exactly like one :func:`save` wrote. Nothing but metadata and
    coordinates is written: unwritten chunks read as 0 until their samples are written, and
    readers refuse the store while :data:`PROGRESS_ATTR` is present. The layout is made under
    a temporary name and renamed into place, so ``path`` is either absent or fully laid out.
    """
    target = pathlib.Path(os.fspath(path)).expanduser()
    if _format_of_suffix(target) != "zarr":
        raise ValueError(f"'{target}': parallel writes go to a zarr store; use a "
                         f"{ZARR_SUFFIXES[0]} path")
    _check_storable_attrs(template)
    _raise_if_invalid(template)
    if template.sizes.get(SAMPLE) != progress.num_samples:
        raise ValueError(f"the template has {template.sizes.get(SAMPLE)} samples, the progress "
                         f"record {progress.num_samples}")
    layout = template.drop_encoding().assign_attrs({PROGRESS_ATTR: progress.to_json()})
    with atomic_path(target) as tmp:
        # compute=False: metadata and in-memory coordinates only; the placeholders' values and
        # dask-backed coordinates are never computed by xarray.
        layout.to_zarr(tmp, mode="w-", zarr_format=ZARR_FORMAT, consolidated=False,
                       encoding=_zarr_encoding(layout), compute=False)
        group = _zarr_group(tmp, "r+")
        for name, coord in layout.coords.items():
            if coord.chunks is None:
                continue
            array = group[name]
            for start in range(0, coord.shape[0], _COORDINATE_BLOCK):
                block = coord.data[start:start + _COORDINATE_BLOCK]
                # here, never on a dask cluster that happens to be the default scheduler
                array[start:start + block.shape[0]] = block.compute(scheduler="synchronous")
    return target


def update_store_progress(path: str | os.PathLike, progress: StoreProgress) -> None:
    """Replace the progress record of a store being written (one driver calls this).

    The root attributes are rewritten whole through a temporary file (zarr's local store
    renames it into place), so a reader or a killed driver never sees half a record.
    """
    target = pathlib.Path(os.fspath(path)).expanduser()
    _zarr_group(target, "r+").attrs[PROGRESS_ATTR] = progress.to_json()


def write_store_region(ds: xr.Dataset, path: str | os.PathLike, *, run_id: str) -> None:
    """Write the samples of ``ds`` into their region of a store being written.

    Parameters
    ----------
    ds : xarray.Dataset
        Consecutive samples ``start .. stop-1`` (its ``sample`` coordinate) with every data
        variable of the store, each of the store's per-sample shape and dtype.
    path : str or os.PathLike
        A store made by :func:`create_store`, on a file system this process sees.
    run_id : str
        The :attr:`StoreProgress.run_id` the samples were computed for.

    Raises
    ------
    DatasetFileError
        If there is no store being written at ``path`` (not on a shared file system, already
        finished), it belongs to another run, or ``ds`` does not match its layout. Nothing is
        written then.

    Notes
    -----
    Regions are whole chunks (one sample each), so concurrent writers of different samples
    never touch the same file, and writing the same samples twice writes the same bytes.
    Each chunk file is written to a temporary and renamed, so a killed writer leaves the old
    chunk or the new one, never half of one. Values pass unchanged (no fill value, no scaling):
    the bytes are those :func:`save` writes.
    """
    target = pathlib.Path(os.fspath(path)).expanduser()
    progress = store_progress(target)
    if progress is None:
        raise DatasetFileError(
            f"there is no zarr store being written at '{target}' on this machine: put the "
            "output on a file system that every dask worker shares with the driver, at the "
            "same path")
    if progress.run_id != run_id:
        raise DatasetFileError(f"'{target}' was laid out again by another run (--overwrite) "
                               "after this batch was scheduled: not writing it")
    indices = np.asarray(ds[SAMPLE].values)
    start = int(indices[0]) if indices.size else 0
    stop = start + indices.size
    if not indices.size or not np.array_equal(indices, np.arange(start, stop)) \
            or stop > progress.num_samples:
        raise DatasetFileError(f"samples {indices.tolist()[:8]} are not a run of consecutive "
                               f"indices inside 0..{progress.num_samples - 1}")
    # zarr directly, one array at a time: a reader that lists the store's members (xarray
    # does) would trip over the temporary of a progress update the driver is writing.
    group = _zarr_group(target, "r+")
    arrays, problems = {}, []
    for name, var in ds.data_vars.items():
        try:
            array = group[name]
        except KeyError:
            problems.append(f"the store has no variable '{name}'")
            continue
        dims = tuple(array.attrs.get("_ARRAY_DIMENSIONS", ()))
        if dims != var.dims or array.shape[1:] != var.shape[1:] or array.dtype != var.dtype:
            problems.append(f"'{name}' is {var.dims} {var.shape[1:]} {var.dtype} per batch, "
                            f"the store has {dims} {array.shape[1:]} {array.dtype}")
        arrays[name] = array
    if problems:
        raise DatasetFileError(f"samples {start}..{stop - 1} do not fit the layout of "
                               f"'{target}': {'; '.join(problems)}")
    for name, array in arrays.items():
        array[start:stop] = np.asarray(ds[name].values)


def finish_store(path: str | os.PathLike) -> pathlib.Path:
    """Mark a store whose samples are all written complete.

    Removes what killed writers left (zarr's ``*.partial`` temporaries), deletes the progress
    record, then consolidates the metadata, after which the store reads like one :func:`save`
    wrote. Each step can be repeated, so a driver killed in between finishes on its rerun.

    Raises
    ------
    ValueError
        If the progress record still lists missing samples.
    """
    target = pathlib.Path(os.fspath(path)).expanduser()
    progress = store_progress(target)
    if progress is not None:
        if not progress.is_complete:
            raise ValueError(f"'{target}' is not finished: {progress.summary()}")
        for root, _, names in os.walk(target):
            for name in names:
                if _ZARR_PARTIAL.search(name):
                    (pathlib.Path(root) / name).unlink(missing_ok=True)
        group = _zarr_group(target, "r+")
        del group.attrs[PROGRESS_ATTR]
    import zarr

    zarr.consolidate_metadata(target, zarr_format=ZARR_FORMAT)
    return target


def convert(source: str | os.PathLike, target: str | os.PathLike, *,
            overwrite: bool = False) -> pathlib.Path:
    """Copy a dataset between netCDF4 and zarr (either way), value for value.

    Parameters
    ----------
    source : str or os.PathLike
        A netCDF4 file or a finished zarr store (one still being written is refused).
    target : str or os.PathLike
        The copy; its suffix picks the format (``.nc``, ``.nc4``, ``.netcdf`` or ``.zarr``).
    overwrite : bool
        Replace an existing ``target`` written by ssmpde.

    Returns
    -------
    pathlib.Path
        The target.

    Notes
    -----
    Values, dtypes, coordinates and every attribute (``history`` included) are copied
    unchanged, so a round trip gives the same dataset. The data stream through one sample at
    a time (dask chunks), so the dataset need not fit in memory. The target is written
    atomically under its output lock (:func:`output_lock`).

    Examples
    --------
    >>> convert("ns.zarr", "ns.nc")  # doctest: +SKIP
    PosixPath('ns.nc')
    """
    source = pathlib.Path(os.fspath(source)).expanduser()
    target = pathlib.Path(os.fspath(target)).expanduser()
    _format_of_suffix(target)  # an unknown suffix fails before the source is read
    with output_lock(target):
        remove_stale_temporaries(target)
        check_output(target, inputs=[source], overwrite=overwrite, flag="target")
        with open_dataset(source, chunks={}) as ds:
            save(ds, target, overwrite=overwrite, validate=False)
    return target


# --------------------------------------------------------------------------------------------
# Describing
# --------------------------------------------------------------------------------------------

def _human_size(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    size = float(nbytes)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024:
            break
    return f"{size:.1f} {unit}"


def _disk_size(path: pathlib.Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    return sum((pathlib.Path(root) / name).stat().st_size
               for root, _, names in os.walk(path) for name in names)


def _file_format(path: pathlib.Path) -> str:
    if path.is_dir():
        return "zarr (format 3)" if (path / "zarr.json").is_file() else "zarr (format 2)"
    with netCDF4.Dataset(path) as nc:
        return f"netCDF ({nc.data_model})"


def _number(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, (float, np.floating)) else str(value)


def _value_range(var: xr.DataArray) -> str:
    if var.size == 0:
        return "(empty)"
    if var.dtype.kind not in "iuf":
        return ""
    with warnings.catch_warnings():
        # All-NaN variables are worth describing, not warning about.
        warnings.simplefilter("ignore", RuntimeWarning)
        values = xr.Dataset({"min": var.min(skipna=True), "max": var.max(skipna=True)})
        values = values.compute()
    return f"[{_number(values['min'].item())}, {_number(values['max'].item())}]"


def _summary(ds: xr.Dataset) -> list[str]:
    lines = [f"equation: {ds.attrs.get('ssmpde_equation', '(missing)')}",
             "dimensions: " + (", ".join(f"{dim}={size}" for dim, size in ds.sizes.items())
                               or "(none)"),
             "coordinates:"]
    for name, coord in ds.coords.items():
        lines.append(f"  {name} ({', '.join(map(str, coord.dims))}) {coord.dtype} "
                     f"{_value_range(coord)} units={coord.attrs.get('units', '(missing)')}")
    lines.append("data variables:")
    for name, var in ds.data_vars.items():
        stats = _value_range(var)
        if var.dtype.kind in "fc" and var.size:
            bad = _count_nonfinite(var)
            stats += f" non-finite={bad}" if bad else ""
        lines.append(f"  {name} ({', '.join(map(str, var.dims))}) {var.dtype} "
                     f"units={var.attrs.get('units', '(missing)')} "
                     f"long_name={var.attrs.get('long_name', '(missing)')!r} min/max={stats}")
    lines.append("global attributes:")
    for key, value in ds.attrs.items():
        if key not in ("ssmpde_config", PROGRESS_ATTR):
            lines.append(f"  {key}: {value}")
    lines.append("config:")
    try:
        config = json.dumps(config_of(ds), indent=2, sort_keys=True)
    except SchemaError as exc:
        config = f"(unavailable: {exc.problems[0]})"
    lines.extend("  " + line for line in config.splitlines())
    try:
        _raise_if_invalid(ds)
        lines.append("schema: ok")
    except SchemaError as exc:
        lines.append("schema: problems")
        lines.extend(f"  - {problem}" for problem in exc.problems)
    return lines


def describe(path_or_ds: str | os.PathLike | xr.Dataset) -> str:
    """Return a human-readable summary of a dataset file, store or in-memory dataset.

    Parameters
    ----------
    path_or_ds : str, os.PathLike or xarray.Dataset
        A netCDF file, a zarr store, or a dataset.  Files are described even if they break the
        schema; the problems are listed at the end.

    Returns
    -------
    str
        Several lines: path, format, size, equation, dimensions with sizes, coordinates (range
        and units), data variables (dims, dtype, units, long_name, min/max), global attributes,
        the pretty-printed config and the schema verdict. A zarr store still being written
        gets a ``status:`` line (how many batches and samples are complete), and the rest
        describes its complete samples only.

    Notes
    -----
    Minima and maxima read every value; files are opened with dask chunks (one sample each),
    so memory stays bounded on large datasets.

    Examples
    --------
    >>> print(describe("navier_stokes.nc"))  # doctest: +SKIP
    """
    if isinstance(path_or_ds, xr.Dataset):
        ds = path_or_ds
        source = ds.encoding.get("source")
        header = [f"path: {source if source else '(in memory)'}", "format: xarray.Dataset",
                  f"size uncompressed: {_human_size(ds.nbytes)}"]
        return "\n".join(header + _summary(ds))
    path = pathlib.Path(os.fspath(path_or_ds)).expanduser()
    progress = store_progress(path)
    with warnings.catch_warnings():
        # Listing a store while its driver updates the progress record can meet the
        # temporary of that update, which zarr warns about; it is gone a moment later.
        warnings.filterwarnings("ignore", message=r"Object at .*\.partial is not recognized")
        ds = _open_dataset(path, validate=False, chunks={}, in_progress=True)
    with ds:
        header = [f"path: {path}", f"format: {_file_format(path)}",
                  f"size on disk: {_human_size(_disk_size(path))}"]
        if progress is None:
            return "\n".join(header + _summary(ds))
        header.append(f"status: being written, {progress.summary()}; rerun its `ssmpde "
                      "generate` command to resume it. Below: the complete samples only.")
        written = [np.arange(start, stop) for start, stop in progress.complete]
        indices = np.concatenate(written) if written else np.arange(0)
        return "\n".join(header + _summary(ds.isel({SAMPLE: indices})))


# --------------------------------------------------------------------------------------------
# Accessor
# --------------------------------------------------------------------------------------------

@xr.register_dataset_accessor("ssmpde")
class SsmpdeAccessor:
    """The ``ds.ssmpde`` namespace: schema helpers on any :class:`xarray.Dataset`.

    Examples
    --------
    >>> ds.ssmpde.equation  # doctest: +SKIP
    'navier_stokes'
    >>> ds.ssmpde.save("ns.nc", overwrite=True)  # doctest: +SKIP
    """

    def __init__(self, ds: xr.Dataset):
        self._ds = ds

    @property
    def config(self) -> dict:
        """The generator config (see :func:`config_of`)."""
        return config_of(self._ds)

    @property
    def equation(self) -> str:
        """The PDE's name from ``ssmpde_equation``; :class:`SchemaError` if missing."""
        equation = self._ds.attrs.get("ssmpde_equation")
        if not isinstance(equation, str) or not equation.strip():
            raise _schema_error(["global attribute 'ssmpde_equation' is missing or empty: set "
                                 "it to the PDE's name (build_dataset() does)"])
        return equation

    def validate(self, **kwargs: Any) -> xr.Dataset:
        """Check the schema; see :func:`validate` for the keywords."""
        return validate(self._ds, **kwargs)

    def save(self, path: str | os.PathLike, **kwargs: Any) -> pathlib.Path:
        """Write the dataset; see :func:`save` for the keywords."""
        return save(self._ds, path, **kwargs)

    def describe(self) -> str:
        """Human-readable summary; see :func:`describe`."""
        return describe(self._ds)
