"""Error indicators: how far off is a surrogate's proposed step, without the fine solver?

An indicator maps a proposed step to an estimate of its relative L2 error per sample,
``(history, proposal, time, parameters) -> [batch]``, cheaply (``parameters`` a mapping
or a :class:`~ssmpde.coupling.Conditions`, as the hybrid loop has them). The error-controlled adaptive
schedule (``"adaptive:TOL"``) accepts a proposal whose estimate is below the tolerance and
lets the solver take the step otherwise. Built in:

``residual``
    The PDE residual of the step, evaluated spectrally between the two frames: the distance
    between the proposal and the trapezoidal-rule update ``u0 + dt/2 (f(u0) + f(u1))``, with
    ``f`` the equation's right-hand side (:meth:`TimeDependentSolver.tendency`). Costs two
    right-hand-side evaluations on the stored grid.
``coarse``
    The discrepancy with one step of a coarse solver (:meth:`TimeDependentSolver.coarsened`)
    from the same frame. Costs one coarse step.
``ensemble``
    The disagreement of two surrogates (a second :class:`~ssmpde.coupling.SurrogateStepper`).

:func:`indicator_quality` measures how well each predicts the true one-step error (Spearman
rank correlation over many states); ``benchmarks/bench_hybrid.py`` reports it, and the best
on Kuramoto–Sivashinsky is the default (:data:`DEFAULT_INDICATOR`).
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Mapping

import numpy as np

from ssmpde.core import relative_l2, unknown_name
from ssmpde.solvers.base import TimeDependentSolver

from .steps import advance, stepper_inputs

__all__ = ["DEFAULT_INDICATOR", "INDICATORS", "indicator_quality", "make_indicator"]

#: name -> what it needs (documentation for errors and the CLI).
INDICATORS = {
    "residual": "the solver's tendency (KS, Burgers, Navier-Stokes)",
    "coarse": "a coarse solver (default: the solver coarsened 2x in time, else in space)",
    "ensemble": "a second surrogate (second=...)",
}
#: The indicator with the best rank correlation on KS (benchmarks/results/hybrid.json).
DEFAULT_INDICATOR = "coarse"

Indicator = Callable[..., np.ndarray]


def _default_coarse(solver):
    """The cheapest valid default coarsening: 2x in time, else 2x in space."""
    errors = []
    for factors in ({"time": 2}, {"space": 2}):
        try:
            return solver.coarsened(**factors)
        except ValueError as error:
            errors.append(str(error))
    raise ValueError(f"the 'coarse' indicator needs a coarser {solver.name} solver and none "
                     f"can be made ({'; '.join(errors)}): pass coarse=... or use another "
                     f"indicator ({', '.join(INDICATORS)})")


def make_indicator(name: str | Indicator, solver, *, coarse=None, second=None) -> Indicator:
    """The indicator ``name`` for ``solver`` (a callable is returned as it is).

    Parameters
    ----------
    name : {"residual", "coarse", "ensemble"} or callable
    solver : TimeDependentSolver
        The fine solver of the hybrid rollout.
    coarse : Stepper, optional
        The ``coarse`` indicator's solver (default: :func:`_default_coarse`).
    second : Stepper, optional
        The ``ensemble`` indicator's second surrogate (required for it).
    """
    if callable(name):
        return name
    if name not in INDICATORS:
        raise ValueError(unknown_name("error indicator", name, list(INDICATORS)))
    if name == "residual":
        def residual(history, proposal, *, time, parameters):
            previous = history[:, -1]
            given = stepper_inputs(solver, parameters, time)
            trapezoid = previous + 0.5 * solver.dt * (
                solver.tendency(previous, time=time, parameters=given)
                + solver.tendency(proposal, time=time + solver.dt, parameters=given))
            return relative_l2(proposal, trapezoid, fields=True)

        # Fail now, not at the first step, if the solver has no tendency.
        if type(solver).tendency is TimeDependentSolver.tendency:
            solver.tendency(np.zeros((1, len(solver.fields), *solver.grid)))
        return residual
    if name == "coarse":
        coarse = coarse if coarse is not None else _default_coarse(solver)

        def discrepancy(history, proposal, *, time, parameters):
            step = coarse.step(history[:, -coarse.window:], time=time,
                               parameters=stepper_inputs(coarse, parameters, time))
            return relative_l2(proposal, step, fields=True)

        return discrepancy
    if second is None:
        raise ValueError("the 'ensemble' indicator needs a second surrogate: pass second=...")

    def disagreement(history, proposal, *, time, parameters):
        other = second.step(history[:, -second.window:], time=time,
                            parameters=stepper_inputs(second, parameters, time))
        return relative_l2(proposal, other, fields=True)

    return disagreement


def indicator_quality(solver, surrogate, trajectories: np.ndarray, indicators: Mapping,
                      *, parameters=None, times=None) -> dict:
    """How well each indicator predicts the true one-step error of the surrogate.

    From every state of ``trajectories`` ``[batch, time, field, *grid]`` (the fine solver's,
    so the surrogate starts from the truth), the surrogate proposes a step; its true error is
    the relative L2 against the next frame. Returns per indicator name the Spearman rank
    correlation between estimate and true error over all (sample, state) pairs, and the
    seconds the indicator took per step.

    Parameters
    ----------
    indicators : mapping of name -> Indicator (see :func:`make_indicator`)
    parameters : mapping or Conditions, optional
        The per-sample inputs, as for :func:`ssmpde.coupling.hybrid_rollout`.
    times : array ``[time]``, optional
        Time of each frame (default ``dt * index``).
    """
    # Imported here: scipy.stats takes most of a second to import and only this needs it.
    from scipy.stats import spearmanr

    trajectories = np.asarray(trajectories, dtype=np.float64)
    window = max(solver.window, surrogate.window)
    count = trajectories.shape[1]
    if count <= window:
        raise ValueError(f"indicator_quality needs more than {window} frames per trajectory")
    times = np.arange(count) * solver.dt if times is None else np.asarray(times)
    true, estimates = [], {name: [] for name in indicators}
    seconds = dict.fromkeys(indicators, 0.0)
    for k in range(window - 1, count - 1):
        history = trajectories[:, k - window + 1:k + 1]
        now = float(times[k])
        proposal = advance(surrogate, history, now, parameters, solver.fields)
        true.append(relative_l2(proposal, trajectories[:, k + 1], fields=True))
        for name, indicator in indicators.items():
            started = _time.perf_counter()
            estimates[name].append(indicator(history, proposal, time=now,
                                                parameters=parameters))
            seconds[name] += _time.perf_counter() - started
    true = np.concatenate(true)
    steps = count - window
    result = {"states": int(true.size), "true_error_median": float(np.median(true)),
              "indicators": {}}
    for name, values in estimates.items():
        values = np.concatenate(values)
        rho = spearmanr(values, true).statistic
        result["indicators"][name] = {
            "spearman": float(rho), "estimate_median": float(np.median(values)),
            "seconds_per_step": seconds[name] / steps}
    return result
