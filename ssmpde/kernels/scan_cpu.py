r"""Fast CPU selective scans: numba kernels behind PyTorch custom operators.

The same two scans as :mod:`ssmpde.kernels.reference` (the oracle; semantics in
``docs/kernels/selective_scan.md``), computed by fused numba loops:

* :func:`selective_scan_cpu`, the 1D scan of Mamba's S6 with GeoMaNO's geometric correction,
* :func:`selective_scan_2d_cpu`, the 2D scan of 2DMamba / 2DGeoMamba (row pass, then column
  pass, with the same Ā).

Design, after mamba-ssm's CUDA kernel (Gu & Dao, 2023):

* Nothing of size ``[batch, channel, state, length]`` is ever stored. The forward keeps the
  state only at checkpoints, every ``chunk`` ≈ √(steps / 2) positions (1D) or rows (2D), plus
  the output before the gate; the backward **recomputes** one chunk at a time from its
  checkpoint into a per-thread scratch that stays in cache and sweeps the adjoint back over
  it. Saved: the inputs, the pre-gate output (``O(batch · channel · length)`` each) and
  the checkpoints (``O(batch · channel · state · √length)`` in 1D); the backward recomputes
  Δ. When autograd will not ask for the backward (``no_grad``, ``inference_mode``, or no
  input requiring grad) the forward keeps nothing.
* Each scan is a ``torch.library`` custom operator (``torch.ops.ssmpde.selective_scan_1d_cpu``,
  ``...selective_scan_2d_cpu``, and their backward operators) with a fake implementation
  and a registered backward, so ``torch.compile`` traces through it as one opaque node.
* Accumulation is in the compute dtype: float64 for float64 inputs, float32 otherwise.
* Ā = exp(Δ A) is formed at each position from Δ ≥ 0 and A < 0, so it lies in (0, 1]; no
  cumulative product or cumulative sum is ever exponentiated, and the state h_{l-1} needed in
  the backward is read from the recomputed scratch, never recovered by dividing by Ā.
* Speed: every kernel works on a block of up to 128 channels of one (batch, group) at a time,
  channel-last, so its innermost loops run over contiguous, independent channels that LLVM
  vectorises at full width whatever the state size (B_l, C_l are scalars there). Those loops
  hold no libm call (Ā = 2^(Δ A log2 e) uses ``exp2`` of ``kernels/_numba_cpu.py``, an
  inlined polynomial within 1 ulp that takes fewer operations than its ``exp``), and their
  sums may be reassociated (``fastmath`` without nnan/ninf). A full block of
  :data:`MAX_BLOCK` channels runs the forward's state loop with a constant trip count. The
  per-position softplus has a vectorisable log1p of its own (:func:`_softplus_kernel`); the
  sigmoids of the backward are torch's (:func:`_step_grads`).
  (A first version vectorised over ``state`` instead; at state 16 LLVM's unrolled vector body
  never ran and the kernels were scalar, 2-3x slower.)
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

from ._numba_cpu import compute_dtype, exp, exp2, log1p_unit, numba_threads

__all__ = ["selective_scan_2d_cpu", "selective_scan_cpu"]

#: torch's softplus threshold: softplus(x) = x above it (and its derivative is 1 there).
SOFTPLUS_THRESHOLD = 20.0


#: Reassociation lets LLVM vectorise the sums over ``state`` (y, dΔ, du); no "nnan"/"ninf",
#: so NaN and inf keep their IEEE meaning (the NaN-filled buffers rely on it).
_STATE_LOOP_FASTMATH = {"reassoc", "contract", "nsz"}


@numba.njit(parallel=True, cache=True, fastmath={"contract"})
def _softplus_kernel(x, bias, out):  # pragma: no cover
    """out = softplus(x + bias) for channel-last ``x, out: [rows, channel]``, ``bias:
    [channel]``, with torch's threshold (the identity above 20): max(v, 0) +
    log1p(exp(−|v|)), vectorised (torch's own softplus is a scalar loop on the CPU)."""
    rows, channels = x.shape
    zero = x.dtype.type(0)
    threshold = x.dtype.type(SOFTPLUS_THRESHOLD)
    for r in numba.prange(rows):
        x_row = x[r]
        o_row = out[r]
        for c in range(channels):
            v = x_row[c] + bias[c]
            soft = max(v, zero) + log1p_unit(exp(-abs(v)))
            o_row[c] = v if v > threshold else soft


# ---------------------------------------------------------------------------------------
# Kernels. Every per-position array is channel-last ([b, length, d] or [b, H, W, d]) and
# each task owns one block of ``width`` channels of one (batch, group): the innermost loops
# run over those channels, contiguous in memory and independent, so LLVM vectorises them at
# full width whatever the state size (B_l and C_l are scalars broadcast across the block).
# ---------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _block(task, groups, blocks, channels_per_group, width):  # pragma: no cover
    """What task ``task`` owns: batch b, group g, block k, channels ``first:stop``."""
    b = task // (groups * blocks)
    g = (task // blocks) % groups
    k = task % blocks
    first = g * channels_per_group + k * width
    return b, g, k, first, min(first + width, (g + 1) * channels_per_group)


#: The channel block whose state loop is compiled with a constant trip count (the widest,
#: :data:`MAX_BLOCK`; a module constant, so numba freezes it into the kernels).
_FULL_BLOCK = 128


@numba.njit(cache=True, fastmath=_STATE_LOOP_FASTMATH)
def _scan_1d_position(l, h_prev, h_next, a_out, u, dts, A2, Bt, Ct, D, R, b, g, first, stop,
                      dtu, y):  # pragma: no cover
    """One scan step for a channel block: h_next = Ā h_prev + Δ B u (Ā kept in ``a_out`` if
    it has rows), and y = D u + Σ_n (C h_next − R Δ B u) into ``y``.
    ``A2`` is A log2(e), so that Ā = 2^(Δ A2) (:func:`exp2`). ``h_prev`` and ``h_next``
    must be different arrays (see :func:`_scan_1d_forward`)."""
    state = A2.shape[0]
    width = stop - first
    u_row = u[b, l, first:stop]
    dt_row = dts[b, l, first:stop]
    keep_a = a_out.shape[0] > 0
    d_row = D[first:stop]
    for c in range(width):
        dtu[c] = dt_row[c] * u_row[c]
        y[c] = d_row[c] * u_row[c]
    for n in range(state):
        bn = Bt[b, g, l, n]
        cn = Ct[b, g, l, n]
        a_row = A2[n, first:stop]
        r_row = R[n, first:stop]
        hp = h_prev[n]
        hn = h_next[n]
        if keep_a:
            a_keep = a_out[n]
            for c in range(width):
                a = exp2(dt_row[c] * a_row[c])
                a_keep[c] = a
                bx = dtu[c] * bn
                hv = a * hp[c] + bx
                hn[c] = hv
                y[c] += cn * hv - r_row[c] * bx
        elif width == _FULL_BLOCK:
            for c in range(_FULL_BLOCK):
                a = exp2(dt_row[c] * a_row[c])
                bx = dtu[c] * bn
                hv = a * hp[c] + bx
                hn[c] = hv
                y[c] += cn * hv - r_row[c] * bx
        else:
            for c in range(width):
                a = exp2(dt_row[c] * a_row[c])
                bx = dtu[c] * bn
                hv = a * hp[c] + bx
                hn[c] = hv
                y[c] += cn * hv - r_row[c] * bx


@numba.njit(parallel=True, cache=True, fastmath=_STATE_LOOP_FASTMATH)
def _scan_1d_forward(u, dts, A2, Bt, Ct, D, R, gate, h0, has_z, reverse, channels_per_group,
                     width, chunk, out, last_state, saved, y_pre):  # pragma: no cover
    """Forward 1D scan. ``u, dts, gate, out: [b, length, d]`` (Δ and silu(z) from
    :func:`_steps`), ``A2, R: [state, d]`` (A2 = A log2 e), ``Bt, Ct: [b, g, length, state]``,
    ``h0, last_state: [b, d, state]``.

    For the backward, if ``saved`` has rows: the state before every ``chunk``-th position
    (in scan order) into ``saved: [b, length / chunk, state, d]`` and, with z, the output
    before the gate into ``y_pre: [b, length, d]``.
    """
    batch, length, channels = u.shape
    groups = Bt.shape[1]
    state = A2.shape[0]
    blocks = -(-channels_per_group // width)
    keep = saved.shape[0] > 0
    no_a = np.empty((0, 0), u.dtype)
    for task in numba.prange(batch * groups * blocks):
        b, g, _, first, stop = _block(task, groups, blocks, channels_per_group, width)
        w = stop - first
        # Two state buffers used in turn: reading and writing one array in the same loop
        # would fail LLVM's runtime overlap check and run the scalar fallback.
        h = np.empty((state, w), u.dtype)
        h_next = np.empty((state, w), u.dtype)
        for n in range(state):
            for c in range(w):
                h[n, c] = h0[b, first + c, n]
        dtu = np.empty(w, u.dtype)
        y = np.empty(w, u.dtype)
        for p in range(length):
            l = length - 1 - p if reverse else p
            if keep and p % chunk == 0:
                saved[b, p // chunk, :, first:stop] = h
            _scan_1d_position(l, h, h_next, no_a, u, dts, A2, Bt, Ct, D, R, b, g, first, stop,
                              dtu, y)
            h, h_next = h_next, h
            o_row = out[b, l, first:stop]
            if has_z:
                gate_row = gate[b, l, first:stop]
                for c in range(w):
                    o_row[c] = y[c] * gate_row[c]
                if keep:
                    y_pre[b, l, first:stop] = y
            else:
                o_row[:] = y
        for n in range(state):
            for c in range(w):
                last_state[b, first + c, n] = h[n, c]


@numba.njit(cache=True)
def _gate_adjoint(do_row, y_row, z_row, s_row, dz_row, dy_row):  # pragma: no cover
    """For one position's channel block: dy = dout · silu(z) and dz = dout · y · silu'(z),
    with silu'(z) = σ(z)(1 + z(1 − σ(z))) and y the output before the gate."""
    one = do_row.dtype.type(1)
    for c in range(do_row.shape[0]):
        s = s_row[c]
        dz_row[c] = do_row[c] * y_row[c] * s * (one + z_row[c] * (one - s))
        dy_row[c] = do_row[c] * z_row[c] * s


@numba.njit(parallel=True, cache=True, fastmath=_STATE_LOOP_FASTMATH)
def _scan_1d_backward(u, dts, dsp, A, A2, Bt, Ct, D, R, z, zsig, y_pre, saved, dout, dlast,
                      delta_softplus, has_z, reverse, channels_per_group, width, chunk,
                      du, ddelta, dz, dh0, dA_part, dR_part, dD_part, dB_part,
                      dC_part):  # pragma: no cover
    """Backward 1D scan; derivation in :func:`_scan_1d_backward_op`. Layouts as in
    :func:`_scan_1d_forward`, whose checkpoints ``saved`` and pre-gate output ``y_pre`` it
    reads; ``dsp`` = dΔ/dδ and ``zsig`` = σ(z) from :func:`_step_grads`.

    Per task (one channel block), chunk by chunk from the end: the chunk's states and Ā
    recomputed from its checkpoint into a scratch of ``(2 chunk + 1) · state · width`` that
    stays in cache, and the adjoint swept back over it with everything else (dΔ, du, dA, dR,
    dB, dC, dD) fused into the same sweep. The task owns ``dB_part[b, g, k]``,
    ``dC_part[b, g, k]`` (summed over blocks k afterwards) and every per-channel output of its
    block, so no two threads write the same element.
    """
    batch, length, channels = u.shape
    groups = Bt.shape[1]
    state = A.shape[0]
    blocks = -(-channels_per_group // width)
    checkpoints = -(-length // chunk)
    zero = u.dtype.type(0)
    for task in numba.prange(batch * groups * blocks):
        b, g, k, first, stop = _block(task, groups, blocks, channels_per_group, width)
        w = stop - first
        hs = np.empty((chunk + 1, state, w), u.dtype)
        a_bar = np.empty((chunk, state, w), u.dtype)
        dy_row = np.empty(w, u.dtype)
        dtu = np.empty(w, u.dtype)
        y = np.empty(w, u.dtype)
        d_row = D[first:stop]
        # Adjoint, chunk by chunk from the end; dh carries Ā_{p+1} dh_{p+1}.
        dh = np.empty((state, w), u.dtype)
        for n in range(state):
            for c in range(w):
                dh[n, c] = dlast[b, first + c, n]
        dA_acc = np.zeros((state, w), u.dtype)
        dR_acc = np.zeros((state, w), u.dtype)
        dD_acc = np.zeros(w, u.dtype)
        da_sum = np.empty(w, u.dtype)
        dbx_b = np.empty(w, u.dtype)
        dB_own = dB_part[b, g, k]
        dC_own = dC_part[b, g, k]
        for j in range(checkpoints - 1, -1, -1):
            p0 = j * chunk
            p1 = min(p0 + chunk, length)
            hs[0] = saved[b, j, :, first:stop]
            for p in range(p0, p1):
                l = length - 1 - p if reverse else p
                _scan_1d_position(l, hs[p - p0], hs[p - p0 + 1], a_bar[p - p0], u, dts, A2,
                                  Bt, Ct, D, R, b, g, first, stop, dtu, y)
            for p in range(p1 - 1, p0 - 1, -1):
                l = length - 1 - p if reverse else p
                u_row = u[b, l, first:stop]
                dt_row = dts[b, l, first:stop]
                if has_z:
                    _gate_adjoint(dout[b, l, first:stop], y_pre[b, l, first:stop],
                                  z[b, l, first:stop], zsig[b, l, first:stop],
                                  dz[b, l, first:stop], dy_row)
                else:
                    dy_row[:] = dout[b, l, first:stop]
                for c in range(w):
                    dtu[c] = dt_row[c] * u_row[c]
                    da_sum[c] = zero
                    dbx_b[c] = zero
                    dD_acc[c] += dy_row[c] * u_row[c]
                h_prev = hs[p - p0]
                h_here = hs[p - p0 + 1]
                a_here = a_bar[p - p0]
                dB_row = dB_own[l]
                dC_row = dC_own[l]
                for n in range(state):
                    bn = Bt[b, g, l, n]
                    cn = Ct[b, g, l, n]
                    a_row = A[n, first:stop]
                    r_row = R[n, first:stop]
                    hp = h_prev[n]
                    hh = h_here[n]
                    ab = a_here[n]
                    dhn_row = dh[n]
                    dA_row = dA_acc[n]
                    dR_row = dR_acc[n]
                    db_sum = zero
                    dc_sum = zero
                    for c in range(w):
                        dy = dy_row[c]
                        a = ab[c]
                        dhn = dhn_row[c] + cn * dy         # dh_l = C_l dy_l + Ā_{l+1} dh_{l+1}
                        da = dhn * hp[c] * a               # ∂L/∂(Δ_l A) = dh_l h_{l-1} Ā_l
                        da_sum[c] += da * a_row[c]
                        dA_row[c] += da * dt_row[c]
                        dbx = dhn - r_row[c] * dy          # dx̄_l = dh_l − R dy_l
                        dbx_b[c] += dbx * bn
                        db_sum += dbx * dtu[c]
                        dc_sum += dy * hh[c]
                        dR_row[c] -= dy * dtu[c] * bn
                        dhn_row[c] = a * dhn
                    dB_row[n] = db_sum
                    dC_row[n] = dc_sum
                du_row = du[b, l, first:stop]
                dd_row = ddelta[b, l, first:stop]
                sp_row = dsp[b, l, first:stop]
                for c in range(w):
                    du_row[c] = dy_row[c] * d_row[c] + dt_row[c] * dbx_b[c]
                    ddt = da_sum[c] + u_row[c] * dbx_b[c]
                    if delta_softplus:
                        ddt *= sp_row[c]
                    dd_row[c] = ddt
        for n in range(state):
            for c in range(w):
                dh0[b, first + c, n] = dh[n, c]
                dA_part[b, first + c, n] = dA_acc[n, c]
                dR_part[b, first + c, n] = dR_acc[n, c]
        for c in range(w):
            dD_part[b, first + c] = dD_acc[c]


@numba.njit(cache=True, fastmath=_STATE_LOOP_FASTMATH)
def _scan_2d_row(i, h_up, h_row, g_out, u, dts, A2, Bt, Ct, R, b, g, first, stop,
                 g_run, dtu, ys):  # pragma: no cover
    """Row i of the 2D scan for a channel block: g runs along the row (carried in ``g_run``),
    h_row[j] = Ā h_up[j] + g; g is kept in ``g_out`` if it has rows; ys[j] gets
    Σ_n (C h − R x̄) (without D u). ``A2`` is A log2(e) (see :func:`_scan_1d_position`).
    ``h_up`` and ``h_row`` must be different arrays (see :func:`_scan_1d_forward`)."""
    width = u.shape[2]
    state = A2.shape[0]
    w = stop - first
    keep = g_out.shape[0] > 0
    g_run[:, :] = 0
    for j in range(width):
        u_row = u[b, i, j, first:stop]
        dt_row = dts[b, i, j, first:stop]
        y = ys[j]
        for c in range(w):
            dtu[c] = dt_row[c] * u_row[c]
            y[c] = 0
        for n in range(state):
            bn = Bt[b, g, i, j, n]
            cn = Ct[b, g, i, j, n]
            a_row = A2[n, first:stop]
            r_row = R[n, first:stop]
            gr = g_run[n]
            hu = h_up[j, n]
            hr = h_row[j, n]
            if keep:
                g_keep = g_out[j, n]
                for c in range(w):
                    a = exp2(dt_row[c] * a_row[c])
                    bx = dtu[c] * bn
                    gv = a * gr[c] + bx
                    gr[c] = gv
                    hv = a * hu[c] + gv
                    hr[c] = hv
                    g_keep[c] = gv
                    y[c] += cn * hv - r_row[c] * bx
            else:
                for c in range(w):
                    a = exp2(dt_row[c] * a_row[c])
                    bx = dtu[c] * bn
                    gv = a * gr[c] + bx
                    gr[c] = gv
                    hv = a * hu[c] + gv
                    hr[c] = hv
                    y[c] += cn * hv - r_row[c] * bx


@numba.njit(parallel=True, cache=True, fastmath=_STATE_LOOP_FASTMATH)
def _scan_2d_forward(u, dts, A2, Bt, Ct, D, R, gate, has_z, channels_per_group, width, chunk,
                     out, saved, y_pre):  # pragma: no cover
    """Forward 2D scan in one row-major sweep, h carried per column. ``u, dts, gate, out:
    [b, H, W, d]``, ``A2, R: [state, d]`` (A2 = A log2 e), ``Bt, Ct: [b, g, H, W, state]``.

    For the backward, if ``saved`` has rows: the column states h before every ``chunk``-th
    row into ``saved: [b, H / chunk, W, state, d]`` and, with z, the output before the gate
    into ``y_pre``.
    """
    batch, height, grid_width, channels = u.shape
    groups = Bt.shape[1]
    state = A2.shape[0]
    blocks = -(-channels_per_group // width)
    keep = saved.shape[0] > 0
    none = np.empty((0, 0, 0), u.dtype)
    for task in numba.prange(batch * groups * blocks):
        b, g, _, first, stop = _block(task, groups, blocks, channels_per_group, width)
        w = stop - first
        h_col = np.zeros((grid_width, state, w), u.dtype)
        h_next = np.empty((grid_width, state, w), u.dtype)  # in turn, as in 1D
        g_run = np.empty((state, w), u.dtype)
        dtu = np.empty(w, u.dtype)
        ys = np.empty((grid_width, w), u.dtype)
        d_row = D[first:stop]
        for i in range(height):
            if keep and i % chunk == 0:
                saved[b, i // chunk, :, :, first:stop] = h_col
            _scan_2d_row(i, h_col, h_next, none, u, dts, A2, Bt, Ct, R, b, g, first, stop,
                         g_run, dtu, ys)
            h_col, h_next = h_next, h_col
            for j in range(grid_width):
                u_row = u[b, i, j, first:stop]
                o_row = out[b, i, j, first:stop]
                y = ys[j]
                for c in range(w):
                    y[c] += d_row[c] * u_row[c]
                if has_z:
                    gate_row = gate[b, i, j, first:stop]
                    for c in range(w):
                        o_row[c] = y[c] * gate_row[c]
                    if keep:
                        y_pre[b, i, j, first:stop] = y
                else:
                    o_row[:] = y


@numba.njit(parallel=True, cache=True, fastmath=_STATE_LOOP_FASTMATH)
def _scan_2d_backward(u, dts, dsp, A, A2, Bt, Ct, D, R, z, zsig, y_pre, saved, dout,
                      delta_softplus, has_z, channels_per_group, width, chunk, du, ddelta, dz,
                      dA_part, dR_part, dD_part, dB_part, dC_part):  # pragma: no cover
    """Backward 2D scan; derivation in :func:`_scan_2d_backward_op`, layouts as in
    :func:`_scan_2d_forward` (whose checkpoints and pre-gate output it reads), task ownership
    as in :func:`_scan_1d_backward`.

    Each chunk of rows, from the last, is recomputed from its checkpoint (h and g of
    ``chunk`` rows; Ā is recomputed where needed, which costs less than the memory traffic of
    keeping it) and swept bottom-up, each row right-to-left.
    """
    batch, height, grid_width, channels = u.shape
    groups = Bt.shape[1]
    state = A.shape[0]
    blocks = -(-channels_per_group // width)
    checkpoints = -(-height // chunk)
    zero = u.dtype.type(0)
    for task in numba.prange(batch * groups * blocks):
        b, g, k, first, stop = _block(task, groups, blocks, channels_per_group, width)
        w = stop - first
        hs = np.empty((chunk + 1, grid_width, state, w), u.dtype)
        gs = np.empty((chunk, grid_width, state, w), u.dtype)
        g_run = np.empty((state, w), u.dtype)
        dtu = np.empty(w, u.dtype)
        ys = np.empty((grid_width, w), u.dtype)
        dy_row = np.empty(w, u.dtype)
        no_g = np.zeros((state, w), u.dtype)
        d_row = D[first:stop]
        # Adjoints: dh_col[j] carries Ā_{i+1,j} dh_{i+1,j}, dg_run carries Ā_{i,j+1} dg_{i,j+1}.
        dh_col = np.zeros((grid_width, state, w), u.dtype)
        dg_run = np.empty((state, w), u.dtype)
        dA_acc = np.zeros((state, w), u.dtype)
        dR_acc = np.zeros((state, w), u.dtype)
        dD_acc = np.zeros(w, u.dtype)
        da_sum = np.empty(w, u.dtype)
        dbx_b = np.empty(w, u.dtype)
        for m in range(checkpoints - 1, -1, -1):
            i0 = m * chunk
            i1 = min(i0 + chunk, height)
            hs[0] = saved[b, m, :, :, first:stop]
            for i in range(i0, i1):
                _scan_2d_row(i, hs[i - i0], hs[i - i0 + 1], gs[i - i0], u, dts, A2, Bt, Ct, R,
                             b, g, first, stop, g_run, dtu, ys)
            for i in range(i1 - 1, i0 - 1, -1):
                dg_run[:, :] = zero
                for j in range(grid_width - 1, -1, -1):
                    u_row = u[b, i, j, first:stop]
                    dt_row = dts[b, i, j, first:stop]
                    if has_z:
                        _gate_adjoint(dout[b, i, j, first:stop], y_pre[b, i, j, first:stop],
                                      z[b, i, j, first:stop], zsig[b, i, j, first:stop],
                                      dz[b, i, j, first:stop], dy_row)
                    else:
                        dy_row[:] = dout[b, i, j, first:stop]
                    for c in range(w):
                        dtu[c] = dt_row[c] * u_row[c]
                        da_sum[c] = zero
                        dbx_b[c] = zero
                        dD_acc[c] += dy_row[c] * u_row[c]
                    h_up = hs[i - i0, j]
                    h_here = hs[i - i0 + 1, j]
                    g_left = gs[i - i0, j - 1] if j > 0 else no_g
                    dh_here = dh_col[j]
                    dB_row = dB_part[b, g, k, i, j]
                    dC_row = dC_part[b, g, k, i, j]
                    for n in range(state):
                        bn = Bt[b, g, i, j, n]
                        cn = Ct[b, g, i, j, n]
                        a_row = A[n, first:stop]
                        a2_row = A2[n, first:stop]
                        r_row = R[n, first:stop]
                        hu = h_up[n]
                        hh = h_here[n]
                        gl = g_left[n]
                        dhc = dh_here[n]
                        dgr = dg_run[n]
                        dA_row = dA_acc[n]
                        dR_row = dR_acc[n]
                        db_sum = zero
                        dc_sum = zero
                        for c in range(w):
                            dy = dy_row[c]
                            a = exp2(dt_row[c] * a2_row[c])  # recomputed: cheaper than stored
                            dhn = dhc[c] + cn * dy
                            dgn = dgr[c] + dhn
                            dbx = dgn - r_row[c] * dy
                            # Ā multiplies both h_{i-1,j} (column pass) and g_{i,j-1} (row pass).
                            da = (dhn * hu[c] + dgn * gl[c]) * a
                            da_sum[c] += da * a_row[c]
                            dA_row[c] += da * dt_row[c]
                            dbx_b[c] += dbx * bn
                            db_sum += dbx * dtu[c]
                            dc_sum += dy * hh[c]
                            dR_row[c] -= dy * dtu[c] * bn
                            dhc[c] = a * dhn
                            dgr[c] = a * dgn
                        dB_row[n] = db_sum
                        dC_row[n] = dc_sum
                    du_row = du[b, i, j, first:stop]
                    dd_row = ddelta[b, i, j, first:stop]
                    sp_row = dsp[b, i, j, first:stop]
                    for c in range(w):
                        du_row[c] = dy_row[c] * d_row[c] + dt_row[c] * dbx_b[c]
                        ddt = da_sum[c] + u_row[c] * dbx_b[c]
                        if delta_softplus:
                            ddt *= sp_row[c]
                        dd_row[c] = ddt
        for n in range(state):
            for c in range(w):
                dA_part[b, first + c, n] = dA_acc[n, c]
                dR_part[b, first + c, n] = dR_acc[n, c]
        for c in range(w):
            dD_part[b, first + c] = dD_acc[c]


# ---------------------------------------------------------------------------------------
# Preparation. The dispatcher (:func:`ssmpde.kernels.selective_scan`) has validated the
# inputs (shapes, floating dtypes, one device, which it ensures is the CPU for this backend);
# only the kernels' own constraint is checked here.
# ---------------------------------------------------------------------------------------
def _check_one_grouping(B, C, spatial):
    """The kernels read B and C through one ``[batch, groups, ...]`` layout: ValueError unless
    both have the same number of groups, a plain one counting as one group."""
    groups = [1 if x.dim() == 2 + spatial else x.shape[1] for x in (B, C)]
    if groups[0] != groups[1]:
        # As mamba-ssm's selective_scan_fn: one grouping serves B and C, which lets one
        # backward task own the gradient of both.
        raise ValueError(f"B and C must have the same number of groups for the cpu backend "
                         f"(a plain one counts as 1); got B with {groups[0]} and C with "
                         f"{groups[1]}. Expand the plain one to the other's groups, or use "
                         f"backend='reference'.")


def _prepare(x, dtype):
    return x.detach().to(dtype).contiguous()


def _state_last(x, spatial, dtype):
    """B or C as ``[batch, groups, *space, state]`` so the state loop reads contiguous memory."""
    if x.dim() == 2 + spatial:
        x = x.unsqueeze(1)
    return x.detach().to(dtype).movedim(2, -1).contiguous()


def _channel_last(x, dtype):
    """``[batch, channel, *space]`` as a contiguous ``[batch, *space, channel]``."""
    return x.detach().to(dtype).movedim(1, -1).contiguous()


def _channel_first(x):
    """A kernel's ``[batch, *space, channel]`` array as a ``[batch, channel, *space]`` view."""
    return torch.from_numpy(x).movedim(-1, 1)


def _prepare_common(u, delta, A, B, C, D, R, z, delta_bias, spatial):
    """Cast to the compute dtype and lay out for the kernels; neutral values for absent inputs.

    u, delta, z become channel-last, A, A log2 e ("A2") and R ``[state, channel]``, B and C
    ``[batch, groups, *space, state]``. D = 0, R = 0 and delta_bias = 0 change nothing in
    the scan; only z needs a flag, with a dummy array so that one compiled signature serves
    both cases.
    """
    dtype = compute_dtype(u)
    channels, state = A.shape
    tensors = {
        "u": _channel_last(u, dtype),
        "delta": _channel_last(delta, dtype),
        "A": _prepare(A.T, dtype),
        # Ā = 2^(Δ A log2 e) in the state loops (:func:`exp2`); the product is formed in
        # float64, so A2 is A log2 e correctly rounded.
        "A2": _prepare(A.T.detach().double() * (1.0 / math.log(2.0)), dtype),
        "B": _state_last(B, spatial, dtype),
        "C": _state_last(C, spatial, dtype),
        "D": _prepare(D, dtype) if D is not None else torch.zeros(channels, dtype=dtype),
        "R": (_prepare(R.T, dtype) if R is not None
              else torch.zeros(state, channels, dtype=dtype)),
        "z": (_channel_last(z, dtype) if z is not None
              else torch.zeros((0,) * (2 + spatial), dtype=dtype)),
        "delta_bias": (_prepare(delta_bias, dtype) if delta_bias is not None
                       else torch.zeros(channels, dtype=dtype)),
    }
    return dtype, tensors


def _steps(delta, delta_bias, delta_softplus, z):
    """The per-position step Δ = softplus(δ + b) (or δ + b) and the gate silu(z) (empty
    without z), torch tensors shaped like the channel-last ``delta`` and ``z``.

    The softplus is :func:`_softplus_kernel` (vectorised; within a few ulp of torch's), the
    same in the forward and in the backward's recomputation.
    """
    if delta_softplus:
        dt = torch.empty_like(delta)
        _softplus_kernel(delta.reshape(-1, delta.shape[-1]).numpy(), delta_bias.numpy(),
                         dt.view(-1, delta.shape[-1]).numpy())
    else:
        dt = delta + delta_bias
    gate = torch.nn.functional.silu(z) if z.numel() else z
    return dt, gate


def _step_grads(x, z, delta_softplus):
    """dΔ/dx = σ(x), exactly 1 above the softplus threshold 20 where softplus is the identity
    (torch's convention), and σ(z); numpy arrays, empty where not needed."""
    empty = np.empty((0,) * x.dim(), x.numpy().dtype)
    dsp = empty
    if delta_softplus:
        dsp = torch.sigmoid(x).masked_fill_(x > SOFTPLUS_THRESHOLD, 1.0).numpy()
    zsig = torch.sigmoid(z).numpy() if z.numel() else empty
    return dsp, zsig


def _nan(shape, dtype):
    """A fresh buffer full of NaN: any element a kernel fails to write stays visible."""
    return np.full(shape, np.nan, dtype=dtype)


#: Widest channel block (a multiple of every SIMD width); the kernels' inner loops run over it.
MAX_BLOCK = _FULL_BLOCK
#: Channel blocks narrower than this are only used when there are no more channels.
MIN_BLOCK = 16
#: Cap on one backward task's scratch (checkpoints and the recomputed chunk); wide rows
#: narrow the channel block to stay under it (down to MIN_BLOCK).
SCRATCH_BYTES = 32 << 20




def _blocking(batch, groups, channels_per_group, steps, step_bytes):
    """(block width, number of blocks, chunk) for the kernels.

    ``steps`` is what the backward checkpoints (positions in 1D, rows in 2D) and
    ``step_bytes`` the scratch one step takes per channel (a state vector in 1D, a row of
    them in 2D). Keeping one checkpoint per ``chunk`` steps and recomputing two arrays over
    a chunk costs ``steps / chunk + 2 chunk`` steps of scratch, least at
    chunk = √(steps / 2). Blocks hold up to :data:`MAX_BLOCK` channels (fewer if the scratch
    would pass :data:`SCRATCH_BYTES`), rounded to multiples of 16 so vectors stay full, and
    are split further (down to :data:`MIN_BLOCK`) until tasks outnumber threads about twice.
    """
    chunk = max(1, math.isqrt(steps // 2))
    per_channel = (-(-steps // chunk) + 2 * chunk + 1) * step_bytes
    widest = max(MIN_BLOCK, min(MAX_BLOCK, SCRATCH_BYTES // per_channel // 16 * 16))
    threads = numba_threads()  # before any kernel: see that function
    blocks = max(-(-channels_per_group // widest),
                 min(-(-channels_per_group // MIN_BLOCK),
                     -(-2 * threads // (batch * groups))))
    width = -(-channels_per_group // blocks)
    width = min(channels_per_group, -(-width // 16) * 16)
    return width, -(-channels_per_group // width), chunk


def _grad_bc(part, like, spatial):
    """dB or dC: the kernels' partials summed over channel blocks, in the layout and dtype of
    ``like`` (the B or C given)."""
    grad = torch.from_numpy(part.sum(axis=2)).movedim(-1, 2)
    if like.dim() == 2 + spatial:
        grad = grad.squeeze(1)
    return grad.to(like.dtype)


def _like(grad, x):
    """A gradient in the dtype of its input ``x``; absent inputs (None) keep the compute
    dtype (autograd never receives those: see :func:`_backward`)."""
    return grad if x is None else grad.to(x.dtype)


def _input_grads(inputs, spatial, du, ddelta, dz, dA_part, dR_part, dD_part, dB_part, dC_part):
    """Gradients of (u, delta, A, B, C, D, R, z, delta_bias) from the backward kernels' outputs:
    channel-last arrays back to ``[batch, channel, *space]``, per-batch partials summed over
    batch, B/C partials over channel blocks, d delta_bias = Σ d delta over batch and space;
    each in its input's dtype (an empty tensor for an absent z)."""
    u, delta, A, B, C, D, R, z, delta_bias = inputs
    ddelta_t = torch.from_numpy(ddelta)
    return [
        _channel_first(du).to(u.dtype),
        ddelta_t.movedim(-1, 1).to(delta.dtype),
        torch.from_numpy(dA_part.sum(axis=0)).to(A.dtype),
        _grad_bc(dB_part, B, spatial),
        _grad_bc(dC_part, C, spatial),
        _like(torch.from_numpy(dD_part.sum(axis=0)), D),
        _like(torch.from_numpy(dR_part.sum(axis=0)), R),
        _channel_first(dz).to(z.dtype) if z is not None else ddelta_t.new_empty(0),
        _like(ddelta_t.sum(dim=tuple(range(1 + spatial))), delta_bias),
    ]


def _grads_fake(inputs, spatial):
    """Empty tensors shaped, laid out and typed as :func:`_input_grads` returns them."""
    u, delta, A, B, C, D, R, z, delta_bias = inputs
    dtype = compute_dtype(u)
    channels, state = A.shape

    def channel_first(x):
        return x.new_empty(x.shape[0], *x.shape[2:], x.shape[1]).movedim(-1, 1)

    def like(x, shape):
        return u.new_empty(shape, dtype=dtype) if x is None else x.new_empty(shape)

    return [channel_first(u), channel_first(delta), A.new_empty(A.shape), B.new_empty(B.shape),
            C.new_empty(C.shape), like(D, (channels,)), like(R, (channels, state)),
            channel_first(z) if z is not None else u.new_empty(0, dtype=dtype),
            like(delta_bias, (channels,))]


def _keep(*tensors) -> bool:
    """Whether autograd will want this call's backward: only then does the forward keep the
    state checkpoints and the pre-gate output (under ``no_grad`` and ``inference_mode``,
    parameters still report ``requires_grad``, so that flag alone is not the answer)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _backward(ctx, grads, present):
    """The gradients autograd asked for, None for the rest and for absent inputs."""
    return tuple(g if want and here else None
                 for g, want, here in zip(grads, ctx.needs_input_grad, present))


# ---------------------------------------------------------------------------------------
# PyTorch custom operators (torch.library). Each scan is one operator with a fake
# implementation (shapes, dtypes and strides only) and a registered backward, itself an
# operator: torch.compile traces through them, under no_grad and inference_mode, without
# looking inside the numba kernels.
# ---------------------------------------------------------------------------------------
def _scan_1d(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                C: torch.Tensor, D: torch.Tensor | None, R: torch.Tensor | None,
                z: torch.Tensor | None, delta_bias: torch.Tensor | None,
                initial_state: torch.Tensor | None, delta_softplus: bool, reverse: bool,
                keep: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward 1D scan: (out ``[batch, channel, length]`` in u's dtype, a view of a
    channel-last buffer; last state ``[batch, channel, state]``; and, if ``keep``, the
    state checkpoints and the output before the gate for the backward, else empty)."""
    batch, channels, length = u.shape
    state = A.shape[1]
    groups = 1 if B.dim() == 3 else B.shape[1]
    dtype, t = _prepare_common(u, delta, A, B, C, D, R, z, delta_bias, spatial=1)
    h0 = (_prepare(initial_state, dtype) if initial_state is not None
          else torch.zeros(batch, channels, state, dtype=dtype))
    np_dtype = t["u"].numpy().dtype
    out = _nan((batch, length, channels), np_dtype)
    last = _nan((batch, channels, state), np_dtype)
    cpg = channels // groups
    width, _, chunk = _blocking(batch, groups, cpg, length, state * np_dtype.itemsize)
    # What the backward needs beyond the inputs: checkpoints of the state (one per chunk,
    # O(batch · channel · state · √length)) and, with z, the output before the gate.
    saved = _nan((batch, -(-length // chunk), state, channels) if keep else (0, 0, 0, 0),
                 np_dtype)
    y_pre = _nan((batch, length, channels) if keep and z is not None else (0, 0, 0), np_dtype)
    dts, gate = _steps(t["delta"], t["delta_bias"], delta_softplus, t["z"])
    _scan_1d_forward(t["u"].numpy(), dts.numpy(), t["A2"].numpy(), t["B"].numpy(),
                     t["C"].numpy(), t["D"].numpy(), t["R"].numpy(), gate.numpy(), h0.numpy(),
                     z is not None, bool(reverse), cpg, width, chunk, out, last, saved, y_pre)
    return (_channel_first(out).to(u.dtype), torch.from_numpy(last).to(u.dtype),
            torch.from_numpy(saved), torch.from_numpy(y_pre))


_scan_1d_op = torch.library.custom_op("ssmpde::selective_scan_1d_cpu", _scan_1d, mutates_args=())


@_scan_1d_op.register_fake
def _scan_1d_fake(u, delta, A, B, C, D, R, z, delta_bias, initial_state, delta_softplus,
                  reverse, keep):
    batch, channels, length = u.shape
    state = A.shape[1]
    groups = 1 if B.dim() == 3 else B.shape[1]
    dtype = compute_dtype(u)
    _, _, chunk = _blocking(batch, groups, channels // groups, length, state)
    saved = (batch, -(-length // chunk), state, channels) if keep else (0, 0, 0, 0)
    y_pre = (batch, length, channels) if keep and z is not None else (0, 0, 0)
    return (u.new_empty(batch, length, channels).movedim(-1, 1),
            u.new_empty(batch, channels, state), u.new_empty(saved, dtype=dtype),
            u.new_empty(y_pre, dtype=dtype))


@torch.library.custom_op("ssmpde::selective_scan_1d_cpu_backward", mutates_args=())
def _scan_1d_backward_op(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor,
                         B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None,
                         R: torch.Tensor | None, z: torch.Tensor | None,
                         delta_bias: torch.Tensor | None, saved: torch.Tensor,
                         y_pre: torch.Tensor, dout: torch.Tensor, dlast: torch.Tensor,
                         delta_softplus: bool, reverse: bool) -> list[torch.Tensor]:
    r"""Backward 1D scan: the gradients of (u, delta, A, B, C, D, R, z, delta_bias) and of
    the initial state, from the forward's checkpoints ``saved`` and pre-gate output ``y_pre``.

    Derivation (scan order; for ``reverse=True`` "next" means the position processed next,
    i.e. the recurrence is the same with positions relabelled). With Δ = softplus(δ + b),
    Ā_l = exp(Δ_l A), x̄_l = Δ_l B_l u_l, h_l = Ā_l h_{l-1} + x̄_l,
    y_l = Σ_n (C_l h_l − R x̄_l) + D u_l, out = y · silu(z):

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

    The states h are recomputed chunk by chunk from the checkpoints into per-thread scratch.
    """
    if saved.numel() == 0:
        raise RuntimeError("the 1D scan's forward kept no checkpoints for the backward; call "
                           "it with grad enabled and an input that requires grad")
    batch, channels, length = u.shape
    state = A.shape[1]
    groups = 1 if B.dim() == 3 else B.shape[1]
    dtype, t = _prepare_common(u, delta, A, B, C, D, R, z, delta_bias, spatial=1)
    has_z = z is not None
    np_dtype = t["u"].numpy().dtype
    cpg = channels // groups
    width, blocks, chunk = _blocking(batch, groups, cpg, length, state * np_dtype.itemsize)
    dts, _ = _steps(t["delta"], t["delta_bias"], delta_softplus, t["z"][:0])
    x = t["delta"] + t["delta_bias"]
    du = _nan((batch, length, channels), np_dtype)
    ddelta = _nan((batch, length, channels), np_dtype)
    dz = _nan((batch, length, channels) if has_z else (0, 0, 0), np_dtype)
    dh0 = _nan((batch, channels, state), np_dtype)
    dA_part = _nan((batch, channels, state), np_dtype)
    dR_part = _nan((batch, channels, state), np_dtype)
    dD_part = _nan((batch, channels), np_dtype)
    dB_part = _nan((batch, groups, blocks, length, state), np_dtype)
    dC_part = _nan((batch, groups, blocks, length, state), np_dtype)
    dsp, zsig = _step_grads(x, t["z"], delta_softplus)
    _scan_1d_backward(t["u"].numpy(), dts.numpy(), dsp, t["A"].numpy(), t["A2"].numpy(),
                      t["B"].numpy(),
                      t["C"].numpy(), t["D"].numpy(), t["R"].numpy(), t["z"].numpy(), zsig,
                      y_pre.numpy(), saved.numpy(), _channel_last(dout, dtype).numpy(),
                      _prepare(dlast, dtype).numpy(), delta_softplus, has_z, reverse, cpg,
                      width, chunk, du, ddelta, dz, dh0, dA_part, dR_part, dD_part, dB_part,
                      dC_part)
    return [*_input_grads((u, delta, A, B, C, D, R, z, delta_bias), 1, du, ddelta, dz, dA_part,
                          dR_part, dD_part, dB_part, dC_part), torch.from_numpy(dh0)]


@_scan_1d_backward_op.register_fake
def _scan_1d_backward_fake(u, delta, A, B, C, D, R, z, delta_bias, saved, y_pre, dout, dlast,
                           delta_softplus, reverse):
    grads = _grads_fake((u, delta, A, B, C, D, R, z, delta_bias), 1)
    return [*grads, u.new_empty(u.shape[0], *A.shape, dtype=compute_dtype(u))]


def _setup_scan_1d(ctx, inputs, output):
    u, delta, A, B, C, D, R, z, delta_bias, initial_state, delta_softplus, reverse, _ = inputs
    ctx.save_for_backward(u, delta, A, B, C, D, R, z, delta_bias, output[2], output[3])
    ctx.flags = (delta_softplus, reverse)
    ctx.present = (*(x is not None for x in (u, delta, A, B, C, D, R, z, delta_bias,
                                              initial_state)), False, False, False)
    ctx.state_dtype = None if initial_state is None else initial_state.dtype


def _scan_1d_autograd(ctx, dout, dlast, _saved, _y_pre):
    u, delta, A, B, C, D, R, z, delta_bias, saved, y_pre = ctx.saved_tensors
    if dlast is None:
        dlast = torch.zeros(u.shape[0], *A.shape, dtype=u.dtype)
    if dout is None:
        dout = torch.zeros_like(u)
    grads = torch.ops.ssmpde.selective_scan_1d_cpu_backward(
        u, delta, A, B, C, D, R, z, delta_bias, saved, y_pre, dout, dlast, *ctx.flags)
    dh0 = grads[9] if ctx.state_dtype is None else grads[9].to(ctx.state_dtype)
    return _backward(ctx, [*grads[:9], dh0, None, None, None], ctx.present)


_scan_1d_op.register_autograd(_scan_1d_autograd, setup_context=_setup_scan_1d)


def _scan_2d(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                C: torch.Tensor, D: torch.Tensor | None, R: torch.Tensor | None,
                z: torch.Tensor | None, delta_bias: torch.Tensor | None, delta_softplus: bool,
                keep: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward 2D scan: (out ``[batch, channel, height, width]`` in u's dtype, a view of a
    channel-last buffer; and, if ``keep``, the column-state checkpoints and the output
    before the gate for the backward, else empty)."""
    batch, channels, height, width = u.shape
    groups = 1 if B.dim() == 4 else B.shape[1]
    state = A.shape[1]
    dtype, t = _prepare_common(u, delta, A, B, C, D, R, z, delta_bias, spatial=2)
    np_dtype = t["u"].numpy().dtype
    out = _nan((batch, height, width, channels), np_dtype)
    cpg = channels // groups
    block, _, chunk = _blocking(batch, groups, cpg, height, width * state * np_dtype.itemsize)
    # Checkpoints of the column states every chunk rows, O(batch · channel · state · width ·
    # √height), and with z the output before the gate: what the backward needs besides
    # the inputs.
    saved = _nan((batch, -(-height // chunk), width, state, channels) if keep
                 else (0, 0, 0, 0, 0), np_dtype)
    y_pre = _nan((batch, height, width, channels) if keep and z is not None
                 else (0, 0, 0, 0), np_dtype)
    dts, gate = _steps(t["delta"], t["delta_bias"], delta_softplus, t["z"])
    _scan_2d_forward(t["u"].numpy(), dts.numpy(), t["A2"].numpy(), t["B"].numpy(),
                     t["C"].numpy(), t["D"].numpy(), t["R"].numpy(), gate.numpy(),
                     z is not None, cpg, block, chunk, out, saved, y_pre)
    return (_channel_first(out).to(u.dtype), torch.from_numpy(saved),
            torch.from_numpy(y_pre))


_scan_2d_op = torch.library.custom_op("ssmpde::selective_scan_2d_cpu", _scan_2d, mutates_args=())


@_scan_2d_op.register_fake
def _scan_2d_fake(u, delta, A, B, C, D, R, z, delta_bias, delta_softplus, keep):
    batch, channels, height, width = u.shape
    groups = 1 if B.dim() == 4 else B.shape[1]
    state = A.shape[1]
    dtype = compute_dtype(u)
    _, _, chunk = _blocking(batch, groups, channels // groups, height, width * state)
    saved = ((batch, -(-height // chunk), width, state, channels) if keep
             else (0, 0, 0, 0, 0))
    y_pre = (batch, height, width, channels) if keep and z is not None else (0, 0, 0, 0)
    return (u.new_empty(batch, height, width, channels).movedim(-1, 1),
            u.new_empty(saved, dtype=dtype), u.new_empty(y_pre, dtype=dtype))


@torch.library.custom_op("ssmpde::selective_scan_2d_cpu_backward", mutates_args=())
def _scan_2d_backward_op(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor,
                         B: torch.Tensor, C: torch.Tensor, D: torch.Tensor | None,
                         R: torch.Tensor | None, z: torch.Tensor | None,
                         delta_bias: torch.Tensor | None, saved: torch.Tensor,
                         y_pre: torch.Tensor, dout: torch.Tensor,
                         delta_softplus: bool) -> list[torch.Tensor]:
    r"""Backward 2D scan: the gradients of (u, delta, A, B, C, D, R, z, delta_bias).

    Forward, per (b, d, n) with the same Ā_{ij} = exp(Δ_{ij} A) in both passes:
    g_{ij} = Ā_{ij} g_{i,j−1} + x̄_{ij} (rows), h_{ij} = Ā_{ij} h_{i−1,j} + g_{ij} (columns),
    y_{ij} = Σ_n (C_{ij} h_{ij} − R x̄_{ij}) + D u_{ij}, out = y · silu(z).

    Backward (dy, dz as in 1D, :func:`_scan_1d_backward_op`):

    * column adjoint, bottom-up: dh_{ij} = C_{ij} dy_{ij} + Ā_{i+1,j} dh_{i+1,j};
    * row adjoint, right-to-left: dg_{ij} = dh_{ij} + Ā_{i,j+1} dg_{i,j+1};
    * dx̄_{ij} = dg_{ij} − R dy_{ij};
    * dĀ_{ij} = dh_{ij} h_{i−1,j} + dg_{ij} g_{i,j−1} (Ā enters both passes);
    * the rest (dΔ, dδ, dA, dB, dC, du, dD, dR, d delta_bias) exactly as in the 1D backward.

    Rows are swept bottom-up and each row right-to-left, so dh_{i+1,j} (previous row) and
    dg_{i,j+1} (previous column of this row) are ready when needed; g and h are recomputed
    per (batch, channel) into per-thread scratch.
    """
    if saved.numel() == 0:
        raise RuntimeError("the 2D scan's forward kept no checkpoints for the backward; call "
                           "it with grad enabled and an input that requires grad")
    batch, channels, height, width = u.shape
    groups = 1 if B.dim() == 4 else B.shape[1]
    state = A.shape[1]
    dtype, t = _prepare_common(u, delta, A, B, C, D, R, z, delta_bias, spatial=2)
    has_z = z is not None
    np_dtype = t["u"].numpy().dtype
    cpg = channels // groups
    block, blocks, chunk = _blocking(batch, groups, cpg, height,
                                     width * state * np_dtype.itemsize)
    dts, _ = _steps(t["delta"], t["delta_bias"], delta_softplus, t["z"][:0])
    x = t["delta"] + t["delta_bias"]
    grid = (batch, height, width, channels)
    du = _nan(grid, np_dtype)
    ddelta = _nan(grid, np_dtype)
    dz = _nan(grid if has_z else (0, 0, 0, 0), np_dtype)
    dA_part = _nan((batch, channels, state), np_dtype)
    dR_part = _nan((batch, channels, state), np_dtype)
    dD_part = _nan((batch, channels), np_dtype)
    dB_part = _nan((batch, groups, blocks, height, width, state), np_dtype)
    dC_part = _nan((batch, groups, blocks, height, width, state), np_dtype)
    dsp, zsig = _step_grads(x, t["z"], delta_softplus)
    _scan_2d_backward(t["u"].numpy(), dts.numpy(), dsp, t["A"].numpy(), t["A2"].numpy(),
                      t["B"].numpy(),
                      t["C"].numpy(), t["D"].numpy(), t["R"].numpy(), t["z"].numpy(), zsig,
                      y_pre.numpy(), saved.numpy(), _channel_last(dout, dtype).numpy(),
                      delta_softplus, has_z, cpg, block, chunk, du, ddelta, dz, dA_part,
                      dR_part, dD_part, dB_part, dC_part)
    return _input_grads((u, delta, A, B, C, D, R, z, delta_bias), 2, du, ddelta, dz, dA_part,
                        dR_part, dD_part, dB_part, dC_part)


@_scan_2d_backward_op.register_fake
def _scan_2d_backward_fake(u, delta, A, B, C, D, R, z, delta_bias, saved, y_pre, dout,
                           delta_softplus):
    return _grads_fake((u, delta, A, B, C, D, R, z, delta_bias), 2)


def _setup_scan_2d(ctx, inputs, output):
    u, delta, A, B, C, D, R, z, delta_bias, delta_softplus, _ = inputs
    ctx.save_for_backward(u, delta, A, B, C, D, R, z, delta_bias, output[1], output[2])
    ctx.delta_softplus = delta_softplus
    ctx.present = (*(x is not None for x in (u, delta, A, B, C, D, R, z, delta_bias)), False,
                   False)


def _scan_2d_autograd(ctx, dout, _saved, _y_pre):
    u, delta, A, B, C, D, R, z, delta_bias, saved, y_pre = ctx.saved_tensors
    grads = torch.ops.ssmpde.selective_scan_2d_cpu_backward(
        u, delta, A, B, C, D, R, z, delta_bias, saved, y_pre, dout, ctx.delta_softplus)
    return _backward(ctx, [*grads, None, None], ctx.present)


_scan_2d_op.register_autograd(_scan_2d_autograd, setup_context=_setup_scan_2d)


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
        If B and C do not have the same number of groups (a plain one counting as 1). The
        other checks (shapes, floating CPU tensors, groups dividing the channels) are the
        dispatcher's: call :func:`ssmpde.kernels.selective_scan` with ``backend="cpu"`` for
        validated inputs.

    Notes
    -----
    Saved for the backward: the inputs, the state checkpoints and (with z) the output
    before the gate, nothing when autograd will not ask for the backward; the backward keeps
    a per-thread scratch of ``O(state · √length)``. Derivation of the
    backward in :func:`_scan_1d_backward_op`.

    Examples
    --------
    >>> import torch
    >>> u = torch.randn(1, 2, 5); delta = torch.randn(1, 2, 5)
    >>> A = -torch.rand(2, 3) - 0.5; B = torch.randn(1, 3, 5); C = torch.randn(1, 3, 5)
    >>> selective_scan_cpu(u, delta, A, B, C).shape
    torch.Size([1, 2, 5])
    """
    _check_one_grouping(B, C, spatial=1)
    keep = _keep(u, delta, A, B, C, D, R, z, delta_bias, initial_state)
    # Eager and without autograd, the operator's implementation is called directly: the
    # dispatcher's round trip costs tens of microseconds, which short scans notice.
    args = (u, delta, A, B, C, D, R, z, delta_bias, initial_state, bool(delta_softplus),
            bool(reverse), keep)
    if keep or torch.compiler.is_compiling():
        out, last, _, _ = _scan_1d_op(*args)
    else:
        with torch.profiler.record_function("ssmpde::selective_scan_1d_cpu"):
            out, last, _, _ = _scan_1d(*args)
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
        As :func:`selective_scan_cpu`; validated inputs through
        :func:`ssmpde.kernels.selective_scan_2d` with ``backend="cpu"``.

    Notes
    -----
    The forward is one row-major sweep carrying g along the row and h per column
    (``O(width · state)`` per task). Backward derivation in :func:`_scan_2d_backward_op`.

    Examples
    --------
    >>> import torch
    >>> u = torch.randn(1, 2, 3, 4); delta = torch.randn(1, 2, 3, 4)
    >>> A = -torch.rand(2, 3) - 0.5; B = torch.randn(1, 3, 3, 4); C = torch.randn(1, 3, 3, 4)
    >>> selective_scan_2d_cpu(u, delta, A, B, C).shape
    torch.Size([1, 2, 3, 4])
    """
    _check_one_grouping(B, C, spatial=2)
    keep = _keep(u, delta, A, B, C, D, R, z, delta_bias)
    args = (u, delta, A, B, C, D, R, z, delta_bias, bool(delta_softplus), keep)
    if keep or torch.compiler.is_compiling():
        return _scan_2d_op(*args)[0]
    with torch.profiler.record_function("ssmpde::selective_scan_2d_cpu"):  # as in 1D
        return _scan_2d(*args)[0]
