"""Parareal with a learned coarse propagator (Lions, Maday & Turinici 2001).

The horizon is cut into ``slices``; the surrogate (coarse propagator G) sweeps them serially,
the solver (fine propagator F) runs every slice at once from the current start states, and
the correction

    U_{j+1}^{k} = F(U_j^{k-1}) + G(U_j^{k}) − G(U_j^{k-1})

converges to the fine solution: after k iterations the first k slices are exact, so
``max_iterations = slices`` reproduces the fine propagator applied slice after slice, bit for
bit. The fine propagator integrates a slice in one run (``solver.simulate``), restarting
only at slice boundaries. The corrections are applied
to every frame of a slice (not only its end), so the result is a whole trajectory; the start
state of a slice is the last ``window`` frames before it, so surrogates with a history window
work too.

The fine propagations of one iteration are independent tasks: given an ``executor`` (a
``concurrent.futures`` executor or a ``distributed.Client``: anything with ``submit``), they
run in parallel; the solver is rebuilt in each worker from its class and config. A slice
whose start state did not change since the last iteration is not recomputed.
"""

from __future__ import annotations

import threading
import time as _time
from dataclasses import asdict, dataclass, field, is_dataclass

import numpy as np

from ssmpde.core import autoregressive, relative_l2

from ssmpde.cluster import MemoryKills, killed_workers

from .steps import advance, check_history, rollout, stepper_inputs

__all__ = ["PararealInfo", "parareal"]


@dataclass
class PararealInfo:
    """What a parareal run did.

    Attributes
    ----------
    iterations : int
        Corrections made (0: the coarse sweep alone).
    changes : list of float
        Per iteration, the largest relative L2 change of a slice's start state.
    converged : bool
        Whether the last change fell below the tolerance (or every slice became exact).
    fine_steps : int
        Solver steps computed in all, over every slice and iteration.
    fine_seconds, coarse_seconds : float
        Seconds of the fine propagations (as measured in the workers) and of the coarse
        sweeps and corrections.
    serial_seconds : float
        What the run costs on one core: their sum.
    wall_seconds : float
        Wall time of the whole run.
    workers : int
        Fine propagations that could run at once (1 without an executor).
    """

    iterations: int = 0
    changes: list[float] = field(default_factory=list)
    converged: bool = False
    fine_steps: int = 0
    fine_seconds: float = 0.0
    coarse_seconds: float = 0.0
    wall_seconds: float = 0.0
    workers: int = 1

    @property
    def serial_seconds(self) -> float:
        return self.fine_seconds + self.coarse_seconds


#: Solvers rebuilt in this worker process, by (class, config, thread): the key is the
#: configuration itself, so one run never gets a solver built for another.
_SOLVERS: dict = {}


def _fine_task(spec, start, steps, time, parameters):
    """One fine propagation (in a worker): the solver from its spec, ``steps`` steps.

    ``spec`` is the solver itself (serial runs) or ``(class, config)`` with the config as
    a dict (:func:`_config_of`), rebuilt once per worker thread (solvers keep buffers).
    """
    if isinstance(spec, tuple):
        cls, config = spec
        # repr of the config dict: hashable, and exact for floats.
        key = (cls, repr(config), threading.get_ident())
        solver = _SOLVERS.get(key)
        if solver is None:
            solver = _SOLVERS[key] = cls(**config)
    else:
        solver = spec
    started = _time.perf_counter()
    if getattr(solver, "window", 1) == 1 and hasattr(solver, "simulate"):
        # A solver integrates the slice in one run (no restart through the stored grid).
        frames = solver.simulate(start[:, -1], steps, time=time,
                                 parameters=stepper_inputs(solver, parameters, time))[:, 1:]
    else:
        frames = rollout(solver, start, steps, time=time, parameters=parameters)
    return frames, _time.perf_counter() - started


def _slices(num_steps: int, slices: int) -> list[int]:
    base, extra = divmod(num_steps, slices)
    return [base + (j < extra) for j in range(slices)]


def _workers(executor) -> int:
    if executor is None:
        return 1
    info = getattr(executor, "scheduler_info", None)
    if info is not None:  # distributed.Client
        return max(1, sum(w.get("nthreads", 1) for w in info()["workers"].values()))
    return int(getattr(executor, "_max_workers", 1))


def parareal(solver, surrogate, history: np.ndarray, num_steps: int, *, slices: int,
             max_iterations: int | None = None, tolerance: float = 1e-6, time: float = 0.0,
             parameters=None, executor=None) -> tuple[np.ndarray, PararealInfo]:
    """Advance ``num_steps`` by parareal: surrogate coarse, solver fine.

    Parameters
    ----------
    solver, surrogate : Stepper
        Fine and coarse propagators (same dt; the surrogate may advance a subset of the
        solver's fields, as in :func:`~ssmpde.coupling.hybrid_rollout`).
    history : array ``[batch, window, field, *grid]``
        The start, its last frame at ``time``.
    slices : int
        Time slices, 1 <= slices <= num_steps; each has at least ``window`` steps.
    max_iterations : int, optional
        Corrections at most (default ``slices``, which makes the result the fine solution).
    tolerance : float
        Stop when no slice's start state changed by more than this (relative L2) in an
        iteration.
    parameters : mapping or Conditions, optional
    executor : object with ``submit``, optional
        Runs the fine propagations of an iteration in parallel.

    Returns
    -------
    frames : array ``[batch, num_steps, field, *grid]``
    info : PararealInfo
    """
    wall_started = _time.perf_counter()
    history = check_history(history, solver, surrogate)
    if isinstance(slices, bool) or not isinstance(slices, int) or not 1 <= slices <= num_steps:
        raise ValueError(f"slices must be an integer in 1..{num_steps} (the steps), got "
                         f"{slices!r}")
    max_iterations = slices if max_iterations is None else max_iterations
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) \
            or max_iterations < 0:
        raise ValueError(f"max_iterations must be a non-negative integer, got "
                         f"{max_iterations!r}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance!r}")
    window = max(solver.window, surrogate.window)
    lengths = _slices(num_steps, slices)
    if min(lengths) < window:
        raise ValueError(f"{slices} slices of {num_steps} steps are shorter than the window "
                         f"of {window} frames: use at most {num_steps // window} slices")
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    info = PararealInfo(workers=_workers(executor))
    spec = solver if executor is None else (type(solver), _config_of(solver))
    fields = tuple(solver.fields)

    def coarse(start, j):
        started = _time.perf_counter()
        frames = autoregressive(
            lambda k, w: advance(surrogate, w, time + (offsets[j] + k) * solver.dt,
                                 parameters, fields),
            start, lengths[j])
        info.coarse_seconds += _time.perf_counter() - started
        return frames

    def tail(start, frames):
        return np.concatenate([start, frames], axis=1)[:, -window:]

    # Iteration 0: the coarse sweep.
    starts = [history[:, -window:]]
    predicted = []
    for j in range(slices):
        predicted.append(coarse(starts[j], j))
        starts.append(tail(starts[j], predicted[j]))
    result = list(predicted)
    fine: list = [None] * slices
    fine_from: list = [None] * slices
    for k in range(1, max_iterations + 1):
        # Fine propagations from the current starts (those that changed), in parallel.
        todo = [j for j in range(slices)
                if fine_from[j] is None or not np.array_equal(fine_from[j], starts[j])]
        jobs = {}
        for j in todo:
            arguments = (spec, starts[j], lengths[j], time + offsets[j] * solver.dt,
                         parameters)
            jobs[j] = (executor.submit(_fine_task, *arguments) if executor is not None
                       else _fine_task(*arguments))
        with MemoryKills() as kills:  # a local cluster's nannies log here while we wait
            for j in todo:
                try:
                    frames, seconds = jobs[j].result() if executor is not None else jobs[j]
                except Exception as error:
                    if type(error).__name__ != "KilledWorker":
                        raise
                    kind, text = killed_workers(executor, kills, 0, "--samples")
                    raise kind(f"parareal: the fine propagation of slice {j + 1} of {slices} "
                               f"(steps {offsets[j]}..{offsets[j + 1] - 1}) failed: "
                               f"{text}") from error
                fine[j], fine_from[j] = frames, starts[j]
                info.fine_seconds += seconds
                info.fine_steps += lengths[j]
        # The serial correction sweep.
        new_starts = [starts[0]]
        change = 0.0
        for j in range(slices):
            if np.array_equal(new_starts[j], starts[j]):
                # An unchanged start: the correction is exactly zero (G − G), so the slice is
                # the fine propagation bit for bit.
                frames, now = fine[j], predicted[j]
            else:
                now = coarse(new_starts[j], j)
                frames = fine[j] + (now - predicted[j])
            predicted[j], result[j] = now, frames
            new_starts.append(tail(new_starts[j], frames))
            change = max(change, float(np.max(relative_l2(new_starts[j + 1], starts[j + 1],
                                                          fields=True, field_axis=2))))
        starts = new_starts
        info.iterations, info.changes = k, info.changes + [change]
        if change <= tolerance:
            info.converged = True
            break
    if max_iterations >= slices and info.iterations >= slices:
        info.converged = True
    info.wall_seconds = _time.perf_counter() - wall_started
    return np.concatenate(result, axis=1), info


def _config_of(solver) -> dict:
    config = getattr(solver, "config", None)
    if not is_dataclass(config):
        raise ValueError("parallel parareal rebuilds the solver in each worker from its "
                         "config dataclass; this fine propagator has none: pass executor=None")
    return asdict(config)
