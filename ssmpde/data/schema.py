"""The ssmpde dataset schema: what an ssmpde dataset is, and :func:`build_dataset` to make one.

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

:func:`build_dataset` assembles such a dataset and :func:`roles_of` reads the roles of a valid
one. Each part of the schema has its own module, and every name of theirs is importable from
here too:

* :mod:`ssmpde.data.coordinates`: the dimension names, :func:`canonical_dims` and the
  coordinates (:func:`grid_coordinates`, :func:`spatial_coordinate`, :func:`time_coordinate`,
  :func:`sample_coordinate`);
* :mod:`ssmpde.data.roles`: what each variable is (:data:`ROLE`, :data:`ENCODED_BY`, vector
  components and :func:`vectors_of`);
* :mod:`ssmpde.data.boundary`: boundary conditions (:func:`format_boundary_conditions`,
  :func:`parse_boundary_conditions`, :func:`boundary_conditions_of`);
* :mod:`ssmpde.data.global_attrs`: the global attributes and the generator config
  (:func:`config_of`);
* :mod:`ssmpde.data.validation`: :func:`validate`, which checks all of them and lists every
  problem with its fix;
* :mod:`ssmpde.data.errors`: :class:`SchemaError` and :class:`DatasetFileError`.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

import xarray as xr

from ssmpde import __version__

from .boundary import (BOUNDARY_CONDITIONS, BOUNDARY_KINDS, BoundaryKinds,
                       boundary_conditions_of, format_boundary_conditions,
                       parse_boundary_conditions)
from .coordinates import (BOUNDS_DIM, GRID_PLACEMENT, GRID_PLACEMENTS, SAMPLE, SPATIAL_DIMS,
                          STANDARD_DIMS, TIME, X, Y, _spatial_dims_of, canonical_dims,
                          grid_coordinates, sample_coordinate, spatial_coordinate,
                          time_coordinate)
from .errors import DatasetFileError, SchemaError, _schema_error
from .global_attrs import CONVENTIONS, REQUIRED_GLOBAL_ATTRS, _config_json, config_of
from .roles import ENCODED_BY, ROLE, ROLES, VECTOR, VECTOR_COMPONENT, vectors_of
from .validation import _raise_if_invalid, validate

# The names of the parts above stay importable from here (``from ssmpde.data.schema import
# SAMPLE``); each is documented once, in the module that defines it.
__all__ = ["build_dataset", "roles_of"]


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
