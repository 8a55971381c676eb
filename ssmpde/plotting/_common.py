"""What every figure of :mod:`ssmpde.plotting` shares: colour scales and maps, labels, titles
that fit, log error axes with a labelled floor, and the atomic save."""

from __future__ import annotations

import functools
import math
import os
import pathlib
import re
import textwrap
from typing import NamedTuple

import numpy as np

from ..data import atomic_path, figure_metadata

DIVERGING = "RdBu_r"
SEQUENTIAL = "viridis"
#: Attribute of a derived variable naming its sequential colour map (schlieren: gray_r).
_CMAP = "ssmpde_cmap"
ERROR_MAP = "magma"
# Values smaller than this fraction of the largest magnitude shown count as zero when deciding
# whether a field takes both signs (round-off around zero does not make a field signed).
SIGN_TOLERANCE = 1e-6
_LABEL_WIDTH = 34  # characters per line of a colour-bar label
#: Relative errors below this are float64 round-off (eps 2.2e-16 grown over a rollout's steps).
ROUND_OFF = 1e-12
#: Decades below the largest error that a log error axis shows; smaller errors are drawn at
#: the axis' labelled floor, as zeros are.
ERROR_DECADES = 6


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


#: Room left beside a title, in inches (both sides together): Agg's glyph widths vary a little
#: with the resolution a figure is drawn at.
_TITLE_MARGIN = 0.2


@functools.cache
def _measure():
    """A renderer that lays text out as Agg draws it, at 72 dpi: one pixel is one point."""
    from matplotlib.backends.backend_agg import RendererAgg

    return RendererAgg(1, 1, 72)


def _text_width(text: str, fontsize: float) -> float:
    """Width in points of one line of ``text`` in matplotlib's default font."""
    from matplotlib.cbook import is_math_text
    from matplotlib.font_manager import FontProperties

    width, _, _ = _measure().get_text_width_height_descent(
        text, FontProperties(size=fontsize), ismath=is_math_text(text))
    return width


def _title(text: str, *, width_inches: float, fontsize: float = 9.0) -> str:
    """``text`` on at most two lines of a ``width_inches`` wide figure (or panel), centred
    on it: lines are filled word by word as far as their rendered width fits, and an
    ellipsis ends what does not fit.  "1 samples" reads as "1 sample": callers format counts
    with ``f"{n} samples"``."""
    text = _ONE_PLURAL.sub(r"1 \1", " ".join(text.split()))
    limit = (width_inches - _TITLE_MARGIN) * 72

    def fits(line: str) -> bool:
        return _text_width(line, fontsize) <= limit

    words, lines = text.split(" "), []
    while words and len(lines) < 2:
        line = words.pop(0)
        while words and fits(f"{line} {words[0]}"):
            line += " " + words.pop(0)
        lines.append(line)
    if words:  # more than two lines: the second ends with an ellipsis
        last = lines[-1].split(" ")
        while len(last) > 1 and not fits(" ".join(last) + " …"):
            last.pop()
        lines[-1] = " ".join(last) + " …"
    for i, line in enumerate(lines):  # a word wider than a line is cut
        while len(line) > 1 and not fits(line):
            line = line[:-2].rstrip() + "…"
        lines[i] = line
    return "\n".join(lines)


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

