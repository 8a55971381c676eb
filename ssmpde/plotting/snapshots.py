"""Dataset fields as figures: :func:`plot_snapshots` for any field of an ssmpde dataset (1D or 2D,
steady or time-dependent), and the numerical :func:`schlieren` of a 2D field."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from ..data import ROLE, SAMPLE, TIME, X, Y, SchemaError, config_of
from ._common import (_CMAP, SEQUENTIAL, _colorbar, _draw, _edges, _label, _label_axes,
                      _new_figure, _save, _scale, _time_text, _title, _units)

__all__ = ["plot_snapshots", "schlieren"]

_PANEL = 2.3  # inches per snapshot panel
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


def _suptitle(ds: xr.Dataset, width_inches: float) -> str:
    """The dataset's title, then its solver's viscosity and forcing, each on at most two
    lines of a ``width_inches`` wide figure."""
    title = ds.attrs.get("title", "")
    try:
        config = config_of(ds).get("solver", {})
    except SchemaError:
        config = {}
    details = ", ".join(f"{k} = {config[k]}" for k in ("viscosity", "forcing")
                        if isinstance(config, Mapping) and k in config)
    return "\n".join(_title(part, width_inches=width_inches, fontsize=10)
                     for part in (title, details) if part)


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
    width = _PANEL * cols + 1.6
    fig = _new_figure(figsize=(width, row_height * len(rows) + 0.9))
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
            axes[r, c].set_title(_title(f"{name}, {where}", width_inches=_PANEL), fontsize=9)
            for ax in axes[r, 1:] if row_name else ():
                ax.set_visible(False)
    fig.suptitle(_suptitle(ds, width), fontsize=10)
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
        ax.set_title(_title(f"{where}, {_time_text(t, time_units)}", width_inches=_PANEL),
                     fontsize=9)
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
