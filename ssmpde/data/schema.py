"""The ssmpde dataset schema: dimension names, variable roles, attributes, and :func:`validate`.

An ssmpde dataset is an :class:`xarray.Dataset` with

* dimensions ``sample``, ``time``, ``y``, ``x`` (1D problems have no ``y``; steady problems no
  ``time``), each with a coordinate variable that carries ``units``;
* one data variable per physical field or per-sample parameter, each with ``long_name`` and
  ``units`` and, as written by the solvers, its :data:`ROLE`; extra non-standard dimensions
  (``forcing_mode``, ...) are allowed on data variables;
* as written by the solvers, the boundary conditions of every variable on the grid
  (:data:`BOUNDARY_CONDITIONS`, read by :func:`boundary_conditions_of`), the components of
  vector fields linked (:data:`VECTOR`, :data:`VECTOR_COMPONENT`, read by :func:`vectors_of`)
  and the placement of the grid points on every spatial coordinate (:data:`GRID_PLACEMENT`:
  nodes or cell centres; finite-volume values are cell averages with CF ``cell_methods``);
* the global attributes :data:`REQUIRED_GLOBAL_ATTRS`, with ``Conventions = "CF-1.10"`` and the
  full generator config as a JSON object in ``ssmpde_config``.

:func:`grid_coordinates`, :func:`spatial_coordinate`, :func:`time_coordinate` and
:func:`sample_coordinate` make the coordinates, :func:`build_dataset` assembles such a dataset,
:func:`validate` checks one and lists every problem with its fix, :func:`config_of`,
:func:`roles_of`, :func:`boundary_conditions_of` and :func:`vectors_of` read what it records.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ssmpde import __version__
from ssmpde.core import JSONFileError, decode_json

__all__ = [
    "BOUNDARY_CONDITIONS",
    "BOUNDARY_KINDS",
    "BOUNDS_DIM",
    "CONVENTIONS",
    "ENCODED_BY",
    "GRID_PLACEMENT",
    "GRID_PLACEMENTS",
    "REQUIRED_GLOBAL_ATTRS",
    "ROLE",
    "ROLES",
    "SAMPLE",
    "SPATIAL_DIMS",
    "STANDARD_DIMS",
    "TIME",
    "VECTOR",
    "VECTOR_COMPONENT",
    "X",
    "Y",
    "DatasetFileError",
    "SchemaError",
    "boundary_conditions_of",
    "build_dataset",
    "canonical_dims",
    "config_of",
    "format_boundary_conditions",
    "grid_coordinates",
    "parse_boundary_conditions",
    "roles_of",
    "sample_coordinate",
    "spatial_coordinate",
    "time_coordinate",
    "validate",
    "vectors_of",
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
#: Variable attribute: the boundary conditions of a variable on the grid, per spatial
#: dimension, written like CF ``cell_methods``: ``"y: periodic x: periodic"``. One kind after
#: a dimension holds at both ends; two kinds are the (lower, upper) ends, e.g.
#: ``"y: reflective x: dirichlet neumann"``.
BOUNDARY_CONDITIONS = "boundary_conditions"
#: The boundary kinds: ``periodic`` (both ends, always), ``dirichlet`` (value given),
#: ``neumann`` (normal derivative given), ``outflow`` (transmissive, zero-gradient ghost
#: cells), ``reflective`` (a wall: the normal velocity mirrored).
BOUNDARY_KINDS = ("periodic", "dirichlet", "neumann", "outflow", "reflective")
#: Variable attribute: the name of the vector field a component belongs to (``"velocity"``).
VECTOR = "vector"
#: Variable attribute: the spatial dimension a vector component points along (``"x"``).
VECTOR_COMPONENT = "vector_component"
#: Spatial-coordinate attribute: where the grid points lie, one of :data:`GRID_PLACEMENTS`.
GRID_PLACEMENT = "grid_placement"
#: ``nodes``: the points are grid nodes (periodic grids, or grids whose ends are the domain's
#: boundary); ``cell_centres``: the points are centres of cells, half a cell in from the
#: boundary (finite-volume data, whose values are cell averages: see ``cell_methods``).
GRID_PLACEMENTS = ("nodes", "cell_centres")
#: The second dimension of a CF cell-bounds coordinate (``x_bounds[x, bounds]``: lower, upper).
BOUNDS_DIM = "bounds"


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
                     units: str = "1", placement: str = "nodes",
                     origin: float | Sequence[float] = 0.0,
                     bounds: bool = False) -> dict[str, xr.DataArray]:
    """Return the spatial coordinates of a uniform grid (1D, square or rectangular 2D).

    With ``endpoint=False`` (periodic grids) the nodes are :math:`x_j = j L / N`,
    :math:`j = 0, \\dots, N-1`: the grid does **not** include the right boundary point, which
    is the same point as the left one.  With ``endpoint=True`` (Dirichlet or Neumann grids) the
    nodes are ``np.linspace(0, L, N)`` and include both boundaries.  With
    ``placement="cell_centres"`` (finite volumes) the points are the centres
    :math:`x_j = (j + \\tfrac12) L / N` of ``N`` equal cells; neither boundary is a point.
    ``origin`` shifts every point. With ``bounds=True`` each cell's edges
    :math:`[j L / N, (j + 1) L / N]` (plus ``origin``) come as a CF bounds coordinate.

    Parameters
    ----------
    resolution : int or sequence of int
        Number of points ``N`` per axis, at least 1: one int for every axis, or one per axis in
        the order of the dimensions (``(ny, nx)`` in 2D, ``(nx,)`` in 1D).
    ndim : {1, 2}, optional
        Number of spatial dimensions: 1 gives ``x`` only, 2 gives ``y`` and ``x``. Default:
        the length of ``resolution`` if it is a sequence, else 2.
    length : float or sequence of float
        Domain length ``L`` per axis (same order as ``resolution``), in ``units``.
    endpoint : bool
        Whether the last node lies on the right boundary (see above); only with
        ``placement="nodes"``.
    units : str
        Units of the coordinates (``"1"`` for a dimensionless domain).
    placement : {"nodes", "cell_centres"}
        Where the points lie (stored as the :data:`GRID_PLACEMENT` attribute).
    origin : float or sequence of float
        Lower end of the domain per axis (same order as ``resolution``).
    bounds : bool
        Also return the cells' edges (only with ``placement="cell_centres"``, for values that
        are cell averages): ``"<dim>_bounds"`` of shape ``(N, 2)`` and dims ``(dim,``
        :data:`BOUNDS_DIM` ``)``, named by the coordinate's CF ``bounds`` attribute.

    Returns
    -------
    dict of str to xarray.DataArray
        ``{"y": y, "x": x}`` (2D) or ``{"x": x}`` (1D); each a float64 array of shape ``(N,)``
        made by :func:`spatial_coordinate` (attributes ``units``, ``long_name``, ``axis``
        ``"Y"`` or ``"X"``, :data:`GRID_PLACEMENT`); with ``bounds=True`` also
        ``"y_bounds"`` and ``"x_bounds"``.

    Examples
    --------
    >>> grid_coordinates(4, ndim=1)["x"].values
    array([0.  , 0.25, 0.5 , 0.75])
    >>> grid_coordinates(3, ndim=1, endpoint=True)["x"].values
    array([0. , 0.5, 1. ])
    >>> grid_coordinates(4, ndim=1, placement="cell_centres")["x"].values
    array([0.125, 0.375, 0.625, 0.875])
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
    origins = (tuple(origin) if isinstance(origin, (tuple, list, np.ndarray))
               else (origin,) * ndim)
    if len(sizes) != ndim or len(lengths) != ndim or len(origins) != ndim:
        raise ValueError(f"resolution {resolution!r}, length {length!r} and origin "
                         f"{origin!r} must give one value per spatial dimension ({ndim})")
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"resolution must be an integer, got {type(n).__name__}")
        if n < 1:
            raise ValueError(f"resolution must be at least 1, got {n}")
    for value in lengths:
        if not (isinstance(value, numbers.Real) and math.isfinite(value) and value > 0):
            raise ValueError(f"length must be a positive finite number, got {value!r}")
    for value in origins:
        if not (isinstance(value, numbers.Real) and math.isfinite(value)):
            raise ValueError(f"origin must be a finite number, got {value!r}")
    _check_placement(placement)
    if endpoint and placement != "nodes":
        raise ValueError("endpoint=True puts a node on the right boundary, which cell centres "
                         "never are: use placement='nodes' or endpoint=False")
    if bounds and placement != "cell_centres":
        raise ValueError("bounds are the edges of cells: use bounds=True with "
                         "placement='cell_centres'")
    _check_units(units)
    if placement == "cell_centres":
        kind = "cell centres"
    else:
        kind = "including both boundaries" if endpoint else "periodic, right boundary excluded"
    coords = {}
    for dim, n, size, start in zip(SPATIAL_DIMS[ndim], sizes, lengths, origins):
        n = int(n)
        if placement == "cell_centres":
            values = (np.arange(n, dtype=np.float64) + 0.5) * float(size) / n
        elif endpoint:
            values = np.linspace(0.0, float(size), n)
        else:
            values = np.arange(n, dtype=np.float64) * (float(size) / n)
        if start != 0:
            values = float(start) + values
        coords[dim] = spatial_coordinate(dim, values, units=units, placement=placement,
                                         long_name=f"{dim} coordinate ({kind})")
        if bounds:
            edges = float(start) + np.arange(n + 1, dtype=np.float64) * float(size) / n
            coords[dim].attrs["bounds"] = f"{dim}_bounds"
            coords[f"{dim}_bounds"] = xr.DataArray(
                np.stack([edges[:-1], edges[1:]], axis=1), dims=(dim, BOUNDS_DIM),
                # CF 7.1: the units are the coordinate's, so none of their own (xarray drops
                # equal ones from netCDF but not from zarr: the two files would differ).
                name=f"{dim}_bounds")
    return coords


def spatial_coordinate(dim: str, values: Iterable[float] | np.ndarray, *, units: str = "1",
                       placement: str = "nodes", long_name: str | None = None
                       ) -> xr.DataArray:
    """Return one spatial coordinate (``x`` or ``y``) with its CF and ssmpde attributes.

    The one place a spatial coordinate gets its attributes: :func:`grid_coordinates` uses it,
    and so does a solver whose points are not a uniform grid from the origin (Darcy's strided
    cell centres).

    Parameters
    ----------
    dim : {"x", "y"}
        The dimension (and the coordinate's name).
    values : array_like, shape (n,)
        The points, strictly increasing and finite; stored as float64.
    units : str
        Units of the points.
    placement : {"nodes", "cell_centres"}
        Where the points lie (:data:`GRID_PLACEMENTS`), stored as :data:`GRID_PLACEMENT`.
    long_name : str, optional
        Default ``"<dim> coordinate"``.

    Returns
    -------
    xarray.DataArray
        Shape ``(n,)``, attributes ``units``, ``long_name``, ``axis`` (``"X"`` or ``"Y"``)
        and :data:`GRID_PLACEMENT`.

    Examples
    --------
    >>> spatial_coordinate("x", [0.25, 0.75], placement="cell_centres").attrs["grid_placement"]
    'cell_centres'
    """
    if dim not in (X, Y):
        raise ValueError(f"spatial dimensions are {Y!r} and {X!r}, got {dim!r}")
    _check_placement(placement)
    _check_units(units)
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"{dim} values must be one-dimensional, got shape {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{dim} values must be finite")
    if values.size > 1 and not np.all(np.diff(values) > 0):
        raise ValueError(f"{dim} values must be strictly increasing")
    attrs = {"units": units, "long_name": long_name or f"{dim} coordinate",
             "axis": dim.upper(), GRID_PLACEMENT: placement}
    return xr.DataArray(values, dims=(dim,), name=dim, attrs=attrs)


def _check_placement(placement: object) -> None:
    if placement not in GRID_PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(GRID_PLACEMENTS)}, got "
                         f"{placement!r}")


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
        Shape ``(time,)``, with attributes ``units`` and ``long_name="time"``.

    Notes
    -----
    No CF ``axis="T"`` and no ``standard_name="time"``: CF (section 4.4) reserves both for
    time coordinates whose units name a reference time (``"s since 2000-01-01"``), which a
    simulation's time is not. cf_xarray still finds the T axis by the ``long_name``.

    Examples
    --------
    >>> time_coordinate([0.0, 0.5, 1.0], units="s").attrs
    {'units': 's', 'long_name': 'time'}
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
                        attrs={"units": units, "long_name": "time"})


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
# Boundary conditions and vectors
# --------------------------------------------------------------------------------------------

_DIM_TOKEN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):$")

BoundaryKinds = str | tuple[str, str]


def _boundary_pair(dim: str, kinds: object) -> tuple[str, str]:
    pair = (kinds, kinds) if isinstance(kinds, str) else tuple(kinds)  # type: ignore[arg-type]
    if len(pair) != 2:
        raise ValueError(f"boundary conditions of {dim!r} must be one kind or a (lower, upper) "
                         f"pair, got {kinds!r}")
    for kind in pair:
        if kind not in BOUNDARY_KINDS:
            raise ValueError(f"unknown boundary kind {kind!r} for {dim!r}: use one of "
                             f"{', '.join(BOUNDARY_KINDS)}")
    if (pair[0] == "periodic") != (pair[1] == "periodic"):
        raise ValueError(f"boundary conditions of {dim!r} pair 'periodic' with "
                         f"{pair[1] if pair[0] == 'periodic' else pair[0]!r}: a periodic "
                         "dimension is periodic at both ends, write '<dim>: periodic'")
    return pair  # type: ignore[return-value]


def format_boundary_conditions(conditions: Mapping[str, BoundaryKinds]) -> str:
    """Write boundary conditions as the :data:`BOUNDARY_CONDITIONS` attribute's text.

    Parameters
    ----------
    conditions : mapping of str to str or (str, str)
        Dimension → one kind (both ends) or a (lower, upper) pair of :data:`BOUNDARY_KINDS`,
        in the order the text lists them (the variable's dimension order, ``y`` before ``x``).

    Returns
    -------
    str
        E.g. ``"y: periodic x: dirichlet neumann"``; a pair of equal kinds is written once.

    Raises
    ------
    ValueError
        For an unknown kind, a pair that is not two kinds, or ``periodic`` at one end only.

    Examples
    --------
    >>> format_boundary_conditions({"y": "periodic", "x": ("dirichlet", "neumann")})
    'y: periodic x: dirichlet neumann'
    """
    parts = []
    for dim, kinds in conditions.items():
        if not isinstance(dim, str) or not _DIM_TOKEN.match(f"{dim}:"):
            raise ValueError(f"boundary conditions need dimension names, got {dim!r}")
        lower, upper = _boundary_pair(dim, kinds)
        parts.append(f"{dim}: {lower}" if lower == upper else f"{dim}: {lower} {upper}")
    return " ".join(parts)


def parse_boundary_conditions(text: object) -> dict[str, tuple[str, str]]:
    """Read the :data:`BOUNDARY_CONDITIONS` attribute's text.

    Parameters
    ----------
    text : str
        ``"<dim>: <kind> [<kind>] <dim>: ..."`` (the grammar of CF ``cell_methods``): after
        each dimension one kind of :data:`BOUNDARY_KINDS` for both ends, or two for the
        (lower, upper) ends.

    Returns
    -------
    dict of str to (str, str)
        Dimension → (lower, upper), in the order of the text.

    Raises
    ------
    ValueError
        Naming what is wrong (an unknown kind, a kind before any dimension, a dimension with
        no kind or more than two, a dimension listed twice, ``periodic`` at one end only) and
        how the text should look.

    Examples
    --------
    >>> parse_boundary_conditions("y: reflective x: dirichlet neumann")
    {'y': ('reflective', 'reflective'), 'x': ('dirichlet', 'neumann')}
    """
    example = "write e.g. 'y: periodic x: dirichlet neumann'"
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"boundary conditions must be non-empty text, got {text!r}: {example}")
    result: dict[str, list[str]] = {}
    current = None
    for token in text.split():
        match = _DIM_TOKEN.match(token)
        if match:
            current = match.group(1)
            if current in result:
                raise ValueError(f"boundary conditions {text!r} list {current!r} twice: "
                                 f"{example}")
            result[current] = []
        elif current is None:
            raise ValueError(f"boundary conditions {text!r} start with {token!r} instead of a "
                             f"dimension followed by ':': {example}")
        else:
            result[current].append(token)
    out = {}
    for dim, kinds in result.items():
        if len(kinds) not in (1, 2):
            raise ValueError(f"boundary conditions {text!r} give {len(kinds)} kinds for "
                             f"{dim!r}; give one (both ends) or two (lower, upper): {example}")
        try:
            out[dim] = _boundary_pair(dim, kinds[0] if len(kinds) == 1 else tuple(kinds))
        except ValueError as exc:
            raise ValueError(f"boundary conditions {text!r}: {exc}; {example}") from None
    return out


def _spatial_dims_of(var: xr.DataArray) -> tuple[str, ...]:
    return tuple(dim for dim in var.dims if dim in (Y, X))


def _boundary_problems(name: str, var: xr.DataArray) -> list[str]:
    text = var.attrs.get(BOUNDARY_CONDITIONS)
    if text is None:
        return []
    fix = (f"set ds['{name}'].attrs['{BOUNDARY_CONDITIONS}'] to e.g. "
           f"{format_boundary_conditions({d: 'periodic' for d in _spatial_dims_of(var)})!r}"
           if _spatial_dims_of(var) else f"drop ds['{name}'].attrs['{BOUNDARY_CONDITIONS}']")
    try:
        conditions = parse_boundary_conditions(text)
    except ValueError as exc:
        return [f"data variable '{name}' has a bad '{BOUNDARY_CONDITIONS}' attribute ({exc}): "
                f"{fix}"]
    spatial = _spatial_dims_of(var)
    if set(conditions) != set(spatial):
        return [f"data variable '{name}' gives boundary conditions for "
                f"{sorted(conditions)} but its spatial dimensions are {list(spatial)}: {fix}"]
    return []


def boundary_conditions_of(ds: xr.Dataset) -> dict[str, dict[str, tuple[str, str]]]:
    """The boundary conditions of every data variable that records them.

    Parameters
    ----------
    ds : xarray.Dataset

    Returns
    -------
    dict
        Variable name → spatial dimension → (lower, upper) kinds of :data:`BOUNDARY_KINDS`,
        e.g. ``{"u": {"y": ("dirichlet", "dirichlet"), "x": ("dirichlet", "dirichlet")}}``.
        Variables without the :data:`BOUNDARY_CONDITIONS` attribute (parameters without a
        grid, files written before ssmpde recorded it) are left out.

    Raises
    ------
    SchemaError
        If an attribute breaks the grammar or does not name exactly the variable's spatial
        dimensions.
    """
    problems = [p for name, var in ds.data_vars.items() for p in _boundary_problems(name, var)]
    if problems:
        raise _schema_error(problems)
    return {name: parse_boundary_conditions(var.attrs[BOUNDARY_CONDITIONS])
            for name, var in ds.data_vars.items() if BOUNDARY_CONDITIONS in var.attrs}


def _vector_problems(ds: xr.Dataset) -> list[str]:
    problems = []
    groups: dict[str, dict[str, list[str]]] = {}
    for name, var in ds.data_vars.items():
        vector, component = var.attrs.get(VECTOR), var.attrs.get(VECTOR_COMPONENT)
        if vector is None and component is None:
            continue
        if not (isinstance(vector, str) and vector and isinstance(component, str)):
            problems.append(f"data variable '{name}' has '{VECTOR}' = {vector!r} and "
                            f"'{VECTOR_COMPONENT}' = {component!r}: a vector component needs "
                            f"both as text (e.g. 'velocity' and 'x'), or neither")
            continue
        spatial = _spatial_dims_of(var)
        if component not in spatial:
            problems.append(f"data variable '{name}' is the {component!r} component of "
                            f"{vector!r}, but its spatial dimensions are {list(spatial)}: set "
                            f"'{VECTOR_COMPONENT}' to one of them")
            continue
        groups.setdefault(vector, {}).setdefault(component, []).append(name)
    for vector, components in groups.items():
        members = [n for names in components.values() for n in names]
        spatial = {_spatial_dims_of(ds[n]) for n in members}
        if len(spatial) > 1:
            problems.append(f"the components {members} of vector {vector!r} lie on different "
                            f"spatial dimensions {sorted(spatial)}: all must share one grid")
            continue
        dims = next(iter(spatial))
        twice = {c: names for c, names in components.items() if len(names) > 1}
        missing = [d for d in dims if d not in components]
        if twice:
            problems.append(f"vector {vector!r} has more than one component along "
                            f"{sorted(twice)} ({twice}): give each dimension one variable")
        if missing:
            problems.append(f"vector {vector!r} has no component along {missing}: add the "
                            f"variables with '{VECTOR}' = {vector!r} and '{VECTOR_COMPONENT}' "
                            f"= {missing[0]!r}, or drop '{VECTOR}' from {members}")
    return problems


def vectors_of(ds: xr.Dataset) -> dict[str, dict[str, str]]:
    """The vector fields of ``ds``: their components, linked by :data:`VECTOR`.

    Parameters
    ----------
    ds : xarray.Dataset

    Returns
    -------
    dict
        Vector name → spatial dimension → variable name, dimensions in the order of the
        variables' dimensions, e.g. ``{"velocity": {"y": "velocity_y", "x": "velocity_x"}}``;
        empty when no variable is a component.

    Raises
    ------
    SchemaError
        If a vector does not have exactly one component along each of its spatial
        dimensions, a component is missing one of the two attributes, or names a dimension
        its variable does not have.
    """
    problems = _vector_problems(ds)
    if problems:
        raise _schema_error(problems)
    found: dict[str, dict[str, str]] = {}
    for name, var in ds.data_vars.items():
        if VECTOR in var.attrs:
            found.setdefault(var.attrs[VECTOR], {})[var.attrs[VECTOR_COMPONENT]] = name
    return {vector: {dim: components[dim] for dim in _spatial_dims_of(ds[next(iter(
        components.values()))])} for vector, components in found.items()}


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
                  history: str | None = None,
                  boundary_conditions: BoundaryKinds | Mapping[str, BoundaryKinds] | None = None,
                  vectors: Mapping[str, Mapping[str, str]] | None = None) -> xr.Dataset:
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
    boundary_conditions : str or (str, str) or mapping, optional
        The domain's boundary conditions: one kind of :data:`BOUNDARY_KINDS` for every side,
        or per spatial dimension one kind or a (lower, upper) pair (``{"y": "periodic",
        "x": ("outflow", "reflective")}``). Written as the :data:`BOUNDARY_CONDITIONS`
        attribute of every data variable with a spatial dimension that does not carry its
        own.
    vectors : mapping, optional
        Vector name → spatial dimension → variable name (``{"velocity": {"x": "velocity_x",
        "y": "velocity_y"}}``): each component gets the :data:`VECTOR` and
        :data:`VECTOR_COMPONENT` attributes (read back by :func:`vectors_of`).

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
    data_vars = _with_metadata(data_vars, boundary_conditions, vectors)
    ds = xr.Dataset(dict(data_vars), coords=dict(coords), attrs=attrs)
    return validate(ds)


def _with_metadata(data_vars: Mapping[str, xr.DataArray],
                   boundary_conditions: BoundaryKinds | Mapping[str, BoundaryKinds] | None,
                   vectors: Mapping[str, Mapping[str, str]] | None) -> dict[str, xr.DataArray]:
    """``data_vars`` with the boundary-condition and vector attributes (new objects)."""
    out = dict(data_vars)
    if boundary_conditions is not None:
        for name, var in data_vars.items():
            spatial = _spatial_dims_of(var)
            if not spatial or BOUNDARY_CONDITIONS in var.attrs:
                continue
            if isinstance(boundary_conditions, Mapping):
                missing = [dim for dim in spatial if dim not in boundary_conditions]
                if missing:
                    raise ValueError(f"boundary_conditions give no kind for {missing} of "
                                     f"variable {name!r}: add them")
                kinds = {dim: boundary_conditions[dim] for dim in spatial}
            else:
                kinds = {dim: boundary_conditions for dim in spatial}
            out[name] = out[name].assign_attrs(
                {BOUNDARY_CONDITIONS: format_boundary_conditions(kinds)})
    for vector, components in (vectors or {}).items():
        for dim, name in components.items():
            if name not in out:
                raise ValueError(f"vector {vector!r} names component {name!r}, which is not "
                                 f"among the data variables {sorted(out)}")
            out[name] = out[name].assign_attrs({VECTOR: vector, VECTOR_COMPONENT: dim})
    return out


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
    source = ds.encoding.get("source")
    config, problem = _decode_config(ds.attrs, f" of {source}" if source else "")
    if problem is not None:
        raise _schema_error([problem])
    return config


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
    return _decode_config(attrs)[1]


def _decode_config(attrs: Mapping, of: str = "") -> tuple[dict | None, str | None]:
    """(the ``ssmpde_config`` object, None) or (None, the problem with it); ``of`` names the
    file (``" of PATH"``) where it is known."""
    fix = "rebuild the dataset with build_dataset(..., config=...)"
    where = f"global attribute 'ssmpde_config'{of}"
    if "ssmpde_config" not in attrs:
        return None, f"{where} is missing: {fix}"
    text = attrs["ssmpde_config"]
    if not isinstance(text, str):
        return None, f"{where} must be a JSON string, got {type(text).__name__}: {fix}"
    try:
        return decode_json(where, text=text, fix=fix), None
    except JSONFileError as error:
        return None, str(error)


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
    # CF 7.1: a bounds variable takes its units from its coordinate (xarray drops equal ones).
    bounds_of = {coord.attrs["bounds"]: name for name, coord in ds.coords.items()
                 if isinstance(coord.attrs.get("bounds"), str)}
    for name, coord in ds.coords.items():
        if "bounds" in coord.attrs:
            problems.extend(_bounds_problems(ds, name, coord))
        if name in bounds_of:
            continue
        if not _has_text(coord.attrs, "units"):
            problems.append(f"coordinate '{name}' has no 'units' attribute: set "
                            f"ds['{name}'].attrs['units'] (use '1' for dimensionless)")
        placement = coord.attrs.get(GRID_PLACEMENT)
        if placement is not None and placement not in GRID_PLACEMENTS:
            problems.append(f"coordinate '{name}' has '{GRID_PLACEMENT}' = {placement!r}: set "
                            f"it to one of {', '.join(GRID_PLACEMENTS)}")
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
        problems.extend(_boundary_problems(name, var))
        problems.extend(_cell_methods_problems(name, var))
    problems.extend(_vector_problems(ds))
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


def _bounds_problems(ds: xr.Dataset, name: str, coord: xr.DataArray) -> list[str]:
    """A CF ``bounds`` attribute names an ``(n, 2)`` variable whose cells hold the points."""
    target = coord.attrs["bounds"]
    fix = (f"rebuild the coordinate with grid_coordinates(..., bounds=True), or drop "
           f"ds['{name}'].attrs['bounds']")
    if not isinstance(target, str) or target not in ds.variables:
        return [f"coordinate '{name}' names bounds {target!r}, which the dataset does not "
                f"have: {fix}"]
    edges = ds[target]
    if coord.ndim != 1 or edges.dims[:1] != coord.dims or edges.ndim != 2 \
            or edges.shape[1] != 2:
        return [f"bounds '{target}' of coordinate '{name}' have dims {edges.dims} and shape "
                f"{edges.shape}, expected ({coord.dims[0]!r}, {BOUNDS_DIM!r}) with 2 columns: "
                f"{fix}"]
    lower, upper, points = (np.asarray(edges[:, 0]), np.asarray(edges[:, 1]),
                            np.asarray(coord))
    if not (np.all(lower <= points) and np.all(points <= upper) and np.all(lower < upper)):
        return [f"bounds '{target}' do not contain the points of '{name}' (each cell must "
                f"satisfy lower <= {name} <= upper, lower < upper): {fix}"]
    if lower.size > 1 and not (np.all(np.diff(lower) > 0) and np.all(upper[:-1] <= lower[1:])):
        return [f"bounds '{target}' of '{name}' are not increasing cells that do not overlap: "
                f"{fix}"]
    return []


def _cell_methods_problems(name: str, var: xr.DataArray) -> list[str]:
    """CF ``cell_methods`` must name the variable's own dimensions (or ``area``)."""
    text = var.attrs.get("cell_methods")
    if text is None:
        return []
    fix = f"set ds['{name}'].attrs['cell_methods'] to e.g. 'y: x: mean' (CF section 7.3)"
    if not isinstance(text, str) or not text.strip():
        return [f"data variable '{name}' has an empty or non-text 'cell_methods': {fix}"]
    tokens = [t for t in re.sub(r"\([^)]*\)", " ", text).split()]
    names = [t[:-1] for t in tokens if t.endswith(":")]
    unknown = [n for n in names if n not in var.dims and n != "area"]
    if not names or tokens[-1].endswith(":") or unknown:
        what = f"names {unknown}, not dimensions of the variable" if unknown else \
            "is not '<dim>: [<dim>: ...] <method>'"
        return [f"data variable '{name}' has cell_methods {text!r}, which {what}: {fix}"]
    return []


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
    variable has only the standard dimensions. Where present (files written before they
    existed lack them, which is no error): :data:`BOUNDARY_CONDITIONS` follows its grammar
    and names exactly the variable's spatial dimensions; vector components (:data:`VECTOR`,
    :data:`VECTOR_COMPONENT`) give each vector one component per spatial dimension;
    :data:`GRID_PLACEMENT` is one of :data:`GRID_PLACEMENTS`; ``cell_methods`` names the
    variable's dimensions.
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
