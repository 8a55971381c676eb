"""Boundary conditions of the variables on the grid, recorded as an attribute.

Every variable the solvers write on the grid records its boundary conditions per spatial
dimension in :data:`BOUNDARY_CONDITIONS`, in the grammar of CF ``cell_methods``
(``"y: periodic x: dirichlet neumann"``): :func:`format_boundary_conditions` writes that text,
:func:`parse_boundary_conditions` reads it, and :func:`boundary_conditions_of` reads and checks
those of a whole dataset.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import xarray as xr

from .coordinates import _spatial_dims_of
from .errors import _schema_error

__all__ = [
    "BOUNDARY_CONDITIONS",
    "BOUNDARY_KINDS",
    "boundary_conditions_of",
    "format_boundary_conditions",
    "parse_boundary_conditions",
]

#: Variable attribute: the boundary conditions of a variable on the grid, per spatial
#: dimension, written like CF ``cell_methods``: ``"y: periodic x: periodic"``. One kind after
#: a dimension holds at both ends; two kinds are the (lower, upper) ends, e.g.
#: ``"y: reflective x: dirichlet neumann"``.
BOUNDARY_CONDITIONS = "boundary_conditions"
#: The boundary kinds: ``periodic`` (both ends, always), ``dirichlet`` (value given),
#: ``neumann`` (normal derivative given), ``outflow`` (transmissive, zero-gradient ghost
#: cells), ``reflective`` (a wall: the normal velocity mirrored).
BOUNDARY_KINDS = ("periodic", "dirichlet", "neumann", "outflow", "reflective")

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
