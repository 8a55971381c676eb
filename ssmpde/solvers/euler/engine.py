"""The engine of the 2D Euler solver: buffers of one (batch, grid) and the CFL-limited loop.

:func:`integrate` evolves primitive states to a final time (the low-level entry point, the
benchmark's); :func:`fast_step` is one step of the compiled kernel at a given Δt (the
counterpart of :func:`ssmpde.solvers.euler.reference.reference_step` in tests);
:class:`_Engine` holds the buffers and the per-sample clocks that
:class:`ssmpde.solvers.euler.Euler2D` steps. See ``docs/numerics/euler.md``.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from ...core import unknown_name
from ..base import SolverDivergedError, positive_finite
from .kernels import _BOUNDARY_CODES, _SLOTS, _STEP, BOUNDARIES, SERIAL_CELLS, _load
from .variables import conserved_variables

#: Slope limiters of the primitive-variable reconstruction.
LIMITERS = ("mc", "minmod")
#: A step shorter than this fraction of the interval means the solution has collapsed.
MIN_STEP_FRACTION = 1e-12


def _boundary_pair(boundary: Any) -> tuple[str, str]:
    """``"outflow"`` or ``("outflow", "periodic")`` (x, y) → a validated pair."""
    pair = (boundary, boundary) if isinstance(boundary, str) else tuple(boundary)
    if len(pair) != 2 or any(not isinstance(k, str) or k not in BOUNDARIES for k in pair):
        bad = [k for k in pair if k not in BOUNDARIES] or [boundary]
        raise ValueError(unknown_name("boundary", bad[0], BOUNDARIES)
                         + " Give one kind for all sides or an (x, y) pair.")
    return pair


def _check_numerics(gamma: Any, cfl: Any, limiter: Any) -> None:
    if not positive_finite(gamma) or gamma <= 1.0:
        raise ValueError(f"gamma must be a finite number > 1 (the ratio of specific heats, "
                         f"e.g. 1.4 for air), got {gamma!r}")
    if not positive_finite(cfl) or cfl > 1.0:
        raise ValueError(f"cfl must lie in (0, 1] (0.4 is the default; lower it if a run "
                         f"diverges), got {cfl!r}")
    if limiter not in LIMITERS:
        raise ValueError(unknown_name("limiter", limiter, LIMITERS))


def _check_primitive(primitive: np.ndarray) -> None:
    """One ValueError naming what is wrong with an initial state and how to fix it."""
    if primitive.ndim != 4 or primitive.shape[1] != 5 or min(primitive.shape[2:]) < 1:
        raise ValueError(f"primitive states must have shape [batch, 5, ny, nx] with fields "
                         f"(density, velocity_x, velocity_y, pressure, tracer), got "
                         f"{primitive.shape}")
    for field, name in ((0, "density"), (3, "pressure")):
        values = primitive[:, field]
        if not np.all(np.isfinite(values)) or not np.all(values > 0):
            finite = values[np.isfinite(values)]
            low = f"minimum {finite.min():.3g}" if finite.size else "no finite value"
            if finite.size < values.size:
                low += ", NaN or inf present"
            raise ValueError(f"initial {name} must be positive and finite everywhere ({low}): "
                             f"fix the initial state (a vacuum is not representable)")
    if not np.all(np.isfinite(primitive)):
        raise ValueError("initial velocity or tracer contains NaN or inf: fix the initial state")


class _Engine:
    """Conserved and primitive buffers, scratch and per-sample clocks for one problem size.

    Nothing is allocated per step: the step kernel writes the new primitives into the second
    buffer, and the two are swapped.
    """

    def __init__(self, primitive: np.ndarray, lengths: tuple[float, float], *, gamma: float,
                 boundary: tuple[str, str], limiter: str, cfl: float,
                 potential: np.ndarray | None, rows: int | None = None) -> None:
        batch, _, ny, nx = primitive.shape
        self.batch, self.ny, self.nx = batch, ny, nx
        self.dx, self.dy = lengths[0] / nx, lengths[1] / ny
        self.gamma, self.cfl = float(gamma), float(cfl)
        self.bx, self.by = (_BOUNDARY_CODES[k] for k in boundary)
        self.mc = limiter == "mc"
        self.gravity = potential is not None
        self.phi = (np.zeros((1, 1, 1)) if potential is None
                    else np.ascontiguousarray(potential, dtype=np.float64))
        threads = numba.get_num_threads()
        # Enough blocks for every thread (4 each, for balance); at least 8 rows per block so
        # the two extra rows a block reconstructs stay cheap. Results do not depend on it.
        self.rows = rows or int(min(ny, max(8, -(-batch * ny // (4 * threads)))))
        self.kernel = _STEP[threads > 1 and batch * ny * nx >= SERIAL_CELLS]
        blocks = batch * (-(-ny // self.rows))
        self.W = np.ascontiguousarray(primitive, dtype=np.float64).copy()
        self.W_next = np.empty_like(self.W)
        self.U = np.empty_like(self.W)
        self.scratch = np.zeros((blocks, _SLOTS, nx + 1))
        self.speed = np.zeros((batch, ny))
        self.bad = np.zeros((batch, ny), dtype=np.int64)
        self.dts = np.zeros(batch)
        self.active = np.ones(batch, dtype=np.bool_)
        _load(self.W, self.U, self.gamma, self.dx, self.dy, self.speed, self.bad)

    def evolve(self, duration: float, *, time: float = 0.0,
               hint: str = "") -> np.ndarray:
        """Advance every sample by ``duration`` with its own CFL steps, the last one clipped
        to land on ``time + duration`` exactly; returns the steps per sample."""
        elapsed = np.zeros(self.batch)
        done = np.zeros(self.batch, dtype=np.bool_)
        steps = np.zeros(self.batch, dtype=np.int64)
        while not done.all():
            fastest = self.speed.max(axis=1)
            with np.errstate(divide="ignore"):
                limit = self.cfl / fastest
            remaining = duration - elapsed
            last = (limit >= remaining) & ~done
            np.copyto(self.dts, np.where(last, remaining, limit))
            self.dts[done] = 0.0
            collapsed = ~done & (self.dts < MIN_STEP_FRACTION * duration) & ~last
            if collapsed.any():
                raise SolverDivergedError(
                    f"the CFL time step collapsed (below {MIN_STEP_FRACTION:g} of the interval) "
                    f"by t = {time + float(elapsed[collapsed].min()):g} in batch rows "
                    f"{np.flatnonzero(collapsed).tolist()}: {hint}")
            np.logical_not(done, out=self.active)
            self.kernel(self.U, self.W, self.W_next, self.phi, self.gravity, self.dts,
                        self.active, self.bx, self.by, self.mc, self.gamma, self.dx, self.dy,
                        self.rows, self.scratch, self.speed, self.bad)
            self.W, self.W_next = self.W_next, self.W
            failed = self.active & self.bad.any(axis=1)
            if failed.any():
                raise SolverDivergedError(
                    f"density or pressure became non-positive or non-finite by t = "
                    f"{time + float((elapsed + self.dts)[failed].min()):g} in batch rows "
                    f"{np.flatnonzero(failed).tolist()} (after the first-order fallback): "
                    f"{hint}")
            steps += self.active
            elapsed += self.dts
            elapsed[last] = duration
            done |= last
        return steps


def integrate(primitive, final_time, *, lengths=(1.0, 1.0), gamma=1.4, boundary="periodic",
              limiter="mc", cfl=0.4, potential=None):
    r"""Evolve primitive states of the 2D Euler equations to ``final_time``.

    Second-order MUSCL-Hancock (unsplit), HLLC fluxes, CFL-limited steps; see
    :class:`Euler2D` for the scheme.

    Parameters
    ----------
    primitive : array, shape ``[batch, 5, ny, nx]``
        (ρ, u, v, p, c) at the cell centres of a grid covering ``[0, Lx] × [0, Ly]``;
        ρ and p positive.
    final_time : float
        Time to integrate over (> 0).
    lengths : (float, float)
        ``(Lx, Ly)``; Δx = Lx / nx, Δy = Ly / ny.
    gamma : float
        Ratio of specific heats γ > 1.
    boundary : {"periodic", "outflow", "reflective"} or (x, y) pair of them
    limiter : {"mc", "minmod"}
    cfl : float
        Courant number C in (0, 1]: Δt = C / max over cells of max((|u| + a)/Δx,
        (|v| + a)/Δy), per sample.
    potential : array ``[batch, ny, nx]`` (or ``[1, ny, nx]``, shared), optional
        Static gravitational potential φ at the cell centres; adds
        S = (0, −ρ∇φ, −ρu·∇φ, 0).

    Returns
    -------
    (numpy.ndarray, int)
        The primitive states at ``final_time`` (a new array) and the number of time steps
        (with a batch, the largest number over its samples: each takes its own CFL steps).

    Raises
    ------
    ValueError
        Bad shapes or settings, or non-positive/non-finite initial ρ or p.
    SolverDivergedError
        ρ or p non-positive or non-finite after a step, or the step size collapsing.

    Example
    -------
    >>> x = (np.arange(64) + 0.5) / 64
    >>> prim = np.zeros((1, 5, 4, 64))
    >>> prim[0, 0], prim[0, 3] = np.where(x < 0.5, 1.0, 0.125), np.where(x < 0.5, 1.0, 0.1)
    >>> out, steps = integrate(prim, 0.2, lengths=(1.0, 4 / 64), boundary="outflow")
    >>> out.shape
    (1, 5, 4, 64)
    """
    primitive = np.asarray(primitive, dtype=np.float64)
    _check_primitive(primitive)
    _check_numerics(gamma, cfl, limiter)
    pair = _boundary_pair(boundary)
    if not positive_finite(final_time):
        raise ValueError(f"final_time must be a positive finite number, got {final_time!r}")
    lengths = tuple(float(v) for v in lengths)
    if len(lengths) != 2 or not all(positive_finite(v) for v in lengths):
        raise ValueError(f"lengths must be two positive finite numbers (Lx, Ly), got {lengths}")
    phi = _check_potential(potential, primitive.shape)
    engine = _Engine(primitive, lengths, gamma=gamma, boundary=pair, limiter=limiter, cfl=cfl,
                     potential=phi)
    steps = engine.evolve(float(final_time), hint=_hint(cfl, limiter))
    return engine.W.copy(), int(steps.max())


def fast_step(primitive, dt, *, lengths=(1.0, 1.0), gamma=1.4, boundary="periodic",
              limiter="mc", potential=None, rows=None, parallel=None):
    """One step of the numba kernel at a given Δt (per sample): the fast counterpart of
    :func:`reference_step`, same arguments; ``rows`` is the kernel's block height and
    ``parallel`` picks the parallel or the serial build (default: by grid size, as
    :func:`integrate`); the result depends on neither.

    Returns the primitive states after the step and a boolean ``[batch]`` array: whether
    the sample's new ρ or p is non-positive or non-finite somewhere.
    """
    primitive = np.asarray(primitive, dtype=np.float64)
    _check_primitive(primitive)
    _check_numerics(gamma, 1.0, limiter)
    phi = _check_potential(potential, primitive.shape)
    engine = _Engine(primitive, tuple(float(v) for v in lengths), gamma=gamma,
                     boundary=_boundary_pair(boundary), limiter=limiter, cfl=1.0,
                     potential=phi, rows=rows)
    engine.dts[:] = np.broadcast_to(np.asarray(dt, dtype=np.float64), (engine.batch,))
    engine.W_next.fill(np.nan)  # an unwritten value fails loudly
    kernel = engine.kernel if parallel is None else _STEP[bool(parallel)]
    kernel(engine.U, engine.W, engine.W_next, engine.phi, engine.gravity, engine.dts,
           engine.active, engine.bx, engine.by, engine.mc, engine.gamma, engine.dx, engine.dy,
           engine.rows, engine.scratch, engine.speed, engine.bad)
    return engine.W_next.copy(), engine.bad.any(axis=1)


def _check_potential(potential, shape) -> np.ndarray | None:
    if potential is None:
        return None
    phi = np.asarray(potential, dtype=np.float64)
    if phi.ndim != 3 or phi.shape[1:] != tuple(shape[2:]) or phi.shape[0] not in (1, shape[0]):
        raise ValueError(f"potential must have shape [batch, ny, nx] = "
                         f"{[shape[0], *shape[2:]]} (or batch 1), got {list(phi.shape)}")
    if not np.all(np.isfinite(phi)):
        raise ValueError("potential contains NaN or inf")
    return phi


def _hint(cfl: float, limiter: str) -> str:
    return (f"cfl {cfl:g}, limiter {limiter!r}: lower the cfl number (e.g. 0.2), use "
            "limiter='minmod' for strong shocks, or raise the resolution")


def conserved_totals(primitive: np.ndarray, gamma: float) -> np.ndarray:
    """Per sample the sums of (ρ, ρu, ρv, E, ρc) over the cells: ``[batch, 5]``."""
    conserved = np.stack(conserved_variables(*(primitive[:, k] for k in range(5)), gamma), axis=1)
    return conserved.sum(axis=(2, 3))

