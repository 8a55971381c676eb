"""Shared pseudospectral helpers: batched real FFTs, wavenumbers, dealiasing masks.

Conventions (say them once, so nobody guesses):

* The domain is the periodic box ``[0, length)^d``; a grid of ``n`` points does **not** include
  the right boundary point: ``x_j = j * length / n``.
* Transforms act on the trailing ``ndim`` axes; everything in front is batch.  Real-to-complex
  ("rfft") layout: the last axis keeps ``n // 2 + 1`` non-negative wavenumbers, the others the
  full ``0 .. n/2-1, -n/2 .. -1`` range.
* Both directions are **unnormalised** (FFTW's convention): ``backward(forward(x)) == n**ndim * x``.
  Hot loops fold the ``1 / n**ndim`` into a multiplier they apply anyway.

Plans are made with ``FFTW_ESTIMATE``: the plan, and therefore every rounding error, is a pure
function of the shape. ``FFTW_MEASURE`` times candidate algorithms and can pick different ones
from run to run (and for different batch sizes when threaded), which would break the guarantee
that sample *i* of a dataset is bit-identical whatever the batch size.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

import numba
import numpy as np
import pyfftw

__all__ = [
    "ETDRK4",
    "RealFFT",
    "VorticityWavenumbers",
    "advection",
    "dealias_mask",
    "derivative_wavenumbers",
    "etdrk4_coefficients",
    "etdrk4_rows",
    "etdrk4_step",
    "default_threads",
    "irfftn",
    "rfftn",
    "spectral_resample",
    "spectral_velocity",
    "velocity_spectra",
    "vorticity_wavenumbers",
    "wavenumbers",
]

Backend = Literal["pyfftw", "numpy"]
#: Grids with at least this many points per transform use all cores in FFTW.
_THREADED_GRID_SIZE = 128 * 128
#: Transforms per FFTW call when the batch is split (see RealFFT).
_CHUNK = 8
_BACKENDS = ("pyfftw", "numpy")


def default_threads() -> int:
    """Threads for FFTW and numba: every core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def solver_threads() -> int:
    """Threads a solver plans its FFTs and kernels with: every core, at most the count the
    thread policy in effect allows (``--threads``, ``SSMPDE_THREADS``; :mod:`ssmpde.threads`)."""
    from ssmpde.threads import fftw_limit

    limit = fftw_limit()
    return default_threads() if limit is None else max(1, min(default_threads(), limit))


def _check_n(n: int) -> int:
    if not isinstance(n, (int, np.integer)) or n < 2 or n % 2:
        raise ValueError(f"spectral grids need an even number of points >= 2, got n={n!r}")
    return int(n)


def wavenumbers(n: int, *, real: bool = False) -> np.ndarray:
    """Integer wavenumbers of an ``n``-point periodic grid, in FFT order.

    Parameters
    ----------
    n : int
        Even number of grid points.
    real : bool
        If true, the ``n // 2 + 1`` non-negative wavenumbers of the real-to-complex layout.

    Returns
    -------
    numpy.ndarray of float64, shape ``(n,)`` or ``(n // 2 + 1,)``.
        ``k = 0, 1, ..., n/2 - 1, -n/2, ..., -1`` (full) or ``0 .. n/2`` (real).
        Multiply by ``2 pi / length`` for angular wavenumbers.
    """
    n = _check_n(n)
    return np.fft.rfftfreq(n, 1.0 / n) if real else np.fft.fftfreq(n, 1.0 / n)


def derivative_wavenumbers(n: int, *, real: bool = False) -> np.ndarray:
    """Wavenumbers for spectral differentiation, with the Nyquist mode zeroed.

    The Nyquist mode ``k = -n/2`` has no partner ``+n/2``: its derivative is not a real
    field, so a first derivative must drop it (Trefethen, *Spectral Methods in MATLAB*, ch. 3).
    """
    k = wavenumbers(n, real=real).copy()
    k[np.abs(k) == n // 2] = 0.0
    return k


def dealias_mask(n: int, *, ndim: int = 2, fraction: float = 2.0 / 3.0) -> np.ndarray:
    """Square truncation mask in real-to-complex layout: keep ``|k_i| <= fraction * (n / 2)``.

    With the default 2/3 this is Orszag's rule as FNO's ``navier_stokes_2d`` applies it to the
    nonlinear term.

    Returns
    -------
    numpy.ndarray of bool, shape ``(n,) * (ndim - 1) + (n // 2 + 1,)``.
    """
    n = _check_n(n)
    if ndim not in (1, 2):
        raise ValueError(f"ndim must be 1 or 2, got {ndim!r}")
    limit = fraction * (n // 2)
    keep_last = np.abs(wavenumbers(n, real=True)) <= limit
    if ndim == 1:
        return keep_last
    keep_full = np.abs(wavenumbers(n)) <= limit
    return keep_full[:, None] & keep_last[None, :]


class VorticityWavenumbers(NamedTuple):
    """The constants of :func:`spectral_velocity` on an ``n``-point square, rfft2 layout.

    Attributes
    ----------
    ky : array ``[n]``
        Angular wavenumbers along y (the full axis), Nyquist mode zeroed (first derivatives).
    kx : array ``[n // 2 + 1]``
        Angular wavenumbers along x (the real axis), Nyquist mode zeroed.
    laplacian : array ``[n, n // 2 + 1]``
        λ = |k|², the symbol of −Δ (the Nyquist modes kept: a second derivative is real).
    inverse_laplacian : array ``[n, n // 2 + 1]``
        1 / λ, and 0 at k = 0: ψ has zero mean (no derivative sees it anyway).
    """

    ky: Any
    kx: Any
    laplacian: Any
    inverse_laplacian: Any


def vorticity_wavenumbers(n: int, *, length: float = 1.0) -> VorticityWavenumbers:
    """:class:`VorticityWavenumbers` of the periodic square ``[0, length)²`` on ``n`` points.

    NumPy float64 arrays; ``length=1`` is the unit torus of the Navier–Stokes solver,
    ``length=2π`` gives integer wavenumbers (Kochkov's Kolmogorov-flow frame).
    """
    scale = 2 * np.pi / length
    laplacian = scale ** 2 * (wavenumbers(n)[:, None] ** 2
                              + wavenumbers(n, real=True)[None, :] ** 2)
    inverse = np.divide(1.0, laplacian, out=np.zeros_like(laplacian), where=laplacian > 0)
    return VorticityWavenumbers(scale * derivative_wavenumbers(n),
                                scale * derivative_wavenumbers(n, real=True), laplacian, inverse)


def spectral_velocity(w_re, w_im, ky, kx, inverse_laplacian):
    r"""The velocity and the vorticity gradient of a vorticity's Fourier coefficients, by parts.

    .. math:: \hat\psi = \hat\omega / |k|^2 \;(-\Delta\psi = \omega),\quad
              \hat u = i k_y \hat\psi,\quad \hat v = -i k_x \hat\psi,\quad
              \widehat{\omega_x} = i k_x \hat\omega,\quad \widehat{\omega_y} = i k_y \hat\omega,

    so u = ∂ψ/∂y, v = −∂ψ/∂x (the Navier–Stokes solver's convention,
    ``docs/numerics/navier_stokes.md``). The one implementation of the Biot–Savart step: the
    solver's numba kernels compile it (on scalars), its NumPy oracle and tendency, the
    PyTorch step, the convolutional corrector's velocity features and the Kolmogorov
    benchmark call it through :func:`velocity_spectra` (on arrays or tensors). Written with
    real arithmetic only, so it is the same code on NumPy arrays, torch tensors and numba
    scalars; multiplying by i is a swap of parts.

    Parameters
    ----------
    w_re, w_im : scalars or arrays ``[..., n, n // 2 + 1]``
        Real and imaginary parts of ω̂.
    ky, kx, inverse_laplacian : scalars or arrays broadcasting against ``w_re``
        As :func:`vorticity_wavenumbers` gives them (``ky`` as a column ``[n, 1]``).

    Returns
    -------
    tuple of four ``(real, imaginary)`` pairs: û, v̂, ω̂_x, ω̂_y.
    """
    p_re = w_re * inverse_laplacian
    p_im = w_im * inverse_laplacian
    return ((-ky * p_im, ky * p_re), (kx * p_im, -kx * p_re),
            (-kx * w_im, kx * w_re), (-ky * w_im, ky * w_re))


def velocity_spectra(w_hat, k: VorticityWavenumbers) -> tuple:
    """(û, v̂, ω̂_x, ω̂_y) of the complex ω̂ ``[..., n, n // 2 + 1]`` (a NumPy array or a torch
    tensor, ``k``'s fields of the same kind): :func:`spectral_velocity` on its parts.

    Example
    -------
    ω = sin 2πy on the unit torus: ψ = sin 2πy / 4π², so u = ∂ψ/∂y = cos 2πy / 2π, v = 0.

    >>> n = 8
    >>> y = np.broadcast_to(np.arange(n)[:, None] / n, (n, n))
    >>> u_hat, v_hat, _, _ = velocity_spectra(np.fft.rfft2(np.sin(2 * np.pi * y)),
    ...                                       vorticity_wavenumbers(n))
    >>> bool(np.allclose(np.fft.irfft2(u_hat, s=(n, n)), np.cos(2 * np.pi * y) / (2 * np.pi)))
    True
    """
    parts = spectral_velocity(w_hat.real, w_hat.imag, k.ky[:, None], k.kx, k.inverse_laplacian)
    return tuple(re + 1j * im for re, im in parts)


def advection(u, v, w_x, w_y):
    """u ω_x + v ω_y in physical space, from the inverse transforms of
    :func:`velocity_spectra` (any array type; numba compiles it on scalars too)."""
    return u * w_x + v * w_y


def _padded(count: int, itemsize: int) -> int:
    """``count`` rounded up so that ``count * itemsize`` is a multiple of the SIMD alignment."""
    align = pyfftw.simd_alignment
    return -(-count * itemsize // align) * align // itemsize


def _aligned(shape: tuple[int, ...], dtype) -> np.ndarray:
    out = pyfftw.empty_aligned(shape, dtype=dtype)
    out[...] = 0
    return out


class RealFFT:
    """Batched real FFT over the trailing axes with preallocated buffers and cached plans.

    The object owns two aligned arrays, ``real`` (``batch_shape + (n,) * ndim``, float64) and
    ``spectral`` (``batch_shape + (n,) * (ndim - 1) + (n // 2 + 1,)``, complex128). Hot loops
    write into one, call :meth:`forward` or :meth:`backward`, and read the other: no
    allocation per call. Both directions are unnormalised.

    Parameters
    ----------
    batch_shape : tuple of int
        Leading (batch) dimensions, e.g. ``(4, 8)`` for four fields of eight samples.
    n : int
        Even number of grid points per axis.
    ndim : {1, 2}
        Number of transformed (trailing) axes.
    threads : int, optional
        FFTW threads; default: all usable cores. The result does not depend on it.
    backend : {"pyfftw", "numpy"}
        ``"numpy"`` runs ``numpy.fft`` on the same buffers: the reference path in tests.
    dtype : float64 or float32
        The real type; the spectral buffer is complex128 or complex64 (FFTW's single
        precision for float32).

    Notes
    -----
    ``backward`` destroys the contents of ``spectral`` with the pyFFTW backend (FFTW's
    complex-to-real transforms overwrite their input); copy first if you still need it.

    Example
    -------
    >>> fft = RealFFT((3,), 16)
    >>> fft.real[...] = 1.0
    >>> spectrum = fft.forward()
    >>> float(fft.spectral[0, 0, 0].real)
    256.0
    """

    def __init__(self, batch_shape: tuple[int, ...], n: int, *, ndim: int = 2,
                 threads: int | None = None, backend: Backend = "pyfftw",
                 dtype=np.float64) -> None:
        if backend not in _BACKENDS:
            raise ValueError(f"unknown FFT backend {backend!r}; choose one of {_BACKENDS}")
        if ndim not in (1, 2):
            raise ValueError(f"ndim must be 1 or 2, got {ndim!r}")
        self.n = _check_n(n)
        self.ndim = ndim
        self.backend = backend
        # Threads pay off only on large grids. Decided by the grid, never the batch: the
        # plan (hence every rounding) must not depend on how many samples share it.
        if threads is None:
            threads = solver_threads() if self.n ** ndim >= _THREADED_GRID_SIZE else 1
        self.threads = int(threads)
        self.batch_shape = tuple(int(b) for b in batch_shape)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float64, np.float32):
            raise ValueError(f"RealFFT is float64 or float32, got {self.dtype}")
        real_dtype, complex_dtype = self.dtype, np.result_type(self.dtype, np.complex64)
        grid = (self.n,) * ndim
        half = (self.n,) * (ndim - 1) + (self.n // 2 + 1,)
        count = int(np.prod(self.batch_shape, dtype=np.int64))
        if ndim == 1:
            # FFTW vectorises 1D transforms across the batch, so a row's rounding would depend
            # on its neighbours. Rows are padded to SIMD-aligned addresses and the batch to
            # whole chunks, every chunk runs the same plan over _CHUNK full rows: a sample's
            # bits do not depend on its place in the batch or the batch size.
            rows = -(-count // _CHUNK) * _CHUNK
            real_store = _aligned((rows, _padded(self.n, real_dtype.itemsize)), real_dtype)
            spectral_store = _aligned((rows, _padded(half[-1], complex_dtype.itemsize)),
                                      complex_dtype)
            self._chunks = [(real_store[i:i + _CHUNK, :self.n],
                             spectral_store[i:i + _CHUNK, :half[-1]])
                            for i in range(0, rows, _CHUNK)]
            self.real = real_store[:count, :self.n].reshape(self.batch_shape + grid)
            self.spectral = spectral_store[:count, :half[-1]].reshape(self.batch_shape + half)
        else:
            self.real = _aligned(self.batch_shape + grid, real_dtype)
            self.spectral = _aligned(self.batch_shape + half, complex_dtype)
            real_flat = self.real.reshape((count,) + grid)
            spectral_flat = self.spectral.reshape((count,) + half)
            self._chunks = self._chunked(real_flat, spectral_flat, count)
        self._axes = tuple(range(-ndim, 0))
        # Plans run over chunks of the (flattened) batch: a few transforms at a time stay in
        # cache (at 256², 4 per call is ~25 % faster per transform than 32). A chunk must
        # start on a SIMD-aligned address, or FFTW would pick unaligned codelets for it and
        # round differently from its neighbours; otherwise one plan covers the batch.
        self._forward_plans: list[pyfftw.FFTW] = []
        self._backward_plans: list[pyfftw.FFTW] = []

    @staticmethod
    def _chunked(real_flat, spectral_flat, count):
        step = _CHUNK if all((size * _CHUNK) % pyfftw.simd_alignment == 0 for size in
                             (real_flat[0].nbytes, spectral_flat[0].nbytes)) else count
        return [(real_flat[i:i + step], spectral_flat[i:i + step])
                for i in range(0, count, max(step, 1))]

    def forward(self) -> np.ndarray:
        """``spectral <- rfft(real)``, unnormalised. Returns ``spectral``."""
        if self.backend == "numpy":
            self.spectral[...] = np.fft.rfftn(self.real, axes=self._axes)
            return self.spectral
        if not self._forward_plans:
            self._forward_plans = [
                pyfftw.FFTW(real, spectral, axes=self._axes, direction="FFTW_FORWARD",
                            flags=("FFTW_ESTIMATE",), threads=self.threads)
                for real, spectral in self._chunks]
        for plan in self._forward_plans:
            plan.execute()
        return self.spectral

    def backward(self) -> np.ndarray:
        """``real <- irfft(spectral)``, unnormalised (``n**ndim`` times numpy's). Returns ``real``."""
        if self.backend == "numpy":
            self.real[...] = np.fft.irfftn(self.spectral, s=(self.n,) * self.ndim,
                                           axes=self._axes, norm="forward")
            return self.real
        if not self._backward_plans:
            self._backward_plans = [
                pyfftw.FFTW(spectral, real, axes=self._axes, direction="FFTW_BACKWARD",
                            flags=("FFTW_ESTIMATE", "FFTW_DESTROY_INPUT"), threads=self.threads)
                for real, spectral in self._chunks]
        for plan in self._backward_plans:
            plan.execute()
        return self.real


def rfftn(x: np.ndarray, *, ndim: int = 2, backend: Backend = "pyfftw") -> np.ndarray:
    """Unnormalised real FFT over the trailing ``ndim`` axes (allocating; not for hot loops)."""
    x = np.asarray(x, dtype=np.float64)
    fft = RealFFT(x.shape[:-ndim], x.shape[-1], ndim=ndim, backend=backend)
    fft.real[...] = x
    return fft.forward().copy()


def irfftn(x_hat: np.ndarray, n: int, *, ndim: int = 2, backend: Backend = "pyfftw") -> np.ndarray:
    """Normalised inverse of :func:`rfftn`: ``irfftn(rfftn(x), n) == x`` to round-off."""
    x_hat = np.asarray(x_hat, dtype=np.complex128)
    fft = RealFFT(x_hat.shape[:-ndim], n, ndim=ndim, backend=backend)
    fft.spectral[...] = x_hat
    return fft.backward() / float(n) ** ndim


def spectral_resample(x: np.ndarray, n: int, *, ndim: int = 2) -> np.ndarray:
    """Resample periodic fields to ``n`` points per axis by Fourier truncation or zero padding.

    Upsampling returns the band-limited interpolant through the given points (the Nyquist
    mode of the coarse grid, which has no unambiguous sign, is dropped); downsampling keeps
    the modes the coarse grid can hold. Resampling to the same size returns a copy.

    Parameters
    ----------
    x : array, shape ``(..., m, m)`` (``ndim=2``) or ``(..., m)``
    n : int
        Even target size.
    """
    x = np.asarray(x, dtype=np.float64)
    m = _check_n(x.shape[-1])
    n = _check_n(n)
    if m == n:
        return x.copy()
    x_hat = rfftn(x, ndim=ndim)
    keep = min(m, n) // 2  # modes |k| < keep survive; the Nyquist of the smaller grid is dropped
    out = np.zeros(x.shape[:-ndim] + (n,) * (ndim - 1) + (n // 2 + 1,), dtype=np.complex128)
    if ndim == 1:
        out[..., :keep] = x_hat[..., :keep]
    else:
        out[..., :keep, :keep] = x_hat[..., :keep, :keep]
        if keep > 1:  # negative wavenumbers -(keep-1) .. -1 (explicit: -0 would slice everything)
            out[..., n - keep + 1:, :keep] = x_hat[..., m - keep + 1:, :keep]
    out *= (n / m) ** ndim
    return irfftn(out, n, ndim=ndim)


# ---------------------------------------------------------------------------------------
# ETDRK4 (Cox & Matthews 2002) with Kassam & Trefethen's (2005) contour-integral coefficients.
# ---------------------------------------------------------------------------------------
#: Points on the contour around each h·L (Kassam & Trefethen use 32 on the full circle, or
#: 16 on the upper half for real L). 64 keep the coefficients at round-off for |hL| ≤ 100.
CONTOUR_POINTS = 64


def etdrk4_coefficients(linear: np.ndarray, h: float, *,
                        points: int = CONTOUR_POINTS) -> dict[str, np.ndarray]:
    r"""The ETDRK4 coefficients of a diagonal linear operator, by contour integrals.

    For :math:`\hat v' = L \hat v + N(\hat v)` the Cox–Matthews scheme needs
    :math:`E = e^{hL}`, :math:`E_2 = e^{hL/2}`, :math:`Q = h\,\varphi_1(hL/2)/2`-type terms and
    :math:`f_1, f_2, f_3` (Kassam & Trefethen 2005, eq. 2.5). Evaluated directly they cancel
    catastrophically for small :math:`|hL|`; here each is the mean of its analytic expression
    over ``points`` points on a circle of radius 1 around :math:`hL` (Cauchy's formula), which
    is accurate to round-off for every :math:`hL`.

    Parameters
    ----------
    linear : array of real or complex, any shape
        The diagonal of L (per Fourier mode, and per sample if it varies).
    h : float
        Time step.
    points : int
        Contour points.

    Returns
    -------
    dict with ``E, E2, Q, f1, f2, f3``, each of ``linear``'s shape (real if ``linear`` is).

    References
    ----------
    Cox & Matthews, J. Comput. Phys. 176 (2002) 430–455.
    Kassam & Trefethen, SIAM J. Sci. Comput. 26 (2005) 1214–1233.
    """
    linear = np.asarray(linear)
    if not (np.isfinite(h) and h > 0):
        raise ValueError(f"the time step must be positive and finite, got {h!r}")
    hl = h * linear
    roots = np.exp(1j * np.pi * (np.arange(1, points + 1) - 0.5) / points * 2)
    lr = hl[..., None] + roots
    exp_lr = np.exp(lr)
    mean = lambda values: values.mean(axis=-1)  # noqa: E731
    q = h * mean((np.exp(lr / 2) - 1) / lr)
    f1 = h * mean((-4 - lr + exp_lr * (4 - 3 * lr + lr ** 2)) / lr ** 3)
    f2 = h * mean((2 + lr + exp_lr * (-2 + lr)) / lr ** 3)
    f3 = h * mean((-4 - 3 * lr - lr ** 2 + exp_lr * (4 - lr)) / lr ** 3)
    out = {"E": np.exp(hl), "E2": np.exp(hl / 2), "Q": q, "f1": f1, "f2": f2, "f3": f3}
    if not np.iscomplexobj(linear):
        out = {k: np.ascontiguousarray(v.real) for k, v in out.items()}
    return out


def etdrk4_rows(linear: np.ndarray, h: float) -> dict[str, np.ndarray]:
    """:func:`etdrk4_coefficients` of each row of ``linear`` (``[rows, m]``, or ``[m]``).

    One contour evaluation per distinct operator (a batch usually shares its ν), each on its
    own: NumPy's complex products round differently in arrays of different sizes, and sample
    i must not depend on its batch. Float64 or complex128 out, ``[rows, m]`` each.
    """
    linear = np.atleast_2d(np.asarray(linear))
    linear = linear.astype(np.complex128 if np.iscomplexobj(linear) else np.float64)
    rows, inverse = np.unique(linear, axis=0, return_inverse=True)
    with np.errstate(under="ignore"):  # e^{hL} of the stiffest modes underflows to 0
        each = [etdrk4_coefficients(row[None], h) for row in rows]
    return {k: np.concatenate([c[k] for c in each])[inverse.reshape(-1)] for k in each[0]}


def etdrk4_step(v, c: Mapping[str, Any], nonlinear: Any, *, nodes: bool = False):
    r"""One Cox–Matthews ETDRK4 step of :math:`\hat v' = L \hat v + N(\hat v)`, written once
    for NumPy arrays and torch tensors: the stages every exponential scheme shares (the
    semilinear 1D solvers' and Navier–Stokes' NumPy oracles and their PyTorch steps; the fast
    paths are numba kernels).

    ``c`` holds ``E, E2, Q, f1, f2, f3`` (:func:`etdrk4_coefficients`),
    ``nonlinear`` maps v̂ to N̂(v̂); with ``nodes`` it is called as ``nonlinear(v̂, node)``,
    ``node`` the stage's time in units of the step (0, ½, ½, 1), for a non-autonomous N (a
    moving forcing). Kassam & Trefethen (2005), eq. (2.5) and ``kursiv.m``.
    """
    def evaluate(state, node):
        return nonlinear(state, node) if nodes else nonlinear(state)

    nv = evaluate(v, 0.0)
    a = c["E2"] * v + c["Q"] * nv
    na = evaluate(a, 0.5)
    b = c["E2"] * v + c["Q"] * na
    nb = evaluate(b, 0.5)
    cc = c["E2"] * a + c["Q"] * (2.0 * nb - nv)
    nc = evaluate(cc, 1.0)
    return c["E"] * v + c["f1"] * nv + 2.0 * c["f2"] * (na + nb) + c["f3"] * nc


@numba.njit(cache=True)
def _stage(e2, q, v, n1, n2, weight, out):  # pragma: no cover
    """out = E2 v + Q (n1 + weight (n2 − n1))): stage a/b (weight 0) and c (2 Nb − Nv)."""
    batch, m = out.shape
    shared = e2.shape[0] == 1
    for b in range(batch):
        c = 0 if shared else b
        for j in range(m):
            nonlinear = n1[b, j] + weight * (n2[b, j] - n1[b, j])
            out[b, j] = e2[c, j] * v[b, j] + q[c, j] * nonlinear


@numba.njit(cache=True)
def _combine(e, f1, f2, f3, v, nv, na, nb, nc):  # pragma: no cover
    """v ← E v + f1 Nv + 2 f2 (Na + Nb) + f3 Nc (in place)."""
    batch, m = v.shape
    shared = e.shape[0] == 1
    for b in range(batch):
        c = 0 if shared else b
        for j in range(m):
            v[b, j] = e[c, j] * v[b, j] + f1[c, j] * nv[b, j] \
                + 2.0 * f2[c, j] * (na[b, j] + nb[b, j]) + f3[c, j] * nc[b, j]


class ETDRK4:
    """Fourth-order exponential time differencing for ``v̂' = L v̂ + N(v̂)`` on rfft modes.

    Parameters
    ----------
    linear : array ``[m]`` or ``[batch, m]``, real or complex
        Diagonal of L over the ``m`` modes (per sample when it varies, e.g. the viscosity).
        Real for dissipative operators (−ν k²), complex for dispersive ones (KdV's i k³).
    h : float
        Time step.
    nonlinear : callable ``(v_hat, out) -> None``
        Writes N(v̂) into ``out`` (complex ``[batch, m]``); must not keep references.
    batch : int

    Notes
    -----
    One step costs four evaluations of ``nonlinear``; the combinations run in numba kernels
    over preallocated buffers (no allocation per step). Mode by mode the arithmetic is the
    same for any batch size.

    Example
    -------
    >>> k = np.arange(5.0)
    >>> stepper = ETDRK4(-k ** 2, 0.1, lambda v, out: out.fill(0), batch=1)
    >>> v = np.ones((1, 5), complex)
    >>> stepper.step(v)
    >>> np.allclose(v[0], np.exp(-0.1 * k ** 2))
    True
    """

    def __init__(self, linear: np.ndarray, h: float, nonlinear, *, batch: int) -> None:
        coefficients = etdrk4_rows(linear, h)
        # Complex coefficient arrays: the kernels then multiply complex by complex only.
        self.c = {k: np.ascontiguousarray(v, dtype=np.complex128)
                  for k, v in coefficients.items()}
        self.nonlinear = nonlinear
        shape = (batch, coefficients["E"].shape[-1])
        self._buffers = [np.empty(shape, np.complex128) for _ in range(7)]

    def step(self, v: np.ndarray) -> None:
        """Advance ``v`` (complex ``[batch, m]``) by one step, in place."""
        c = self.c
        nv, na, nb, nc, a, b, cc = self._buffers
        self.nonlinear(v, nv)
        _stage(c["E2"], c["Q"], v, nv, nv, 0.0, a)
        self.nonlinear(a, na)
        _stage(c["E2"], c["Q"], v, na, na, 0.0, b)
        self.nonlinear(b, nb)
        _stage(c["E2"], c["Q"], a, nv, nb, 2.0, cc)  # E2 a + Q (2 Nb − Nv)
        self.nonlinear(cc, nc)
        _combine(c["E"], c["f1"], c["f2"], c["f3"], v, nv, na, nb, nc)

