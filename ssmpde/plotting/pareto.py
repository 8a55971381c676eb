"""Error against cost: :func:`plot_pareto` draws one marker per rollout configuration and the
Pareto front (:func:`pareto_front`) through the best."""

from __future__ import annotations

import math
import os
import pathlib
from collections.abc import Mapping, Sequence

import numpy as np

from ._common import _error_floor, _log_error_axis, _new_figure, _save, _title

__all__ = ["pareto_front", "plot_pareto"]

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
    """The rows no other row beats in both error at the horizon and wall time (failed rows
    excluded), ordered by time: :func:`ssmpde.coupling.pareto.pareto_front` by
    ``final_rel_l2``, the front the figure draws."""
    # imported here: ssmpde.coupling loads torch, which a figure does not need
    from ssmpde.coupling.pareto import pareto_front as front

    return front(rows, "final_rel_l2")


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
    if title:  # centred over the axes: 1.5 inches of the width are the legend's
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
