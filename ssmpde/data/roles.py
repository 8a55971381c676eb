"""What each data variable is to the toolkit, as its solver declared it.

:data:`ROLE` says what a variable is (one of :data:`ROLES`: ``state``, ``parameter``,
``forcing``, ``diagnostic``); :data:`ENCODED_BY` names the grid variable that carries a
non-scalar parameter to a model; :data:`VECTOR` and :data:`VECTOR_COMPONENT` link the
components of a vector field, read back by :func:`vectors_of`. Training tasks, conditioning
and coupling read these attributes; nothing guesses from dimensions. The roles of a whole
dataset are read by :func:`ssmpde.data.schema.roles_of`, which validates the dataset first.
"""

from __future__ import annotations

import xarray as xr

from .coordinates import _spatial_dims_of
from .errors import _schema_error

__all__ = [
    "ENCODED_BY",
    "ROLE",
    "ROLES",
    "VECTOR",
    "VECTOR_COMPONENT",
    "vectors_of",
]

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
#: Variable attribute: the name of the vector field a component belongs to (``"velocity"``).
VECTOR = "vector"
#: Variable attribute: the spatial dimension a vector component points along (``"x"``).
VECTOR_COMPONENT = "vector_component"


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
