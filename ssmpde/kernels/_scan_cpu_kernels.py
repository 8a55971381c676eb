"""The numba kernels of the fast CPU selective scans (:mod:`.scan_cpu`).

The loops themselves, on NumPy arrays already cast and laid out by :mod:`.scan_cpu`, which
also holds the rest: the layouts (``_prepare_common``), the steps Δ and gate
(``_steps``, ``_step_grads``), the channel blocking (``_blocking``), the ``torch.library``
operators with their autograd, and the derivations of the backward
(``_scan_1d_backward_op``, ``_scan_2d_backward_op``); the docstrings below name those
functions. The design (checkpoints and recomputation, channel-last blocks of up to
``MAX_BLOCK`` channels vectorised by LLVM, ``exp2`` without a libm call, NaN-filled buffers) is
described there.
"""

from __future__ import annotations

import numba
import numpy as np

from ._numba_cpu import exp, exp2, log1p_unit

#: torch's softplus threshold: softplus(x) = x above it (and its derivative is 1 there).
SOFTPLUS_THRESHOLD = 20.0


# Arrays are copied element by element in these kernels, never by an array assignment
# (``hs[0] = saved[b, j, :, first:stop]``): that would compile numba's shape-mismatch error
# path (its message formatting), 3.5-4.3 s of each backward kernel's 9-11 s first compile.

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
                saved_p = saved[b, p // chunk]
                for n in range(state):
                    for c in range(w):
                        saved_p[n, first + c] = h[n, c]
            _scan_1d_position(l, h, h_next, no_a, u, dts, A2, Bt, Ct, D, R, b, g, first, stop,
                              dtu, y)
            h, h_next = h_next, h
            o_row = out[b, l, first:stop]
            if has_z:
                gate_row = gate[b, l, first:stop]
                for c in range(w):
                    o_row[c] = y[c] * gate_row[c]
                if keep:
                    y_keep = y_pre[b, l]
                    for c in range(w):
                        y_keep[first + c] = y[c]
            else:
                for c in range(w):
                    o_row[c] = y[c]
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
            saved_j = saved[b, j]
            h_first = hs[0]
            for n in range(state):
                for c in range(w):
                    h_first[n, c] = saved_j[n, first + c]
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
                    do_row = dout[b, l]
                    for c in range(w):
                        dy_row[c] = do_row[first + c]
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
                saved_i = saved[b, i // chunk]
                for j in range(grid_width):
                    for n in range(state):
                        for c in range(w):
                            saved_i[j, n, first + c] = h_col[j, n, c]
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
                        y_keep = y_pre[b, i, j]
                        for c in range(w):
                            y_keep[first + c] = y[c]
                else:
                    for c in range(w):
                        o_row[c] = y[c]


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
            saved_m = saved[b, m]
            h_first = hs[0]
            for j in range(grid_width):
                for n in range(state):
                    for c in range(w):
                        h_first[j, n, c] = saved_m[j, n, first + c]
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
                        do_row = dout[b, i, j]
                        for c in range(w):
                            dy_row[c] = do_row[first + c]
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
