"""Dimension names and the coordinates that go with them.

An ssmpde dataset has the dimensions ``sample``, ``time``, ``y``, ``x`` (1D problems have no
``y``; steady problems no ``time``), each with a coordinate variable that carries ``units``.
:func:`grid_coordinates`, :func:`spatial_coordinate`, :func:`time_coordinate` and
:func:`sample_coordinate` make those coordinates; every spatial coordinate records where its
points lie (:data:`GRID_PLACEMENT`: nodes or cell centres), and cell-centred ones may carry CF
cell bounds (:data:`BOUNDS_DIM`). :func:`canonical_dims` is the schema's order of a variable's
dimensions.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence

import numpy as np
import xarray as xr

__all__ = [
    "BOUNDS_DIM",
    "GRID_PLACEMENT",
    "GRID_PLACEMENTS",
    "SAMPLE",
    "SPATIAL_DIMS",
    "STANDARD_DIMS",
    "TIME",
    "X",
    "Y",
    "canonical_dims",
    "grid_coordinates",
    "sample_coordinate",
    "spatial_coordinate",
    "time_coordinate",
]

SAMPLE, TIME, Y, X = "sample", "time", "y", "x"
STANDARD_DIMS = (SAMPLE, TIME, Y, X)
SPATIAL_DIMS = {1: (X,), 2: (Y, X)}
#: Spatial-coordinate attribute: where the grid points lie, one of :data:`GRID_PLACEMENTS`.
GRID_PLACEMENT = "grid_placement"
#: ``nodes``: the points are grid nodes (periodic grids, or grids whose ends are the domain's
#: boundary); ``cell_centres``: the points are centres of cells, half a cell in from the
#: boundary (finite-volume data, whose values are cell averages: see ``cell_methods``).
GRID_PLACEMENTS = ("nodes", "cell_centres")
#: The second dimension of a CF cell-bounds coordinate (``x_bounds[x, bounds]``: lower, upper).
BOUNDS_DIM = "bounds"


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
        # Indices in increasing order (every reader's) are distinct without a sort.
        if not (np.diff(values) > 0).all() and np.unique(values).size != values.size:
            raise ValueError("sample indices must be distinct")
    return xr.DataArray(values, dims=(SAMPLE,), name=SAMPLE,
                        attrs={"units": "1", "long_name": "sample index"})


def _check_units(units: object) -> None:
    if not isinstance(units, str) or not units:
        raise ValueError(f"units must be a non-empty string (use '1' for dimensionless), "
                         f"got {units!r}")


def _spatial_dims_of(var: xr.DataArray) -> tuple[str, ...]:
    return tuple(dim for dim in var.dims if dim in (Y, X))
