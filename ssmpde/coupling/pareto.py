r"""Judging a learned method against the plain solver's Pareto front.

McGreivy & Hakim (Nature Machine Intelligence 2024) ask of every learned speed-up: is there a
plain solver run (another grid, another time step) that is both as fast and as accurate? A
learned method pays only where there is none. This module is that judgement, on rows a user
can make from their own runs: plain dicts with ``seconds`` (what a rollout took), the
problem's one accuracy metric, ``kind`` (``"solver"`` or ``"coarse"`` for a plain solver
run, anything else, e.g. ``"corrected"``, for a learned method) and a ``label`` (or a
rollout report's ``schedule``) naming the row.

**One metric, plus time.** A row is judged by time and by the one metric that measures the
problem's accuracy (:data:`METRICS`): the correlation time for a chaotic or turbulent flow
(Kolmogorov flow, Kuramoto–Sivashinsky; larger is better), the error at the horizon where the
runs stay correlated over it (the Euler problems' density error; smaller is better). Never by
a second metric beside it: the error at the horizon of a flow that has decorrelated from the
reference is about the same for every run (about √2 for two uncorrelated fields of equal
energy) and differs between runs only by noise, so a test on it would let a row that is
slower and shorter-correlated than a plain run escape on a noise-level difference.

* :func:`dominates`: row ``a`` is as fast as ``b`` and as accurate (ties count: a plain run
  that equals a learned one leaves it nothing to gain).
* :func:`pareto_front`: the rows no other row beats in both, by time.
* :func:`equal_accuracy_seconds`: what the plain solver takes for a given accuracy,
  interpolated along its front (log seconds, linear in the metric's accuracy score: the
  correlation time itself, or −log10 of an error, so that errors interpolate log-log).
* :func:`breakeven`: the rollouts after which a learned method has repaid its data and
  training (Zhang et al. 2026).
* :func:`paired_interval`: the mean per-sample difference of two rows evaluated on the same
  samples and its percentile-bootstrap interval. A mean over a few samples of a chaotic flow
  is noisy; a claim that a learned row is as accurate as a plain one holds only when the
  interval of their paired difference lies at or above zero.
* :func:`judge`: all of these for every learned row of a table, in place.

Example
-------
>>> rows = [{"kind": "solver", "label": "64²", "seconds": 0.6, "correlation_time": 4.5},
...         {"kind": "solver", "label": "128²", "seconds": 6.0, "correlation_time": 8.6},
...         {"kind": "corrected", "label": "mine", "seconds": 1.7, "correlation_time": 3.3}]
>>> judge(rows, "correlation_time")[2]["dominated_by"]
['64²']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["METRICS", "PLAIN_KINDS", "Metric", "breakeven", "dominates", "equal_accuracy_seconds",
           "judge", "metric_of", "nearest_plain", "paired_interval", "pareto_front",
           "solver_front"]

#: Row kinds that are plain solver runs: the benchmark's ``solver`` rows, a rollout report's
#: fine ``solver`` and ``coarse`` rows.
PLAIN_KINDS = ("solver", "coarse")


@dataclass(frozen=True)
class Metric:
    """An accuracy metric of a row.

    Attributes
    ----------
    name : str
        The row's field that holds it.
    larger_is_better : bool
        True for a time (correlation time), False for an error.
    logarithmic : bool
        Interpolate in its logarithm (errors fall as a power of the cost).
    per_sample : str or None
        The row's field with the metric of every evaluation sample, in the samples' order
        (None: the rows carry none), for :func:`paired_interval`.
    """

    name: str
    larger_is_better: bool
    logarithmic: bool = False
    per_sample: str | None = None

    def accuracy(self, row: Mapping) -> float | None:
        """The row's score, larger is better: the metric, −(the metric), or −log10(the
        metric) (an error of 0, the reference itself: +inf); None when the row has none."""
        value = row.get(self.name)
        if value is None or row.get("failed"):
            return None
        if self.larger_is_better:
            return float(value)
        if self.logarithmic:
            return math.inf if value == 0 else -math.log10(value)
        return -float(value)


#: The metrics rows are judged by, by name.
METRICS = {metric.name: metric for metric in (
    Metric("correlation_time", larger_is_better=True, per_sample="correlation_times"),
    Metric("correlation_time_95", larger_is_better=True, per_sample="correlation_time_95s"),
    Metric("final_rel_l2", larger_is_better=False, logarithmic=True,
           per_sample="final_rel_l2s"),
)}


def metric_of(metric: str | Metric) -> Metric:
    """A :class:`Metric`, or the one of :data:`METRICS` called ``metric``."""
    if isinstance(metric, Metric):
        return metric
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}: choose one of {sorted(METRICS)} or pass "
                         "a Metric")
    return METRICS[metric]


def _seconds(row: Mapping) -> float | None:
    seconds = row.get("seconds")
    return None if seconds is None or row.get("failed") else float(seconds)


def dominates(a: Mapping, b: Mapping, metric: str | Metric) -> bool:
    """Whether row ``a`` is as fast as ``b`` and as accurate by ``metric`` (both at least
    as good: ties count). False when either row lacks its time or the metric (a failed run).
    Judged by the one metric alone: see the module's notes."""
    metric = metric_of(metric)
    seconds = _seconds(a), _seconds(b)
    scores = metric.accuracy(a), metric.accuracy(b)
    if None in seconds or None in scores:
        return False
    return seconds[0] <= seconds[1] and scores[0] >= scores[1]


def _beats(a: Mapping, b: Mapping, metric: Metric) -> bool:
    """``a`` dominates ``b`` and is better in time or accuracy."""
    return dominates(a, b, metric) and (
        _seconds(a) < _seconds(b) or metric.accuracy(a) > metric.accuracy(b))


def pareto_front(rows: Sequence[Mapping], metric: str | Metric) -> list[Mapping]:
    """The rows that no other row beats (as fast and as accurate by ``metric``, better in
    one of the two), ordered by time; rows without a time or the metric (failed) are left
    out, rows tied in both are all kept."""
    metric = metric_of(metric)
    done = [r for r in rows if _seconds(r) is not None and metric.accuracy(r) is not None]
    front = [r for r in done if not any(_beats(other, r, metric) for other in done)]
    return sorted(front, key=lambda r: (_seconds(r), -metric.accuracy(r)))


def solver_front(rows: Sequence[Mapping], metric: str | Metric,
                 plain: Sequence[str] = PLAIN_KINDS) -> list[Mapping]:
    """The plain solver's Pareto front that :func:`equal_accuracy_seconds` interpolates
    along: :func:`pareto_front` of the rows whose kind is in ``plain`` and whose accuracy is
    finite (the reference itself, error 0 by definition, is left out), by time, each more
    accurate than the one before."""
    metric = metric_of(metric)

    def finite(row: Mapping) -> bool:
        score = metric.accuracy(row)
        return score is not None and math.isfinite(score)

    return pareto_front([r for r in rows if r.get("kind") in plain and finite(r)], metric)


def equal_accuracy_seconds(rows: Sequence[Mapping], target: float, metric: str | Metric,
                           plain: Sequence[str] = PLAIN_KINDS) -> float | None:
    """What the plain solver takes to reach ``metric`` = ``target`` (in the metric's own
    units): log seconds interpolated linearly in the accuracy score along
    :func:`solver_front`; the cheapest front row's seconds when even it does as well (an
    upper bound), None when no plain row does."""
    metric = metric_of(metric)
    wanted = metric.accuracy({metric.name: target})
    front = solver_front(rows, metric, plain)
    scores = [metric.accuracy(r) for r in front]
    if not front or wanted > scores[-1]:
        return None
    if wanted <= scores[0]:
        return float(_seconds(front[0]))
    for (low, a), (high, b) in zip(zip(front, scores), zip(front[1:], scores[1:])):
        if a < wanted <= b:
            weight = (wanted - a) / (b - a)
            return float(math.exp(math.log(_seconds(low)) + weight * (
                math.log(_seconds(high)) - math.log(_seconds(low)))))
    return None  # unreachable: the front's accuracy increases


def breakeven(upfront_seconds: float | None, seconds: float | None,
              solver_seconds: float | None) -> int | None:
    """Rollouts after which a learned method has repaid its upfront cost (data generation and
    training; Zhang et al. 2026): ``ceil(upfront / (solver_seconds − seconds))``, with
    ``solver_seconds`` the solver's time at equal accuracy. None when a cost is unknown or the
    method saves nothing per rollout (it never breaks even); 0 with no upfront cost."""
    if upfront_seconds is None or seconds is None or solver_seconds is None:
        return None
    saving = solver_seconds - seconds
    if saving <= 0:
        return None
    # a ratio a hair above a whole number from round-off (interpolated times) rounds down
    return math.ceil(upfront_seconds / saving * (1 - 1e-12)) if upfront_seconds > 0 else 0


def paired_interval(a: Sequence[float], b: Sequence[float], *, confidence: float = 0.95,
                    resamples: int = 20_000, seed: int = 0) -> dict:
    """The mean of ``a - b`` over paired samples (the same evaluation samples, in the same
    order) and its percentile-bootstrap interval: the pairs resampled with replacement
    ``resamples`` times (a seeded generator, so the interval is reproducible).

    Returns
    -------
    dict
        ``difference`` (the mean), ``low`` and ``high`` (the interval's ends), ``samples``,
        ``confidence``.

    >>> r = paired_interval([4.5, 3.3, 4.9, 5.7, 5.7, 2.9, 4.6, 5.4],
    ...                     [4.5, 3.7, 5.3, 5.1, 4.4, 3.0, 5.1, 4.7])
    >>> round(r["difference"], 2), r["low"] < 0 < r["high"]
    (0.15, True)
    """
    import numpy as np

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.ndim != 1 or a.shape != b.shape or a.size < 2:
        raise ValueError(f"paired samples must be two sequences of the same length >= 2, got "
                         f"{a.shape} and {b.shape}")
    if not np.isfinite(a).all() or not np.isfinite(b).all():
        raise ValueError("paired samples must be finite numbers")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    difference = a - b
    picks = np.random.default_rng(seed).integers(0, difference.size,
                                                 size=(resamples, difference.size))
    means = difference[picks].mean(axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return {"difference": float(difference.mean()), "low": float(low), "high": float(high),
            "samples": int(difference.size), "confidence": confidence}


def nearest_plain(rows: Sequence[Mapping], row: Mapping, metric: str | Metric,
                  plain: Sequence[str] = PLAIN_KINDS) -> Mapping | None:
    """The row of the plain solver's front (:func:`solver_front`) whose accuracy is closest
    to ``row``'s (the slower of two at the same distance); None without a front."""
    metric = metric_of(metric)
    score = metric.accuracy(row)
    front = solver_front(rows, metric, plain)
    if score is None or not front:
        return None
    return min(reversed(front), key=lambda r: abs(metric.accuracy(r) - score))


def _name(row: Mapping) -> str | None:
    return row.get("label", row.get("schedule"))


def judge(rows: list[dict], metric: str | Metric,
          plain: Sequence[str] = PLAIN_KINDS) -> list[dict]:
    """Judge every learned row of ``rows`` (kind not in ``plain``) against all the plain
    rows, whatever their grid or step, by time and ``metric`` alone; returns ``rows``, each
    learned row updated in place with:

    * ``dominated_by``: the names (``label``, else ``schedule``) of the plain rows as fast
      and as accurate (:func:`dominates`); the row pays only if this is empty. None for a
      row without a time or the metric (a failed run: not judged);
    * ``equal_accuracy_solver_seconds``: :func:`equal_accuracy_seconds` at its accuracy;
    * ``speedup``: that over its own seconds (None where either is unknown);
    * ``breakeven_rollouts``: :func:`breakeven` with its ``upfront_seconds``, if any;
    * ``paired``: where the metric has per-sample values (:attr:`Metric.per_sample`) in the
      row and in the nearest plain row of the front (:func:`nearest_plain`): that row's name
      (``against``) and :func:`paired_interval` of their per-sample metric, oriented so that
      a positive difference favours the learned row, with ``supported`` true when the
      interval's lower end is at or above zero (the learned row at least as accurate);
      None otherwise.

    Every field is computed afresh from the rows given: call it again after adding a row.
    """
    metric = metric_of(metric)
    plain_rows = [r for r in rows if r.get("kind") in plain]
    for row in rows:
        if row.get("kind") in plain:
            continue
        seconds, judged = _seconds(row), metric.accuracy(row) is not None
        row["dominated_by"] = ([_name(r) for r in plain_rows if dominates(r, row, metric)]
                               if seconds is not None and judged else None)
        equal = (equal_accuracy_seconds(plain_rows, row[metric.name], metric, plain)
                 if judged else None)
        row["equal_accuracy_solver_seconds"] = equal
        row["speedup"] = None if equal is None or not seconds else equal / seconds
        row["breakeven_rollouts"] = breakeven(row.get("upfront_seconds"), seconds, equal)
        row["paired"] = _paired(rows, row, metric, plain) if judged else None
    return rows


def _paired(rows, row, metric: Metric, plain) -> dict | None:
    """The ``paired`` field of :func:`judge`."""
    other = nearest_plain(rows, row, metric, plain)
    field = metric.per_sample
    if other is None or field is None or not row.get(field) or not other.get(field) \
            or len(row[field]) != len(other[field]):
        return None
    mine, theirs = (row[field], other[field]) if metric.larger_is_better else \
        (other[field], row[field])
    interval = paired_interval(mine, theirs)
    return {"against": _name(other), **interval, "supported": interval["low"] >= 0}
