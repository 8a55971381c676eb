"""The ssmpde dataset schema: dimension names, variable roles, attributes, and :func:`validate`.

An ssmpde dataset is an :class:`xarray.Dataset` with

* dimensions ``sample``, ``time``, ``y``, ``x`` (1D problems have no ``y``; steady problems no
  ``time``), each with a coordinate variable that carries ``units``;
* one data variable per physical field or per-sample parameter, each with ``long_name`` and
  ``units`` and, as written by the solvers, its :data:`ROLE`; extra non-standard dimensions
  (``forcing_mode``, ...) are allowed on data variables;
* the global attributes :data:`REQUIRED_GLOBAL_ATTRS`, with ``Conventions = "CF-1.10"`` and the
  full generator config as a JSON object in ``ssmpde_config``.

:func:`grid_coordinates`, :func:`time_coordinate` and :func:`sample_coordinate` make the
coordinates, :func:`build_dataset` assembles such a dataset, :func:`validate` checks one and
lists every problem with its fix, :func:`config_of` and :func:`roles_of` read what it records.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ssmpde import __version__

__all__ = [
    "CONVENTIONS",
    "ENCODED_BY",
    "REQUIRED_GLOBAL_ATTRS",
    "ROLE",
    "ROLES",
    "SAMPLE",
    "SPATIAL_DIMS",
    "STANDARD_DIMS",
    "TIME",
    "X",
    "Y",
    "DatasetFileError",
    "SchemaError",
    "build_dataset",
    "canonical_dims",
    "config_of",
    "grid_coordinates",
    "roles_of",
    "sample_coordinate",
    "time_coordinate",
    "validate",
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


def canonical_dims(dims: Sequence[str]) -> tuple[str, ...]:
    """The schema's order of a data variable's dimensions: ``sample``, ``time``, any others
    in their given order, then the grid ``y``, ``x``.

    Examples
    --------
    >>> canonical_dims(("sample", "time", "x", "y"))
    ('sample', 'time', 'y', 'x')
    >>> canonical_dims(("forcing_mode", "sample"))
    ('sample', 'forcing_mode')
    """
    dims = tuple(dims)
    return (tuple(d for d in (SAMPLE, TIME) if d in dims)
            + tuple(d for d in dims if d not in STANDARD_DIMS)
            + tuple(d for d in (Y, X) if d in dims))


def _dims_problems(name: str, var: xr.DataArray) -> list[str]:
    """Dimensions out of the schema's order; for grid fields, names it does not know."""
    problems = []
    role = var.attrs.get(ROLE)
    unknown = [d for d in var.dims if d not in STANDARD_DIMS]
    if role in ("state", "forcing") and unknown:
        # A field on the grid with other dimension names cannot be read by name: which of
        # them is y and which is x is the writer's knowledge, not the reader's.
        problems.append(f"{role} variable '{name}' has dimensions {unknown} that are not the "
                        f"schema's ({', '.join(STANDARD_DIMS)}): which is which cannot be "
                        f"told by name; rename them, e.g. ds = ds.rename("
                        f"{{{', '.join(f'{d!r}: ...' for d in unknown)}}}) with '{Y}', '{X}' "
                        "(or 'time') as they are")
    order = canonical_dims(var.dims)
    if order != tuple(var.dims):
        problems.append(f"data variable '{name}' has dimensions ({', '.join(map(str, var.dims))}"
                        f"), not in the schema's order ({', '.join(order)}): transpose it, "
                        f"ds['{name}'] = ds['{name}'].transpose({', '.join(map(repr, order))})"
                        " (files stored in another order are read by name)")
    return problems


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
        problems.extend(_dims_problems(name, var))
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
    empty; the dimensions of each data variable are in the order of :func:`canonical_dims`
    (``sample``, ``time``, other dimensions, ``y``, ``x``), and a ``state`` or ``forcing``
    variable has only the standard dimensions.
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
