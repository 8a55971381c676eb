"""Checking a dataset against the schema: :func:`validate` lists every problem with its fix.

The rules of each part of the schema (coordinates, roles, boundary conditions, vectors, global
attributes) are checked here together, so that one :class:`~ssmpde.data.errors.SchemaError`
names every problem of a dataset at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import xarray as xr

from .boundary import _boundary_problems
from .coordinates import (BOUNDS_DIM, GRID_PLACEMENT, GRID_PLACEMENTS, SAMPLE, STANDARD_DIMS,
                          TIME, X, Y, canonical_dims)
from .errors import _schema_error
from .global_attrs import _global_problems
from .roles import ENCODED_BY, ROLE, ROLES, _vector_problems

__all__ = ["validate"]


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
    problems.extend(_global_problems(ds))
    if check_finite:
        for name, var in ds.data_vars.items():
            if var.dtype.kind in "fc":
                bad = _count_nonfinite(var)
                if bad:
                    problems.append(f"data variable '{name}' has {bad} non-finite values "
                                    "(NaN or inf): regenerate it or drop the bad samples")
    return problems


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
