r"""Fast CPU selective scans: numba kernels behind ``torch.autograd.Function``\ s.

The same two scans as :mod:`ssmpde.kernels.reference` (the oracle; semantics in
``shared/specs/kernels.md``), computed by fused numba loops:

* :func:`selective_scan_cpu`, the 1D scan of Mamba's S6 with GeoMaNO's geometric correction,
* :func:`selective_scan_2d_cpu`, the 2D scan of 2DMamba / 2DGeoMamba (row pass, then column
  pass, with the same Ā).

Design, after mamba-ssm's CUDA kernel (Gu & Dao, 2023):

* Nothing of size ``[batch, channel, state, length]`` is ever stored. The forward keeps only
  the running state; the backward **recomputes** the states of one (batch, channel) pair at a
  time into a per-thread scratch of ``O(state · length)`` and sweeps the adjoint back over it.
  Saved tensors are the (cast, contiguous) inputs: ``O(batch · channel · length)`` plus B, C.
* Accumulation is in the compute dtype: float64 for float64 inputs, float32 otherwise.
* Ā = exp(Δ A) is formed at each position from Δ ≥ 0 and A < 0, so it lies in (0, 1]; no
  cumulative product or cumulative sum is ever exponentiated, and the state h_{l-1} needed in
  the backward is read from the recomputed scratch, never recovered by dividing by Ā.
* Speed: the loops over ``state`` are what LLVM vectorises, so they hold no libm call (Ā uses
  :func:`_exp`, an inlined polynomial exp within 1 ulp of np.exp) and their sums may be
  reassociated (``fastmath`` without nnan/ninf). The per-position softplus and sigmoids are
  computed beforehand by torch (:func:`_steps`), vectorised, as O(batch · channel · length)
  temporaries that are not saved.
* Output and gradient buffers start as NaN (the trick of flash-linear-attention's tests), so an
  element a kernel forgets to write fails every comparison instead of passing as zero.

Shapes (fixed once; no layout flags):

* 1D: ``u, delta, z: [batch, channel, length]``, ``A, R: [channel, state]``,
  ``B, C: [batch, state, length]`` or grouped ``[batch, groups, state, length]``,
  ``D, delta_bias: [channel]``, ``initial_state: [batch, channel, state]``.
* 2D: the same with ``length`` replaced by ``height, width``.

References
----------
A. Gu and T. Dao, "Mamba: Linear-time sequence modeling with selective state spaces", 2023
(``selective_scan_fn`` and its backward in mamba-ssm).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch
from numba import types
from numba.extending import intrinsic, overload

__all__ = ["selective_scan_2d_cpu", "selective_scan_cpu"]

#: torch's softplus threshold: softplus(x) = x above it (and its derivative is 1 there).
SOFTPLUS_THRESHOLD = 20.0


# ---------------------------------------------------------------------------------------
# A vectorisable exp for the state loops. numba has no vector math library here (no SVML),
# so np.exp is a scalar libm call that keeps every loop over ``state`` scalar; this one is
# inlined arithmetic (Cody-Waite reduction, a Taylor polynomial, and 2^k built from its bits)
# that LLVM vectorises. Error ≤ 1 ulp against np.exp (float32 and float64) on [LO, HI].
# ---------------------------------------------------------------------------------------
@intrinsic
def _bits_as_float(typingctx, bits):  # pragma: no cover
    """Reinterpret an int32 / int64 as float32 / float64 (an LLVM bitcast, no conversion)."""
    if bits == types.int32:
        ret = types.float32
    elif bits == types.int64:
        ret = types.float64
    else:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(ret))

    return ret(bits), codegen


def _exp(x):  # pragma: no cover
    """exp(x) for float32 / float64 scalars. In numba kernels the vectorisable polynomial of
    :func:`_exp_overload` (within 1.5 ulp); from Python, NumPy's exp."""
    return np.exp(x)


def _exp_constants(dtype, degree, bias, low, ln2_hi, ln2_lo):
    """Coefficients 2/i! (the factor 2 pays for the 2^(k-1) below), the range and ln 2 split.

    ``ln2_hi`` has few enough significant bits that k · ln2_hi is exact for every k in range
    (Cody and Waite); ``bias`` is the IEEE exponent bias. 2^(k-1) is built as a normal number
    from its exponent bits, which needs k - 1 ≥ 1 - bias: below ``low`` (e^low ≈ 4 × the
    smallest normal) the result is flushed to 0, an absolute error under 3e-38 (float32) or
    6e-308 (float64); above log(max) it is +inf.
    """
    high = math.log(np.finfo(dtype).max)
    coeffs = tuple(dtype(2.0 / math.factorial(i)) for i in range(degree + 1))
    return (dtype(low), dtype(high), dtype(1.0 / math.log(2.0)), dtype(ln2_hi),
            dtype(ln2_lo), coeffs, bias)


# Taylor remainders on |f| ≤ ln2/2: 5e-9 (degree 7, float32), 5e-18 (degree 13, float64).
_EXP32 = _exp_constants(np.float32, 7, 127, -86.5, 0.693145751953125,
                        1.42860682030941723212e-6)
_EXP64 = _exp_constants(np.float64, 13, 1023, -707.5, 6.93147180369123816490e-01,
                        1.90821492927058770002e-10)


#: Reassociation lets LLVM vectorise the sums over ``state`` (y, dΔ, du); no "nnan"/"ninf",
#: so NaN and inf keep their IEEE meaning (the NaN-filled buffers rely on it).
_STATE_LOOP_FASTMATH = {"reassoc", "contract", "nsz"}


@overload(_exp, jit_options={"fastmath": {"contract"}})  # no reassoc: keeps the ln2 split
def _exp_overload(x):  # pragma: no cover
    """exp(x) = 2^(k-1) · 2 e^f with k = round(x / ln2), f = x − k ln2 ∈ [−ln2/2, ln2/2].

    NaN propagates (through f), x > log(max) gives +inf, x < LOW gives 0.
    """
    if not isinstance(x, types.Float):
        return None
    if x.bitwidth == 32:
        low, high, log2e, ln2_hi, ln2_lo, c, bias = _EXP32
        c0, c1, c2, c3, c4, c5, c6, c7 = c
        half, zero, inf = np.float32(0.5), np.float32(0.0), np.float32(np.inf)

        def impl(x):
            xc = low if x < low else (high if x > high else x)
            k = np.floor(xc * log2e + half)
            f = (xc - k * ln2_hi) - k * ln2_lo
            r = ((((((c7 * f + c6) * f + c5) * f + c4) * f + c3) * f + c2) * f + c1) * f + c0
            r *= _bits_as_float(np.int32((np.int32(k) + np.int32(bias - 1)) << np.int32(23)))
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
        r *= _bits_as_float(np.int64((np.int64(k) + np.int64(bias - 1)) << np.int64(52)))
        r = 0.0 if x < low else r
        return np.inf if x > high else r

    return impl


# ---------------------------------------------------------------------------------------
# 1D kernels.
# ---------------------------------------------------------------------------------------
@numba.njit(parallel=True, cache=True, fastmath=_STATE_LOOP_FASTMATH)
def _scan_1d_forward(u, dts, A, Bt, Ct, D, R, gate, h0, has_z, reverse, channels_per_group,
                     out, last_state):  # pragma: no cover
    """Forward 1D scan, one (batch, channel) pair per task; B, C are ``[b, g, length, state]``.

    ``dts`` is the step Δ and ``gate`` is silu(z), both ``[b, d, length]`` and computed by
    :func:`_steps` with torch's vectorised softplus / sigmoid.
    """
    batch, channels, length = u.shape
    state = A.shape[1]
    for task in numba.prange(batch * channels):
        b = task // channels
        d = task % channels
        g = d // channels_per_group
        h = h0[b, d].copy()
        for p in range(length):
            l = length - 1 - p if reverse else p
            dt = dts[b, d, l]
            uu = u[b, d, l]
            dt_u = dt * uu
            y = D[d] * uu
            for n in range(state):
                a = _exp(dt * A[d, n])
                bx = dt_u * Bt[b, g, l, n]
                h[n] = a * h[n] + bx
                y += Ct[b, g, l, n] * h[n] - R[d, n] * bx
            if has_z:
                y *= gate[b, d, l]
            out[b, d, l] = y
        for n in range(state):
            last_state[b, d, n] = h[n]


@numba.njit(cache=True)
def _backward_task(task, groups, chunks, channels_per_group):  # pragma: no cover
    """What backward task ``task`` owns: batch b, group g, channel chunk k, channels
    ``first:stop`` (the chunks split the group's channels as evenly as possible)."""
    chunk = (channels_per_group + chunks - 1) // chunks
    b = task // (groups * chunks)
    g = (task // chunks) % groups
    k = task % chunks
    first = g * channels_per_group + k * chunk
    return b, g, k, first, min(first + chunk, (g + 1) * channels_per_group)


@numba.njit(parallel=True, cache=True, fastmath=_STATE_LOOP_FASTMATH)
def _scan_1d_backward(u, dts, dsp, A, Bt, Ct, D, R, z, zsig, h0, dout, dlast,
                      delta_softplus, has_z, reverse, channels_per_group, chunks,
                      du, ddelta, dz, dh0, dA_part, dR_part, dD_part, dB_part,
                      dC_part):  # pragma: no cover
    """Backward 1D scan; see :class:`_SelectiveScan1d` for the derivation.

    ``dts`` is Δ, ``dsp`` = dΔ/dδ (the softplus derivative) and ``zsig`` = σ(z), all
    ``[b, d, length]`` from :func:`_steps`. One task per (batch, group, chunk of the group's
    channels): the task owns
    ``dB_part[b, g, k]`` and ``dC_part[b, g, k]`` (summed over k afterwards), and every
    per-(batch, channel) output of its channels, so no two threads write the same element.
    """
    batch, channels, length = u.shape
    groups = Bt.shape[1]
    state = A.shape[1]
    one = u.dtype.type(1)
    zero = u.dtype.type(0)
    for task in numba.prange(batch * groups * chunks):
        b, g, k, first, stop = _backward_task(task, groups, chunks, channels_per_group)
        dB_part[b, g, k] = zero
        dC_part[b, g, k] = zero
        # Per-thread scratch, O(state · length): the recomputed Ā and h of one channel (row
        # p + 1 of hs is h after scan step p, row 0 the initial state) and the state adjoint.
        a_bar = np.empty((length, state), u.dtype)
        hs = np.empty((length + 1, state), u.dtype)
        dhs = np.empty((length, state), u.dtype)
        dtp = np.empty(length, u.dtype)
        dys = np.empty(length, u.dtype)
        h = np.empty(state, u.dtype)
        dh = np.empty(state, u.dtype)
        dA_acc = np.empty(state, u.dtype)
        dR_acc = np.empty(state, u.dtype)
        for d in range(first, stop):
            # Recompute the forward (scan order p), keeping Ā and h for the adjoint sweep.
            # The carried h lives in its own small array rather than being read back from the
            # previous row of hs (in isolation that loop ran ~3x slower: LLVM cannot tell two
            # rows of one array apart).
            h[:] = h0[b, d]
            hs[0] = h
            for p in range(length):
                l = length - 1 - p if reverse else p
                dt = dts[b, d, l]
                dtp[p] = dt
                uu = u[b, d, l]
                dt_u = dt * uu
                a_row = a_bar[p]
                for n in range(state):
                    a_row[n] = _exp(dt * A[d, n])
                h_row = hs[p + 1]
                b_row = Bt[b, g, l]
                c_row = Ct[b, g, l]
                y = zero
                for n in range(state):
                    bx = dt_u * b_row[n]
                    hn = a_row[n] * h[n] + bx
                    h[n] = hn
                    h_row[n] = hn
                    y += c_row[n] * hn - R[d, n] * bx
                if has_z:
                    y += D[d] * uu
                    zz = z[b, d, l]
                    s = zsig[b, d, l]
                    dz[b, d, l] = dout[b, d, l] * y * s * (one + zz * (one - s))
                    dys[p] = dout[b, d, l] * zz * s
                else:
                    dys[p] = dout[b, d, l]
            # Adjoint sweep against scan order, the only sequential part: dhs[p] = C_p dy_p +
            # Ā_{p+1} dhs[p+1], the carry dh starting from d last_state.
            for n in range(state):
                dh[n] = dlast[b, d, n]
            for p in range(length - 1, -1, -1):
                l = length - 1 - p if reverse else p
                dy = dys[p]
                a_row = a_bar[p]
                c_row = Ct[b, g, l]
                dh_row = dhs[p]
                for n in range(state):
                    dhn = dh[n] + c_row[n] * dy
                    dh_row[n] = dhn
                    dh[n] = a_row[n] * dhn
            dh0[b, d] = dh
            # Everything else is a per-position function of dhs, h, Ā: no carried state.
            dA_acc[:] = zero
            dR_acc[:] = zero
            dD_acc = zero
            for p in range(length):
                l = length - 1 - p if reverse else p
                dy = dys[p]
                dt = dtp[p]
                uu = u[b, d, l]
                dt_u = dt * uu
                dD_acc += dy * uu
                a_row = a_bar[p]
                h_prev = hs[p]
                b_row = Bt[b, g, l]
                dh_row = dhs[p]
                # ∂L/∂(ΔA) through Ā = exp(ΔA): dĀ · Ā with dĀ = dh_l h_{l-1};
                # dx̄ = dh − R dy enters dΔ through B u and du through Δ B.
                da_sum = zero
                dbx_b = zero
                for n in range(state):
                    da_sum += dh_row[n] * h_prev[n] * a_row[n] * A[d, n]
                    dbx_b += (dh_row[n] - R[d, n] * dy) * b_row[n]
                du[b, d, l] = dy * D[d] + dt * dbx_b
                ddt = da_sum + uu * dbx_b
                if delta_softplus:
                    ddt *= dsp[b, d, l]
                ddelta[b, d, l] = ddt
                db_row = dB_part[b, g, k, l]
                for n in range(state):
                    db_row[n] += (dh_row[n] - R[d, n] * dy) * dt_u
                dc_row = dC_part[b, g, k, l]
                h_row = hs[p + 1]
                for n in range(state):
                    dc_row[n] += dy * h_row[n]
                for n in range(state):
                    dA_acc[n] += dh_row[n] * h_prev[n] * a_row[n] * dt
                w = dy * dt_u
                for n in range(state):
                    dR_acc[n] -= w * b_row[n]
            dA_part[b, d] = dA_acc
            dR_part[b, d] = dR_acc
            dD_part[b, d] = dD_acc


# ---------------------------------------------------------------------------------------
# 2D kernels (grids row-major; B, C as [b, g, height, width, state]).
# ---------------------------------------------------------------------------------------
@numba.njit(parallel=True, cache=True, fastmath=_STATE_LOOP_FASTMATH)
def _scan_2d_forward(u, dts, A, Bt, Ct, D, R, gate, has_z, channels_per_group,
                     out):  # pragma: no cover
    """Forward 2D scan in one row-major sweep: g runs along the row, h is carried per column.

    ``dts`` (Δ) and ``gate`` (silu(z)) as in :func:`_scan_1d_forward`.
    """
    batch, channels, height, width = u.shape
    state = A.shape[1]
    zero = u.dtype.type(0)
    for task in numba.prange(batch * channels):
        b = task // channels
        d = task % channels
        g = d // channels_per_group
        h_col = np.zeros((width, state), u.dtype)
        g_row = np.empty(state, u.dtype)
        for i in range(height):
            g_row[:] = zero
            for j in range(width):
                dt = dts[b, d, i, j]
                uu = u[b, d, i, j]
                dt_u = dt * uu
                y = D[d] * uu
                for n in range(state):
                    a = _exp(dt * A[d, n])
                    bx = dt_u * Bt[b, g, i, j, n]
                    g_row[n] = a * g_row[n] + bx
                    h_col[j, n] = a * h_col[j, n] + g_row[n]
                    y += Ct[b, g, i, j, n] * h_col[j, n] - R[d, n] * bx
                if has_z:
                    y *= gate[b, d, i, j]
                out[b, d, i, j] = y


@numba.njit(parallel=True, cache=True, fastmath=_STATE_LOOP_FASTMATH)
def _scan_2d_backward(u, dts, dsp, A, Bt, Ct, D, R, z, zsig, dout, delta_softplus, has_z,
                      channels_per_group, chunks, du, ddelta, dz, dA_part, dR_part, dD_part,
                      dB_part, dC_part):  # pragma: no cover
    """Backward 2D scan; see :class:`_SelectiveScan2d`. Task ownership as in the 1D backward."""
    batch, channels, height, width = u.shape
    groups = Bt.shape[1]
    state = A.shape[1]
    one = u.dtype.type(1)
    zero = u.dtype.type(0)
    for task in numba.prange(batch * groups * chunks):
        b, g, k, first, stop = _backward_task(task, groups, chunks, channels_per_group)
        dB_part[b, g, k] = zero
        dC_part[b, g, k] = zero
        # Per-thread scratch, O(state · height · width): Ā, g and h of one channel.
        a_bar = np.empty((height, width, state), u.dtype)
        gs = np.empty((height, width, state), u.dtype)
        hs = np.empty((height, width, state), u.dtype)
        dtp = np.empty((height, width), u.dtype)
        dys = np.empty((height, width), u.dtype)
        g_row = np.empty(state, u.dtype)
        dg_row = np.empty(state, u.dtype)
        dh_col = np.empty((width, state), u.dtype)
        dA_acc = np.empty(state, u.dtype)
        dR_acc = np.empty(state, u.dtype)
        for d in range(first, stop):
            for i in range(height):
                g_row[:] = zero
                for j in range(width):
                    dt = dts[b, d, i, j]
                    dtp[i, j] = dt
                    uu = u[b, d, i, j]
                    dt_u = dt * uu
                    y = D[d] * uu
                    for n in range(state):
                        a = _exp(dt * A[d, n])
                        a_bar[i, j, n] = a
                        bx = dt_u * Bt[b, g, i, j, n]
                        g_row[n] = a * g_row[n] + bx
                        gs[i, j, n] = g_row[n]
                        h_up = hs[i - 1, j, n] if i > 0 else zero
                        hs[i, j, n] = a * h_up + g_row[n]
                        y += Ct[b, g, i, j, n] * hs[i, j, n] - R[d, n] * bx
                    if has_z:
                        zz = z[b, d, i, j]
                        s = zsig[b, d, i, j]
                        dz[b, d, i, j] = dout[b, d, i, j] * y * s * (one + zz * (one - s))
                        dys[i, j] = dout[b, d, i, j] * zz * s
                    else:
                        dys[i, j] = dout[b, d, i, j]
            # Adjoints: rows bottom-up (dh_col carries Ā_{i+1,j} dh_{i+1,j}), and within a
            # row right-to-left (dg_row carries Ā_{i,j+1} dg_{i,j+1}).
            dh_col[:, :] = zero
            dA_acc[:] = zero
            dR_acc[:] = zero
            dD_acc = zero
            for i in range(height - 1, -1, -1):
                dg_row[:] = zero
                for j in range(width - 1, -1, -1):
                    dy = dys[i, j]
                    dt = dtp[i, j]
                    uu = u[b, d, i, j]
                    dt_u = dt * uu
                    dD_acc += dy * uu
                    du_acc = dy * D[d]
                    ddt = zero
                    for n in range(state):
                        bn = Bt[b, g, i, j, n]
                        a = a_bar[i, j, n]
                        dhn = dh_col[j, n] + Ct[b, g, i, j, n] * dy
                        dgn = dg_row[n] + dhn
                        dbx = dgn - R[d, n] * dy
                        h_up = hs[i - 1, j, n] if i > 0 else zero
                        g_left = gs[i, j - 1, n] if j > 0 else zero
                        # Ā multiplies both h_{i-1,j} (column pass) and g_{i,j-1} (row pass).
                        da = (dhn * h_up + dgn * g_left) * a
                        ddt += da * A[d, n] + dbx * bn * uu
                        dA_acc[n] += da * dt
                        dR_acc[n] -= dy * dt_u * bn
                        dB_part[b, g, k, i, j, n] += dbx * dt_u
                        dC_part[b, g, k, i, j, n] += dy * hs[i, j, n]
                        du_acc += dbx * dt * bn
                        dh_col[j, n] = a * dhn
                        dg_row[n] = a * dgn
                    du[b, d, i, j] = du_acc
                    if delta_softplus:
                        ddt *= dsp[b, d, i, j]
                    ddelta[b, d, i, j] = ddt
            for n in range(state):
                dA_part[b, d, n] = dA_acc[n]
                dR_part[b, d, n] = dR_acc[n]
            dD_part[b, d] = dD_acc


# ---------------------------------------------------------------------------------------
# Validation and preparation.
# ---------------------------------------------------------------------------------------
def _layout(spatial: int) -> str:
    return "length" if spatial == 1 else "height, width"


def _check_tensor(name, x, shape, expected=None):
    """Raise ValueError unless ``x`` is a floating CPU tensor of ``shape`` (None: any)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if x.device.type != "cpu":
        raise ValueError(f"{name} must be on the CPU for the cpu backend; got {x.device}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor; got {x.dtype}")
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape [{expected}] = {list(shape)}; "
                         f"got {list(x.shape)}")


def _check_inputs(u, delta, A, B, C, D, R, z, delta_bias, initial_state, spatial):
    """Validate every input against u's shape; return (state, groups)."""
    space = _layout(spatial)
    _check_tensor("u", u, None)
    if u.dim() != 2 + spatial or 0 in u.shape:
        raise ValueError(f"u must be a non-empty [batch, channel, {space}] tensor; "
                         f"got shape {list(u.shape)}")
    batch, channels, *grid = u.shape
    _check_tensor("delta", delta, u.shape, f"batch, channel, {space}")
    _check_tensor("A", A, None)
    if A.dim() != 2 or A.shape[0] != channels or A.shape[1] == 0:
        raise ValueError(f"A must have shape [channel={channels}, state]; got {list(A.shape)}")
    state = A.shape[1]
    groups = None
    for name, x in (("B", B), ("C", C)):
        _check_tensor(name, x, None)
        plain = [batch, state, *grid]
        if x.dim() == 2 + spatial and list(x.shape) == plain:
            x_groups = 1
        elif (x.dim() == 3 + spatial and x.shape[1] > 0 and channels % x.shape[1] == 0
              and list(x.shape) == [batch, x.shape[1], state, *grid]):
            x_groups = x.shape[1]
        else:
            raise ValueError(
                f"{name} must have shape [batch, state, {space}] = {plain} or "
                f"[batch, groups, state, {space}] = {[batch, 'groups', state, *grid]} with "
                f"groups dividing channel={channels}; got {list(x.shape)}")
        if groups is not None and x_groups != groups:
            # As mamba-ssm's selective_scan_fn: one grouping serves B and C, which lets one
            # backward task own the gradient of both.
            raise ValueError(f"B and C must have the same number of groups; got B with {groups} "
                             f"and C with {x_groups}")
        groups = x_groups
    for name, x, shape, expected in (
            ("D", D, [channels], "channel"),
            ("delta_bias", delta_bias, [channels], "channel"),
            ("R", R, [channels, state], "channel, state"),
            ("z", z, u.shape, f"batch, channel, {space}"),
            ("initial_state", initial_state, [batch, channels, state], "batch, channel, state")):
        if x is not None:
            _check_tensor(name, x, shape, expected)
    return state, groups


def _compute_dtype(u: torch.Tensor) -> torch.dtype:
    """float64 for float64 inputs, float32 for everything else (half precisions included)."""
    return torch.float64 if u.dtype == torch.float64 else torch.float32


def _prepare(x, dtype):
    return x.detach().to(dtype).contiguous()


def _state_last(x, spatial, dtype):
    """B or C as ``[batch, groups, *space, state]`` so the state loop reads contiguous memory."""
    if x.dim() == 2 + spatial:
        x = x.unsqueeze(1)
    return x.detach().to(dtype).movedim(2, -1).contiguous()


def _prepare_common(u, delta, A, B, C, D, R, z, delta_bias, spatial):
    """Cast, make contiguous, and stand in neutral values (zeros) for absent D, R, delta_bias.

    D = 0, R = 0 and delta_bias = 0 change nothing in the scan; only z needs a flag, with a
    dummy array so that one compiled signature serves both cases.
    """
    dtype = _compute_dtype(u)
    channels, state = A.shape
    tensors = {
        "u": _prepare(u, dtype),
        "delta": _prepare(delta, dtype),
        "A": _prepare(A, dtype),
        "B": _state_last(B, spatial, dtype),
        "C": _state_last(C, spatial, dtype),
        "D": _prepare(D, dtype) if D is not None else torch.zeros(channels, dtype=dtype),
        "R": _prepare(R, dtype) if R is not None else torch.zeros(channels, state, dtype=dtype),
        "z": _prepare(z, dtype) if z is not None else torch.zeros((0,) * (2 + spatial),
                                                                   dtype=dtype),
        "delta_bias": (_prepare(delta_bias, dtype) if delta_bias is not None
                       else torch.zeros(channels, dtype=dtype)),
    }
    return dtype, tensors


def _steps(delta, delta_bias, delta_softplus, z, spatial, backward=False):
    """The per-position scalars, vectorised by torch rather than one libm call per position.

    Returns numpy arrays shaped like ``delta``: Δ = softplus(δ + b) (or δ + b), and for the
    forward the gate silu(z); for the backward σ(z) and dΔ/dδ (σ(δ + b), exactly 1 above the
    threshold 20, where softplus is the identity). Absent ones are empty placeholders. These are
    O(batch · channel · length) and never saved: the backward recomputes them from δ and z.
    """
    x = delta + delta_bias.view(-1, *(1,) * spatial)
    empty = delta.new_empty((0,) * delta.dim())
    dt = torch.nn.functional.softplus(x, threshold=SOFTPLUS_THRESHOLD) if delta_softplus else x
    if not backward:
        gate = torch.nn.functional.silu(z) if z.numel() else empty
        return dt.numpy(), gate.numpy()
    if delta_softplus:
        dsp = torch.where(x > SOFTPLUS_THRESHOLD, torch.ones_like(x), torch.sigmoid(x))
    else:
        dsp = empty
    zsig = torch.sigmoid(z) if z.numel() else empty
    return dt.numpy(), dsp.numpy(), zsig.numpy()


def _nan(shape, dtype):
    """A fresh buffer full of NaN: any element a kernel fails to write stays visible."""
    return np.full(shape, np.nan, dtype=dtype)


def _chunks(batch, groups, channels_per_group):
    """Split each group's channels so that backward tasks outnumber threads about twice.

    The partial dB, dC buffers are ``[batch, groups, chunks, *space, state]``: one chunk
    when batch · groups already feeds every thread, so they cost at most about
    ``batch · groups + 2 · threads`` copies of ``state · length``.
    """
    threads = numba.get_num_threads()
    wanted = max(1, -(-2 * threads // (batch * groups)))
    chunks = min(channels_per_group, wanted)
    chunk = -(-channels_per_group // chunks)
    return -(-channels_per_group // chunk)  # no empty chunk


def _meta(*tensors):
    """(dtype, ndim) of each input, None for absent ones: what the backward needs of them.

    Kept instead of the tensors themselves, which would hold them (and any graph through
    them) alive outside ``save_for_backward``'s bookkeeping.
    """
    return [None if x is None else (x.dtype, x.dim()) for x in tensors]


def _grad_bc(part, meta, spatial, needed):
    """Reduce dB/dC partials over chunks and restore the caller's layout and dtype."""
    if not needed:
        return None
    grad = torch.from_numpy(part.sum(axis=2)).movedim(-1, 2)
    if meta[1] == 2 + spatial:
        grad = grad.squeeze(1)
    return grad.to(meta[0])


def _out(grad, meta, needed):
    """The gradient in its input's dtype, or None where autograd does not want one."""
    return grad.to(meta[0]) if needed and meta is not None else None


def _input_grads(meta, need, spatial, du, ddelta, dz, dA_part, dR_part, dD_part, dB_part,
                 dC_part):
    """Gradients of (u, delta, A, B, C, D, R, z, delta_bias) from the backward kernels' outputs:
    per-batch partials summed over batch, B/C partials over channel chunks, d delta_bias =
    Σ d delta over batch and space; each cast back to its input's dtype (None if not needed)."""
    ddelta_t = torch.from_numpy(ddelta)
    space = tuple(range(2, 2 + spatial))
    return (
        _out(torch.from_numpy(du), meta[0], need[0]),
        _out(ddelta_t, meta[1], need[1]),
        _out(torch.from_numpy(dA_part.sum(axis=0)), meta[2], need[2]),
        _grad_bc(dB_part, meta[3], spatial, need[3]),
        _grad_bc(dC_part, meta[4], spatial, need[4]),
        _out(torch.from_numpy(dD_part.sum(axis=0)), meta[5], need[5]),
        _out(torch.from_numpy(dR_part.sum(axis=0)), meta[6], need[6]),
        _out(torch.from_numpy(dz), meta[7], need[7]),
        _out(ddelta_t.sum(dim=(0, *space)), meta[8], need[8]),
    )


# ---------------------------------------------------------------------------------------
# Autograd functions.
# ---------------------------------------------------------------------------------------
class _SelectiveScan1d(torch.autograd.Function):
    r"""1D selective scan with a recomputing backward.

    Derivation of the backward (scan order; for ``reverse=True`` "next" means the position
    processed next, i.e. the recurrence is the same with positions relabelled). With
    Δ = softplus(δ + b), Ā_l = exp(Δ_l A), x̄_l = Δ_l B_l u_l,
    h_l = Ā_l h_{l-1} + x̄_l, y_l = Σ_n (C_l h_l − R x̄_l) + D u_l, out = y · silu(z):

    * dy = dout · silu(z),  dz = dout · y · silu'(z),  silu'(z) = σ(z)(1 + z(1 − σ(z))).
    * Adjoint of the state, from the last position back:
      dh_l = C_l dy_l + Ā_{l+1} dh_{l+1}, started from d last_state.
    * dx̄_l = dh_l − R dy_l  (x̄ enters h directly and y through −R).
    * dĀ_l = dh_l h_{l−1}, hence ∂/∂(Δ_l A) = dĀ_l Ā_l; dA = Σ_{b,l} dĀ Ā Δ.
    * dΔ_l = Σ_n (dĀ_l Ā_l A + dx̄_l B_l u_l);  dδ = dΔ · σ(δ + b) (1 above 20);
      d delta_bias = Σ_{b,l} dδ.
    * dB_l = Σ_{d in group} dx̄_l Δ_l u_l;  dC_l = Σ_{d in group} dy_l h_l.
    * du_l = D dy_l + Σ_n dx̄_l Δ_l B_l;  dD = Σ_{b,l} dy u;  dR = −Σ_{b,l} dy x̄.
    * d initial_state = Ā_first dh_first (the carried adjoint after the sweep).

    The states h are recomputed per (batch, channel) into per-thread scratch; only the
    inputs are saved.
    """

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, R, z, delta_bias, initial_state, delta_softplus,
                reverse):
        batch, channels, length = u.shape
        state = A.shape[1]
        groups = 1 if B.dim() == 3 else B.shape[1]
        dtype, t = _prepare_common(u, delta, A, B, C, D, R, z, delta_bias, spatial=1)
        h0 = (_prepare(initial_state, dtype) if initial_state is not None
              else torch.zeros(batch, channels, state, dtype=dtype))
        np_dtype = t["u"].numpy().dtype
        out = _nan((batch, channels, length), np_dtype)
        last = _nan((batch, channels, state), np_dtype)
        dts, gate = _steps(t["delta"], t["delta_bias"], delta_softplus, t["z"], spatial=1)
        _scan_1d_forward(t["u"].numpy(), dts, t["A"].numpy(), t["B"].numpy(), t["C"].numpy(),
                         t["D"].numpy(), t["R"].numpy(), gate, h0.numpy(), z is not None,
                         bool(reverse), channels // groups, out, last)
        del dts, gate
        # A zero initial state is rebuilt in the backward rather than kept alive until then.
        ctx.save_for_backward(t["u"], t["delta"], t["A"], t["B"], t["C"], t["D"], t["R"],
                              t["z"], t["delta_bias"], h0 if initial_state is not None else None)
        ctx.meta = _meta(u, delta, A, B, C, D, R, z, delta_bias, initial_state)
        ctx.flags = (bool(delta_softplus), z is not None, bool(reverse), groups)
        return (torch.from_numpy(out).to(u.dtype), torch.from_numpy(last).to(u.dtype))

    @staticmethod
    def backward(ctx, dout, dlast):
        u, delta, A, Bt, Ct, D, R, z, delta_bias, h0 = ctx.saved_tensors
        delta_softplus, has_z, reverse, groups = ctx.flags
        batch, channels, length = u.shape
        state = A.shape[1]
        if h0 is None:
            h0 = torch.zeros(batch, channels, state, dtype=u.dtype)
        np_dtype = u.numpy().dtype
        dout = dout.detach().to(u.dtype).contiguous().numpy()
        dlast = dlast.detach().to(u.dtype).contiguous().numpy()
        cpg = channels // groups
        chunks = _chunks(batch, groups, cpg)
        du = _nan((batch, channels, length), np_dtype)
        ddelta = _nan((batch, channels, length), np_dtype)
        dz = _nan((batch, channels, length) if has_z else (0, 0, 0), np_dtype)
        dh0 = _nan((batch, channels, state), np_dtype)
        dA_part = _nan((batch, channels, state), np_dtype)
        dR_part = _nan((batch, channels, state), np_dtype)
        dD_part = _nan((batch, channels), np_dtype)
        dB_part = _nan((batch, groups, chunks, length, state), np_dtype)
        dC_part = _nan((batch, groups, chunks, length, state), np_dtype)
        dts, dsp, zsig = _steps(delta, delta_bias, delta_softplus, z, spatial=1, backward=True)
        _scan_1d_backward(u.numpy(), dts, dsp, A.numpy(), Bt.numpy(), Ct.numpy(), D.numpy(),
                          R.numpy(), z.numpy(), zsig, h0.numpy(), dout, dlast, delta_softplus,
                          has_z, reverse, cpg, chunks, du, ddelta, dz, dh0, dA_part, dR_part,
                          dD_part, dB_part, dC_part)
        need = ctx.needs_input_grad
        return (
            *_input_grads(ctx.meta, need, 1, du, ddelta, dz, dA_part, dR_part, dD_part,
                          dB_part, dC_part),
            _out(torch.from_numpy(dh0), ctx.meta[9], need[9]),
            None,
            None,
        )


class _SelectiveScan2d(torch.autograd.Function):
    r"""2D selective scan with a recomputing backward.

    Forward, per (b, d, n) with the same Ā_{ij} = exp(Δ_{ij} A) in both passes:
    g_{ij} = Ā_{ij} g_{i,j−1} + x̄_{ij} (rows), h_{ij} = Ā_{ij} h_{i−1,j} + g_{ij} (columns),
    y_{ij} = Σ_n (C_{ij} h_{ij} − R x̄_{ij}) + D u_{ij}, out = y · silu(z).

    Backward (dy, dz as in 1D):

    * column adjoint, bottom-up: dh_{ij} = C_{ij} dy_{ij} + Ā_{i+1,j} dh_{i+1,j};
    * row adjoint, right-to-left: dg_{ij} = dh_{ij} + Ā_{i,j+1} dg_{i,j+1};
    * dx̄_{ij} = dg_{ij} − R dy_{ij};
    * dĀ_{ij} = dh_{ij} h_{i−1,j} + dg_{ij} g_{i,j−1} (Ā enters both passes);
    * the rest (dΔ, dδ, dA, dB, dC, du, dD, dR, d delta_bias) exactly as in the 1D backward.

    Rows are swept bottom-up and each row right-to-left, so dh_{i+1,j} (previous row) and
    dg_{i,j+1} (previous column of this row) are ready when needed; g and h are recomputed
    per (batch, channel) into per-thread scratch.
    """

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, R, z, delta_bias, delta_softplus):
        batch, channels, height, width = u.shape
        groups = 1 if B.dim() == 4 else B.shape[1]
        dtype, t = _prepare_common(u, delta, A, B, C, D, R, z, delta_bias, spatial=2)
        out = _nan((batch, channels, height, width), t["u"].numpy().dtype)
        dts, gate = _steps(t["delta"], t["delta_bias"], delta_softplus, t["z"], spatial=2)
        _scan_2d_forward(t["u"].numpy(), dts, t["A"].numpy(), t["B"].numpy(), t["C"].numpy(),
                         t["D"].numpy(), t["R"].numpy(), gate, z is not None,
                         channels // groups, out)
        del dts, gate
        ctx.save_for_backward(t["u"], t["delta"], t["A"], t["B"], t["C"], t["D"], t["R"],
                              t["z"], t["delta_bias"])
        ctx.meta = _meta(u, delta, A, B, C, D, R, z, delta_bias)
        ctx.flags = (bool(delta_softplus), z is not None, groups)
        return torch.from_numpy(out).to(u.dtype)

    @staticmethod
    def backward(ctx, dout):
        u, delta, A, Bt, Ct, D, R, z, delta_bias = ctx.saved_tensors
        delta_softplus, has_z, groups = ctx.flags
        batch, channels, height, width = u.shape
        state = A.shape[1]
        np_dtype = u.numpy().dtype
        dout = dout.detach().to(u.dtype).contiguous().numpy()
        cpg = channels // groups
        chunks = _chunks(batch, groups, cpg)
        grid = (batch, channels, height, width)
        du = _nan(grid, np_dtype)
        ddelta = _nan(grid, np_dtype)
        dz = _nan(grid if has_z else (0, 0, 0, 0), np_dtype)
        dA_part = _nan((batch, channels, state), np_dtype)
        dR_part = _nan((batch, channels, state), np_dtype)
        dD_part = _nan((batch, channels), np_dtype)
        dB_part = _nan((batch, groups, chunks, height, width, state), np_dtype)
        dC_part = _nan((batch, groups, chunks, height, width, state), np_dtype)
        dts, dsp, zsig = _steps(delta, delta_bias, delta_softplus, z, spatial=2, backward=True)
        _scan_2d_backward(u.numpy(), dts, dsp, A.numpy(), Bt.numpy(), Ct.numpy(), D.numpy(),
                          R.numpy(), z.numpy(), zsig, dout, delta_softplus, has_z, cpg, chunks,
                          du, ddelta, dz, dA_part, dR_part, dD_part, dB_part, dC_part)
        return (
            *_input_grads(ctx.meta, ctx.needs_input_grad, 2, du, ddelta, dz, dA_part,
                          dR_part, dD_part, dB_part, dC_part),
            None,
        )


# ---------------------------------------------------------------------------------------
# Public API.
# ---------------------------------------------------------------------------------------
def selective_scan_cpu(u, delta, A, B, C, *, D=None, R=None, z=None, delta_bias=None,
                       delta_softplus=True, reverse=False, initial_state=None,
                       return_last_state=False):
    r"""1D selective scan with GeoMaNO's geometric correction, fast CPU path.

    .. math::
        h_l = \bar A_l h_{l-1} + \bar B_l x_l,\qquad
        y_l = \sum_n (C_l h_l - R\,\bar B_l x_l) + D x_l,\qquad
        \text{out} = y \cdot \mathrm{silu}(z)

    with Δ = softplus(delta + delta_bias), Ā = exp(ΔA), B̄x = Δ B u: the semantics of
    :func:`ssmpde.kernels.reference.selective_scan_ref`, computed by numba kernels
    (parallel over batch · channel) with a backward that recomputes the states.

    Parameters
    ----------
    u, delta : torch.Tensor, ``[batch, channel, length]``
        Input sequence and raw step sizes (CPU, float32 or float64).
    A : torch.Tensor, ``[channel, state]``
        Negative real diagonal of the continuous-time state matrix.
    B, C : torch.Tensor, ``[batch, state, length]`` or ``[batch, groups, state, length]``
        Input and output projections; channel d reads group ``d // (channel // groups)``.
        B and C must have the same number of groups (as in mamba-ssm).
    D, delta_bias : torch.Tensor, ``[channel]``, optional
        Skip connection and bias added to ``delta`` before the softplus.
    R : torch.Tensor, ``[channel, state]``, optional
        Geometric correction (GeoMaNO Eq. 9); None gives plain Mamba.
    z : torch.Tensor, ``[batch, channel, length]``, optional
        Gate: the output is multiplied by silu(z).
    delta_softplus : bool
        Apply softplus (threshold 20, as torch) to ``delta + delta_bias``.
    reverse : bool
        Run the recurrence from the last position to the first.
    initial_state : torch.Tensor, ``[batch, channel, state]``, optional
        h before the first processed position (zero by default).
    return_last_state : bool
        Also return h after the last processed position.

    Returns
    -------
    out : torch.Tensor, ``[batch, channel, length]``
        In ``u``'s dtype (computed in float64 for float64 inputs, float32 otherwise).
    last_state : torch.Tensor, ``[batch, channel, state]``
        Only if ``return_last_state``; differentiable, so chunked scans backpropagate.

    Raises
    ------
    ValueError
        If a tensor has the wrong shape, is not a floating CPU tensor, or the groups of B/C
        do not divide the channels.

    Notes
    -----
    Saved for the backward: the inputs only, ``O(batch · channel · length)`` besides B, C;
    the backward keeps a per-thread scratch of ``O(state · length)``. Derivation of the
    backward in :class:`_SelectiveScan1d`.

    Examples
    --------
    >>> import torch
    >>> u = torch.randn(1, 2, 5); delta = torch.randn(1, 2, 5)
    >>> A = -torch.rand(2, 3) - 0.5; B = torch.randn(1, 3, 5); C = torch.randn(1, 3, 5)
    >>> selective_scan_cpu(u, delta, A, B, C).shape
    torch.Size([1, 2, 5])
    """
    _check_inputs(u, delta, A, B, C, D, R, z, delta_bias, initial_state, spatial=1)
    out, last = _SelectiveScan1d.apply(u, delta, A, B, C, D, R, z, delta_bias, initial_state,
                                       delta_softplus, reverse)
    return (out, last) if return_last_state else out


def selective_scan_2d_cpu(u, delta, A, B, C, *, D=None, R=None, z=None, delta_bias=None,
                          delta_softplus=True):
    r"""2D selective scan (2DMamba / GeoMaNO Eq. 4, 10), fast CPU path.

    Per (batch, channel, state), with the same Ā in both passes:

    .. math::
        g_{i,j} = \bar A_{i,j}\, g_{i,j-1} + \bar B x_{i,j},\qquad
        h_{i,j} = \bar A_{i,j}\, h_{i-1,j} + g_{i,j},\qquad
        y_{i,j} = \sum_n (C_{i,j} h_{i,j} - R\,\bar B x_{i,j}) + D u_{i,j}

    and out = y · silu(z): the semantics of
    :func:`ssmpde.kernels.reference.selective_scan_2d_ref`. Each source reaches a target along
    one path (its row, then down the column), not the path-counting recurrence
    h = Ā h_left + Ā h_up + b.

    Parameters
    ----------
    u, delta, z : torch.Tensor, ``[batch, channel, height, width]``
        Input grid, raw step sizes, optional gate.
    A, R : torch.Tensor, ``[channel, state]``
        State matrix diagonal (negative) and optional geometric correction.
    B, C : torch.Tensor, ``[batch, state, height, width]`` or grouped
        ``[batch, groups, state, height, width]``
        Projections; the same number of groups for both.
    D, delta_bias : torch.Tensor, ``[channel]``, optional
    delta_softplus : bool
        Apply softplus (threshold 20) to ``delta + delta_bias``.

    Returns
    -------
    torch.Tensor, ``[batch, channel, height, width]`` in ``u``'s dtype.

    Raises
    ------
    ValueError
        On wrong shapes or groups that do not divide the channels.

    Notes
    -----
    The forward is one row-major sweep carrying g along the row and h per column
    (``O(width · state)`` per task). Backward derivation in :class:`_SelectiveScan2d`.

    Examples
    --------
    >>> import torch
    >>> u = torch.randn(1, 2, 3, 4); delta = torch.randn(1, 2, 3, 4)
    >>> A = -torch.rand(2, 3) - 0.5; B = torch.randn(1, 3, 3, 4); C = torch.randn(1, 3, 3, 4)
    >>> selective_scan_2d_cpu(u, delta, A, B, C).shape
    torch.Size([1, 2, 3, 4])
    """
    _check_inputs(u, delta, A, B, C, D, R, z, delta_bias, None, spatial=2)
    return _SelectiveScan2d.apply(u, delta, A, B, C, D, R, z, delta_bias, delta_softplus)
