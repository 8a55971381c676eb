"""Hybrid rollouts as figures: :func:`plot_hybrid` sets a hybrid solver/surrogate run beside the
solver-only reference and the surrogate alone, with every schedule's error against time."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np

from ..data import SPATIAL_DIMS
from ._common import (ERROR_MAP, _colorbar, _draw, _error_floor, _label, _label_axes,
                      _log_error_axis, _new_figure, _save, _scale, _time_text, _title, _units)

__all__ = ["plot_hybrid"]

_WIDTH = 14.0  # inches: four panels and two colour bars a row
_PANEL = 2.6  # inches a panel's title may take

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

    fig = _new_figure(figsize=(_WIDTH, 3.1 * len(fields) + 3.0))
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
            ax.set_title(_title(titles[j], width_inches=_PANEL), fontsize=9)
            _label_axes(ax, x_label, y_label if j == 0 else None)
            if j == 2:  # the three runs share this colour bar; the error has its own
                _colorbar(top, image, list(row[:3]), _label(long_names[i], units[i]))
        _colorbar(top, image, row[3], _label(f"|error| in {long_names[i]}", units[i]))
    label = sample if sample_label is None else sample_label
    when = (_time_text(time_values[-1], _units(times, None)) if steady_frame else
            f"t = {time_values[0]:g} … {time_values[-1]:g}")
    top.suptitle(_title(f"sample {label}, {when}", width_inches=_WIDTH, fontsize=10),
                 fontsize=10)

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
