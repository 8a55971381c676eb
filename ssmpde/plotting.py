"""Figures that say more than numbers: dataset fields and hybrid rollouts (matplotlib, to file).

:func:`plot_snapshots` draws any field of an ssmpde dataset (1D or 2D, steady or
time-dependent); :func:`plot_hybrid` compares a hybrid solver/surrogate rollout with the
solver-only reference.  Both use the real domain extent from the coordinates, give every panel
(or row of panels sharing a scale) its own colour bar labelled ``long_name [units]``, and use a
diverging map with symmetric limits only for fields that take both signs in what is shown.

Figures are built on :class:`matplotlib.figure.Figure` directly (no pyplot state, no backend
switch) and written through a temporary file renamed into place.
"""

from __future__ import annotations

import math
import os
import pathlib
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import xarray as xr

from .data import (ROLE, SAMPLE, SPATIAL_DIMS, TIME, X, Y, SchemaError, atomic_path, config_of,
                   figure_metadata)

__all__ = ["plot_hybrid", "plot_pareto", "plot_snapshots", "schlieren"]

DIVERGING = "RdBu_r"
SEQUENTIAL = "viridis"
#: Attribute of a derived variable naming its sequential colour map (schlieren: gray_r).
_CMAP = "ssmpde_cmap"
ERROR_MAP = "magma"
# Values smaller than this fraction of the largest magnitude shown count as zero when deciding
# whether a field takes both signs (round-off around zero does not make a field signed).
SIGN_TOLERANCE = 1e-6
_PANEL = 2.3  # inches per snapshot panel
_LABEL_WIDTH = 34  # characters per line of a colour-bar label
#: Relative errors below this are float64 round-off (eps 2.2e-16 grown over a rollout's steps).
ROUND_OFF = 1e-12
#: Decades below the largest error that a log error axis shows; smaller errors are drawn at
#: the axis' labelled floor, as zeros are.
ERROR_DECADES = 6


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------

class _Scale(NamedTuple):
    """Colour map and limits for a set of values."""

    cmap: str
    vmin: float
    vmax: float


def _label(name: str, units: str | None) -> str:
    """``"name [units]"``; ``units == "1"`` gives ``"name (non-dimensional)"``."""
    if units == "1":
        return f"{name} (non-dimensional)"
    return f"{name} [{units}]" if units else name


def _units(obj: object, default: str | None = "1") -> str | None:
    """The ``units`` attribute of a DataArray (or anything with ``attrs``), else ``default``."""
    return getattr(obj, "attrs", {}).get("units", default)


def _edges(nodes: np.ndarray) -> np.ndarray:
    """Cell edges around nodes (pixel centres at the nodes): midpoints between neighbours, and
    half a spacing beyond the first and last node.  Works for periodic grids (right boundary
    excluded), endpoint grids and non-uniform or decreasing coordinates."""
    nodes = np.asarray(nodes, dtype=np.float64)
    if nodes.size == 1:
        return nodes + np.array([-0.5, 0.5])
    mid = 0.5 * (nodes[1:] + nodes[:-1])
    return np.concatenate([[nodes[0] - (mid[0] - nodes[0])], mid,
                           [nodes[-1] + (nodes[-1] - mid[-1])]])


def _is_uniform(nodes: np.ndarray) -> bool:
    steps = np.diff(np.asarray(nodes, dtype=np.float64))
    return steps.size < 2 or bool(np.allclose(steps, steps[0], rtol=1e-6, atol=0.0))


def _scale(*arrays: np.ndarray, sequential: str = SEQUENTIAL) -> _Scale:
    """Diverging map with symmetric limits if the values take both signs, otherwise
    ``sequential`` over their actual range (NaN and inf ignored)."""
    values = np.concatenate([np.ravel(np.asarray(a, dtype=np.float64)) for a in arrays])
    values = values[np.isfinite(values)]
    if values.size == 0:
        return _Scale(sequential, 0.0, 1.0)
    lo, hi = float(values.min()), float(values.max())
    tolerance = SIGN_TOLERANCE * max(-lo, hi)
    if lo < -tolerance and hi > tolerance:
        limit = max(-lo, hi)
        return _Scale(DIVERGING, -limit, limit)
    if lo == hi:  # a constant field: give the colour bar a range around it
        pad = 0.5 * abs(lo) or 0.5
        lo, hi = (0.0, 1.0) if lo == 0 else (lo - pad, hi + pad)
    return _Scale(sequential, lo, hi)


def _draw(ax, values: np.ndarray, x: np.ndarray, y: np.ndarray, scale: _Scale, *,
          aspect: str = "equal"):
    """Draw ``values[len(y), len(x)]`` with pixel centres at the nodes ``x``, ``y``: an image
    for uniform coordinates, a mesh otherwise.  Returns the mappable for a colour bar."""
    ex, ey = _edges(x), _edges(y)
    style = {"cmap": scale.cmap, "vmin": scale.vmin, "vmax": scale.vmax}
    if _is_uniform(x) and _is_uniform(y):
        return ax.imshow(values, origin="lower", extent=(ex[0], ex[-1], ey[0], ey[-1]),
                         aspect=aspect, interpolation="nearest", **style)
    mesh = ax.pcolormesh(ex, ey, values, shading="flat", **style)
    ax.set_aspect(aspect)
    return mesh


def _wrap(text: str) -> str:
    return textwrap.fill(text, _LABEL_WIDTH, break_long_words=False, break_on_hyphens=False)


def _colorbar(fig, mappable, axes, label: str) -> None:
    bar = fig.colorbar(mappable, ax=axes, shrink=0.9)
    bar.set_label(_wrap(label), fontsize=8)
    bar.ax.tick_params(labelsize=7)


def _label_axes(ax, xlabel: str | None = None, ylabel: str | None = None) -> None:
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=8)
    if ylabel:
        ax.set_ylabel(_wrap(ylabel), fontsize=8)
    ax.locator_params(nbins=5)  # small panels: a few readable ticks
    ax.tick_params(labelsize=7)


def _time_text(t: float, units: str | None) -> str:
    return f"t = {t:g}" + (f" {units}" if units and units != "1" else "")


def _new_figure(**kwargs):
    from matplotlib.figure import Figure

    return Figure(layout="constrained", **kwargs)


def _save(fig, path: str | os.PathLike, dpi: int) -> pathlib.Path:
    """Write ``fig`` through a hidden temporary beside ``path``, renamed into place once
    complete; on any error (interrupt, ...) the temporary is removed and an existing ``path``
    is left as it was.  The format follows the suffix (PNG without one): one of
    :data:`~ssmpde.data.FIGURE_FORMATS`, whose files carry ssmpde's mark
    (:func:`~ssmpde.data.figure_metadata`) so that ``--overwrite`` may replace them later."""
    target = pathlib.Path(os.fspath(path)).expanduser()
    fmt = target.suffix[1:].lower() or "png"
    metadata = figure_metadata(fmt)  # an unknown format fails before anything is written
    with atomic_path(target) as tmp:
        fig.savefig(tmp, dpi=dpi, format=fmt, metadata=metadata)
    return target


# A count of one before a plural noun ("1 samples"), not "11 samples" or "0.1 steps".
_ONE_PLURAL = re.compile(r"(?<![\d.,])1 (sample|step|frame|run|epoch|iteration|second)s\b")


def _title(text: str, *, width_inches: float, fontsize: float = 9.0) -> str:
    """``text`` on at most two lines of a ``width_inches`` wide figure (an ellipsis ends what
    does not fit), with "1 samples" read as "1 sample": callers format counts with
    ``f"{n} samples"``."""
    text = _ONE_PLURAL.sub(r"1 \1", " ".join(text.split()))
    # DejaVu Sans averages about 0.55 em per character; keep a margin for wide ones.
    per_line = max(20, int(width_inches * 72 / (0.6 * fontsize)))
    return "\n".join(textwrap.wrap(text, per_line, break_on_hyphens=False, max_lines=2,
                                   placeholder=" …"))


def _error_floor(values: np.ndarray) -> float:
    """The floor of a log error axis: a decade below the smallest meaningful error.

    Meaningful errors are at least :data:`ROUND_OFF` and at least ``10**-ERROR_DECADES`` of the
    largest error; the rest (zeros, round-off) are drawn at the floor, so that an exact
    schedule does not stretch the axis to 1e-16 and squash everything else into its top."""
    values = np.asarray(values, dtype=np.float64).ravel()
    values = values[np.isfinite(values) & (values > 0)]
    if values.size == 0:
        return ROUND_OFF
    negligible = max(ROUND_OFF, float(values.max()) * 10.0 ** -ERROR_DECADES)
    smallest = float(values[values >= negligible].min())
    return 10.0 ** (math.floor(math.log10(smallest)) - 1)


def _floor_texts(values: np.ndarray, floor: float) -> tuple[str, str] | None:
    """(tick label, band text) for what a log error axis draws at ``floor``; None if no
    value lies below it."""
    values = np.asarray(values, dtype=np.float64).ravel()
    below = values[np.isfinite(values) & (values < floor)]
    if below.size == 0:
        return None
    positive = below[below > 0]
    if positive.size == 0:
        return "0", "error 0 (exact)"
    bound = f"{floor:.0e}".replace("e-0", "e-")
    zero = "0 or " if positive.size < below.size else ""
    noise = " (round-off)" if positive.max() < ROUND_OFF else ""
    return f"<{bound}", f"error {zero}< {bound}{noise}"


def _log_error_axis(ax, floor: float, top: float, values: np.ndarray):
    """Log y axis from ``floor`` to just above ``top``.  If some ``values`` are below ``floor``
    (zeros, round-off: drawn at ``floor`` by the caller), a shaded band under a dashed line at
    ``floor`` holds them, with a tick label and a text that say what they are ("0", "error 0
    (exact)").  Returns the band's text artist, or None without one."""
    from matplotlib.ticker import FixedLocator, FuncFormatter
    from matplotlib.transforms import blended_transform_factory

    texts = _floor_texts(values, floor)
    top = max(top, 10 * floor)
    bottom = floor / 10 ** 0.5 if texts else floor
    upper = top * 10 ** 0.3
    ax.set_yscale("log")
    ax.set_ylim(bottom, upper)
    first, last = math.floor(math.log10(floor)), math.ceil(math.log10(upper))
    stride = max(1, math.ceil((last - first + 1) / 8))  # at most about 8 labelled decades
    decades = [10.0 ** k for k in range(last, first - 1, -stride) if floor <= 10.0 ** k]
    if texts:  # no decade label crowding the floor's own
        decades = [floor, *(d for d in decades if d > floor * 10 ** 0.5)]
    minor = [m * 10.0 ** k for k in range(first, last) for m in range(2, 10)
             if floor < m * 10.0 ** k < upper] if stride == 1 else []
    ax.yaxis.set_major_locator(FixedLocator(decades))
    ax.yaxis.set_minor_locator(FixedLocator(minor))  # none in the band: nothing is there
    if not texts:
        return None
    tick_text, band_text = texts
    ax.yaxis.set_major_formatter(FuncFormatter(
        lambda v, _: tick_text if math.isclose(v, floor, rel_tol=1e-9)
        else f"$10^{{{round(math.log10(v))}}}$"))
    ax.axhspan(bottom, floor, color="0.92", zorder=0, lw=0)
    ax.axhline(floor, color="0.4", linestyle="--", linewidth=0.9, zorder=1)
    return ax.text(0.005, floor, " " + band_text, fontsize=7, color="0.3", ha="left",
                   va="top", transform=blended_transform_factory(ax.transAxes, ax.transData),
                   zorder=2)


# --------------------------------------------------------------------------------------------
# Dataset snapshots
# --------------------------------------------------------------------------------------------

_PLOTTABLE_DIMS = {SAMPLE, TIME, Y, X}


def _spatial_dims(var: xr.DataArray) -> tuple[str, ...]:
    if X not in var.dims:
        return ()
    return (Y, X) if Y in var.dims else (X,)


def _select_variables(ds: xr.Dataset, variables: str | Sequence[str] | None) -> list[str]:
    """Names to plot; ValueError for unknown names, non-spatial variables, empty selections."""
    available = list(ds.data_vars)
    plottable = [name for name in available if _spatial_dims(ds[name])
                 and set(ds[name].dims) <= _PLOTTABLE_DIMS]
    if variables is None:
        if any(ROLE in ds[name].attrs for name in available):
            names = [n for n in plottable if ds[n].attrs.get(ROLE) == "state"]
            if not names:
                raise ValueError("nothing to plot: no data variable has role 'state' and "
                                 f"spatial dims ({X!r}); pass variables=... from "
                                 f"{plottable}")
            return names
        if not plottable:
            raise ValueError(f"nothing to plot: no data variable has spatial dims; the "
                             f"dataset has {available}")
        return plottable
    names = [variables] if isinstance(variables, str) else list(variables)
    if not names:
        raise ValueError(f"variables is empty: name at least one of {plottable}")
    for name in names:
        if name not in ds.data_vars:
            raise ValueError(f"dataset has no variable {name!r}; it has {available}")
        var = ds[name]
        if not _spatial_dims(var):
            raise ValueError(f"{name!r} has no spatial dims ({X!r}, optionally {Y!r}),"
                             f" it has {var.dims}; plottable variables: {plottable}")
        extra = [d for d in var.dims if d not in _PLOTTABLE_DIMS]
        if extra:
            raise ValueError(f"{name!r} has dims {extra} beyond {sorted(_PLOTTABLE_DIMS)}: "
                             f"select one entry first, e.g. ds.isel({extra[0]}=0)")
    return names


def _coord(da: xr.DataArray, dim: str) -> tuple[np.ndarray, str]:
    """Node positions along ``dim`` and their axis label (index positions if no coordinate)."""
    if dim in da.coords:
        return np.asarray(da[dim].values, dtype=np.float64), _label(dim, _units(da[dim], None))
    return np.arange(da.sizes[dim], dtype=np.float64), f"{dim} (index)"


def _field_label(da: xr.DataArray, name: str) -> str:
    return _label(da.attrs.get("long_name", name), _units(da, None))


def _draw_panel(fig, ax, da: xr.DataArray, label: str, *, xlabel: bool, ylabel: bool) -> None:
    """One sample of one field, steady or 1D time-dependent: an image (2D), a space-time
    diagram (1D + time) or a line (1D steady), with its own colour bar."""
    x, x_label = _coord(da, X)
    if Y in da.dims or TIME in da.dims:
        vertical = Y if Y in da.dims else TIME
        y, y_label = _coord(da, vertical)
        values = da.transpose(vertical, X).values
        scale = _scale(values, sequential=da.attrs.get(_CMAP, SEQUENTIAL))
        image = _draw(ax, values, x, y, scale,
                      aspect="equal" if vertical == Y else "auto")
        _colorbar(fig, image, ax, label)
        _label_axes(ax, x_label if xlabel else None, y_label if ylabel else None)
        return
    ax.plot(x, da.values, linewidth=1.2)
    if x.size > 1:
        ax.set_xlim(x.min(), x.max())
    ax.grid(True, alpha=0.3)
    _label_axes(ax, x_label if xlabel else None, label)


def _domain_ratio(ds: xr.Dataset, names: Sequence[str]) -> float:
    """Height over width of the first 2D field's domain (1 without one), kept in [0.4, 1.6]
    so that panels of non-square domains are not padded with blank space."""
    for name in names:
        if Y in ds[name].dims:
            (x, _), (y, _) = _coord(ds[name], X), _coord(ds[name], Y)
            ex, ey = _edges(x), _edges(y)
            return float(np.clip(abs(ey[-1] - ey[0]) / abs(ex[-1] - ex[0]), 0.4, 1.6))
    return 1.0


def _suptitle(ds: xr.Dataset) -> str:
    title = ds.attrs.get("title", "")
    try:
        config = config_of(ds).get("solver", {})
    except SchemaError:
        config = {}
    details = ", ".join(f"{k} = {config[k]}" for k in ("viscosity", "forcing")
                        if isinstance(config, Mapping) and k in config)
    return "\n".join(part for part in (title, details) if part)


def _snapshot_figure(ds: xr.Dataset, *, variables: str | Sequence[str] | None = None,
                     samples: Sequence[int] = (0, 1), num_times: int = 5):
    """Build (but do not save) the :func:`plot_snapshots` figure; returns the Figure."""
    names = _select_variables(ds, variables)
    size = ds.sizes.get(SAMPLE, 1)
    samples = [int(s) for s in samples if -size <= s < size]
    if not samples:
        raise ValueError(f"no sample to plot: samples must index the {size} samples")
    movies = [n for n in names if TIME in ds[n].dims and Y in ds[n].dims]
    if movies:
        if num_times < 1:
            raise ValueError(f"num_times must be at least 1, got {num_times}")
        count = ds.sizes[TIME]
        times = np.unique(np.linspace(0, count - 1, min(num_times, count)).round().astype(int))
        rows, cols = [(s, n) for s in samples for n in names], len(times)
    else:
        times = np.array([], dtype=int)
        rows, cols = [(s, None) for s in samples], len(names)
    row_height = (_PANEL - 0.5) * _domain_ratio(ds, names) + 0.5  # image + title and labels
    fig = _new_figure(figsize=(_PANEL * cols + 1.6, row_height * len(rows) + 0.9))
    axes = fig.subplots(len(rows), cols, squeeze=False)
    for r, (sample, row_name) in enumerate(rows):
        where = (f"sample {int(ds[SAMPLE][sample])}" if SAMPLE in ds.coords
                 else f"sample {sample}")
        last_row = r == len(rows) - 1
        for c, name in enumerate([row_name] if row_name else names):
            field = ds[name]
            da = field.isel({SAMPLE: sample}) if SAMPLE in field.dims else field
            label = _field_label(field, name)
            if name in movies:
                _draw_movie_row(fig, axes[r], da, times, label, where, xlabel=last_row)
                continue
            # A steady or 1D field among 2D time rows takes the first panel of its row alone.
            _draw_panel(fig, axes[r, c], da, label, xlabel=last_row or bool(row_name),
                        ylabel=True)
            axes[r, c].set_title(f"{name}, {where}", fontsize=9)
            for ax in axes[r, 1:] if row_name else ():
                ax.set_visible(False)
    fig.suptitle(_suptitle(ds), fontsize=10)
    return fig


def _draw_movie_row(fig, axes, da: xr.DataArray, times: np.ndarray, label: str, where: str,
                    *, xlabel: bool) -> None:
    """One sample of one 2D time-dependent field at ``times``, sharing one colour bar."""
    frames = da.isel({TIME: list(times)}).transpose(TIME, Y, X)
    x, x_label = _coord(da, X)
    y, y_label = _coord(da, Y)
    scale = _scale(frames.values, sequential=da.attrs.get(_CMAP, SEQUENTIAL))
    time_units = _units(da[TIME], None) if TIME in da.coords else None
    for col, ax in enumerate(axes):
        image = _draw(ax, frames.values[col], x, y, scale)
        t = float(frames[TIME][col]) if TIME in frames.coords else float(times[col])
        ax.set_title(f"{where}, {_time_text(t, time_units)}", fontsize=9)
        _label_axes(ax, x_label if xlabel else None, y_label if col == 0 else None)
    _colorbar(fig, image, list(axes), label)


def schlieren(ds: xr.Dataset, variable: str = "density") -> xr.DataArray:
    """Numerical schlieren ``|∇q|`` of a 2D field ``q`` (default the density), per frame.

    Second-order central differences in the interior, one-sided at the edges
    (``numpy.gradient`` with the grid spacing from the coordinates). Shocks and contact
    surfaces show as thin dark lines (drawn in ``gray_r``), as in a schlieren photograph.

    Returns
    -------
    xarray.DataArray with ``q``'s dims, named ``schlieren_<variable>``, with units.
    """
    if variable not in ds.data_vars:
        raise ValueError(f"schlieren: the dataset has no variable {variable!r}; it has "
                         f"{sorted(ds.data_vars)}")
    q = ds[variable]
    if Y not in q.dims or X not in q.dims:
        raise ValueError(f"schlieren needs a 2D field ({Y!r}, {X!r}); {variable!r} "
                         f"has dims {q.dims}")
    spacing = []
    for dim in (Y, X):
        nodes, _ = _coord(q, dim)
        spacing.append(float(nodes[1] - nodes[0]) if nodes.size > 1 else 1.0)
    axes = (q.dims.index(Y), q.dims.index(X))
    gy, gx = np.gradient(np.asarray(q.values, dtype=np.float64), *spacing, axis=axes)
    x_units = _units(q[X], None) if X in q.coords else None
    units = _units(q, "1") if x_units in (None, "1") else f"{_units(q, '1')} / {x_units}"
    return xr.DataArray(np.hypot(gx, gy), coords=q.coords, dims=q.dims,
                        name=f"schlieren_{variable}",
                        attrs={"long_name": f"|∇ {q.attrs.get('long_name', variable)}|",
                               "units": units, _CMAP: "gray_r"})


def plot_snapshots(ds: xr.Dataset, path: str | os.PathLike, *,
                   variables: str | Sequence[str] | None = None,
                   samples: Sequence[int] = (0, 1), num_times: int = 5,
                   schlieren_of: str | None = None, dpi: int = 110) -> pathlib.Path:
    """Write a figure of dataset fields, for any field and any (1D or 2D) grid.

    Layouts:

    * any 2D time-dependent field selected: one row per (sample, field), one column per time
      (``num_times`` evenly spaced); each row has one colour scale and one colour bar.  Steady
      or 1D fields in such a figure get the first panel of their row.
    * otherwise one row per sample and one column per field, each panel with its own colour
      bar: 2D steady fields as images, 1D time-dependent fields as space-time diagrams (``x``
      horizontal, time vertical), 1D steady fields as line plots.

    Colour bars are labelled ``long_name [units]``.  A field that takes both signs in what is
    shown gets a diverging map (``RdBu_r``) with symmetric limits, otherwise ``viridis`` over
    its actual range.  Images span the real domain: pixel centres at the coordinate nodes, so
    the extent runs from ``x0 - dx/2`` to ``x_last + dx/2``.

    Parameters
    ----------
    ds : xarray.Dataset
        An ssmpde dataset (see :mod:`ssmpde.data`).
    path : path
        Output image (PNG, PDF or SVG by suffix); written atomically.
    variables : str or sequence of str, optional
        Variables to draw.  Default: every variable with ``role == "state"`` and spatial dims,
        or every variable with spatial dims if the dataset has no ``role`` attributes.
    samples : sequence of int
        Positions along ``sample`` (those out of range are skipped).
    num_times : int
        Columns for time-dependent 2D fields.
    schlieren_of : str, optional
        Also draw the numerical schlieren ``|∇q|`` of this 2D field (:func:`schlieren`), e.g.
        ``"density"`` for compressible flow.

    Raises
    ------
    ValueError
        For an unknown variable (the message lists the available ones), a variable without
        spatial dims, or an empty selection of variables or samples.
    """
    if schlieren_of is not None:
        names = _select_variables(ds, variables)
        derived = schlieren(ds, schlieren_of)
        ds = ds.assign({derived.name: derived})
        variables = [*names, derived.name]
    return _save(_snapshot_figure(ds, variables=variables, samples=samples,
                                  num_times=num_times), path, dpi)


# --------------------------------------------------------------------------------------------
# Hybrid rollouts
# --------------------------------------------------------------------------------------------

def _per_field(value: str | Mapping[str, str] | Sequence[str] | None, fields: Sequence[str],
               default: Sequence[str], what: str) -> list[str]:
    if value is None:
        return list(default)
    if isinstance(value, str):
        return [value] * len(fields)
    if isinstance(value, Mapping):
        return [value.get(f, d) for f, d in zip(fields, default)]
    value = list(value)
    if len(value) != len(fields):
        raise ValueError(f"{what} has {len(value)} entries for {len(fields)} fields {fields}")
    return value


def _grid_coords(coords: Mapping[str, np.ndarray] | None,
                 shape: Sequence[int]) -> list[tuple[np.ndarray, str]]:
    """Node positions and axis labels for the grid dims (``(x,)`` or ``(y, x)``)."""
    dims = SPATIAL_DIMS[len(shape)]
    coords = dict(coords or {})
    unknown = sorted(set(coords) - set(dims))
    if unknown:
        raise ValueError(f"coords has {unknown}; a {len(shape)}D grid has dims {list(dims)}")
    result = []
    for dim, n in zip(dims, shape):
        values = coords.get(dim)
        if values is None:
            result.append((np.arange(n, dtype=np.float64) / n, _label(dim, "1")))
            continue
        nodes = np.asarray(values, dtype=np.float64)
        if nodes.shape != (n,):
            raise ValueError(f"coords[{dim!r}] has shape {nodes.shape}, the grid has {n} nodes")
        result.append((nodes, _label(dim, _units(values))))
    return result


def _hybrid_figure(*, reference: np.ndarray, hybrid: np.ndarray, surrogate: np.ndarray,
                   times: Sequence[float], errors: Mapping[str, np.ndarray], schedule: str,
                   fields: Sequence[str] = ("vorticity",),
                   units: str | Mapping[str, str] | Sequence[str] | None = None,
                   long_names: str | Mapping[str, str] | Sequence[str] | None = None,
                   coords: Mapping[str, np.ndarray] | None = None, sample: int = 0,
                   sample_label: int | None = None):
    """Build (but do not save) the :func:`plot_hybrid` figure; returns the Figure."""
    runs = [np.asarray(a) for a in (reference, hybrid, surrogate)]
    shape = runs[0].shape
    if len(shape) not in (4, 5) or any(a.shape != shape for a in runs):
        raise ValueError("reference, hybrid and surrogate must share a shape [batch, time, "
                         f"field, *grid] with a 1D or 2D grid, got {[a.shape for a in runs]}")
    fields = [fields] if isinstance(fields, str) else list(fields)
    if not fields or len(fields) > shape[2]:
        raise ValueError(f"fields {fields} must name 1 to {shape[2]} entries of the field axis")
    if not -shape[0] <= sample < shape[0]:
        raise ValueError(f"sample {sample} is out of range for a batch of {shape[0]}")
    time_values = np.asarray(times, dtype=np.float64)
    if time_values.shape != (shape[1],):
        raise ValueError(f"times has shape {time_values.shape}, the runs have {shape[1]} frames")
    for name, curve in errors.items():
        if np.shape(curve) != (shape[1],):
            raise ValueError(f"errors[{name!r}] has shape {np.shape(curve)}, expected "
                             f"({shape[1]},)")
    units = _per_field(units, fields, ["1"] * len(fields), "units")
    long_names = _per_field(long_names, fields, fields, "long_names")
    grid = _grid_coords(coords, shape[3:])
    time_label = _label("time", _units(times))
    steady_frame = len(grid) == 2  # 2D: last frame; 1D: space-time over all frames

    fig = _new_figure(figsize=(14.0, 3.1 * len(fields) + 3.0))
    top, bottom = fig.subfigures(2, 1, height_ratios=[3.1 * len(fields), 3.0])
    axes = top.subplots(len(fields), 4, squeeze=False)
    titles = ["solver only (reference)", f"hybrid ({schedule})", "surrogate only",
              "|hybrid − reference|"]
    x, x_label = grid[-1]
    y, y_label = grid[0] if steady_frame else (time_values, time_label)
    aspect = "equal" if steady_frame else "auto"
    for i, row in enumerate(axes):
        frames = [a[sample, -1, i] if steady_frame else a[sample, :, i] for a in runs]
        with np.errstate(invalid="ignore", over="ignore"):  # a diverged run may hold inf
            error = np.abs(frames[1] - frames[0])
        shared = _scale(*frames)
        for j, (ax, values) in enumerate(zip(row, [*frames, error])):
            scale = shared if j < 3 else _scale(error, sequential=ERROR_MAP)
            image = _draw(ax, values, x, y, scale, aspect=aspect)
            ax.set_title(titles[j], fontsize=9)
            _label_axes(ax, x_label, y_label if j == 0 else None)
            if j == 2:  # the three runs share this colour bar; the error has its own
                _colorbar(top, image, list(row[:3]), _label(long_names[i], units[i]))
        _colorbar(top, image, row[3], _label(f"|error| in {long_names[i]}", units[i]))
    label = sample if sample_label is None else sample_label
    when = (_time_text(time_values[-1], _units(times, None)) if steady_frame else
            f"t = {time_values[0]:g} … {time_values[-1]:g}")
    top.suptitle(f"sample {label}, {when}", fontsize=10)

    _draw_error_curves(bottom.subplots(), time_values, errors, time_label)
    return fig


#: Line styles and (open) markers of the error curves: curve i gets ``_LINESTYLES[i % 4]`` and
#: ``_MARKERS[i % 7]`` (4 and 7 are coprime: 28 distinct pairs), so that schedules with equal
#: errors, drawn over each other, still differ.
_LINESTYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def _draw_error_curves(ax, times: np.ndarray, errors: Mapping[str, np.ndarray],
                       time_label: str) -> None:
    """Relative L2 error against time, one curve per schedule, on a log axis whose floor is
    drawn and labelled (:func:`_log_error_axis`); errors below it (zeros, round-off) lie on it.

    Schedules often have equal errors (two adaptive tolerances that both fall back to the
    solver; the solver schedule and parareal): every curve stays visible because earlier
    curves are drawn wider, each has its own (line style, open marker) pair, later markers
    are smaller (equal points show as nested markers), and on long series each curve marks
    every n-th point from its own offset."""
    curves = {name: np.asarray(curve, dtype=np.float64) for name, curve in errors.items()}
    values = np.concatenate([c.ravel() for c in curves.values()]) if curves else np.zeros(0)
    floor = _error_floor(values)
    finite = values[np.isfinite(values)]
    top = float(finite.max()) if finite.size else 1.0
    count = len(curves)
    every = count if times.size >= 2 * count else 1
    for i, (name, curve) in enumerate(curves.items()):
        exact = bool(np.all(curve == 0))
        shown = np.where(np.isfinite(curve), np.maximum(curve, floor), np.nan)
        ax.plot(times, shown, label=f"{name}: exact (0)" if exact else name,
                linestyle=_LINESTYLES[i % len(_LINESTYLES)],
                linewidth=max(1.0, 3.0 - 2.0 * i / max(count - 1, 1)),
                marker=_MARKERS[i % len(_MARKERS)], markerfacecolor="none",
                markersize=max(3.5, 8.0 - 4.5 * i / max(count - 1, 1)), markeredgewidth=1.1,
                markevery=(i % every, every), zorder=3 + i / max(count, 1))
    _log_error_axis(ax, floor, top, values)
    ax.set_xlabel(time_label)
    ax.set_ylabel("relative L2 error vs solver")
    ax.grid(True, which="both", alpha=0.3)
    if curves:
        ax.legend(fontsize=8, title="schedule", title_fontsize=8, loc="center left",
                  bbox_to_anchor=(1.01, 0.5), handlelength=3.5)


def plot_hybrid(path: str | os.PathLike, *, reference: np.ndarray, hybrid: np.ndarray,
                surrogate: np.ndarray, times: Sequence[float], errors: dict[str, np.ndarray],
                schedule: str, fields: Sequence[str] = ("vorticity",),
                field: str | None = None,
                units: str | Mapping[str, str] | Sequence[str] | None = None,
                long_names: str | Mapping[str, str] | Sequence[str] | None = None,
                coords: Mapping[str, np.ndarray] | None = None, sample: int = 0,
                sample_label: int | None = None, dpi: int = 110) -> pathlib.Path:
    """Hybrid rollout figure, one row per field, and relative L2 error against time below.

    For a 2D grid each row shows the last frame of the solver-only reference, the hybrid run
    and the surrogate-only run (one shared colour scale and colour bar, diverging only if the
    values take both signs) and ``|hybrid − reference|`` (its own colour bar).  For a 1D grid
    the same four panels are space-time diagrams (``x`` horizontal, time vertical).  Below,
    the relative L2 error of every schedule against time on log axes, each schedule with its
    own line style and marker so that equal curves stay visible; errors more than
    :data:`ERROR_DECADES` decades below the largest, or below :data:`ROUND_OFF`, and zeros
    are drawn on a dashed, labelled floor, and a schedule that matches the reference
    exactly is listed as ``"name: exact (0)"``.

    Parameters
    ----------
    reference, hybrid, surrogate : numpy.ndarray
        ``[batch, time, field, *grid]`` with ``grid`` ``(x,)`` or ``(y, x)``.
    times : sequence of float
        ``[time]``, the time of each frame (units from ``times.attrs`` if it has them).
    errors : dict of str to numpy.ndarray
        Schedule name to its per-step relative L2 error ``[time]``.
    schedule : str
        The schedule of ``hybrid``.
    fields : sequence of str
        Names of the first ``len(fields)`` entries of the field axis; those are drawn.
    field : str, optional
        Shortcut for ``fields=(field,)``.
    units, long_names : str, mapping or sequence, optional
        Per field (mapping by name or sequence in order); defaults ``"1"`` and the name.
    coords : mapping of str to array, optional
        Node positions per grid dim (``"x"``, ``"y"``); default ``j / n`` on the unit
        interval.  Units are read from ``attrs`` (xarray coordinates) if present.
    sample : int
        Position along ``batch`` to draw; ``sample_label`` is shown instead if given.
    """
    if field is not None:
        if tuple(fields) not in (("vorticity",), (field,)):
            raise ValueError(f"pass field={field!r} or fields={tuple(fields)}, not both")
        fields = (field,)
    fig = _hybrid_figure(reference=reference, hybrid=hybrid, surrogate=surrogate, times=times,
                         errors=errors, schedule=schedule, fields=fields, units=units,
                         long_names=long_names, coords=coords, sample=sample,
                         sample_label=sample_label)
    return _save(fig, path, dpi)


# --------------------------------------------------------------------------------------------
# Error against cost
# --------------------------------------------------------------------------------------------

#: Marker and colour per kind of rollout row (:func:`ssmpde.coupling.run.run_rollout`).
_PARETO_STYLE = {
    "solver": ("*", "black", "solver (fine)"),
    "coarse": ("s", "tab:gray", "coarse solver"),
    "surrogate": ("o", "tab:red", "surrogate only"),
    "fixed": ("^", "tab:orange", "fixed schedule"),
    "checks": ("v", "tab:brown", "adaptive (checks)"),
    "adaptive": ("D", "tab:blue", "adaptive (error control)"),
    "parareal": ("P", "tab:green", "parareal"),
    "corrected": ("h", "tab:cyan", "corrected coarse solver"),
}


def pareto_front(rows: Sequence[Mapping]) -> list[Mapping]:
    """The rows no other row beats in both error and wall time (failed rows excluded),
    ordered by time."""
    done = [r for r in rows if "failed" not in r]
    front = [r for r in done
             if not any(o["seconds"] <= r["seconds"] and o["final_rel_l2"] <= r["final_rel_l2"]
                        and (o["seconds"], o["final_rel_l2"]) != (r["seconds"], r["final_rel_l2"])
                        for o in done)]
    return sorted(front, key=lambda r: r["seconds"])


_MARKER_AREA = 60  # points², as matplotlib's scatter ``s``
#: adjustText settings for the Pareto labels: pushed harder off the markers than by default
#: (labels otherwise settle on a neighbour's marker), and a fixed number of iterations.
_ADJUST = dict(iter_lim=300, expand=(1.2, 1.5), force_static=(0.5, 1.0), force_text=(0.3, 0.6))


def _renderer(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas
    return (canvas if hasattr(canvas, "get_renderer") else FigureCanvasAgg(fig)).get_renderer()


def _unstack(ax, texts) -> None:
    """Labels that adjustText left over each other, one line apart.

    adjustText pushes overlapping labels apart by forces; two labels that feel the same
    forces (points side by side at an edge of the axes, like ``parareal:5:1`` and
    ``parareal:5:2``) can end one over the other.  Each label, taken from the top, moves down
    a line at a time until it covers no label placed before it."""
    renderer = _renderer(ax.figure)
    placed = []
    for text in sorted(texts, key=lambda t: -ax.transData.transform(t.get_position())[1]):
        box = text.get_window_extent(renderer)
        while any(box.overlaps(other) for other in placed):
            x, y = ax.transData.transform(text.get_position())
            text.set_position(ax.transData.inverted().transform((x, y - 1.1 * box.height)))
            box = text.get_window_extent(renderer)
        placed.append(box)


def _leader_lines(ax, texts, points, *, gap: float = 6.0) -> None:
    """A thin line from each point to its label where the label moved away from it (more
    than ``gap`` pixels between the point and the nearest edge of the label)."""
    renderer = _renderer(ax.figure)
    to_data = ax.transData.inverted()
    for text, point in zip(texts, points):
        box = text.get_window_extent(renderer)
        x, y = ax.transData.transform(point)
        near = (min(max(x, box.x0), box.x1), min(max(y, box.y0), box.y1))
        if math.hypot(near[0] - x, near[1] - y) > gap:
            (x0, y0), (x1, y1) = to_data.transform([(x, y), near])
            ax.plot([x0, x1], [y0, y1], color="0.5", lw=0.5, zorder=2.5)


def _pareto_figure(rows: Sequence[Mapping], *, title: str = "", floor: float | None = None,
                   dpi: int = 150):
    """Build (but do not save) the :func:`plot_pareto` figure; returns the Figure."""
    from adjustText import adjust_text
    from matplotlib.transforms import Bbox

    done = [r for r in rows if "failed" not in r]
    if not done:
        raise ValueError("plot_pareto needs at least one row that ran to the end")
    errors = np.array([float(r["final_rel_l2"]) for r in done])
    if floor is None:
        floor = _error_floor(errors)
    width = 9.0
    fig = _new_figure(figsize=(width, 5.5), dpi=dpi)
    ax = fig.add_subplot()
    seen, points, texts = set(), [], []
    for row, error in zip(done, np.maximum(errors, floor)):
        marker, colour, label = _PARETO_STYLE.get(row.get("kind"), ("x", "tab:purple", "other"))
        ax.scatter(row["seconds"], error, marker=marker, color=colour, s=_MARKER_AREA, zorder=3,
                   label=None if label in seen else label)
        seen.add(label)
        points.append((row["seconds"], error))
        texts.append(ax.text(row["seconds"], error, row["schedule"], fontsize=7, zorder=4))
    front = pareto_front(done)
    ax.step([r["seconds"] for r in front], [max(r["final_rel_l2"], floor) for r in front],
            where="post", color="tab:blue", alpha=0.4, lw=1.5, zorder=2, label="Pareto front")
    ax.set_xscale("log")
    band = _log_error_axis(ax, floor, float(errors.max()), errors)
    seconds = np.array([float(r["seconds"]) for r in done])
    seconds = seconds[seconds > 0]
    if seconds.size:  # room at both ends for the labels of the first and last points
        ax.set_xlim(seconds.min() / 10 ** 0.25, seconds.max() * 10 ** 0.25)
    ax.set_xlabel("wall time (s)", fontsize=8)
    ax.set_ylabel("relative L2 error at the horizon", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="both", alpha=0.25)
    # Outside the axes: the legend takes no room from the points and their labels.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    failed = [r for r in rows if "failed" in r]
    if failed:
        fig.supxlabel(_title("failed, not drawn: " + "; ".join(r["schedule"] for r in failed),
                             width_inches=width, fontsize=8), fontsize=8, color="tab:red")
    if title:
        ax.set_title(_title(title, width_inches=width - 1.5), fontsize=9)
    # Labels move apart (adjustText) once the layout is final, and stay out of it: moved
    # labels must not resize the axes they were placed in.  iter_lim, not adjustText's
    # default time limit, so that the figure does not depend on the machine's speed.
    for text in texts:
        text.set_in_layout(False)
    fig.draw_without_rendering()
    fig.set_layout_engine("none")
    # Obstacles as boxes in data coordinates (what adjustText takes): each marker's square
    # (its area is ``s`` points²) and the floor's text.
    to_data = ax.transData.inverted()
    half = 0.5 * math.sqrt(_MARKER_AREA) * fig.dpi / 72
    obstacles = [Bbox(ax.transData.transform([point, point]) + [[-half, -half], [half, half]])
                 .transformed(to_data) for point in points]
    if band is not None:
        obstacles.append(band.get_window_extent().transformed(to_data))
    adjust_text(texts, ax=ax, objects=obstacles, **_ADJUST)
    _unstack(ax, texts)
    _leader_lines(ax, texts, points)
    return fig


def plot_pareto(path: str | os.PathLike, rows: Sequence[Mapping], *, title: str = "",
                floor: float | None = None, dpi: int = 150) -> pathlib.Path:
    """Error at the horizon against wall time, one marker per configuration, the Pareto
    front drawn through the best.

    Point labels are moved apart (adjustText) so that none covers another, with a thin line
    back to their point when moved far.  The title takes at most two lines.

    Parameters
    ----------
    rows : sequence of mapping
        Each with ``schedule``, ``kind``, ``final_rel_l2`` and ``seconds`` (rows with
        ``failed`` are listed under the plot instead). The fine solver's error is zero by
        definition; errors below ``floor`` are drawn at ``floor``, a dashed line over a
        shaded band whose tick and text say what lies on it ("error 0 (exact)").  Default
        floor: a decade below the smallest error that is at least :data:`ROUND_OFF` and
        within :data:`ERROR_DECADES` decades of the largest.
    """
    return _save(_pareto_figure(rows, title=title, floor=floor, dpi=dpi), path, dpi)
