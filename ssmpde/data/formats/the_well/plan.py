"""What an export writes where: The Well's fields, scalars, boundaries and the ssmpde metadata
of a dataset, decided before anything is written."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import xarray as xr

from ssmpde import __version__

from ...schema import ROLE, SAMPLE, TIME, X, Y, boundary_conditions_of, vectors_of
from .layout import (_GROUPS, _METADATA_VERSION, _ROOT_ATTRS, _TO_WELL_BC, _WELL_DIMS, METADATA,
                     _attrs_json, _json_value)


@dataclasses.dataclass(frozen=True)
class _Field:
    """One Well field: a t0 field (one variable) or a t1 field (one variable per component)."""

    name: str
    order: int
    variables: tuple[str, ...]
    well_dims: tuple[str, ...]   # the spatial axes the field varies along, in Well order
    sample_varying: bool
    time_varying: bool

    def file_dims(self) -> tuple[str, ...]:
        return ((SAMPLE,) if self.sample_varying else ()) + \
            ((TIME,) if self.time_varying else ()) + self.well_dims


@dataclasses.dataclass(frozen=True)
class _Scalar:
    """One Well scalar: a variable without spatial dimensions, or one element of one."""

    name: str
    variable: str
    element: tuple[int, ...]
    sample_varying: bool
    time_varying: bool


@dataclasses.dataclass
class _Plan:
    fields: list[_Field]
    scalars: list[_Scalar]
    constants: dict[str, Any]            # simulation_parameters: same for every sample
    boundaries: dict[str, dict]          # Well group name -> attrs and mask sides
    metadata: dict
    notes: list[str]
    cast: np.dtype | None = None         # the dtype floating data variables are written in

    def stored(self, dtype: np.dtype) -> np.dtype:
        """The dtype a data variable of ``dtype`` is written in."""
        return self.cast if self.cast is not None and dtype.kind == "f" else np.dtype(dtype)


def _float_dtype(dtype: Any) -> np.dtype | None:
    """``dtype`` of :func:`export`: None (keep) or float32 / float64."""
    if dtype is None:
        return None
    try:
        value = np.dtype(dtype)
    except TypeError:
        value = None
    if value not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be 'float32' or 'float64' (or None: keep the dataset's), "
                         f"got {dtype!r}")
    return value


def _check_name(name: str, what: str) -> None:
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"{what} {name!r} cannot be an HDF5 name (no '/', not empty): rename "
                         "it (ds.rename(...)) before exporting to The Well")


def _plan(ds: xr.Dataset, ndim: int, cast: np.dtype | None = None) -> _Plan:
    well_dims = _WELL_DIMS[ndim]
    spatial = set(well_dims)
    notes: list[str] = []
    vectors = vectors_of(ds)
    in_vector: dict[str, str] = {}
    fields: list[_Field] = []
    for vector, components in vectors.items():
        names = [components.get(dim) for dim in well_dims]
        problem = None
        if set(components) != spatial:
            problem = (f"has components along {sorted(components)}, not along every spatial "
                       f"dimension {list(well_dims)}")
        else:
            dims = {ds[name].dims for name in names}
            dtypes = {ds[name].dtype for name in names}
            if len(dims) > 1 or len(dtypes) > 1:
                problem = "has components with different dimensions or dtypes"
            elif not spatial & set(next(iter(dims))) or \
                    set(next(iter(dims))) - spatial - {SAMPLE, TIME}:
                problem = "is not a grid field [sample?, time?, *grid]"
        if problem is not None:
            notes.append(f"vector '{vector}' {problem}: its components are written as separate "
                         "t0 (scalar) fields")
            continue
        _check_name(vector, "vector")
        dims = ds[names[0]].dims
        fields.append(_Field(vector, 1, tuple(names), tuple(d for d in well_dims if d in dims),
                             SAMPLE in dims, TIME in dims))
        in_vector.update({name: vector for name in names})

    scalars: list[_Scalar] = []
    constants: dict[str, Any] = {}
    for name, var in ds.data_vars.items():
        if name in in_vector:
            continue
        _check_name(name, "data variable")
        dims = set(var.dims)
        extra = [d for d in var.dims if d not in spatial and d not in (SAMPLE, TIME)]
        if dims & spatial:
            if extra:
                raise ValueError(f"data variable '{name}' has dimensions {var.dims}: The Well "
                                 "holds grid fields [sample?, time?, *grid] and per-sample "
                                 f"numbers, not grids with the extra dimensions {extra}; drop "
                                 "it (ds.drop_vars) or split it into one variable per element")
            fields.append(_Field(name, 0, (name,), tuple(d for d in well_dims if d in dims),
                                 SAMPLE in dims, TIME in dims))
            continue
        shape = tuple(var.sizes[d] for d in extra)
        elements = list(np.ndindex(*shape))
        if not elements:
            raise ValueError(f"data variable '{name}' {var.dims} has no elements: The Well has "
                             "nothing to store for it; drop it (ds.drop_vars) before exporting")
        if extra:
            notes.append(f"'{name}' {var.dims} is written as {len(elements)} scalars "
                         f"{name}_<{'_'.join(extra)}> (The Well's scalars are single numbers "
                         "per sample or per time)")
        for element in elements:
            scalar = name if not extra else "_".join([name, *map(str, element)])
            scalars.append(_Scalar(scalar, name, element, SAMPLE in dims, TIME in dims))
            if SAMPLE not in dims and TIME not in dims and scalar not in _ROOT_ATTRS:
                constants[scalar] = var.values[element] if extra else var.values[()]

    taken: dict[str, str] = {}
    for kind, names in (("field", [f.name for f in fields]), ("scalar", [s.name for s in scalars])):
        for name in names:
            if name in taken:
                raise ValueError(f"The Well needs distinct names for its fields and scalars, but "
                                 f"'{name}' is both a {taken[name]} and a {kind}: rename one "
                                 "(ds.rename(...)) before exporting")
            taken[name] = kind
    for field in fields:
        roles = {ds[v].attrs.get(ROLE) for v in field.variables}
        if field.time_varying and roles & {"forcing", "diagnostic"}:
            notes.append(f"'{field.name}' (role {', '.join(sorted(r for r in roles if r))}) is a "
                         "time-varying field: The Well's loaders have no known forcing and put "
                         "it among the input and output fields")
    boundaries = _boundary_plan(ds, fields, notes)
    notes.append("units, long names, roles, grid placement and the dataset's attributes have no "
                 f"place in The Well's schema: they are kept in the extra '{METADATA}' dataset, "
                 "which ssmpde reads back and The Well's loaders ignore")
    plan = _Plan(fields, scalars, constants, boundaries, {}, notes, cast)
    plan.metadata = _metadata(ds, fields, scalars, plan)
    floating = sorted({str(var.dtype) for var in ds.data_vars.values() if var.dtype.kind == "f"})
    if floating:
        written = sorted({str(plan.stored(var.dtype)) for var in ds.data_vars.values()
                          if var.dtype.kind == "f"})
        how = "cast from " + ", ".join(floating) if written != floating else "the dataset's dtype"
        advice = ("" if written == ["float32"] else ": The Well's own files and models are "
                  "float32 (its models refuse float64 input); convert with --dtype float32 "
                  "(dtype='float32') for them")
        notes.append(f"values written as {', '.join(written)} ({how}){advice}")
    return plan


def _boundary_plan(ds: xr.Dataset, fields: list[_Field], notes: list[str]) -> dict[str, dict]:
    conditions = boundary_conditions_of(ds)
    # field -> dim -> (lower, upper) in The Well's words, from its (first) component
    per_field: dict[str, dict[str, tuple[str, str]]] = {}
    lossy: set[tuple[str, str, str]] = set()
    for field in fields:
        known = [conditions.get(v, {}) for v in field.variables]
        if any(k != known[0] for k in known[1:]):
            notes.append(f"the components of '{field.name}' have different boundary "
                         "conditions; The Well keeps one set per field: those of "
                         f"'{field.variables[0]}' are written")
        kinds = {}
        for dim, (lower, upper) in known[0].items():
            if dim not in field.well_dims:
                continue
            kinds[dim] = (_TO_WELL_BC[lower], _TO_WELL_BC[upper])
            for kind in (lower, upper):
                if kind in ("dirichlet", "neumann"):
                    lossy.add((dim, kind, _TO_WELL_BC[kind]))
        per_field[field.name] = kinds
    for dim, kind, well in sorted(lossy):
        notes.append(f"{dim}: {kind} is written as The Well's {well} (it knows WALL, OPEN and "
                     "PERIODIC only)")
    groups: dict[str, dict] = {}
    dims = sorted({d for f in fields for d in f.well_dims}, key=lambda d: (d != X, d))
    for dim in dims:
        along = [f.name for f in fields if dim in f.well_dims]
        for side in (0, 1):
            kinds = {name: per_field[name][dim][side] for name in along
                     if dim in per_field[name]}
            if not kinds:
                continue
            shared = set(kinds.values())
            if len(kinds) == len(along) and len(shared) == 1:
                keys = [(shared.pop(), ())]  # one geometric condition for every field
            else:
                keys = [(kind, (name,)) for name, kind in kinds.items()]
            for kind, owners in keys:
                group = "_".join([dim, kind.lower(), *owners])
                entry = groups.setdefault(group, {"bc_type": kind, "dim": dim,
                                                  "fields": list(owners), "sides": set()})
                entry["sides"].add(side)
    if not groups and fields:
        notes.append("no boundary conditions are recorded: The Well's loaders take every "
                     "boundary as OPEN")
    return groups


def _metadata(ds: xr.Dataset, fields: list[_Field], scalars: list[_Scalar],
              plan: _Plan) -> dict:
    stored: dict[str, dict] = {}
    for field in fields:
        for component, name in enumerate(field.variables):
            stored[name] = {"field": field.name, "group": _GROUPS[field.order],
                            "component": component if field.order else None}
    for scalar in scalars:
        var = ds[scalar.variable]
        entry = stored.setdefault(scalar.variable, {
            "scalars": [], "shape": [var.sizes[d] for d in var.dims if d not in (SAMPLE, TIME)]})
        entry["scalars"].append(scalar.name)
    variables = {}
    for name, var in ds.data_vars.items():
        variables[name] = {"dims": list(var.dims), "dtype": plan.stored(var.dtype).str,
                           "attrs": _attrs_json(var.attrs), **stored[name]}
    coords = {}
    for name, coord in ds.coords.items():
        entry = {"dims": list(coord.dims), "dtype": coord.dtype.str,
                 "attrs": _attrs_json(coord.attrs)}
        if name not in (SAMPLE, TIME, X, Y):
            entry["values"] = _json_value(coord.values)
        coords[name] = entry
    return {"version": _METADATA_VERSION, "ssmpde_version": __version__,
            "attrs": _attrs_json(ds.attrs), "coords": coords, "variables": variables}
