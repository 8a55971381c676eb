"""The time-stepping engine of :class:`~ssmpde.solvers.navier_stokes.NavierStokes2D`.

numba kernels (one fused pass per stage, written into preallocated buffers), FFTW plans and
the groups of samples that run through a record interval side by side: the fast path whose
plain NumPy oracle is :func:`~ssmpde.solvers.navier_stokes.reference_step` (and
:func:`~ssmpde.solvers.navier_stokes.reference_etdrk4_step`). The solver decides the steps;
the engine takes them. See ``docs/numerics/navier_stokes.md``.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from .spectral import (RealFFT, advection, dealias_mask, solver_threads, spectral_velocity,
                       vorticity_wavenumbers)

__all__ = ["IMEX_STAGES", "Engine"]

# Spalart, Moser & Rogers (1991), J. Comput. Phys. 96, low-storage RK3 / Crank–Nicolson:
# explicit weights (gamma, zeta), implicit weights alpha = beta, with alpha+beta = gamma+zeta.
_RK3_GAMMA = (8.0 / 15.0, 5.0 / 12.0, 3.0 / 4.0)
_RK3_ZETA = (0.0, -17.0 / 60.0, -5.0 / 12.0)
_RK3_ALPHA = (4.0 / 15.0, 1.0 / 15.0, 1.0 / 6.0)
_RK3_NODES = (0.0, 8.0 / 15.0, 2.0 / 3.0)  # stage start times, in units of the step

#: The implicit–explicit schemes' stages ``(alpha, gamma, zeta, node)``: Euler–CN is the single
#: stage α = ½, γ = 1, ζ = 0; RK3/CN the Spalart–Moser–Rogers three.
IMEX_STAGES = {"euler-cn": ((0.5, 1.0, 0.0, 0.0),),
               "rk3-cn": tuple(zip(_RK3_ALPHA, _RK3_GAMMA, _RK3_ZETA, _RK3_NODES))}


# ---------------------------------------------------------------------------------------
# numba kernels: one fused pass per stage, written into preallocated buffers. Each is
# compiled twice: parallel over rows (one group of samples uses every core) and serial with
# the GIL released (several groups run side by side, one per core). Same arithmetic.
# ---------------------------------------------------------------------------------------
#: The one Biot–Savart step and advection product (:mod:`ssmpde.solvers.spectral`), compiled
#: on scalars for the kernels below. The velocity is left to LLVM to inline: numba's own
#: inlining of its pairs trips the parallel builds' array analysis (numba 0.68).
_velocity_at = numba.njit(cache=True)(spectral_velocity)
_advection_at = numba.njit(inline="always", cache=True)(advection)


@numba.njit(inline="always", cache=True)
def _gradients_at(out, b, i, j, s_re, s_im, k_y, k_x, inv_lap, scale):  # pragma: no cover
    """out[b, 0..3, i, j] = (û, v̂, ω̂x, ω̂y) of the state s · scale at one mode
    (:func:`~ssmpde.solvers.spectral.spectral_velocity`). Real and imaginary parts spelled
    out: numba's complex product follows C99 Annex G (inf/NaN branches) and does not
    vectorise; multiplying by i·k is only a swap."""
    u, v, w_x, w_y = _velocity_at(s_re * scale, s_im * scale, k_y, k_x, inv_lap)
    out[b, 0, i, j] = complex(u[0], u[1])
    out[b, 1, i, j] = complex(v[0], v[1])
    out[b, 2, i, j] = complex(w_x[0], w_x[1])
    out[b, 3, i, j] = complex(w_y[0], w_y[1])


@numba.njit(inline="always", cache=True)
def _explicit_at(f, g, has_shift, c, s, weight, n_hat):  # pragma: no cover
    """The explicit term E = f̂(t) − weight · N̂ at one mode, by parts (see
    :func:`_gradients_at`): f̂(t) = c F̂ + s Ĝ with c = cos φ, s = sin φ of the moving
    forcing's phase (``has_shift``; F̂ alone otherwise), ``weight`` the dealiasing mask.
    Values, not arrays and indices: numba then compiles the serial kernels' loops as tightly
    as if the lines stood in them (5x faster, measured)."""
    e_re = f.real * c
    e_im = f.imag * c
    if has_shift:
        e_re += g.real * s
        e_im += g.imag * s
    return e_re - weight * n_hat.real, e_im - weight * n_hat.imag


def _spectral_gradients(w_hat, ky, kx, inv_lap, scale, active, out):  # pragma: no cover
    """out[:, 0..3] = (û, v̂, ω̂x, ω̂y) · scale, with u = ∂yψ, v = −∂xψ, ψ̂ = ω̂ / λ."""
    batch, n, m = w_hat.shape
    for row in numba.prange(batch * n):
        b = row // n
        i = row % n
        if not active[b]:
            continue
        k_y = ky[i]
        for j in range(m):
            w = w_hat[b, i, j]
            _gradients_at(out, b, i, j, w.real, w.imag, k_y, kx[j], inv_lap[i, j], scale)


def _advection(fields, active, out):  # pragma: no cover
    """out = u ω_x + v ω_y in physical space."""
    batch, n, n2 = out.shape
    for row in numba.prange(batch * n):
        b = row // n
        i = row % n
        if not active[b]:
            continue
        for j in range(n2):
            out[b, i, j] = _advection_at(fields[b, 0, i, j], fields[b, 1, i, j],
                                         fields[b, 2, i, j], fields[b, 3, i, j])


def _imex_stage(w_hat, nonlinear_hat, previous, forcing, forcing_shift, has_shift, f_cos,
                f_sin, mask, lap, viscosity, drag, dt, active, alpha, gamma, zeta,
                store_previous):  # pragma: no cover
    """One implicit–explicit stage: CN-type diffusion and drag, explicit advection and forcing.

    E = −mask · N̂ + f̂(t);  ω̂ ← [(1 − a) ω̂ + Δt (γ E + ζ E_prev)] / (1 + a), a = α Δt (ν λ
    + μ). Euler–CN is the single stage α = ½, γ = 1, ζ = 0. (μ = 0 adds an exact 0.)
    """
    batch, n, m = w_hat.shape
    shared_forcing = forcing.shape[0] == 1
    for row in numba.prange(batch * n):
        b = row // n
        i = row % n
        if not active[b]:
            continue
        fb = 0 if shared_forcing else b
        h = dt[b]
        diffusion = alpha * h * viscosity[b]
        damping = alpha * h * drag
        c, s = f_cos[b], f_sin[b]
        for j in range(m):
            # complex arithmetic by parts (see _spectral_gradients); division by the real
            # 1 + a is componentwise, as NumPy does it.
            e_re, e_im = _explicit_at(forcing[fb, i, j], forcing_shift[fb, i, j], has_shift, c,
                                      s, mask[i, j], nonlinear_hat[b, i, j])
            i_re = gamma * e_re
            i_im = gamma * e_im
            if zeta != 0.0:
                p = previous[b, i, j]
                i_re += zeta * p.real
                i_im += zeta * p.imag
            a = diffusion * lap[i, j] + damping
            w = w_hat[b, i, j]
            w_hat[b, i, j] = complex(((1.0 - a) * w.real + h * i_re) / (1.0 + a),
                                     ((1.0 - a) * w.imag + h * i_im) / (1.0 + a))
            if store_previous:
                previous[b, i, j] = complex(e_re, e_im)


def _etd_stage(kind, w_hat, raw, forcing, forcing_shift, has_shift, f_cos, f_sin, mask,
               stages, coefficients, which, ky, kx, inv_lap, scale, active,
               out):  # pragma: no cover
    """An ETDRK4 stage (Cox & Matthews), fused with the next evaluation's gradients.

    ``raw`` is rfft(u·∇ω) of the last stage state; its N = f̂(t) − mask · raw is stored in
    ``stages[kind - 1]`` (N_v, N_a, N_b, N_c). Then, with E, E2, Q, f1, f2, f3 =
    ``coefficients[which[b]]``: kind 1: a = E2 ω̂ + Q N_v, kept in ``stages[4]``; kind 2:
    b = E2 ω̂ + Q N_a; kind 3: c = E2 a + Q (2 N_b − N_v); kind 4: ω̂ ← E ω̂ + f1 N_v +
    2 f2 (N_a + N_b) + f3 N_c. The gradients of the new state go to ``out`` (the next
    evaluation's input), as :func:`_spectral_gradients` writes them.
    """
    batch, n, m = w_hat.shape
    shared_forcing = forcing.shape[0] == 1
    for row in numba.prange(batch * n):
        b = row // n
        i = row % n
        if not active[b]:
            continue
        fb = 0 if shared_forcing else b
        cb = which[b]
        c, s = f_cos[b], f_sin[b]
        k_y = ky[i]
        for j in range(m):
            e_re, e_im = _explicit_at(forcing[fb, i, j], forcing_shift[fb, i, j], has_shift, c,
                                      s, mask[i, j], raw[b, i, j])
            stages[kind - 1, b, i, j] = complex(e_re, e_im)
            if kind == 4:
                w = w_hat[b, i, j]
                nv = stages[0, b, i, j]
                na = stages[1, b, i, j]
                nb = stages[2, b, i, j]
                e = coefficients[cb, 0, i, j]
                f1 = coefficients[cb, 3, i, j]
                f2 = 2.0 * coefficients[cb, 4, i, j]
                f3 = coefficients[cb, 5, i, j]
                s_re = e * w.real + f1 * nv.real + f2 * (na.real + nb.real) + f3 * e_re
                s_im = e * w.imag + f1 * nv.imag + f2 * (na.imag + nb.imag) + f3 * e_im
                w_hat[b, i, j] = complex(s_re, s_im)
            else:
                e2 = coefficients[cb, 1, i, j]
                q = coefficients[cb, 2, i, j]
                if kind == 3:
                    base = stages[4, b, i, j]
                    nv = stages[0, b, i, j]
                    s_re = e2 * base.real + q * (2.0 * e_re - nv.real)
                    s_im = e2 * base.imag + q * (2.0 * e_im - nv.imag)
                else:
                    w = w_hat[b, i, j]
                    s_re = e2 * w.real + q * e_re
                    s_im = e2 * w.imag + q * e_im
                    if kind == 1:
                        stages[4, b, i, j] = complex(s_re, s_im)
            _gradients_at(out, b, i, j, s_re, s_im, k_y, kx[j], inv_lap[i, j], scale)


class _Kernels:
    """The kernels, compiled parallel or serial (GIL released)."""

    def __init__(self, parallel: bool) -> None:
        def compile_(function):
            if parallel:
                return numba.njit(parallel=True, cache=True)(function)
            # A distinct name keeps numba's on-disk cache entries of the two builds apart.
            serial = types.FunctionType(function.__code__, function.__globals__,
                                        function.__name__ + "_serial")
            serial.__qualname__ = function.__qualname__ + "_serial"
            return numba.njit(nogil=True, cache=True)(serial)

        self.gradients = compile_(_spectral_gradients)
        self.advection = compile_(_advection)
        self.imex_stage = compile_(_imex_stage)
        self.etd_stage = compile_(_etd_stage)


_KERNELS = {True: _Kernels(parallel=True), False: _Kernels(parallel=False)}

#: Bytes of intermediate arrays the running groups of samples may keep in cache together
#: (about half a typical L3): a group goes through a whole record interval before the next,
#: so each step reads what the previous one wrote from cache instead of memory.
_CACHE_BUDGET = 16 * 2 ** 20


class _Group:
    """Buffers of one group of samples: views of the state, FFT plans, work arrays."""

    def __init__(self, engine: Engine, rows: slice, *, backend: str, threads: int) -> None:
        size = rows.stop - rows.start
        self.rows = rows
        self.w_hat = engine.w_hat[rows]
        self.previous = engine.previous[rows]
        self.gradients = RealFFT((size, 4), engine.n, backend=backend, threads=threads,
                                 dtype=engine.dtype)
        self.nonlinear = RealFFT((size,), engine.n, backend=backend, threads=threads,
                                 dtype=engine.dtype)
        self.everyone = np.ones(size, dtype=np.bool_)
        # ETDRK4: N_v, N_a, N_b, N_c and the stage a
        self.stages = engine.stages[:, rows] if engine.stages is not None else None


class Engine:
    """Buffers, FFT plans, constants and threads for one (grid, batch) size; reused.

    The batch is cut into groups of samples that fit in cache. With several groups, one per
    core runs at a time, each with single-threaded FFTs and serial kernels (no
    synchronisation inside a step); a single group uses every core inside each FFT and
    kernel. Each sample's arithmetic is the same either way: FFTW_ESTIMATE plans give the
    same bits for any batch or thread count, and the kernels are elementwise.
    """

    def __init__(self, n: int, batch: int, *, backend: str, threads: int | None,
                 exponential: bool = False, dtype=np.float64) -> None:
        self.n, self.batch = n, batch
        self.dtype = np.dtype(dtype)
        complex_dtype = np.result_type(self.dtype, np.complex64)
        m = n // 2 + 1
        self.w_hat = np.zeros((batch, n, m), dtype=complex_dtype)
        self.previous = np.zeros((batch, n, m), dtype=complex_dtype)
        self.stages = np.zeros((5, batch, n, m), dtype=complex_dtype) if exponential else None
        cores = solver_threads() if threads is None else max(1, int(threads))
        # ~12 grid-sized fields per sample (22 for ETDRK4's stages and coefficients); the
        # cache is shared by the groups running at once (at 256² on two cores: one sample
        # per group, 1.35x faster than two).
        fields = 22 if exponential else 12
        fits = max(1, _CACHE_BUDGET // (cores * fields * n * n * 8))
        size = min(fits, -(-batch // cores))
        starts = range(0, batch, size)
        self.workers = min(cores, len(starts))
        fft_threads = max(1, cores // self.workers) if n * n >= 128 * 128 else 1
        self.kernels = _KERNELS[self.workers == 1 and cores > 1]
        self.groups = [_Group(self, slice(s, min(batch, s + size)), backend=backend,
                              threads=fft_threads) for s in starts]
        self.record = RealFFT((batch,), n, backend=backend, threads=cores, dtype=self.dtype)
        real = self.dtype.type
        k = vorticity_wavenumbers(n)
        self.ky, self.kx = k.ky.astype(real), k.kx.astype(real)
        self.lap = k.laplacian.astype(real)  # λ(0) = 0: the mean vorticity is conserved exactly
        self.inv_lap = k.inverse_laplacian.astype(real)
        self.mask = dealias_mask(n).astype(real)
        self.scale = real(1.0 / (n * n))  # the unnormalised backward FFT's factor, folded in
        self._pool = ThreadPoolExecutor(self.workers) if self.workers > 1 else None

    def map_groups(self, function: Callable[[_Group], None]) -> None:
        """Run ``function(group)`` for every group, ``self.workers`` at a time."""
        if self._pool is None:
            for group in self.groups:
                function(group)
            return
        for future in [self._pool.submit(function, group) for group in self.groups]:
            future.result()  # re-raises a worker's exception here

    def nonlinear(self, group: _Group, active: np.ndarray) -> np.ndarray:
        """rfft(u ω_x + v ω_y) of the group's current state (unnormalised; a buffer view)."""
        self.kernels.gradients(group.w_hat, self.ky, self.kx, self.inv_lap, self.scale,
                               active, group.gradients.spectral)
        return self.advect(group, active)

    def advect(self, group: _Group, active: np.ndarray) -> np.ndarray:
        """rfft(u ω_x + v ω_y) from the gradient spectra already in ``group.gradients``."""
        group.gradients.backward()
        self.kernels.advection(group.gradients.real, active, group.nonlinear.real)
        return group.nonlinear.forward()

    def advection(self) -> np.ndarray:
        """u ω_x + v ω_y of the current state in physical space (a new array; for tests)."""
        out = np.empty((self.batch, self.n, self.n))
        for group in self.groups:
            self.nonlinear(group, group.everyone)
            out[group.rows] = group.nonlinear.real
        return out

    def max_speed(self) -> np.ndarray:
        """max over the grid of |u| + |v| per sample."""
        speed = np.empty(self.batch)
        for group in self.groups:
            self.kernels.gradients(group.w_hat, self.ky, self.kx, self.inv_lap, self.scale,
                                   group.everyone, group.gradients.spectral)
            velocity = group.gradients.backward()[:, :2]
            speed[group.rows] = np.max(np.abs(velocity[:, 0]) + np.abs(velocity[:, 1]),
                                       axis=(-2, -1))
        return speed

    def physical(self) -> np.ndarray:
        """The current vorticity in physical space (a new float64 array)."""
        self.record.spectral[...] = self.w_hat
        return self.record.backward().astype(np.float64) * (1.0 / (self.n * self.n))

    def load(self, vorticity: np.ndarray) -> None:
        self.record.real[...] = vorticity
        self.w_hat[...] = self.record.forward()

    def advance_imex(self, stages, steps: np.ndarray, dt: np.ndarray, start: float,
                     viscosity: np.ndarray, drag: float, forcing_hat: np.ndarray,
                     shift_hat: np.ndarray, phase_speed: float | None) -> None:
        """Advance ``w_hat`` by ``steps[b]`` steps of ``dt[b]`` per sample, each step the
        implicit–explicit ``stages`` (:data:`IMEX_STAGES`); with ``phase_speed`` the forcing
        moves, f̂(t) = cos φ F̂ + sin φ Ĝ, φ = ``phase_speed`` · t (``shift_hat`` is Ĝ)."""
        store_previous = len(stages) > 1
        moving = phase_speed is not None
        shared = forcing_hat.shape[0] == 1
        kernels = self.kernels

        def advance(group: _Group) -> None:
            # Samples are independent: a group runs through the whole interval on its own,
            # its working set staying in cache from step to step.
            rows = group.rows
            group_steps, group_dt, nu = steps[rows], dt[rows], viscosity[rows]
            f = forcing_hat if shared else forcing_hat[rows]
            g = shift_hat if shared else shift_hat[rows]
            f_cos, f_sin = np.ones(len(group_dt)), np.zeros(len(group_dt))
            for sub in range(int(group_steps.max())):
                active = sub < group_steps
                for alpha, gamma, zeta, node in stages:
                    if moving:
                        phase = phase_speed * (start + (sub + node) * group_dt)
                        f_cos, f_sin = np.cos(phase), np.sin(phase)
                    nonlinear_hat = self.nonlinear(group, active)
                    kernels.imex_stage(group.w_hat, nonlinear_hat, group.previous, f, g, moving,
                                       f_cos, f_sin, self.mask, self.lap, nu, drag, group_dt,
                                       active, alpha, gamma, zeta, store_previous)

        self.map_groups(advance)

    def advance_etdrk4(self, steps: int, dt: float, start: float, coefficients: np.ndarray,
                       which: np.ndarray, forcing_hat: np.ndarray, shift_hat: np.ndarray,
                       phase_speed: float | None) -> None:
        """``steps`` ETDRK4 steps of ``dt``, every sample alike (faithful stepping); sample b
        takes the coefficients ``coefficients[which[b]]`` (E, E2, Q, f1, f2, f3); the forcing
        as in :meth:`advance_imex`."""
        moving = phase_speed is not None
        shared = forcing_hat.shape[0] == 1
        kernels = self.kernels

        def advance(group: _Group) -> None:
            rows, active = group.rows, group.everyone
            f = forcing_hat if shared else forcing_hat[rows]
            g = shift_hat if shared else shift_hat[rows]
            own = which[rows]
            f_cos, f_sin = np.ones(len(active)), np.zeros(len(active))
            kernels.gradients(group.w_hat, self.ky, self.kx, self.inv_lap, self.scale,
                              active, group.gradients.spectral)
            for sub in range(steps):
                for kind, node in ((1, 0.0), (2, 0.5), (3, 0.5), (4, 1.0)):
                    if moving:
                        phase = phase_speed * (start + (sub + node) * dt)
                        f_cos = np.full(len(active), np.cos(phase))
                        f_sin = np.full(len(active), np.sin(phase))
                    raw = self.advect(group, active)
                    kernels.etd_stage(kind, group.w_hat, raw, f, g, moving, f_cos, f_sin,
                                      self.mask, group.stages, coefficients, own, self.ky,
                                      self.kx, self.inv_lap, self.scale, active,
                                      group.gradients.spectral)

        self.map_groups(advance)
