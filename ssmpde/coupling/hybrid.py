"""Rollouts with any Stepper, and hybrid solver–surrogate rollouts.

A schedule says which component advances each step:

* ``"solver"`` (solver only), ``"surrogate"`` (surrogate only);
* a repeating pattern ``"surrogate:4,solver:1"`` (four surrogate steps, then the solver
  re-anchors, and so on);
* ``"adaptive"``: the surrogate proposes every step, and the step goes to the solver
  (recorded as ``fallback``, with the reason) when the proposal fails a physical check: a
  non-finite value, a drift of the spatial mean (mean vorticity is conserved), or growth of
  the mean square (enstrophy) beyond a bound.

States are NumPy ``[batch, window, field, *grid]`` histories, as in the Stepper protocol.
"""

from __future__ import annotations

import dataclasses
import time as _time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import xarray as xr

from ssmpde import data as schema

__all__ = ["Checks", "HybridResult", "hybrid_rollout", "parse_schedule", "rollout",
           "to_dataset"]

SOLVER, SURROGATE, FALLBACK = "solver", "surrogate", "fallback"


def parse_schedule(schedule: str) -> list[tuple[str, int]] | str:
    """``"surrogate:4,solver:1"`` → ``[("surrogate", 4), ("solver", 1)]``; ``"solver"``,
    ``"surrogate"`` (also ``…-only``) → one-entry patterns; ``"adaptive"`` → ``"adaptive"``."""
    text = schedule.strip().lower()
    if text == "adaptive":
        return "adaptive"
    if text in (SOLVER, f"{SOLVER}-only"):
        return [(SOLVER, 1)]
    if text in (SURROGATE, f"{SURROGATE}-only"):
        return [(SURROGATE, 1)]
    pattern = []
    for part in text.split(","):
        name, sep, count = part.strip().partition(":")
        if name not in (SOLVER, SURROGATE) or not sep or not count.isdigit() or int(count) < 1:
            raise ValueError(f"bad schedule {schedule!r}: use 'solver', 'surrogate', "
                             "'adaptive' or a pattern like 'surrogate:4,solver:1'")
        pattern.append((name, int(count)))
    return pattern


def _pattern_component(pattern: list[tuple[str, int]], step: int) -> str:
    period = sum(count for _, count in pattern)
    position = step % period
    for name, count in pattern:
        if position < count:
            return name
        position -= count
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Checks:
    """Physical checks of the adaptive schedule, per sample of a proposed frame.

    Attributes
    ----------
    mean_tolerance : float
        Largest allowed change of a field's spatial mean in one step, relative to the
        field's standard deviation in the previous frame (mean vorticity is conserved).
    growth_bound : float
        Largest allowed ratio of the mean square (enstrophy for vorticity) to the previous
        frame's.
    """

    mean_tolerance: float = 0.05
    growth_bound: float = 1.5

    def failure(self, previous: np.ndarray, proposed: np.ndarray) -> str | None:
        """Why ``proposed`` ``[batch, field, *grid]`` is rejected, or None."""
        if not np.isfinite(proposed).all():
            return "non-finite values"
        axes = tuple(range(2, proposed.ndim))
        scale = previous.std(axis=axes) + 1e-12
        drift = np.abs(proposed.mean(axis=axes) - previous.mean(axis=axes)) / scale
        if (drift > self.mean_tolerance).any():
            return f"mean drift {drift.max():.3g} x std > {self.mean_tolerance}"
        growth = np.square(proposed).mean(axis=axes) / (np.square(previous).mean(axis=axes)
                                                        + 1e-300)
        if (growth > self.growth_bound).any():
            return f"mean-square growth {growth.max():.3g} > {self.growth_bound}"
        return None


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
    """

    frames: np.ndarray
    times: np.ndarray
    source: list[str]
    reasons: list[str | None]
    seconds: dict[str, float] = field(default_factory=dict)
    errors: np.ndarray | None = None
    reference_seconds: float | None = None

    @property
    def steps(self) -> dict[str, int]:
        return {name: self.source.count(name) for name in (SOLVER, SURROGATE, FALLBACK)}


def _check_history(history: np.ndarray, *steppers) -> np.ndarray:
    history = np.asarray(history, dtype=np.float64)
    need = max(s.window for s in steppers)
    if history.ndim < 4 or history.shape[1] < need:
        raise ValueError(f"history must be [batch, window >= {need}, field, *grid], got "
                         f"{list(history.shape)}")
    fields = {tuple(s.fields) for s in steppers}
    if len(fields) > 1:
        raise ValueError(f"the steppers advance different fields: {sorted(fields)}")
    if history.shape[2] != len(steppers[0].fields):
        raise ValueError(f"history has {history.shape[2]} fields; the steppers advance "
                         f"{list(steppers[0].fields)}")
    return history


def _advance(stepper, frames: list[np.ndarray], time: float, parameters):
    history = np.stack(frames[-stepper.window:], axis=1)
    names = getattr(stepper, "parameter_names", None)
    if parameters is not None and names is not None:
        # Each stepper gets the parameters it takes: a solver needs viscosity, a
        # surrogate may also be conditioned on the forcing field.
        parameters = {k: v for k, v in parameters.items() if k in names}
    return np.asarray(stepper.step(history, time=time, parameters=parameters),
                      dtype=np.float64)


def rollout(stepper, history: np.ndarray, num_steps: int, *, time: float = 0.0,
            parameters: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
    """``num_steps`` steps of one Stepper from ``history`` (its last frame at ``time``):
    ``[batch, num_steps, field, *grid]``."""
    history = _check_history(history, stepper)
    frames = list(np.moveaxis(history, 1, 0))
    out = []
    for k in range(num_steps):
        frame = _advance(stepper, frames, time + k * stepper.dt, parameters)
        frames.append(frame)
        out.append(frame)
    return np.stack(out, axis=1)


def relative_l2(prediction: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per-sample ‖pred − true‖₂ / ‖true‖₂ over every axis but the first."""
    difference = (prediction - target).reshape(len(target), -1)
    return np.linalg.norm(difference, axis=1) / np.maximum(
        np.linalg.norm(target.reshape(len(target), -1), axis=1), 1e-300)


def hybrid_rollout(solver, surrogate, history: np.ndarray, num_steps: int,
                   schedule: str = "surrogate:4,solver:1", *, time: float = 0.0,
                   parameters: Mapping[str, np.ndarray] | None = None,
                   reference: np.ndarray | bool | None = True,
                   checks: Checks | None = None) -> HybridResult:
    """Advance ``num_steps`` with the solver and the surrogate taking turns by ``schedule``.

    Parameters
    ----------
    solver, surrogate : Stepper
        Same fields and dt; each reads the last ``window`` frames it needs, and gets the
        entries of ``parameters`` named in its ``parameter_names`` (all if it has none).
    history : array ``[batch, window, field, *grid]``
        At least the larger of the two windows; its last frame is at ``time``.
    schedule : str
        See :func:`parse_schedule`.
    parameters : mapping, optional
        Per-sample parameters for both (viscosity, forcing, …).
    reference : array, True or None
        The solver-only trajectory ``[batch, num_steps, field, *grid]`` to measure errors
        against; True computes it (and times it); None skips the errors.
    checks : Checks, optional
        The adaptive schedule's checks.
    """
    if solver.dt != surrogate.dt:
        raise ValueError(f"the solver steps {solver.dt} and the surrogate {surrogate.dt}: "
                         "configure the solver's record interval to the surrogate's dt")
    history = _check_history(history, solver, surrogate)
    plan = parse_schedule(schedule)
    checks = checks or Checks()
    frames = list(np.moveaxis(history, 1, 0))
    seconds = {SOLVER: 0.0, SURROGATE: 0.0}
    source: list[str] = []
    reasons: list[str | None] = []
    out = []
    for k in range(num_steps):
        now = time + k * solver.dt
        component = SURROGATE if plan == "adaptive" else _pattern_component(plan, k)
        reason = None
        started = _time.perf_counter()
        if component == SURROGATE:
            frame = _advance(surrogate, frames, now, parameters)
            seconds[SURROGATE] += _time.perf_counter() - started
            if plan == "adaptive":
                reason = checks.failure(frames[-1], frame)
            if reason is not None:
                component = FALLBACK
                started = _time.perf_counter()
        if component != SURROGATE:
            frame = _advance(solver, frames, now, parameters)
            seconds[SOLVER] += _time.perf_counter() - started
        frames.append(frame)
        out.append(frame)
        source.append(component)
        reasons.append(reason)
    result = HybridResult(np.stack(out, axis=1), time + solver.dt * np.arange(1, num_steps + 1),
                          source, reasons, seconds)
    if reference is True:
        started = _time.perf_counter()
        reference = rollout(solver, history, num_steps, time=time, parameters=parameters)
        result.reference_seconds = _time.perf_counter() - started
    if reference is not None and reference is not False:
        reference = np.asarray(reference)
        if reference.shape != result.frames.shape:
            raise ValueError(f"reference must have shape {list(result.frames.shape)}, got "
                             f"{list(reference.shape)}")
        result.errors = np.array([relative_l2(result.frames[:, k], reference[:, k]).mean()
                                  for k in range(num_steps)])
    return result


SOURCE_CODES = {SOLVER: 0, SURROGATE: 1, FALLBACK: 2}


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
    dims = schema.SPATIAL_DIMS[len(grid_shape)]
    coords = {schema.SAMPLE: schema.sample_coordinate(
                  np.arange(batch) if samples is None else np.asarray(samples)),
              schema.TIME: schema.time_coordinate(result.times)}
    solver_coords = solver.coordinates() if hasattr(solver, "coordinates") else {}
    for dim, n in zip(dims, grid_shape):
        if dim in solver_coords and solver_coords[dim].size == n:
            coords[dim] = solver_coords[dim]
        else:
            coords[dim] = schema.grid_coordinates(n, ndim=len(grid_shape))[dim]
    units = dict(units or {})
    specs = solver.variables() if hasattr(solver, "variables") else {}
    data_vars = {}
    for f, name in enumerate(solver.fields):
        spec = specs.get(name)
        attrs = {"long_name": getattr(spec, "long_name", name),
                 "units": units.get(name, getattr(spec, "units", "1"))}
        data_vars[name] = xr.DataArray(frames[:, :, f], dims=(schema.SAMPLE, schema.TIME, *dims),
                                       attrs=attrs)
    data_vars["source"] = xr.DataArray(
        np.array([SOURCE_CODES[s] for s in result.source], dtype=np.int8), dims=(schema.TIME,),
        attrs={"long_name": "component that made the frame", "units": "1",
               "flag_values": np.array(list(SOURCE_CODES.values()), dtype=np.int8),
               "flag_meanings": " ".join(SOURCE_CODES)})
    if result.errors is not None:
        data_vars["rel_l2_error"] = xr.DataArray(
            result.errors, dims=(schema.TIME,),
            attrs={"long_name": "relative L2 error against the solver-only run, mean over "
                                "samples", "units": "1"})
    solver_config = getattr(solver, "config", None)
    config = {
        "schedule": schedule,
        "solver": dataclasses.asdict(solver_config) if dataclasses.is_dataclass(solver_config)
        else None,
        "checkpoint": getattr(surrogate, "source", None),
        "seconds": result.seconds, "reference_seconds": result.reference_seconds,
        "steps": result.steps,
        "fallback_reasons": {str(k): r for k, r in enumerate(result.reasons) if r},
    }
    return schema.build_dataset(
        data_vars, coords=coords,
        equation=equation or getattr(solver, "name", "unknown"), config=config,
        title=f"Hybrid rollout ({schedule}) of {', '.join(solver.fields)}",
        references="ssmpde hybrid solver-surrogate rollout",
        solver=type(solver).__name__)
