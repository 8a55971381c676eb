r"""Semilinear PDEs on a periodic interval, u_t = L u + N(u): pseudospectral with ETDRK4.

One base, :class:`SemilinearSolver1D`, carries the algorithm every such PDE shares: real
FFTs, the nonlinear term with optional 2/3 dealiasing, Cox–Matthews ETDRK4 with the
Kassam–Trefethen contour coefficients, restarts that keep the last operator, spectral
interpolation from other grids, the plain NumPy right-hand side and the plain NumPy ETDRK4
step (:meth:`SemilinearSolver1D.reference_step`, the oracle of the fast path). A PDE fills
two hooks, in the spirit of Exponax's steppers (Koehler, Niedermayr, Westermann & Thuerey,
"APEBench: A Benchmark for Autoregressive Neural Emulators of PDEs", 2024): its linear
operator (:meth:`SemilinearSolver1D.linear`, a diagonal on the Fourier modes) and its
nonlinear function (:attr:`SemilinearSolver1D.nonlinearity`, a :class:`Nonlinearity`); then
its config and presets. Kuramoto–Sivashinsky, Burgers and Korteweg–de Vries share the
:class:`QuadraticFlux`; Allen–Cahn has a cubic reaction.

See ``docs/numerics/kuramoto_sivashinsky.md``, ``docs/numerics/burgers.md``,
``docs/numerics/kdv.md`` and ``docs/numerics/allen_cahn.md``.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import types
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numba
import numba.extending
import numpy as np

from ..data import TIME, X
from .base import (TimeDependentSolver, VariableSpec, check_ranged, positive_finite,
                   whole_multiple)
from .solver import DTYPES, check_dtype
from . import _fftw, spectral
from .random_fields import sample_rng
from .spectral import (CONTOUR_POINTS, ETDRK4, RealFFT, dealias_mask, derivative_wavenumbers,
                       etdrk4_coefficients, etdrk4_step, solver_threads, spectral_resample,
                       wavenumbers)

__all__ = ["DTYPES", "FusedETDRK4", "MAX_RESOLUTION", "NonlinearTerm1D", "Nonlinearity",
           "PowerReaction", "QuadraticFlux", "SemilinearSolver1D", "SpectralState",
           "check_config", "check_grid", "etdrk4_step", "sine_series"]

#: Largest simulation grid accepted by default (2**22 points: one batch row of buffers is
#: ~1 GB already).
MAX_RESOLUTION = 2 ** 22
#: The largest time_step x |L| of a mode: ETDRK4's contour coefficients take cubes of it, and
#: float64 holds about 1.8e308 (so below 5.6e102, with margin).
MAX_STIFFNESS = 1e100


def check_grid(resolution: Any, simulation_resolution: Any, maximum: int = MAX_RESOLUTION
               ) -> None:
    """Even grid sizes, the stored one an even divisor of the simulated one.

    Stored frames are strided from the simulation grid, and a frame on the stored grid is
    interpolated back spectrally, which needs an even grid. Four points at least: on two, the
    only mode besides the mean is the Nyquist mode, which has no derivative.
    """
    def integer(n):
        return isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_))

    n, r = simulation_resolution, resolution
    if not integer(n) or n < 4 or n % 2 or n > maximum:
        raise ValueError(f"simulation_resolution must be an even integer in 4..{maximum}, got "
                         f"{n!r}")
    if not integer(r) or r < 2 or r % 2 or n % r:
        divisors = [d for d in range(n, 1, -1) if n % d == 0 and d % 2 == 0]
        raise ValueError(f"stored resolution {r!r} must be an even divisor of the simulation "
                         f"resolution {n} (frames are strided, so it must divide the simulation "
                         f"resolution); choose one of {divisors[:8]}")


def check_config(config: Any, *, positive: Sequence[str] = (), ranged: Sequence[str] = (),
                 maximum: int = MAX_RESOLUTION,
                 initial_conditions: Sequence[str] | None = None) -> None:
    """The checks every semilinear config shares (ValueError naming the field).

    Grids (:func:`check_grid`), ``dealias`` a bool, ``final_time``, ``record_interval``,
    ``time_step`` and the fields named in ``positive`` positive and finite, whole numbers of
    record intervals and of time steps per record; the fields named in ``ranged`` positive
    numbers or ``(low, high)`` pairs (:func:`check_ranged`). With ``initial_conditions``, the
    config's ``initial_condition`` is one of them; a config's ``lmax`` (of
    :func:`sine_series`) is an integer in 2..N/2 (every drawn wavenumber below the Nyquist
    wavenumber of the N-point simulation grid).
    """
    if initial_conditions is not None and config.initial_condition not in initial_conditions:
        raise ValueError(f"unknown initial_condition {config.initial_condition!r}; choose one "
                         f"of {tuple(initial_conditions)}")
    sines = hasattr(config, "lmax")
    if sines and (isinstance(config.lmax, bool) or not isinstance(config.lmax, (int, np.integer))
                  or config.lmax < 2):
        raise ValueError(f"lmax must be an integer >= 2, got {config.lmax!r}")
    check_grid(config.resolution, config.simulation_resolution, maximum)
    if sines:
        # The sines have wavenumbers l < lmax; on N points only l < N / 2 (below the Nyquist
        # wavenumber) is represented, a larger one aliases onto a lower mode.
        nyquist = config.simulation_resolution // 2
        if config.lmax > nyquist:
            raise ValueError(f"lmax {config.lmax} draws sines of wavenumbers up to "
                             f"{config.lmax - 1}, which {config.simulation_resolution} "
                             f"simulation points cannot resolve (they hold wavenumbers below "
                             f"{nyquist}): choose lmax <= {nyquist}, or raise "
                             "simulation_resolution")
    if not isinstance(config.dealias, (bool, np.bool_)):
        raise ValueError(f"dealias must be True or False, got {config.dealias!r}")
    check_dtype(getattr(config, "dtype", "float64"))
    for name in (*positive, "final_time", "record_interval", "time_step"):
        value = getattr(config, name)
        if not positive_finite(value):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    whole_multiple(config.final_time, config.record_interval,
                   "final_time must be a whole number of record intervals")
    whole_multiple(config.record_interval, config.time_step,
                   "record_interval must be a whole number of time steps")
    for name in ranged:
        check_ranged(name, getattr(config, name))


def sine_series(seed: int, indices: Sequence[int], n: int, length: float, lmax: int, *,
                terms: int = 10) -> np.ndarray:
    """Random sums of sines, LPSDA's law for KS and KdV: ``[batch, 1, n]``.

    u0 = Σ_{k=1}^{terms} A_k sin(2π l_k x / L + φ_k) with A ~ U[−½, ½), φ ~ U[0, 2π) and
    l ~ randint(1, lmax), drawn in that order from stream 0 of each sample, on x_j = L j / n
    (Brandstetter, Welling & Worrall, "Lie Point Symmetry Data Augmentation for Neural PDE
    Solvers", 2022).
    """
    x = length * np.arange(n) / n
    out = np.empty((len(indices), 1, n))
    for row, index in enumerate(indices):
        rng = sample_rng(seed, index, stream=0)
        amplitude = rng.uniform(-0.5, 0.5, size=terms)
        phase = rng.uniform(0.0, 2 * np.pi, size=terms)
        wavenumber = rng.integers(1, lmax, size=terms)
        out[row, 0] = np.sum(amplitude[:, None] * np.sin(
            2 * np.pi * wavenumber[:, None] * x[None, :] / length + phase[:, None]), axis=0)
    return out


class Nonlinearity(abc.ABC):
    r"""The nonlinear hook of a semilinear PDE: :math:`\hat N(\hat u) = g(k)\,\mathcal F[f(u)]`,
    a pointwise term f, then a Fourier multiplier g (the 2/3 mask is the solver's business).

    One object serves every path of :class:`SemilinearSolver1D`: the fast path evaluates
    :meth:`term_` in place on its FFTW buffers; the NumPy oracle, the plain right-hand side
    and the PyTorch step (:mod:`ssmpde.solvers.differentiable`) evaluate :meth:`term`,
    written with arithmetic operators only so that it runs on arrays and tensors alike.
    """

    #: p where f is homogeneous of degree p, f(s u) = s^p f(u): the fast and PyTorch paths
    #: then feed f the unnormalised inverse transform n u and fold 1/n^p into g (a pass
    #: fewer, and the rounding KS, Burgers and KdV always had). None: f gets u itself.
    degree: ClassVar[int | None] = None
    #: p where f(u) = u^p exactly (u·u·…·u, left to right): the solver then runs its fused
    #: kernel (:class:`FusedETDRK4`), transforms included, in compiled code. None: the
    #: buffered path, which calls :meth:`term_` from Python four times a step.
    power: ClassVar[int | None] = None
    #: What keeps the explicit term stable, for the message of a run that blew up.
    step_limit: ClassVar[str] = "reduce it"

    @abc.abstractmethod
    def term(self, u: Any) -> Any:
        """f(u), pointwise, for a NumPy array or a torch tensor ``u`` (a new object)."""

    def term_(self, u: np.ndarray) -> None:
        """f(u) written into ``u`` (the fast path; override with a kernel where it pays)."""
        u[...] = self.term(u)

    @abc.abstractmethod
    def multiplier(self, k: np.ndarray) -> np.ndarray:
        """g on the angular wavenumbers ``k`` of the rfft modes (the Nyquist mode's k is 0)."""


class QuadraticFlux(Nonlinearity):
    """−b (u²/2)_x = −b u u_x: f = u², g = −½ b i k (Burgers, Kuramoto–Sivashinsky, KdV)."""

    degree = power = 2
    step_limit = ("keep time_step * b * max|u| * 2 pi N / (3 L) (b the flux coefficient) well "
                  "below 10, about 0.3 for accuracy")

    def __init__(self, coefficient: float = 1.0) -> None:
        self.coefficient = float(coefficient)

    def term(self, u):
        return u * u

    def term_(self, u: np.ndarray) -> None:
        np.square(u, out=u)

    def multiplier(self, k: np.ndarray) -> np.ndarray:
        # b = 1 multiplies −½i exactly: Burgers and KS round as they did before b existed
        return (-0.5j * self.coefficient) * k


class PowerReaction(Nonlinearity):
    """c u^p, a reaction (g = c on every mode): −u³ of Allen–Cahn, −u² of Fisher–KPP, the
    linear part of the reaction going to the linear operator."""

    def __init__(self, coefficient: float, power: int) -> None:
        if isinstance(power, bool) or not isinstance(power, (int, np.integer)) or power < 2:
            raise ValueError(f"power must be an integer >= 2, got {power!r}")
        self.coefficient, self.degree = float(coefficient), int(power)
        self.power = self.degree
        self.step_limit = f"keep time_step * {power} |c| max|u|^{power - 1} below about 2.5"

    def term(self, u):
        out = u
        for _ in range(self.degree - 1):
            out = out * u
        return out

    def multiplier(self, k: np.ndarray) -> np.ndarray:
        return np.full(k.shape, self.coefficient)


class NonlinearTerm1D:
    """The fast evaluation of a :class:`Nonlinearity`: ``out <- factor · FFT(f(u))`` over
    preallocated FFTW buffers (no allocation per call), as :class:`ETDRK4` calls it.

    ``factor`` is :meth:`SemilinearSolver1D.nonlinear_factor` with ``scaled=True`` (the
    transforms are unnormalised); ``batch`` rows, ``backend`` as :class:`RealFFT`'s.
    """

    def __init__(self, nonlinearity: Nonlinearity, factor: np.ndarray, *, batch: int,
                 backend: str = "pyfftw") -> None:
        self.n = 2 * (factor.shape[-1] - 1)
        # 1D transforms are too small to share between threads
        self.fft = RealFFT((batch,), self.n, ndim=1, backend=backend, threads=1)
        self.nonlinearity = nonlinearity
        self.factor = np.asarray(factor, dtype=np.complex128).reshape(1, -1)

    def __call__(self, v_hat: np.ndarray, out: np.ndarray) -> None:
        self.fft.spectral[...] = v_hat
        u = self.fft.backward()
        if self.nonlinearity.degree is None:
            u /= self.n
        self.nonlinearity.term_(u)
        np.multiply(self.fft.forward(), self.factor, out=out)

    def spectral(self, u: np.ndarray) -> np.ndarray:
        """The unnormalised rfft of u ``[batch, n]`` (a new array)."""
        self.fft.real[...] = u
        return self.fft.forward().copy()

    def physical(self, v_hat: np.ndarray) -> np.ndarray:
        """u on the grid from its (unnormalised) rfft ``v_hat`` (a new array)."""
        self.fft.spectral[...] = v_hat
        return self.fft.backward() / self.n


def _times(c, z):
    """c · z, for a real or complex coefficient c and a complex z (the kernels' product)."""
    return c * z


@numba.extending.overload(_times, inline="always")
def _times_by_parts(c, z):  # pragma: no cover
    # By parts: numba's complex product follows C99 Annex G (inf/NaN branches) and does not
    # vectorise; a real c is two products. Same values as NumPy's (c + 0i)(x + iy).
    if isinstance(c, numba.types.Float):
        return lambda c, z: complex(c * z.real, c * z.imag)
    return lambda c, z: complex(c.real * z.real - c.imag * z.imag,
                                c.real * z.imag + c.imag * z.real)


def _fused_steps(v, steps, e, e2, q, f1, f2x2, f3, factor, power, forward, backward, real,
                 spectral, work, source, has_source):  # pragma: no cover
    """``steps`` ETDRK4 steps of every row of ``v`` (in place), transforms included.

    Row after row, each row through all its steps while its few kilobytes stay in L1. A
    nonlinear evaluation: the stage into ``spectral``, c2r into ``real`` (unnormalised),
    u -> u^power, r2c, times ``factor`` (g, the 2/3 mask and 1/n^power), plus the row of
    ``source`` (Ŝ, unnormalised) if ``has_source``. The arithmetic is :func:`etdrk4_step`'s,
    with 2 f2 precomputed (``f2x2``, an exact doubling).
    """
    batch, m = v.shape
    n = real.shape[0]
    shared = e.shape[0] == 1
    nv, na, nb, nc, a = work[0], work[1], work[2], work[3], work[4]
    real_in, spectral_in = real.ctypes.data, spectral.ctypes.data
    for row in range(batch):
        c = 0 if shared else row
        for _ in range(steps):
            for stage in range(4):
                if stage == 0:
                    for j in range(m):
                        spectral[j] = v[row, j]
                elif stage == 1:
                    for j in range(m):
                        a[j] = _times(e2[c, j], v[row, j]) + _times(q[c, j], nv[j])
                        spectral[j] = a[j]
                elif stage == 2:
                    for j in range(m):
                        spectral[j] = _times(e2[c, j], v[row, j]) + _times(q[c, j], na[j])
                else:
                    for j in range(m):
                        spectral[j] = _times(e2[c, j], a[j]) \
                            + _times(q[c, j], nb[j] + nb[j] - nv[j])
                _C2R(backward, spectral_in, real_in)
                if power == 2:
                    for i in range(n):
                        real[i] = real[i] * real[i]
                else:
                    for i in range(n):
                        u = real[i]
                        out = u
                        for _k in range(power - 1):
                            out = out * u
                        real[i] = out
                _R2C(forward, real_in, spectral_in)
                target = work[stage]
                for j in range(m):
                    target[j] = _times(factor[j], spectral[j])
                if has_source:
                    for j in range(m):
                        target[j] = target[j] + source[row, j]
            for j in range(m):
                v[row, j] = _times(e[c, j], v[row, j]) + _times(f1[c, j], nv[j]) \
                    + _times(f2x2[c, j], na[j] + nb[j]) + _times(f3[c, j], nc[j])


def _forward_rows(source, target, plan, real, spectral):  # pragma: no cover
    """Each row of ``source`` (real) r2c-transformed into ``target``, unnormalised, through
    the one-row buffers the plans are made for.

    Rows are copied element by element: an array assignment (``real[:] = source[row]``)
    makes numba compile its shape-mismatch error path, 1.6 s of a 3.8 s first compile."""
    real_in, spectral_in = real.ctypes.data, spectral.ctypes.data
    for row in range(source.shape[0]):
        for j in range(real.shape[0]):
            real[j] = source[row, j]
        _R2C(plan, real_in, spectral_in)
        for j in range(spectral.shape[0]):
            target[row, j] = spectral[j]


def _backward_rows(source, target, plan, real, spectral):  # pragma: no cover
    """Each row of ``source`` (rfft modes) c2r-transformed into ``target``, unnormalised."""
    real_in, spectral_in = real.ctypes.data, spectral.ctypes.data
    for row in range(source.shape[0]):
        for j in range(spectral.shape[0]):
            spectral[j] = source[row, j]
        _C2R(plan, spectral_in, real_in)
        for j in range(real.shape[0]):
            target[row, j] = real[j]


def _compiled(function, dtype):
    """``function`` compiled with the FFTW of ``dtype`` (float64 or float32) as its
    ``_R2C``/``_C2R``; a name of its own per precision keeps numba's disk cache apart."""
    r2c, c2r = _fftw.EXECUTE[dtype]
    suffix = np.dtype(dtype).name
    scope = dict(function.__globals__, _R2C=r2c, _C2R=c2r)
    copy = types.FunctionType(function.__code__, scope, f"{function.__name__}_{suffix}")
    copy.__qualname__ = f"{function.__qualname__}_{suffix}"
    return numba.njit(nogil=True, cache=True)(copy)


_KERNELS = {dtype: tuple(_compiled(f, dtype) for f in (_fused_steps, _forward_rows,
                                                          _backward_rows))
            for dtype in (np.float64, np.float32)}


class FusedETDRK4:
    """ETDRK4 for ``v̂' = L v̂ + g F[u^p]`` with the whole step in one compiled kernel.

    The fast path of :class:`SemilinearSolver1D` for nonlinearities that are a pointwise
    power (:attr:`Nonlinearity.power`): FFTW's plans executed from numba
    (:mod:`ssmpde.solvers._fftw`), so a step makes no Python call, at batch 1 as at batch 64.
    Rows are split over ``threads`` workers (GIL released), each with its own buffers; the
    rows a worker takes never change a row's arithmetic (one plan, one kernel, row by row).

    Parameters
    ----------
    linear : array ``[1 or batch, m]``
        Diagonal of L on the ``m = n // 2 + 1`` rfft modes, real or complex.
    h : float
        Time step.
    factor : complex array ``[m]``
        g times the 2/3 mask times 1/n^p (:meth:`SemilinearSolver1D.nonlinear_factor` with
        ``scaled=True``).
    power : int
        p of f(u) = u^p.
    batch : int
    dtype : float64 or float32
        The real type of the arithmetic; the coefficients are computed in float64 and rounded.
    threads : int, optional
        Workers over the rows (default: the solver thread policy, at most one per row).
    """

    def __init__(self, linear: np.ndarray, h: float, factor: np.ndarray, power: int, *,
                 batch: int, dtype=np.float64, threads: int | None = None) -> None:
        self.dtype = np.dtype(dtype).type
        self.complex_dtype = np.result_type(self.dtype, np.complex64).type
        c = spectral.etdrk4_rows(linear, h)
        m = c["E"].shape[-1]
        self.n = 2 * (m - 1)
        coefficient_dtype = self.complex_dtype if np.iscomplexobj(c["E"]) else self.dtype
        c["f2x2"] = 2.0 * c.pop("f2")
        self.coefficients = tuple(np.ascontiguousarray(c[k], dtype=coefficient_dtype)
                                  for k in ("E", "E2", "Q", "f1", "f2x2", "f3"))
        self.factor = np.ascontiguousarray(np.reshape(factor, -1), dtype=self.complex_dtype)
        self.power = int(power)
        self.plans = _fftw.Plans(self.n, self.dtype)
        self.steps_kernel, self.forward_kernel, self.backward_kernel = _KERNELS[self.dtype]
        workers = solver_threads() if threads is None else max(1, int(threads))
        self.workers = max(1, min(workers, batch))
        size = -(-batch // self.workers)
        self.blocks = [slice(s, min(batch, s + size)) for s in range(0, batch, size)]
        self.buffers = [(_fftw.aligned_row(self.n, self.dtype),
                         _fftw.aligned_row(m, self.complex_dtype),
                         np.zeros((5, m), self.complex_dtype)) for _ in self.blocks]
        self._pool = ThreadPoolExecutor(len(self.blocks)) if len(self.blocks) > 1 else None
        self._no_source = np.zeros((1, 1), self.complex_dtype)  # the kernel's unused argument

    def _map(self, function) -> None:
        if self._pool is None:
            function(self.blocks[0], self.buffers[0])
            return
        for future in [self._pool.submit(function, block, buffers)
                       for block, buffers in zip(self.blocks, self.buffers)]:
            future.result()

    def advance(self, v: np.ndarray, steps: int, source: np.ndarray | None = None) -> None:
        """``steps`` steps of ``v`` (``[batch, m]``, of :attr:`complex_dtype`), in place;
        ``source`` (``[batch, m]``, unnormalised rfft like ``v``) is added to N̂."""
        e = self.coefficients
        shared = e[0].shape[0] == 1
        has_source = source is not None
        if not has_source:
            source = self._no_source

        def run(block, buffers):
            real, spectral, work = buffers
            own = e if shared else tuple(x[block] for x in e)
            self.steps_kernel(v[block], int(steps), *own, self.factor, self.power,
                              self.plans.forward, self.plans.backward, real, spectral, work,
                              source[block] if has_source else source, has_source)

        self._map(run)

    def spectral(self, u: np.ndarray) -> np.ndarray:
        """The unnormalised rfft of u ``[batch, n]``: a new ``[batch, m]`` array."""
        u = np.ascontiguousarray(u, dtype=self.dtype)
        out = np.empty((u.shape[0], self.n // 2 + 1), self.complex_dtype)
        real, spectral, _ = self.buffers[0]
        self.forward_kernel(u, out, self.plans.forward, real, spectral)
        return out

    def physical(self, v: np.ndarray) -> np.ndarray:
        """u on the grid from its unnormalised rfft ``v``: a new float64 ``[batch, n]``."""
        out = np.empty((v.shape[0], self.n), self.dtype)
        real, spectral, _ = self.buffers[0]
        self.backward_kernel(np.ascontiguousarray(v), out, self.plans.backward, real,
                             spectral)
        return out.astype(np.float64) / self.n


class BufferedETDRK4:
    """The stepper for any :class:`Nonlinearity`: :class:`NonlinearTerm1D` on pyFFTW (or
    ``numpy.fft``) buffers, :class:`~ssmpde.solvers.spectral.ETDRK4`'s numba kernels, a
    Python call per transform. The interface of :class:`FusedETDRK4`."""

    def __init__(self, linear: np.ndarray, h: float, factor: np.ndarray,
                 nonlinearity: Nonlinearity, *, batch: int, backend: str) -> None:
        self.term = NonlinearTerm1D(nonlinearity, factor, batch=batch, backend=backend)
        self.stepper = ETDRK4(linear, h, self.term, batch=batch)

    def advance(self, v: np.ndarray, steps: int, source: np.ndarray | None = None) -> None:
        if source is not None:
            def nonlinear(v_hat, out):
                self.term(v_hat, out)
                out += source

            self.stepper.nonlinear = nonlinear
        try:
            for _ in range(steps):
                self.stepper.step(v)
        finally:
            self.stepper.nonlinear = self.term

    def spectral(self, u: np.ndarray) -> np.ndarray:
        return self.term.spectral(u)

    def physical(self, v: np.ndarray) -> np.ndarray:
        return self.term.physical(v)


@dataclasses.dataclass
class SpectralState:
    """A batch in flight: ``v_hat`` (unnormalised rfft of u, ``[batch, n // 2 + 1]``) and
    the stepper (:class:`FusedETDRK4` or :class:`BufferedETDRK4`) that advances and
    transforms it, and the spectrum of a source term added to N̂, if any."""

    v_hat: np.ndarray
    stepper: FusedETDRK4 | BufferedETDRK4
    #: Ŝ of a source term (unnormalised rfft, ``[batch, n // 2 + 1]``), or None.
    source_hat: np.ndarray | None = None


class SemilinearSolver1D(TimeDependentSolver):
    r"""Base of the 1D semilinear PDEs :math:`u_t = \mathcal L u + N(u)` on [0, L).

    Periodic; real Fourier pseudospectral in space, the nonlinear term zeroed outside the 2/3
    band when the config's ``dealias`` is set (Orszag's rule); in time Cox–Matthews ETDRK4 at
    the fixed step ``time_step`` (the config's), :math:`\mathcal L` integrated exactly and
    N explicitly.

    A subclass fills two hooks:

    * :meth:`linear`, the diagonal of :math:`\mathcal L` on the rfft modes (real for
      dissipative PDEs, complex for dispersive ones), per sample where it depends on a
      per-sample parameter;
    * :attr:`nonlinearity`, N as a :class:`Nonlinearity` (a class attribute, or a property
      where it reads the config, as KdV's flux coefficient);

    and gives the config (``resolution``, ``simulation_resolution``, ``final_time``,
    ``record_interval``, ``time_step``, ``dealias`` and, unless :attr:`domain_length` is
    fixed by the class, ``domain_length``; :func:`check_config` validates them), its presets,
    :meth:`initial_condition` where LPSDA's sine series of the config's ``lmax`` (the default)
    does not fit, and :attr:`parameter_units` (``name -> (long_name, units)``) for its
    per-sample parameters, which are written to datasets with the role ``parameter``.

    Conventions: the grid x_j = L j / N does **not** include the right end point; states are
    ``[batch, 1, x]``; stored frames are every s-th simulation node. The spatial mean of u is
    conserved exactly when L(0) = 0 and g(0) = 0 (a flux has no mean).

    Parameters
    ----------
    fft_backend : {"pyfftw", "numpy"}
        ``"numpy"`` runs the same scheme on ``numpy.fft`` (a reference path for tests,
        float64 only). With ``"pyfftw"`` and a power nonlinearity (all four PDEs) a step runs
        in one compiled kernel (:class:`FusedETDRK4`), otherwise through
        :class:`BufferedETDRK4`.
    threads : int, optional
        Workers over the batch's rows on the fused path (default: the thread policy,
        ``--threads`` / ``SSMPDE_THREADS``). The results do not depend on it.
    **config
        Fields of the subclass's config dataclass.

    References
    ----------
    Cox & Matthews, "Exponential time differencing for stiff systems", J. Comput. Phys. 176
    (2002). Kassam & Trefethen, "Fourth-order time-stepping for stiff PDEs", SIAM J. Sci.
    Comput. 26 (2005).
    """

    fields = ("u",)
    boundary_conditions = "periodic"
    #: Per-sample parameters as dataset variables: name -> (long_name, units). Each is a
    #: scalar that a ``(low, high)`` pair in the config draws per sample: a subclass names
    #: it here only (``parameter_names`` and ``ranged_parameters`` follow).
    parameter_units: ClassVar[Mapping[str, tuple[str, str]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.parameter_names = cls.ranged_parameters = tuple(cls.parameter_units)

    def __init__(self, *, fft_backend: str = "pyfftw", threads: int | None = None,
                 **config: Any) -> None:
        super().__init__(**config)
        self.fft_backend = fft_backend
        self.threads = threads
        self._operator: tuple | None = None
        if getattr(self.config, "dtype", "float64") != "float64" and not self._fused:
            raise ValueError(f"dtype {self.config.dtype} runs on the fused path only (a power "
                             "nonlinearity, fft_backend='pyfftw'); use dtype='float64'")
        self._check_stiffness()

    def _check_stiffness(self) -> None:
        """Refuse a config whose stiffest mode ETDRK4's coefficients cannot hold in float64
        (they take cubes of time_step · L): a diffusivity of 1e300 or a domain of 1e-300 made
        NaN coefficients, numpy's warnings and a blow-up blamed on the time step."""
        cfg, n = self.config, self.config.simulation_resolution
        extremes = [np.atleast_1d(np.asarray(getattr(cfg, name), dtype=np.float64))
                    for name in self.parameter_names]
        rows = np.array(list(itertools.product(*extremes)) or [()], dtype=np.float64)
        parameters = {name: rows[:, i] for i, name in enumerate(self.parameter_names)}
        with np.errstate(over="ignore", invalid="ignore"):
            stiffness = float(np.max(np.abs(cfg.time_step * self.linear(n, parameters))))
        if not stiffness <= MAX_STIFFNESS:
            given = ", ".join(f"{name} {getattr(cfg, name)!r}" for name in self.parameter_names)
            shown = f"{stiffness:.3g}" if np.isfinite(stiffness) else "not finite (overflow)"
            raise ValueError(
                f"{self.name}: time_step x |L| of the stiffest mode is {shown} (L the "
                f"linear operator of {given + ', ' if given else ''}domain_length "
                f"{self.domain_length:g} on {n} points), beyond the {MAX_STIFFNESS:g} its "
                "ETDRK4 coefficients hold in float64: these values are far outside the "
                "PDE's range; choose ones of physical size")

    @property
    def _fused(self) -> bool:
        return self.nonlinearity.power is not None and self.fft_backend == "pyfftw"

    @property
    def domain_length(self) -> float:
        """The period L (the config's ``domain_length``)."""
        return float(self.config.domain_length)

    @property
    @abc.abstractmethod
    def nonlinearity(self) -> Nonlinearity:
        """N of u_t = L u + N(u): the hook every path evaluates (fast, PyTorch, oracle)."""

    @abc.abstractmethod
    def linear(self, n: int, parameters: Mapping[str, np.ndarray]) -> np.ndarray:
        """The diagonal of the linear operator on the ``n // 2 + 1`` rfft modes of an
        ``n``-point grid: ``[batch or 1, n // 2 + 1]``, float64 or complex128.

        ``parameters`` are the resolved per-sample parameters (each ``[batch, ...]``).
        """

    def wavenumbers(self, n: int, *, nyquist: bool = False) -> np.ndarray:
        """Angular wavenumbers 2π k / L of the rfft modes; the Nyquist mode's is zeroed
        (odd derivatives: :func:`derivative_wavenumbers`) unless ``nyquist``."""
        k = wavenumbers(n, real=True) if nyquist else derivative_wavenumbers(n, real=True)
        return 2 * np.pi / self.domain_length * k

    def initial_condition(self, seed: int, indices: Sequence[int]) -> np.ndarray:
        """u0 ``[batch, 1, N]``: LPSDA's sine series (:func:`sine_series`, the config's
        ``lmax``), stream 0 of each sample."""
        cfg = self.config
        return sine_series(seed, indices, cfg.simulation_resolution, self.domain_length,
                           cfg.lmax)

    def nonlinear_factor(self, n: int, *, scaled: bool = False) -> np.ndarray:
        """g (of :attr:`nonlinearity`) times the 2/3 mask with ``dealias``, ``[n // 2 + 1]``
        complex128; ``scaled`` folds in the 1/n^p of unnormalised transforms (a hook of
        degree p, see :class:`Nonlinearity`)."""
        mask = dealias_mask(n, ndim=1) if self.config.dealias else np.ones(n // 2 + 1)
        factor = self.nonlinearity.multiplier(self.wavenumbers(n)) * mask
        if scaled and self.nonlinearity.degree is not None:
            factor = factor / n ** self.nonlinearity.degree
        return np.asarray(factor, dtype=np.complex128)

    # -- simulation ------------------------------------------------------------------------
    def to_simulation_grid(self, frames: np.ndarray) -> np.ndarray:
        """States on any even grid → the simulation grid, by spectral interpolation."""
        return spectral_resample(frames[:, 0], self.config.simulation_resolution,
                                 ndim=1)[:, None]

    def start(self, initial: np.ndarray, parameters: Mapping[str, np.ndarray]) -> SpectralState:
        cfg = self.config
        batch, n = initial.shape[0], cfg.simulation_resolution
        linear = self.linear(n, parameters)
        # A hybrid rollout restarts the solver every step: keep the last operator (its
        # ETDRK4 contour coefficients cost more than a record interval of steps).
        key = (batch, linear.shape, linear.dtype.str, linear.tobytes())
        if self._operator is None or self._operator[0] != key:
            self._operator = (key, self._stepper(linear, batch))
        stepper = self._operator[1]
        return SpectralState(stepper.spectral(initial[:, 0]), stepper)

    def _stepper(self, linear: np.ndarray, batch: int) -> FusedETDRK4 | BufferedETDRK4:
        """The fused stepper where the nonlinearity is a power and FFTW runs the transforms;
        the buffered one otherwise (float64 only)."""
        cfg, n = self.config, self.config.simulation_resolution
        factor = self.nonlinear_factor(n, scaled=True)
        if self._fused:
            dtype = np.dtype(getattr(cfg, "dtype", "float64")).type
            return FusedETDRK4(linear, cfg.time_step, factor, self.nonlinearity.power,
                               batch=batch, dtype=dtype, threads=self.threads)
        return BufferedETDRK4(linear, cfg.time_step, factor, self.nonlinearity, batch=batch,
                              backend=self.fft_backend)

    def advance(self, state: SpectralState, time: float) -> None:
        steps = whole_multiple(self.config.record_interval, self.config.time_step,
                               "record_interval")
        # A blow-up overflows on its way to inf/NaN; simulate() reports it after the record
        # interval (SolverDivergedError naming the time and the fix), so no warnings here.
        with np.errstate(over="ignore", invalid="ignore"):
            state.stepper.advance(state.v_hat, steps, state.source_hat)

    takes_source = True

    def add_source(self, state: SpectralState, source: np.ndarray) -> None:
        """Ŝ = rfft(S) (unnormalised, as v̂) joins N̂ in every stage of the interval's steps."""
        source_hat = state.stepper.spectral(source[:, 0])
        state.source_hat = source_hat if state.source_hat is None \
            else state.source_hat + source_hat

    def observe(self, state: SpectralState) -> np.ndarray:
        return state.stepper.physical(state.v_hat)[:, None]

    def tendency(self, frames: np.ndarray, *, time: float = 0.0,
                 parameters: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """u_t = L u + N(u) at ``frames`` ``[batch, 1, n]`` (any even n), in plain NumPy.

        The solver's semi-discretisation on the n-point grid: N from :attr:`nonlinearity`,
        zeroed outside the 2/3 band with ``dealias``; the linear operator of :meth:`linear`
        on every mode. ``time`` is unused (these PDEs are autonomous).
        """
        frames = np.asarray(frames, dtype=np.float64)
        if frames.ndim != 3 or frames.shape[1] != 1:
            raise ValueError(f"frames must have shape [batch, 1, x], got {frames.shape}")
        batch, n = frames.shape[0], frames.shape[-1]
        resolved = self.resolve_parameters(batch, parameters)
        u = frames[:, 0]
        rhs = self.nonlinear_factor(n) * np.fft.rfft(self.nonlinearity.term(u)) \
            + self.linear(n, resolved) * np.fft.rfft(u)
        return np.fft.irfft(rhs, n)[:, None]

    def reference_step(self, v_hat: np.ndarray, parameters: Mapping[str, np.ndarray] | None
                       = None, *, steps: int = 1, contour_points: int = CONTOUR_POINTS
                       ) -> np.ndarray:
        """``steps`` ETDRK4 steps of ``time_step`` in plain NumPy: the oracle of the fast path.

        The textbook formulas of Kassam & Trefethen's ``kursiv.m`` on ``numpy.fft``, with the
        solver's two hooks and the contour coefficients over ``contour_points`` points
        (Kassam & Trefethen use 32).

        Parameters
        ----------
        v_hat : complex array ``[batch, n // 2 + 1]``
            ``numpy.fft.rfft`` of u on an n-point grid.
        parameters : mapping, optional
            Per-sample parameters (``[batch]`` each), as for :meth:`step`.

        Returns
        -------
        complex array of ``v_hat``'s shape: v̂ after ``steps`` steps.
        """
        v_hat = np.asarray(v_hat, dtype=np.complex128)
        n = 2 * (v_hat.shape[-1] - 1)
        linear = self.linear(n, self.resolve_parameters(v_hat.shape[0], parameters))
        with np.errstate(under="ignore"):  # e^{hL} of the stiffest modes underflows to 0
            c = etdrk4_coefficients(linear, self.config.time_step, points=contour_points)
        factor, term = self.nonlinear_factor(n), self.nonlinearity.term

        def nonlinear(v):
            return factor * np.fft.rfft(term(np.fft.irfft(v, n)))

        for _ in range(steps):
            v_hat = etdrk4_step(v_hat, c, nonlinear)
        return v_hat

    def divergence_hint(self) -> str:
        return (f"time_step {self.config.time_step:g} is too large for the explicit "
                f"nonlinear term: {self.nonlinearity.step_limit}, or raise the resolution")

    # -- dataset ---------------------------------------------------------------------------
    def extra_variables(self) -> dict[str, VariableSpec]:
        return {name: VariableSpec((), *self.parameter_units[name], role="parameter")
                for name in self.parameter_names}

    def extra_outputs(self, inputs: Mapping[str, np.ndarray],
                      times: np.ndarray) -> dict[str, np.ndarray]:
        return {name: np.asarray(inputs[name], dtype=np.float64)
                for name in self.parameter_names}

    def stored_bytes_per_sample(self) -> int:
        return self._stored_bytes({TIME: self.num_records + 1,
                                   X: self.config.resolution})
