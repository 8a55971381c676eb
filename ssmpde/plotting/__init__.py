"""Figures that say more than numbers: dataset fields and hybrid rollouts (matplotlib, to file).

:func:`plot_snapshots` draws any field of an ssmpde dataset (1D or 2D, steady or
time-dependent); :func:`plot_hybrid` compares a hybrid solver/surrogate rollout with the
solver-only reference; :func:`plot_pareto` sets every rollout configuration's error against
its wall time.  The first two use the real domain extent from the coordinates, give every panel
(or row of panels sharing a scale) its own colour bar labelled ``long_name [units]``, and use a
diverging map with symmetric limits only for fields that take both signs in what is shown.
Every title is wrapped to the width it is centred on, so none runs off its figure.

Figures are built on :class:`matplotlib.figure.Figure` directly (no pyplot state, no backend
switch) and written through a temporary file renamed into place.

One module per kind of figure: :mod:`ssmpde.plotting.snapshots` (and :func:`schlieren`),
:mod:`ssmpde.plotting.hybrid`, :mod:`ssmpde.plotting.pareto`; what they share (colour scales,
labels, titles, log error axes, the atomic save) is in the private ``_common``.
"""

# The colour maps and error-axis constants the docstrings name, where they always were.
from ._common import DIVERGING, ERROR_DECADES, ERROR_MAP, ROUND_OFF, SEQUENTIAL, SIGN_TOLERANCE
from .hybrid import plot_hybrid
from .pareto import pareto_front, plot_pareto
from .snapshots import plot_snapshots, schlieren

__all__ = ["pareto_front", "plot_hybrid", "plot_pareto", "plot_snapshots", "schlieren"]
