"""The honest baseline of a surrogate: the same solver at reduced cost.

A surrogate in a solver loop is worth using only if it beats what the solver itself gives
for the same time on a coarser simulation grid or with a longer time step. Every rollout
report carries these rows (:func:`coarse_baselines`), each with its error at the horizon
against the fine solver and its wall time.
"""

from __future__ import annotations

import time as _time

import numpy as np

from ssmpde.core import high_correlation_time, relative_l2
from ssmpde.solvers.base import SolverDivergedError, parse_coarsening

from .steps import stepper_inputs

__all__ = ["DEFAULT_COARSENINGS", "SURROGATE_KINDS", "against_coarse", "coarse_baselines",
           "parse_coarsening", "solver_run"]

#: (space, time) factors tried by default; those a configuration cannot make are skipped.
DEFAULT_COARSENINGS = ((2, 1), (4, 1), (1, 2), (1, 5), (2, 2), (2, 5), (4, 5))


def _label(solver, space: int, time: int) -> str:
    grid = "x".join(map(str, solver.simulation_grid))
    step = getattr(solver.config, "time_step", None)
    cfl = getattr(solver.config, "cfl", None)
    if getattr(solver.config, "time_stepping", None) == "cfl" or step is None and cfl:
        detail = f"cfl {cfl:g}"
    elif step is not None:
        detail = f"dt {step:g}"
    else:
        detail = "default step"
    return f"coarse {space}x{time} (grid {grid}, {detail})"


def solver_run(solver, history: np.ndarray, num_steps: int, *, time: float = 0.0,
               parameters=None) -> tuple[np.ndarray, float]:
    """The solver on its own, as a user would run it: one continuous integration from the
    last frame of ``history`` (no restart per step), after a one-step warm-up (numba, FFT
    plans). Returns the frames ``[batch, num_steps, field, *grid]`` and the seconds."""
    given = stepper_inputs(solver, parameters, time)
    start = np.asarray(history, dtype=np.float64)[:, -1]
    solver.simulate(start, 1, time=time, parameters=given)
    started = _time.perf_counter()
    frames = solver.simulate(start, num_steps, time=time, parameters=given)[:, 1:]
    return frames, _time.perf_counter() - started


def coarse_baselines(solver, history: np.ndarray, num_steps: int, *, reference: np.ndarray,
                     time: float = 0.0, parameters=None, coarsenings=None) -> list[dict]:
    """Run coarsened copies of ``solver`` over the same horizon (each as one continuous
    integration: :func:`solver_run`) and measure them against the fine ``reference``.

    Parameters
    ----------
    solver : TimeDependentSolver
        The fine solver (the reference).
    history : array ``[batch, window, field, *grid]``
    reference : array ``[batch, num_steps, field, *grid]``
        The fine solver's rollout.
    coarsenings : sequence of (space, time) or "SxT" strings, optional
        Default :data:`DEFAULT_COARSENINGS`, keeping those the configuration can make.

    Returns
    -------
    list of dict
        Per coarsening: ``schedule`` (a label naming its grid and step), ``kind`` "coarse",
        ``space``, ``time``, ``final_rel_l2``, ``errors`` (per step), ``seconds``; or
        ``failed`` (why: the solver diverged at that cost, or the factor is invalid when
        asked for explicitly).
    """
    explicit = coarsenings is not None
    factors = [parse_coarsening(c) if isinstance(c, str) else tuple(c)
               for c in (coarsenings if explicit else DEFAULT_COARSENINGS)]
    rows = []
    for space, steps in factors:
        try:
            coarse = solver.coarsened(space=space, time=steps)
        except (ValueError, TypeError) as error:
            if explicit:
                rows.append({"schedule": f"coarse {space}x{steps}", "kind": "coarse",
                             "space": space, "time": steps, "failed": str(error)})
            continue
        label = _label(coarse, space, steps)
        try:
            frames, seconds = solver_run(coarse, history, num_steps, time=time,
                                         parameters=parameters)
        except SolverDivergedError as error:
            rows.append({"schedule": label, "kind": "coarse", "space": space, "time": steps,
                         "failed": f"diverged: {error}"})
            continue
        errors = np.array([relative_l2(frames[:, k], reference[:, k], fields=True).mean()
                           for k in range(num_steps)])
        rows.append({"schedule": label, "kind": "coarse", "space": space, "time": steps,
                     "final_rel_l2": float(errors[-1]), "errors": errors.tolist(),
                     "seconds": seconds,
                     "correlation_time": high_correlation_time(frames, reference, solver.dt)})
    return rows


#: Row kinds that use a trained model: the surrogate's schedules and the corrected solvers.
SURROGATE_KINDS = ("surrogate", "fixed", "checks", "adaptive", "parareal", "corrected")


def against_coarse(rows: list[dict]) -> dict:
    """Does any surrogate-based configuration beat the coarse solver at equal cost?

    A surrogate-based row *beats the baseline* when every solver-only row (the coarse
    solvers, and the fine solver itself) that took no longer has a larger error at the
    horizon: a configuration slower than the fine solver never pays its way. Returns
    ``best`` (the beating row with the smallest error, or None), ``closest`` (else: the
    surrogate-based row with the smallest error) with ``dominated_by`` (the solver-only row
    at most as slow and as wrong), ``fine`` (the fine solver's row) and ``summary``, one
    sentence for a report.
    """
    done = [r for r in rows if "failed" not in r]
    idle = _corrections_without_gain(done)
    coarse = [r for r in done if r.get("kind") in ("coarse", "solver")]
    solver_rows = [r for r in done if r.get("kind") == "solver"]
    # The fine solver as a user runs it (one continuous run) when the report has it.
    fine = next((r for r in solver_rows if "solver" not in r),
                min(solver_rows, key=lambda r: r["seconds"], default=None))
    beating = []
    for row in (r for r in done if r.get("kind") in SURROGATE_KINDS):
        cheaper = [c for c in coarse if c["seconds"] <= row["seconds"]]
        if all(c["final_rel_l2"] > row["final_rel_l2"] for c in cheaper):
            beating.append(row)
    result = {"fine": fine, "best": None, "closest": None, "dominated_by": None}

    def cost(row):
        return (f"{row['final_rel_l2']:.3g} in {row['seconds']:.3f} s"
                + (f" ({row['seconds'] / fine['seconds']:.0%} of the fine solver's "
                   f"{fine['seconds']:.3f} s)" if fine else ""))

    note = "".join(f"; {row['schedule']} ends where {plain['schedule'].split(' (')[0]} does "
                   f"({row['final_rel_l2']:.3g} against {plain['final_rel_l2']:.3g}): its "
                   "corrector adds nothing" for row, plain in idle)
    result["no_gain"] = [row for row, _ in idle]
    if beating:
        best = min(beating, key=lambda r: r["final_rel_l2"])
        result["best"] = best
        result["summary"] = (f"best against the solver baselines: {best['schedule']}, rel. L2 "
                             f"{cost(best)}; no solver run (fine or coarse) as fast is as "
                             "accurate" + note)
        return result
    candidates = [r for r in done if r.get("kind") in SURROGATE_KINDS]
    if not candidates:
        result["summary"] = "no surrogate-based configuration ran to the end"
        return result
    closest = min(candidates, key=lambda r: r["final_rel_l2"])
    winner = min((c for c in coarse if c["seconds"] <= closest["seconds"]),
                 key=lambda c: c["final_rel_l2"])
    result.update(closest=closest, dominated_by=winner)
    result["summary"] = (f"no surrogate-based configuration beats the solver alone: the most "
                         f"accurate, {closest['schedule']}, reaches {cost(closest)}; "
                         f"{winner['schedule']} reaches {cost(winner)}" + note)
    return result


#: A corrected row within this relative distance of its own coarse solver's final error has
#: learned nothing a user can see.
NO_GAIN = 0.01


def _corrections_without_gain(rows: list[dict]) -> list[tuple[dict, dict]]:
    """(corrected row, its coarse solver's row) pairs whose final errors agree to
    :data:`NO_GAIN`: the correction adds nothing to the coarse solver."""
    out = []
    for row in rows:
        if row.get("kind") != "corrected":
            continue
        coarsening = row["schedule"].removeprefix("corrected ").split(",")[0]
        plain = next((r for r in rows if r.get("kind") == "coarse"
                      and f"{r.get('space')}x{r.get('time')}" == coarsening), None)
        if plain is not None and abs(row["final_rel_l2"] - plain["final_rel_l2"]) \
                <= NO_GAIN * max(plain["final_rel_l2"], 1e-300):
            out.append((row, plain))
    return out
