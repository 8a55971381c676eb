"""Hybrid solver–surrogate rollouts: a schedule over two steppers, and the rollout as a dataset.

The schedules (which component advances each step: the solver or the surrogate alone, a
fixed pattern, ``adaptive`` with physical checks, ``adaptive:TOL`` error control, parareal)
are named objects in :mod:`ssmpde.coupling.schedules`; :func:`hybrid_rollout` hands the
rollout to the schedule and measures it against the solver.

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

import numpy as np
import xarray as xr

from ssmpde.core import relative_l2
from ssmpde.data import (ROLE, SAMPLE, SPATIAL_DIMS, TIME, build_dataset, grid_coordinates,
                         sample_coordinate, time_coordinate)
from ssmpde.solvers.base import Checks

from .schedules import (FALLBACK, PARAREAL, SOLVER, SURROGATE, BaseSchedule, HybridResult, Rollout,
                        as_schedule)
from .steps import Conditions, check_history, rollout

__all__ = ["hybrid_rollout", "to_dataset"]


def hybrid_rollout(solver, surrogate, history: np.ndarray, num_steps: int,
                   schedule: str | BaseSchedule = "surrogate:4,solver:1", *, time: float = 0.0,
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
    schedule : str or BaseSchedule
        Its text (:func:`~ssmpde.coupling.schedules.parse_schedule`) or a schedule already
        parsed (a caller running one schedule many times parses it once).
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
    plan = as_schedule(schedule)
    run = Rollout(solver, surrogate, time, parameters,
                  checks or getattr(solver, "checks", None) or Checks(), plan.text(),
                  indicator=indicator, coarse=coarse, second=second, executor=executor)
    wall_started = _time.perf_counter()
    result = plan.run(run, history, num_steps)
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
