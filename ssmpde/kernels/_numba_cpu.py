r"""What the numba CPU kernels (:mod:`ssmpde.kernels.scan_cpu`, :mod:`ssmpde.kernels.ssd_cpu`)
share: vectorisable math intrinsics, the compute dtype and the start of numba's thread pool.

numba has no vector math library here (no SVML), so ``np.exp`` in a kernel is a scalar libm
call that keeps its loop scalar. :func:`exp`, :func:`exp2` and :func:`log1p_unit` are plain
NumPy calls from Python and, inside ``numba.njit`` kernels, inlined polynomials (numba
``overload``\ s) that LLVM vectorises. Their accuracy is pinned in ulps by
``tests/kernels/test_scan_cpu.py``. Kernels that call them may be compiled with
``cache=True``: the overloads are registered when this module is imported, before any cached
kernel is loaded.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch
from numba import types
from numba.extending import intrinsic, overload

__all__ = ["compute_dtype", "exp", "exp2", "log1p_unit", "numba_threads"]


# ---------------------------------------------------------------------------------------
# A vectorisable exp for the state loops. numba has no vector math library here (no SVML),
# so np.exp is a scalar libm call that keeps every loop over ``state`` scalar; this one is
# inlined arithmetic (Cody-Waite reduction, a polynomial, and 2^k built from its bits)
# that LLVM vectorises. Error ≤ 1.05 ulp (float32) and 0.9 ulp (float64) against the exact
# exp on [LO, HI].
# ---------------------------------------------------------------------------------------
#: The same-width integer and float types an LLVM bitcast maps between, both ways.
_BITCASTS = {types.int32: types.float32, types.int64: types.float64,
             types.float32: types.int32, types.float64: types.int64}


@intrinsic
def _bitcast(typingctx, x):  # pragma: no cover
    """Reinterpret an int32 / int64 as float32 / float64, or a float as its integer bits
    (an LLVM bitcast, no conversion)."""
    ret = _BITCASTS.get(x)
    if ret is None:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(ret))

    return ret(x), codegen


def exp(x):  # pragma: no cover
    """exp(x) for float32 / float64 scalars. In numba kernels the vectorisable polynomial of
    :func:`_exp_overload` (within 1.5 ulp); from Python, NumPy's exp."""
    return np.exp(x)


def _exp_constants(dtype, degree, bias, low, ln2_hi, ln2_lo, coeffs=None):
    """Coefficients (by default Taylor's 2/i!; the factor 2 pays for the 2^(k-1) below), the
    range and ln 2 split.

    ``ln2_hi`` has few enough significant bits that k · ln2_hi is exact for every k in range
    (Cody and Waite); ``bias`` is the IEEE exponent bias. 2^(k-1) is built as a normal number
    from its exponent bits, which needs k - 1 ≥ 1 - bias: below ``low`` (e^low ≈ 4 × the
    smallest normal) the result is flushed to 0, an absolute error under 3e-38 (float32) or
    6e-308 (float64); above log(max) it is +inf.
    """
    high = math.log(np.finfo(dtype).max)
    if coeffs is None:
        coeffs = [2.0 / math.factorial(i) for i in range(degree + 1)]
    coeffs = tuple(dtype(c) for c in coeffs)
    return (dtype(low), dtype(high), dtype(1.0 / math.log(2.0)), dtype(ln2_hi),
            dtype(ln2_lo), coeffs, bias)


# float32: degree 6, fitted to 2 e^f by least squares of the relative error at 2000
# Chebyshev nodes of |f| ≤ ln2/2 (near minimax): 2e-9 relative, 1e-7 evaluated in float32,
# one multiply-add fewer than Taylor's degree 7 for the same accuracy (the state loops are
# bound by these multiply-adds). float64: Taylor, remainder 5e-18 at degree 13.
_EXP32 = _exp_constants(np.float32, 6, 127, -86.5, 0.693145751953125,
                        1.42860682030941723212e-6,
                        coeffs=(2.0, 2.0, 0.9999998, 0.33332843, 0.08333672, 0.016749542,
                                0.0027658842))
_EXP64 = _exp_constants(np.float64, 13, 1023, -707.5, 6.93147180369123816490e-01,
                        1.90821492927058770002e-10)


@overload(exp, jit_options={"fastmath": {"contract"}})  # no reassoc: keeps the ln2 split
def _exp_overload(x):  # pragma: no cover
    """exp(x) = 2^(k-1) · 2 e^f with k = round(x / ln2), f = x − k ln2 ∈ [−ln2/2, ln2/2].

    NaN propagates (through f), x > log(max) gives +inf, x < LOW gives 0.
    """
    if not isinstance(x, types.Float):
        return None
    if x.bitwidth == 32:
        low, high, log2e, ln2_hi, ln2_lo, c, bias = _EXP32
        c0, c1, c2, c3, c4, c5, c6 = c
        half, zero, inf = np.float32(0.5), np.float32(0.0), np.float32(np.inf)

        def impl(x):
            xc = low if x < low else (high if x > high else x)
            k = np.floor(xc * log2e + half)
            f = (xc - k * ln2_hi) - k * ln2_lo
            r = (((((c6 * f + c5) * f + c4) * f + c3) * f + c2) * f + c1) * f + c0
            r *= _bitcast(np.int32((np.int32(k) + np.int32(bias - 1)) << np.int32(23)))
            r = zero if x < low else r
            return inf if x > high else r

        return impl
    low, high, log2e, ln2_hi, ln2_lo, c, bias = _EXP64
    c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13 = c

    def impl(x):
        xc = low if x < low else (high if x > high else x)
        k = np.floor(xc * log2e + 0.5)
        f = (xc - k * ln2_hi) - k * ln2_lo
        r = ((((((c13 * f + c12) * f + c11) * f + c10) * f + c9) * f + c8) * f + c7) * f + c6
        r = (((((r * f + c5) * f + c4) * f + c3) * f + c2) * f + c1) * f + c0
        r *= _bitcast(np.int64((np.int64(k) + np.int64(bias - 1)) << np.int64(52)))
        r = 0.0 if x < low else r
        return np.inf if x > high else r

    return impl


def exp2(x):  # pragma: no cover
    """2^x for float32 / float64 scalars. In numba kernels the polynomial of
    :func:`_exp2_overload`; from Python, NumPy's exp2."""
    return np.exp2(x)


def _exp2_constants(dtype, mantissa_bits, bias, coeffs):
    """(low, high, shifter, exponent offset, coefficients) of :func:`_exp2_overload`.

    Adding the shifter 1.5 · 2^m (m mantissa bits) to |x| < 2^(m-1) rounds x to the nearest
    integer k in the shifter's last bits, so ``bits(x + shifter) + offset`` is k + bias, the
    exponent field of 2^k. x is clamped to [1 − bias, bias + 1]: 2^k stays a normal number
    down to the smallest normal (2^(1-bias), the result below it, an absolute error under
    1.2e-38 in float32 and 2.3e-308 in float64), and k = bias + 1 is the all-ones exponent,
    +inf.
    """
    shifter = dtype(1.5 * 2.0 ** mantissa_bits)
    bits = int(np.array([shifter]).view(np.int32 if dtype == np.float32 else np.int64)[0])
    return (dtype(1 - bias), dtype(bias + 1), shifter, bias - bits,
            tuple(dtype(c) for c in coeffs))


# 2^f on |f| ≤ 1/2. float32: degree 6 fitted by least squares of the relative error at 4000
# Chebyshev nodes (1.6e-8 relative with the float32 coefficients); float64: Taylor's
# ln2^i / i!, remainder 4e-18 at degree 13.
_EXP2_32 = _exp2_constants(np.float32, 23, 127,
                           (1.0, 0.6931471824645996, 0.24022646248340607, 0.05550329014658928,
                            0.009618519805371761, 0.0013399859890341759,
                            0.00015337577497120947))
_EXP2_64 = _exp2_constants(np.float64, 52, 1023,
                           [math.log(2.0) ** i / math.factorial(i) for i in range(14)])


@overload(exp2, jit_options={"fastmath": {"contract"}})  # no reassoc: keeps the shifter
def _exp2_overload(x):  # pragma: no cover
    """2^x = 2^k · 2^f with k = round(x) by the shifter and f = x − k ∈ [−1/2, 1/2].

    Fewer operations than :func:`exp` (no range reduction by ln 2, no float-to-int
    conversion, two clamps instead of four selects): the Ā of the state loops, which take
    A log2(e) so that Ā = exp(Δ A) = 2^(Δ A log2 e). NaN propagates; x ≥ bias + 1/2 gives
    +inf (2^x ≥ 2^(bias + 1/2) is within a factor √2 of the largest float), x below
    1 − bias gives the smallest normal.
    """
    if not isinstance(x, types.Float):
        return None
    single = x.bitwidth == 32
    low, high, shifter, offset, c = _EXP2_32 if single else _EXP2_64
    integer = np.int32 if single else np.int64
    offset, shift = integer(offset), integer(23 if single else 52)
    top, rest = c[-1], c[-2::-1]

    def impl(x):
        xc = low if x < low else x
        xc = high if xc > high else xc
        t = xc + shifter
        f = xc - (t - shifter)
        r = top
        for coefficient in numba.literal_unroll(rest):  # Horner
            r = r * f + coefficient
        return r * _bitcast(integer((_bitcast(t) + offset) << shift))

    return impl


def log1p_unit(t):  # pragma: no cover
    """log(1 + t) for t in [0, 1] (float32 / float64 scalars). In numba kernels the
    vectorisable series of :func:`_log1p_unit_overload`; from Python, NumPy's log1p."""
    return np.log1p(t)


def _atanh_series(dtype, terms):
    """Coefficients 2 / (2i + 1), i = 0..terms-1, of 2 atanh(s) = log((1 + s) / (1 - s))."""
    return tuple(dtype(2.0 / (2 * i + 1)) for i in range(terms))


# With s = t / (2 + t) ≤ 1/3 the series' remainder is below s^(2 terms) / (2 terms + 1):
# 1e-8 (7 terms, float32) and 2e-17 (16 terms, float64) relative.
_LOG1P32 = _atanh_series(np.float32, 7)
_LOG1P64 = _atanh_series(np.float64, 16)


@overload(log1p_unit, jit_options={"fastmath": {"contract"}})
def _log1p_unit_overload(t):  # pragma: no cover
    """log(1 + t) = 2 atanh(s) = 2 Σ s^(2i+1) / (2i + 1), s = t / (2 + t) ∈ [0, 1/3]: one
    division and a polynomial in s², no libm call, so loops over it vectorise."""
    if not isinstance(t, types.Float):
        return None
    coeffs = _LOG1P32 if t.bitwidth == 32 else _LOG1P64
    top = coeffs[-1]
    rest = coeffs[-2::-1]
    two = np.float32(2.0) if t.bitwidth == 32 else 2.0

    def impl(t):
        s = t / (two + t)
        s2 = s * s
        r = top
        for c in numba.literal_unroll(rest):
            r = r * s2 + c
        return r * s

    return impl


def compute_dtype(u: torch.Tensor) -> torch.dtype:
    """float64 for float64 inputs, float32 for everything else (half precisions included)."""
    return torch.float64 if u.dtype == torch.float64 else torch.float32


_numba_pool_started = False


def numba_threads() -> int:
    """numba's thread count in this thread, starting numba's thread pool without touching
    torch's.

    numba's OpenMP threading layer and torch share one OpenMP runtime, and starting numba's
    pool (its first parallel kernel, or the first ``numba.get_num_threads()``) sets that
    runtime's thread count to numba's, which torch's parallel regions then use (e.g. 2
    instead of ``OMP_NUM_THREADS=1``). torch's count is put back, so the first scan in a
    process does not change how many threads torch uses from then on, nor the bits of
    torch's thread-partitioned reductions (the gradients of LayerNorm and depthwise
    convolution parameters): a run continued in another process stays bit-identical.
    """
    global _numba_pool_started
    if _numba_pool_started:
        return numba.get_num_threads()
    before = torch.get_num_threads()
    threads = numba.get_num_threads()
    if torch.get_num_threads() != before:
        torch.set_num_threads(before)
    _numba_pool_started = True
    return threads
