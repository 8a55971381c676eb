"""Hybrid solver–surrogate rollouts: schedules over two steppers.

A schedule says which component advances each step:

* ``"solver"`` (solver only), ``"surrogate"`` (surrogate only);
* a repeating pattern ``"surrogate:4,solver:1"`` (four surrogate steps, then the solver
  re-anchors, and so on);
* ``"adaptive"``: the surrogate proposes every step, and the step goes to the solver
  (recorded as ``fallback``, with the reason) when the proposal fails a physical check the
  solver declares (:class:`ssmpde.solvers.base.Checks`: non-finite values, drift of a
  conserved mean, loss of positivity, growth of the mean square beyond a bound);
* ``"adaptive:TOL"`` (or ``"adaptive:TOL:INDICATOR"``): error control. The surrogate
  proposes every step; an error indicator (:mod:`ssmpde.coupling.indicators`) estimates the
  proposal's relative L2 error, and the solver takes the step unless the estimate (largest
  over the batch) is below ``TOL``. ``TOL = 0`` is the solver alone, ``inf`` the surrogate;
* ``"parareal:SLICES[:ITERATIONS[:TOL]]"``: parareal with the surrogate as the coarse and
  the solver as the fine propagator (:mod:`ssmpde.coupling.parareal`).

States are NumPy ``[batch, window, field, *grid]`` histories, as in the Stepper protocol.
Per-sample inputs are a mapping of arrays, or a :class:`~ssmpde.coupling.steps.Conditions`
that also holds time-dependent forcing and gives each step the values at its time. One step
of a stepper and a rollout of one alone live in :mod:`ssmpde.coupling.steps`. See
``docs/hybrid.md``.
"""

from __future__ import annotations

import dataclasses
import time as _time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from ssmpde.core import autoregressive, relative_l2
from ssmpde.data import (ROLE, SAMPLE, SPATIAL_DIMS, TIME, build_dataset, grid_coordinates,
                         sample_coordinate, time_coordinate)
from ssmpde.solvers.base import Checks, SolverDivergedError

from .indicators import DEFAULT_INDICATOR, INDICATORS, make_indicator
from .parareal import PararealInfo, parareal
from .steps import Conditions, advance, check_history, rollout

__all__ = ["Adaptive", "Checks", "HybridResult", "HybridRolloutError", "Parareal", "Plan",
           "hybrid_rollout", "parse_schedule", "schedule_text", "to_dataset"]

SOLVER, SURROGATE, FALLBACK, PARAREAL = "solver", "surrogate", "fallback", "parareal"


@dataclass(frozen=True)
class Adaptive:
    """Error-controlled schedule: accept a surrogate step if its estimated error < tolerance."""

    tolerance: float
    indicator: str | None = None  # None: the default (indicators.DEFAULT_INDICATOR)


@dataclass(frozen=True)
class Parareal:
    """Parareal: ``slices`` time slices, at most ``iterations`` corrections (default
    ``slices``: exact), stop when the starts change by less than ``tolerance``."""

    slices: int
    iterations: int | None = None
    tolerance: float = 1e-6


#: A parsed schedule, as :func:`parse_schedule` returns it.
Plan = list[tuple[str, int]] | str | Adaptive | Parareal


def _number(text: str, schedule: str, kind=float):
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"bad schedule {schedule!r}: {text!r} is not a number") from None
    if not value >= 0:
        raise ValueError(f"bad schedule {schedule!r}: {text!r} must be >= 0")
    return value


def parse_schedule(schedule: str) -> Plan:
    """``"surrogate:4,solver:1"`` → ``[("surrogate", 4), ("solver", 1)]``; ``"solver"``,
    ``"surrogate"`` (also ``…-only``) → one-entry patterns; ``"adaptive"`` → ``"adaptive"``;
    ``"adaptive:1e-3[:coarse]"`` → :class:`Adaptive`; ``"parareal:5[:2[:1e-4]]"`` →
    :class:`Parareal`."""
    text = schedule.strip().lower()
    if text == "adaptive":
        return "adaptive"
    head, _, rest = text.partition(":")
    if head == "adaptive":
        tolerance, _, indicator = rest.partition(":")
        if indicator and indicator not in INDICATORS:
            raise ValueError(f"bad schedule {schedule!r}: unknown error indicator "
                             f"{indicator!r}; choose one of {', '.join(INDICATORS)}")
        return Adaptive(_number(tolerance, schedule), indicator or None)
    if head == "parareal":
        parts = rest.split(":") if rest else []
        if not 1 <= len(parts) <= 3:
            raise ValueError(f"bad schedule {schedule!r}: use parareal:SLICES, "
                             "parareal:SLICES:ITERATIONS or parareal:SLICES:ITERATIONS:TOL")
        slices = _number(parts[0], schedule, int)
        iterations = _number(parts[1], schedule, int) if len(parts) > 1 else None
        tolerance = _number(parts[2], schedule) if len(parts) > 2 else 1e-6
        if slices < 1:
            raise ValueError(f"bad schedule {schedule!r}: at least one slice")
        return Parareal(slices, iterations, tolerance)
    if text in (SOLVER, f"{SOLVER}-only"):
        return [(SOLVER, 1)]
    if text in (SURROGATE, f"{SURROGATE}-only"):
        return [(SURROGATE, 1)]
    pattern = []
    for part in text.split(","):
        name, sep, count = part.strip().partition(":")
        if name not in (SOLVER, SURROGATE) or not sep or not count.isdigit() or int(count) < 1:
            raise ValueError(f"bad schedule {schedule!r}: use 'solver', 'surrogate', "
                             "'adaptive', 'adaptive:TOL', 'parareal:SLICES' or a pattern like "
                             "'surrogate:4,solver:1'")
        pattern.append((name, int(count)))
    return pattern


def schedule_text(plan: Plan) -> str:
    """The schedule text of a parsed schedule, for labels and messages: parsing it gives a
    schedule that runs the same (``Parareal(4, None, 1e-3)`` reads
    ``"parareal:4:4:0.001"``, the iterations made explicit)."""
    if isinstance(plan, str):
        return plan
    if isinstance(plan, Adaptive):
        return f"adaptive:{plan.tolerance!r}" + (f":{plan.indicator}" if plan.indicator else "")
    if isinstance(plan, Parareal):
        text = f"parareal:{plan.slices}"
        if plan.iterations is not None or plan.tolerance != Parareal.tolerance:
            iterations = plan.slices if plan.iterations is None else plan.iterations
            text += f":{iterations}"
        if plan.tolerance != Parareal.tolerance:
            text += f":{plan.tolerance!r}"
        return text
    return ",".join(f"{name}:{count}" for name, count in plan)


def _pattern_component(pattern: list[tuple[str, int]], step: int) -> str:
    period = sum(count for _, count in pattern)
    position = step % period
    for name, count in pattern:
        if position < count:
            return name
        position -= count
    raise AssertionError("unreachable")


class HybridRolloutError(ValueError):
    """The solver cannot continue from frames the surrogate made (a fixed schedule)."""


@dataclass
class HybridResult:
    """A hybrid rollout: the frames, who made each, what it cost, how far it is off.

    Attributes
    ----------
    frames : array ``[batch, num_steps, field, *grid]``
        The new frames (the initial history excluded).
    times : array ``[num_steps]``
        Physical time of each frame.
    source : list of str
        Per step: ``solver``, ``surrogate`` or ``fallback``.
    reasons : list of str or None
        Per step: why a fallback happened.
    seconds : dict
        Wall time per component (``solver``, ``surrogate``; the rejected surrogate proposals
        of fallback steps count as surrogate time).
    errors : array ``[num_steps]`` or None
        Relative L2 against the reference trajectory per step (mean over the batch).
    reference_seconds : float or None
        Wall time of the solver-only reference run.
    estimates : list of float or None
        ``"adaptive:TOL"``: per step, the indicator's estimate of the proposal's error
        (largest over the batch; None where the surrogate did not propose).
    parareal : PararealInfo or None
        Parareal: iterations, changes, fine steps, serial and wall seconds.
    wall_seconds : float
        Wall time of the rollout (parareal: with its parallel fine propagations).
    """

    frames: np.ndarray
    times: np.ndarray
    source: list[str]
    reasons: list[str | None]
    seconds: dict[str, float] = field(default_factory=dict)
    errors: np.ndarray | None = None
    reference_seconds: float | None = None
    estimates: list[float | None] | None = None
    parareal: PararealInfo | None = None
    wall_seconds: float | None = None

    @property
    def steps(self) -> dict[str, int]:
        counts = {name: self.source.count(name) for name in (SOLVER, SURROGATE, FALLBACK)}
        if PARAREAL in self.source:
            counts[PARAREAL] = self.source.count(PARAREAL)
        return counts


def hybrid_rollout(solver, surrogate, history: np.ndarray, num_steps: int,
                   schedule: str | Plan = "surrogate:4,solver:1", *, time: float = 0.0,
                   parameters: Mapping[str, np.ndarray] | Conditions | None = None,
                   reference: np.ndarray | bool | None = True,
                   checks: Checks | None = None, indicator=None, coarse=None, second=None,
                   executor=None) -> HybridResult:
    """Advance ``num_steps`` with the solver and the surrogate taking turns by ``schedule``.

    Parameters
    ----------
    solver, surrogate : Stepper
        Same dt; each reads the last ``window`` frames it needs, and gets the entries of
        ``parameters`` named in its ``parameter_names`` (all if it has none). The surrogate
        may advance a subset of the solver's fields; on its steps the others keep their
        last values.
    history : array ``[batch, window, field, *grid]``
        At least the larger of the two windows; its last frame is at ``time``.
    schedule : str or Plan
        See :func:`parse_schedule`; a schedule it has parsed is taken as it is (a caller
        running one schedule many times parses it once).
    parameters : mapping or Conditions, optional
        Per-sample inputs for both (viscosity, forcing, …); each stepper gets those in its
        ``parameter_names``. A :class:`Conditions` also carries time-dependent forcing.
    reference : array, True or None
        The solver-only trajectory ``[batch, num_steps, field, *grid]`` to measure errors
        against; True computes it (and times it); None skips the errors.
    checks : Checks, optional
        The ``"adaptive"`` schedule's checks; default the solver's own (``solver.checks``).
    indicator : str or callable, optional
        The error indicator of ``"adaptive:TOL"`` (overrides the schedule's; default
        :data:`ssmpde.coupling.indicators.DEFAULT_INDICATOR`).
    coarse, second : Stepper, optional
        The ``coarse`` indicator's solver, the ``ensemble`` indicator's second surrogate.
    executor : object with ``submit``, optional
        Parareal: runs the fine propagations of an iteration in parallel
        (``concurrent.futures`` executor or ``distributed.Client``).
    """
    if solver.dt != surrogate.dt:
        raise ValueError(f"the solver steps {solver.dt} and the surrogate {surrogate.dt}: "
                         "configure the solver's record interval to the surrogate's dt")
    history = check_history(history, solver, surrogate)
    plan = parse_schedule(schedule) if isinstance(schedule, str) else schedule
    label = schedule if isinstance(schedule, str) else schedule_text(plan)
    checks = checks or getattr(solver, "checks", None) or Checks()
    seconds = {SOLVER: 0.0, SURROGATE: 0.0}
    source: list[str] = []
    reasons: list[str | None] = []
    estimates: list[float | None] = []
    estimate_of = None
    if isinstance(plan, Adaptive):
        estimate_of = make_indicator(indicator or plan.indicator or DEFAULT_INDICATOR, solver,
                                     coarse=coarse, second=second)
        seconds["indicator"] = 0.0

    def step(k: int, window: np.ndarray) -> np.ndarray:
        now = time + k * solver.dt
        if isinstance(plan, Adaptive):
            component = SURROGATE if plan.tolerance > 0 else SOLVER
        else:
            component = SURROGATE if plan == "adaptive" else _pattern_component(plan, k)
        reason = estimate = None
        started = _time.perf_counter()
        if component == SURROGATE:
            frame = advance(surrogate, window, now, parameters, solver.fields)
            seconds[SURROGATE] += _time.perf_counter() - started
            if plan == "adaptive":
                reason = checks.failure(window[:, -1], frame, solver.fields)
            elif estimate_of is not None:
                started = _time.perf_counter()
                estimate = float(np.max(estimate_of(window, frame, time=now,
                                                    parameters=parameters)))
                seconds["indicator"] += _time.perf_counter() - started
                if not estimate < plan.tolerance:  # NaN is rejected too
                    reason = f"estimated error {estimate:.3g} >= tolerance {plan.tolerance:g}"
            if reason is not None:
                component = FALLBACK
                started = _time.perf_counter()
        if component != SURROGATE:
            try:
                frame = advance(solver, window, now, parameters)
            except (ValueError, SolverDivergedError) as error:
                if SURROGATE not in source[-solver.window:]:
                    raise
                # A fixed schedule handed the solver an unphysical surrogate frame (negative
                # density, say): say so, and name the schedule that would have caught it.
                raise HybridRolloutError(
                    f"step {k + 1} of schedule {label!r}: the solver cannot continue from "
                    f"the surrogate's frames ({error}); the adaptive schedule checks every "
                    "surrogate frame and falls back to the solver") from error
            seconds[SOLVER] += _time.perf_counter() - started
        source.append(component)
        reasons.append(reason)
        estimates.append(estimate)
        return frame

    wall_started = _time.perf_counter()
    times = time + solver.dt * np.arange(1, num_steps + 1)
    if isinstance(plan, Parareal):
        frames, info = parareal(solver, surrogate, history, num_steps, slices=plan.slices,
                                max_iterations=plan.iterations, tolerance=plan.tolerance,
                                time=time, parameters=parameters, executor=executor)
        result = HybridResult(frames, times, [PARAREAL] * num_steps, [None] * num_steps,
                              {SOLVER: info.fine_seconds, SURROGATE: info.coarse_seconds},
                              parareal=info)
    else:
        frames = autoregressive(step, history, num_steps)
        result = HybridResult(frames, times, source, reasons, seconds, estimates=estimates)
    result.wall_seconds = _time.perf_counter() - wall_started
    if reference is True:
        started = _time.perf_counter()
        reference = rollout(solver, history, num_steps, time=time, parameters=parameters)
        result.reference_seconds = _time.perf_counter() - started
    if reference is not None and reference is not False:
        reference = np.asarray(reference)
        if reference.shape != result.frames.shape:
            raise ValueError(f"reference must have shape {list(result.frames.shape)}, got "
                             f"{list(reference.shape)}")
        result.errors = np.array([relative_l2(result.frames[:, k], reference[:, k],
                                              fields=True).mean() for k in range(num_steps)])
    return result


SOURCE_CODES = {SOLVER: 0, SURROGATE: 1, FALLBACK: 2, PARAREAL: 3}


def to_dataset(result: HybridResult, *, solver, schedule: str, surrogate=None,
               samples=None, equation: str | None = None,
               units: Mapping[str, str] | None = None) -> xr.Dataset:
    """A hybrid rollout as an ssmpde dataset (schema of :mod:`ssmpde.data`).

    Variables: one per field ``(sample, time, *grid)``; ``source (time)``, coded 0 / 1 / 2
    for solver / surrogate / fallback (CF ``flag_values`` and ``flag_meanings``);
    ``rel_l2_error (time)`` against the solver-only reference when it was computed.
    Attributes record the schedule, the solver config, the checkpoint, the fallback reasons
    and the wall time of each component.
    """
    frames = result.frames
    batch, steps = frames.shape[:2]
    grid_shape = frames.shape[3:]
    dims = SPATIAL_DIMS[len(grid_shape)]
    coords = {SAMPLE: sample_coordinate(
                  np.arange(batch) if samples is None else np.asarray(samples)),
              TIME: time_coordinate(result.times)}
    solver_coords = solver.coordinates() if hasattr(solver, "coordinates") else {}
    for dim, n in zip(dims, grid_shape):
        if dim in solver_coords and solver_coords[dim].size == n:
            coords[dim] = solver_coords[dim]
            bounds = coords[dim].attrs.get("bounds")
            if bounds in solver_coords:  # cell edges of finite-volume grids
                coords[bounds] = solver_coords[bounds]
        else:
            coords[dim] = grid_coordinates(grid_shape)[dim]
    units = dict(units or {})
    specs = solver.variables() if hasattr(solver, "variables") else {}
    data_vars = {}
    for f, name in enumerate(solver.fields):
        spec = specs.get(name)
        # The solver's own attributes (cell_methods of finite volumes among them), role state.
        attrs = {**(spec.attrs() if hasattr(spec, "attrs") else {}),
                 "long_name": getattr(spec, "long_name", name),
                 "units": units.get(name, getattr(spec, "units", "1")), ROLE: "state"}
        data_vars[name] = xr.DataArray(frames[:, :, f], dims=(SAMPLE, TIME, *dims),
                                       attrs=attrs)
    data_vars["source"] = xr.DataArray(
        np.array([SOURCE_CODES[s] for s in result.source], dtype=np.int8), dims=(TIME,),
        attrs={"long_name": "component that made the frame", "units": "1",
               ROLE: "diagnostic",
               "flag_values": np.array(list(SOURCE_CODES.values()), dtype=np.int8),
               "flag_meanings": " ".join(SOURCE_CODES)})
    if result.errors is not None:
        data_vars["rel_l2_error"] = xr.DataArray(
            result.errors, dims=(TIME,),
            attrs={"long_name": "relative L2 error against the solver-only run, mean over "
                                "samples", "units": "1", ROLE: "diagnostic"})
    solver_config = getattr(solver, "config", None)
    config = {
        "schedule": schedule,
        "solver": dataclasses.asdict(solver_config) if dataclasses.is_dataclass(solver_config)
        else None,
        "checkpoint": getattr(surrogate, "source", None),
        "seconds": result.seconds, "reference_seconds": result.reference_seconds,
        "steps": result.steps,
        "fallback_reasons": {str(k): r for k, r in enumerate(result.reasons) if r},
        "wall_seconds": result.wall_seconds,
    }
    if result.estimates is not None and any(e is not None for e in result.estimates):
        config["error_estimates"] = result.estimates
    if result.parareal is not None:
        config["parareal"] = dataclasses.asdict(result.parareal)
    return build_dataset(
        data_vars, coords=coords,
        equation=equation or getattr(solver, "name", "unknown"), config=config,
        title=f"Hybrid rollout ({schedule}) of {', '.join(solver.fields)}",
        references="ssmpde hybrid solver-surrogate rollout",
        solver=type(solver).__name__,
        boundary_conditions=getattr(solver, "boundary_conditions", None),
        vectors=getattr(solver, "vectors", None))
