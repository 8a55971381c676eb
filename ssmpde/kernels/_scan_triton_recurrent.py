"""The recurrent 1D Triton kernels: one position at a time, states in registers, segments in
parallel.

``selective_scan_triton(..., kernel="recurrent")`` runs these: each program walks its positions
with a ``[state, channel]`` tile of states in registers (ggml's ``ssm-scan.cu`` layout); for
parallelism beyond ``batch × channel blocks`` the sequence is cut into segments, scanned from
zero in a first pass, joined by :func:`_carry_kernel` and scanned again from their true start
states. The backward recomputes each chunk into a per-program scratch buffer and walks it
backwards with the adjoint in registers. Design notes in :mod:`.scan_triton`; shared helpers
in :mod:`._scan_triton_common`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._scan_triton_common import (
    _compute_dtype,
    _empty,
    _grad,
    _grouped_b_c,
    _load_channel_parameters,
    _load_dt,
    _opt,
    _position_gradients,
    _reduce_grouped,
    _scan_1d_flags,
    _sigmoid,
    _softplus_grad,
    _tuning,
)

#: ``log2(e)``: the recurrent kernels take ``exp(ΔA)`` as ``exp2(Δ · A log2 e)``.
LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
LN2: tl.constexpr = tl.constexpr(0.6931471805599453)


@triton.jit
def _rec_prologue(A_ptr, R_ptr, D_ptr, bias_ptr, channels, state, channels_per_group,
                  HAS_R: tl.constexpr, HAS_D: tl.constexpr, HAS_BIAS: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, DTYPE: tl.constexpr):
    """:func:`_prologue` of the recurrent kernels, whose tiles are ``[BLOCK_N, BLOCK_D]``.

    Every ``[state, channel]`` array the kernels read or write in their loops is stored
    channel-minor (``A``, ``R`` transposed by the host; the chunk states, segment ends and
    partials as ``[..., state, channel]``): Triton lays tiles out after the memory they touch,
    so the channels go to the threads and a channel's states stay in one thread's registers,
    and the sums over the state (``y = Σ_n C h``) need no exchange between threads (ggml's
    ``ssm-scan.cu`` layout). Returns also the segment ``pid_s``, ``A2 = A · log2(e)`` for
    ``exp2`` (instead of A: one tile of registers fewer), and the offsets ``nd`` of a tile in a ``[state, channel]`` plane and ``dn`` in a
    ``[channel, state]`` one (the user's layout of initial and last states).
    """
    pid_b = tl.program_id(0).to(tl.int64)
    pid_d = tl.program_id(1)
    pid_s = tl.program_id(2)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    mask_d = offs_d < channels
    mask_n = offs_n < state
    mask_nd = mask_n[:, None] & mask_d[None, :]
    group = (pid_d * BLOCK_D) // channels_per_group
    nd = offs_n[:, None] * channels + offs_d[None, :]
    A, R, Dv, bias = _load_channel_parameters(A_ptr, R_ptr, D_ptr, bias_ptr, offs_d, mask_d, nd,
                                              mask_nd, HAS_R, HAS_D, HAS_BIAS, DTYPE)
    return (pid_b, pid_d, pid_s, offs_d, offs_n, mask_d, mask_n, mask_nd, group, A * LOG2E, R,
            Dv, bias, nd, offs_d[None, :] * state + offs_n[:, None])


@triton.jit
def _rec_step_inputs(u_ptr, delta_ptr, B_ptr, bias, row, bc_row, p, length, mask_d, mask_n,
                     HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr, REVERSE: tl.constexpr,
                     DTYPE: tl.constexpr):
    """``(pos, offs, u, x, Δ, B)`` of processing step ``p``: the position (``length − 1 − p``
    when ``REVERSE``), the channel offsets ``[BLOCK_D]`` of it, u, raw x, Δ ``[BLOCK_D]`` and
    B ``[BLOCK_N]`` there."""
    if REVERSE:
        pos = length - 1 - p
    else:
        pos = p
    offs = row + pos
    u = tl.load(u_ptr + offs, mask=mask_d, other=0.0).to(DTYPE)
    x, dt = _load_dt(delta_ptr, bias, offs, mask_d, HAS_BIAS, SOFTPLUS, DTYPE)
    Bt = tl.load(B_ptr + bc_row + pos, mask=mask_n, other=0.0).to(DTYPE)
    return pos, offs, u, x, dt, Bt


@triton.jit
def _rec_output(h, Ct, bx, R, Dv, u, z_ptr, offs, mask_d, HAS_R: tl.constexpr,
                HAS_D: tl.constexpr, HAS_Z: tl.constexpr, DTYPE: tl.constexpr):
    """``(y, z)``: ``y = Σ_n (C h − R B̄x) + D u`` of one position ``[BLOCK_D]`` (before the
    gate) and the gate input z there (zeros without one)."""
    y = tl.sum(h * Ct[:, None], axis=0)
    if HAS_R:
        y -= tl.sum(R * bx, axis=0)
    if HAS_D:
        y += Dv * u
    z = y * 0
    if HAS_Z:
        z = tl.load(z_ptr + offs, mask=mask_d, other=0.0).to(DTYPE)
    return y, z


@triton.jit
def _rec_fwd_kernel(
    u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, R_ptr, z_ptr, bias_ptr, h0_ptr, starts_ptr,
    out_ptr, states_ptr, ends_ptr, decay_ptr,
    channels, length, state, groups, channels_per_group, num_chunks, seg_chunks, segments,
    HAS_D: tl.constexpr, HAS_R: tl.constexpr, HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_H0: tl.constexpr, SOFTPLUS: tl.constexpr, REVERSE: tl.constexpr, LOCAL: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr, UNROLL: tl.constexpr,
    DTYPE: tl.constexpr,
):
    """1D recurrent forward: program ``(batch, channel block, segment)`` walks its segment's
    positions one at a time with the ``[BLOCK_N, BLOCK_D]`` state in registers.

    Segment ``s`` covers chunks ``s · seg_chunks …`` (processing order). ``LOCAL``: the first
    pass of a segmented scan; the segment runs from zero (segment 0 from ``h0``) and writes
    only its end state ``ends[b, s]`` and its decay ``Π Ā = exp2(A2 · ΣΔ)`` ``decay[b, s]``,
    one sum of Δ per channel. Otherwise: the segment starts from ``starts[b, s − 1]`` (what
    :func:`_carry_kernel` made of the first pass; ``h0`` or zero for segment 0), writes the
    outputs and, after every chunk, the state ``states[b, chunk, :, :]`` (``[state, channel]``;
    the backward's restart points; the last one is the returned last state).
    """
    (pid_b, pid_d, pid_s, offs_d, offs_n, mask_d, mask_n, mask_nd, group, A2, R, Dv, bias,
     nd, dn) = _rec_prologue(A_ptr, R_ptr, D_ptr, bias_ptr, channels, state, channels_per_group,
                             HAS_R, HAS_D, HAS_BIAS, BLOCK_D, BLOCK_N, DTYPE)
    first = ((nd * 0 + pid_s) == 0) & mask_nd
    h = tl.zeros([BLOCK_N, BLOCK_D], dtype=DTYPE)
    if HAS_H0:
        h += tl.load(h0_ptr + pid_b * channels * state + dn, mask=first, other=0.0).to(DTYPE)
    if not LOCAL:
        h += tl.load(starts_ptr + (pid_b * (segments - 1) + pid_s - 1) * channels * state + nd,
                     mask=mask_nd & ~first, other=0.0).to(DTYPE)
    total = (offs_d * 0).to(DTYPE)

    row = (pid_b * channels + offs_d) * length
    bc_row = ((pid_b * groups + group) * state + offs_n) * length
    c_begin = pid_s * seg_chunks
    c_end = tl.minimum(c_begin + seg_chunks, num_chunks)
    for c in range(c_begin, c_end):
        p_end = tl.minimum(c * CHUNK + CHUNK, length)
        for p in tl.range(c * CHUNK, p_end, loop_unroll_factor=UNROLL):
            pos, offs, u, _, dt, Bt = _rec_step_inputs(u_ptr, delta_ptr, B_ptr, bias, row,
                                                       bc_row, p, length, mask_d, mask_n,
                                                       HAS_BIAS, SOFTPLUS, REVERSE, DTYPE)
            bx = Bt[:, None] * (dt * u)[None, :]
            h = tl.exp2(A2 * dt[None, :]) * h + bx
            if LOCAL:
                total += dt
            else:
                Ct = tl.load(C_ptr + bc_row + pos, mask=mask_n, other=0.0).to(DTYPE)
                y, z = _rec_output(h, Ct, bx, R, Dv, u, z_ptr, offs, mask_d, HAS_R, HAS_D,
                                   HAS_Z, DTYPE)
                if HAS_Z:
                    y *= z * _sigmoid(z)
                tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask_d)
        if not LOCAL:
            tl.store(states_ptr + (pid_b * num_chunks + c) * channels * state + nd,
                     h.to(states_ptr.dtype.element_ty), mask=mask_nd)
    if LOCAL:
        seg = (pid_b * segments + pid_s) * channels * state + nd
        tl.store(ends_ptr + seg, h.to(ends_ptr.dtype.element_ty), mask=mask_nd)
        tl.store(decay_ptr + seg, tl.exp2(A2 * total[None, :]).to(decay_ptr.dtype.element_ty),
                 mask=mask_nd)


@triton.jit
def _carry_kernel(ends_ptr, decay_ptr, out_ptr, per_batch, segments, REVERSE: tl.constexpr,
                  BLOCK: tl.constexpr):
    """Join the segments of a segmented scan: ``H ← decay[s] · H + ends[s]`` from ``H = 0``
    over the segments in order (``REVERSE``: from the last one down), one program per
    ``(batch, block of channel × state)``.

    Forward: ``out[b, s]`` is the state before segment ``s + 1`` (``ends[0]`` already holds
    ``h0``'s part). Backward (``REVERSE``; ``ends[s]`` the adjoint at segment ``s``'s start
    from a zero carry, ``ends[S − 1]`` including ∂L/∂last_state): ``out[b, s]`` is ∂L/∂h after
    segment ``s``'s last position, from everything after it.
    """
    pid_b = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < per_batch
    H = tl.zeros([BLOCK], dtype=out_ptr.dtype.element_ty)
    for k in range(0, segments - 1):
        if REVERSE:
            s = segments - 1 - k
            dest = s - 1
        else:
            s = k
            dest = k
        at = (pid_b * segments + s) * per_batch + offs
        H = tl.load(decay_ptr + at, mask=mask, other=0.0) * H \
            + tl.load(ends_ptr + at, mask=mask, other=0.0)
        tl.store(out_ptr + (pid_b * (segments - 1) + dest) * per_batch + offs, H, mask=mask)


@triton.jit
def _rec_dy(dout_ptr, y, z, offs, mask_d, HAS_Z: tl.constexpr, DTYPE: tl.constexpr):
    """``(dy, dz)``: the cotangent of ``y`` (before the gate) and of the gate input."""
    dout = tl.load(dout_ptr + offs, mask=mask_d, other=0.0).to(DTYPE)
    if HAS_Z:
        sz = _sigmoid(z)
        return dout * z * sz, dout * y * sz * (1.0 + z * (1.0 - sz))
    return dout, dout * 0


@triton.jit
def _rec_bwd_carry_kernel(
    delta_ptr, A_ptr, C_ptr, z_ptr, bias_ptr, dout_ptr, dlast_ptr, ends_ptr, decay_ptr,
    channels, length, state, groups, channels_per_group, num_chunks, seg_chunks, segments,
    HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr,
    REVERSE: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    CHUNK: tl.constexpr, UNROLL: tl.constexpr, DTYPE: tl.constexpr,
):
    """First pass of a segmented backward: the adjoint across segment ``s = pid_s + 1`` from a
    zero carry (∂L/∂last_state for the last one), ``g ← Ā (g + dy C)`` backwards over its
    positions. Writes ``ends[b, s]`` (∂L/∂h before the segment, from the segment's own
    outputs) and ``decay[b, s] = Π Ā`` for :func:`_carry_kernel`."""
    (pid_b, pid_d, pid_s, offs_d, offs_n, mask_d, mask_n, mask_nd, group, A2, R, Dv, bias,
     nd, dn) = _rec_prologue(A_ptr, A_ptr, A_ptr, bias_ptr, channels, state, channels_per_group,
                             False, False, HAS_BIAS, BLOCK_D, BLOCK_N, DTYPE)
    s = pid_s + 1
    G = tl.load(dlast_ptr + pid_b * channels * state + dn,
                mask=mask_nd & ((nd * 0 + s) == segments - 1), other=0.0).to(DTYPE)
    total = (offs_d * 0).to(DTYPE)
    row = (pid_b * channels + offs_d) * length
    bc_row = ((pid_b * groups + group) * state + offs_n) * length
    p_begin = s * seg_chunks * CHUNK
    p_end = tl.minimum(p_begin + seg_chunks * CHUNK, length)
    for j in tl.range(0, p_end - p_begin, loop_unroll_factor=UNROLL):
        p = p_end - 1 - j
        if REVERSE:
            pos = length - 1 - p
        else:
            pos = p
        offs = row + pos
        _, dt = _load_dt(delta_ptr, bias, offs, mask_d, HAS_BIAS, SOFTPLUS, DTYPE)
        Ct = tl.load(C_ptr + bc_row + pos, mask=mask_n, other=0.0).to(DTYPE)
        z = (offs_d * 0).to(DTYPE)
        if HAS_Z:
            z = tl.load(z_ptr + offs, mask=mask_d, other=0.0).to(DTYPE)
        dy, _ = _rec_dy(dout_ptr, z, z, offs, mask_d, HAS_Z, DTYPE)  # dy needs no y
        G = tl.exp2(A2 * dt[None, :]) * (G + Ct[:, None] * dy[None, :])
        total += dt
    seg = (pid_b * segments + s) * channels * state + nd
    tl.store(ends_ptr + seg, G.to(ends_ptr.dtype.element_ty), mask=mask_nd)
    tl.store(decay_ptr + seg, tl.exp2(A2 * total[None, :]).to(decay_ptr.dtype.element_ty),
             mask=mask_nd)


@triton.jit
def _rec_bwd_kernel(
    u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, R_ptr, z_ptr, bias_ptr, h0_ptr, states_ptr,
    carries_ptr, dout_ptr, dlast_ptr, scratch_ptr,
    du_ptr, ddelta_ptr, dz_ptr, dB_ptr, dC_ptr, dA_ptr, dR_ptr, dD_ptr, dh0_ptr,
    channels, length, state, groups, channels_per_group, num_chunks, seg_chunks, segments,
    num_blocks,
    HAS_D: tl.constexpr, HAS_R: tl.constexpr, HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_H0: tl.constexpr, SOFTPLUS: tl.constexpr, REVERSE: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr, UNROLL: tl.constexpr,
    DTYPE: tl.constexpr, ATOMIC: tl.constexpr,
):
    """1D recurrent backward of segment ``pid_s``: its chunks in reverse processing order.

    A chunk's states are recomputed forwards from the saved state before it into this
    program's scratch ``[CHUNK + 1, BLOCK_N, BLOCK_D]`` (row 0 the state before the chunk,
    row ``i + 1`` the state after its position ``i``), then walked backwards one position at a
    time with the adjoint ``G = ∂L/∂h`` in registers: ``g = G + dy C`` (∂L/∂h_t), and
    ``G ← Ā_t g`` (∂L/∂h_{t-1}), so Ā is needed at the current position only. ``h_{t-1}`` is
    the scratch row above ``h_t``'s; ``h_t`` stays in registers from the step before. The carry into the segment's last
    position comes from ``carries[b, s]`` (:func:`_carry_kernel`), or is ∂L/∂last_state for
    the last segment. ``dB, dC`` as the chunked kernel's; ``dA, dR, dD`` partials per
    ``(batch, segment)``.
    """
    (pid_b, pid_d, pid_s, offs_d, offs_n, mask_d, mask_n, mask_nd, group, A2, R, Dv, bias,
     nd, dn) = _rec_prologue(A_ptr, R_ptr, D_ptr, bias_ptr, channels, state, channels_per_group,
                             HAS_R, HAS_D, HAS_BIAS, BLOCK_D, BLOCK_N, DTYPE)
    zero_nd = nd * 0
    is_last = (zero_nd + pid_s) == segments - 1
    G = tl.load(dlast_ptr + pid_b * channels * state + dn, mask=mask_nd & is_last,
                other=0.0).to(DTYPE)
    G += tl.load(carries_ptr + (pid_b * (segments - 1) + pid_s) * channels * state + nd,
                 mask=mask_nd & ~is_last, other=0.0).to(DTYPE)
    dA_acc = tl.zeros([BLOCK_N, BLOCK_D], dtype=DTYPE)
    dR_acc = tl.zeros([BLOCK_N, BLOCK_D], dtype=DTYPE)
    dD_acc = (offs_d * 0).to(DTYPE)

    row = (pid_b * channels + offs_d) * length
    bc_row = ((pid_b * groups + group) * state + offs_n) * length
    tile = BLOCK_N * BLOCK_D
    scratch = (scratch_ptr
               + ((pid_b * num_blocks + pid_d) * segments + pid_s) * (CHUNK + 1) * tile
               + tl.arange(0, BLOCK_N)[:, None] * BLOCK_D + tl.arange(0, BLOCK_D)[None, :])
    c_begin = pid_s * seg_chunks
    c_end = tl.minimum(c_begin + seg_chunks, num_chunks)
    for cc in range(0, c_end - c_begin):
        c = c_end - 1 - cc
        # The state before this chunk: the saved end state of the one before, else h0 (or 0).
        h = tl.load(states_ptr + (pid_b * num_chunks + c - 1) * channels * state + nd,
                    mask=mask_nd & ((zero_nd + c) > 0), other=0.0).to(DTYPE)
        if HAS_H0:
            h += tl.load(h0_ptr + pid_b * channels * state + dn,
                         mask=mask_nd & ((zero_nd + c) == 0), other=0.0).to(DTYPE)
        p_begin = c * CHUNK
        p_end = tl.minimum(p_begin + CHUNK, length)
        tl.store(scratch, h.to(scratch_ptr.dtype.element_ty))
        for p in tl.range(p_begin, p_end, loop_unroll_factor=UNROLL):
            _, _, u, _, dt, Bt = _rec_step_inputs(u_ptr, delta_ptr, B_ptr, bias, row, bc_row, p,
                                                  length, mask_d, mask_n, HAS_BIAS, SOFTPLUS,
                                                  REVERSE, DTYPE)
            h = tl.exp2(A2 * dt[None, :]) * h + Bt[:, None] * (dt * u)[None, :]
            tl.store(scratch + (p - p_begin + 1) * tile, h.to(scratch_ptr.dtype.element_ty))
        # Scratch rows are read back below, possibly by other threads of the program.
        tl.debug_barrier()
        h_cur = h
        for j in tl.range(0, p_end - p_begin, loop_unroll_factor=UNROLL):
            p = p_end - 1 - j
            pos, offs, u, x, dt, Bt = _rec_step_inputs(u_ptr, delta_ptr, B_ptr, bias, row,
                                                       bc_row, p, length, mask_d, mask_n,
                                                       HAS_BIAS, SOFTPLUS, REVERSE, DTYPE)
            h_prev = tl.load(scratch + (p - p_begin) * tile).to(DTYPE)
            Ct = tl.load(C_ptr + bc_row + pos, mask=mask_n, other=0.0).to(DTYPE)
            dtu = dt * u
            bx = Bt[:, None] * dtu[None, :]
            y, z = _rec_output(h_cur, Ct, bx, R, Dv, u, z_ptr, offs, mask_d, HAS_R, HAS_D,
                               HAS_Z, DTYPE)
            dy, dz = _rec_dy(dout_ptr, y, z, offs, mask_d, HAS_Z, DTYPE)
            if HAS_Z:
                tl.store(dz_ptr + offs, dz.to(dz_ptr.dtype.element_ty), mask=mask_d)
            dA = tl.exp2(A2 * dt[None, :])
            g = G + Ct[:, None] * dy[None, :]
            dbx = g
            if HAS_R:
                dbx -= R * dy[None, :]
                dR_acc -= dy[None, :] * bx
            dAA = g * dA * h_prev  # ∂L/∂Ā · Ā
            dbxB = tl.sum(dbx * Bt[:, None], axis=0)
            ddt = dbxB * u + tl.sum(dAA * A2, axis=0) * LN2
            du = dbxB * dt
            if HAS_D:
                du += dy * Dv
                dD_acc += dy * u
            dA_acc += dAA * dt[None, :]
            if SOFTPLUS:
                ddt = ddt * _softplus_grad(x)
            tl.store(du_ptr + offs, du.to(du_ptr.dtype.element_ty), mask=mask_d)
            tl.store(ddelta_ptr + offs, ddt.to(ddelta_ptr.dtype.element_ty), mask=mask_d)
            dBt = tl.sum(dbx * dtu[None, :], axis=1)
            dCt = tl.sum(h_cur * dy[None, :], axis=1)
            if ATOMIC:
                part = ((pid_b * groups + group) * state + offs_n) * length + pos
                tl.atomic_add(dB_ptr + part, dBt.to(dB_ptr.dtype.element_ty), mask=mask_n)
                tl.atomic_add(dC_ptr + part, dCt.to(dC_ptr.dtype.element_ty), mask=mask_n)
            else:
                part = ((pid_b * num_blocks + pid_d) * state + offs_n) * length + pos
                tl.store(dB_ptr + part, dBt.to(dB_ptr.dtype.element_ty), mask=mask_n)
                tl.store(dC_ptr + part, dCt.to(dC_ptr.dtype.element_ty), mask=mask_n)
            G = dA * g
            h_cur = h_prev
        # The next (earlier) chunk overwrites the scratch rows just read.
        tl.debug_barrier()

    tl.store(dh0_ptr + pid_b * channels * state + dn, G.to(dh0_ptr.dtype.element_ty),
             mask=mask_nd & ((zero_nd + pid_s) == 0))
    part = (pid_b * segments + pid_s) * channels * state + nd
    tl.store(dA_ptr + part, dA_acc.to(dA_ptr.dtype.element_ty), mask=mask_nd)
    if HAS_R:
        tl.store(dR_ptr + part, dR_acc.to(dR_ptr.dtype.element_ty), mask=mask_nd)
    if HAS_D:
        tl.store(dD_ptr + (pid_b * segments + pid_s) * channels + offs_d,
                 dD_acc.to(dD_ptr.dtype.element_ty), mask=mask_d)



# ----------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------


def _segments(batch, num_blocks, num_chunks, requested, min_programs):
    """``(segments, chunks per segment)`` of a recurrent 1D scan.

    ``requested=None``: the fewest segments (a power of two, at most one per chunk) that give
    ``batch · channel blocks · segments >= min_programs`` programs; more segments fill more of
    the GPU but cost a first pass over the positions. Every segment gets at least one chunk.
    """
    if requested is None:
        requested = 1
        while batch * num_blocks * requested < min_programs and requested * 2 <= num_chunks:
            requested *= 2
    elif requested < 1:
        raise ValueError(f"segments must be a positive integer; got {requested}")
    seg_chunks = triton.cdiv(num_chunks, min(requested, num_chunks))
    return triton.cdiv(num_chunks, seg_chunks), seg_chunks


def _recurrent_launch(kernel, cpg, batch, channels, num_chunks, segments):
    """``(BLOCK_D, num_blocks, segments, chunks per segment, UNROLL, launch options)``."""
    block_d, launch = _tuning(kernel, cpg)
    unroll, min_programs = launch.pop("unroll"), launch.pop("min_programs")
    num_blocks = channels // block_d
    nseg, seg_chunks = _segments(batch, num_blocks, num_chunks, segments, min_programs)
    return block_d, num_blocks, nseg, seg_chunks, unroll, launch


#: Channel × state entries per program of :func:`_carry_kernel`.
_CARRY_BLOCK = 256


def _join_segments(ends, decay, reverse):
    """What :func:`_carry_kernel` makes of a segmented first pass ``[batch, S, channel,
    state]``: ``[batch, S − 1, channel, state]``."""
    batch, nseg, channels, state = ends.shape
    out = _empty((batch, nseg - 1, channels, state), dtype=ends.dtype, device=ends.device)
    _carry_kernel[(batch, triton.cdiv(channels * state, _CARRY_BLOCK))](
        ends, decay, out, channels * state, nseg, REVERSE=reverse, BLOCK=_CARRY_BLOCK)
    return out


class _SelectiveScanRecurrentFn(torch.autograd.Function):
    """1D selective scan by the recurrent kernels: segmented forward, checkpointed backward."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, R, z, delta_bias, initial_state, delta_softplus,
                reverse, chunk_size, segments):
        u, delta, A = u.contiguous(), delta.contiguous(), A.contiguous()
        Bg, Cg, groups, layouts = _grouped_b_c(B, C, 1)
        batch, channels, length = u.shape
        state = A.shape[1]
        cpg = channels // groups
        num_chunks = max(triton.cdiv(length, chunk_size), 1)
        block_d, num_blocks, nseg, seg_chunks, unroll, launch = _recurrent_launch(
            "scan_rec_fwd", cpg, batch, channels, num_chunks, segments)
        acc, acc_tl = _compute_dtype(u)
        dev = u.device
        out = _empty((batch, channels, length), dtype=u.dtype, device=dev)
        # Channel-minor [state, channel] planes (see _rec_prologue).
        states = _empty((batch, num_chunks, state, channels), dtype=acc, device=dev)
        At = A.t().contiguous()
        Rt = None if R is None else R.t().contiguous()
        h0 = None if initial_state is None else initial_state.contiguous()
        flags = _scan_1d_flags(D, R, z, delta_bias, h0, delta_softplus, reverse, block_d, state,
                               chunk_size, acc_tl, UNROLL=unroll)
        args = (u, delta, At, Bg, Cg, _opt(D, u), _opt(Rt, u), _opt(z, u), _opt(delta_bias, u),
                _opt(h0, u))
        sizes = (channels, length, state, groups, cpg, num_chunks, seg_chunks, nseg)
        starts = states
        if nseg > 1:
            # First pass: every segment but the last from zero, for its end state and decay.
            ends = _empty((batch, nseg, state, channels), dtype=acc, device=dev)
            decay = _empty((batch, nseg, state, channels), dtype=acc, device=dev)
            _rec_fwd_kernel[(batch, num_blocks, nseg - 1)](
                *args, states, out, states, ends, decay, *sizes, LOCAL=True, **flags, **launch)
            starts = _join_segments(ends, decay, reverse=False)
        _rec_fwd_kernel[(batch, num_blocks, nseg)](
            *args, starts, out, states, states, states, *sizes, LOCAL=False, **flags, **launch)
        ctx.save_for_backward(u, delta, At, Bg, Cg, D, Rt, z, delta_bias, h0, states)
        ctx.meta = (layouts, groups, cpg, num_chunks, segments, flags, A.dtype,
                    None if R is None else R.dtype)
        return out, states[:, -1].transpose(1, 2).to(u.dtype)

    @staticmethod
    def backward(ctx, dout, dlast):
        u, delta, At, Bg, Cg, D, Rt, z, delta_bias, h0, states = ctx.saved_tensors
        layouts, groups, cpg, num_chunks, segments, flags, A_dtype, R_dtype = ctx.meta
        batch, channels, length = u.shape
        state = At.shape[0]
        block_d, num_blocks, nseg, seg_chunks, unroll, launch = _recurrent_launch(
            "scan_rec_bwd", cpg, batch, channels, num_chunks, segments)
        flags = dict(flags, BLOCK_D=block_d, UNROLL=unroll)
        acc = states.dtype
        dev = u.device
        dout = dout.contiguous()
        dlast = dlast.to(acc).contiguous()
        sizes = (channels, length, state, groups, cpg, num_chunks, seg_chunks, nseg)
        carries = states
        if nseg > 1:
            ends = _empty((batch, nseg, state, channels), dtype=acc, device=dev)
            decay = _empty((batch, nseg, state, channels), dtype=acc, device=dev)
            _rec_bwd_carry_kernel[(batch, num_blocks, nseg - 1)](
                delta, At, Cg, _opt(z, u), _opt(delta_bias, u), dout, dlast, ends, decay,
                *sizes, **{k: flags[k] for k in ("HAS_Z", "HAS_BIAS", "SOFTPLUS", "REVERSE",
                                                 "BLOCK_D", "BLOCK_N", "CHUNK", "UNROLL",
                                                 "DTYPE")}, **launch)
            carries = _join_segments(ends, decay, reverse=True)
        du, ddelta, dz, dB, dC, atomic = _position_gradients(u, groups, num_blocks, state, acc,
                                                             z is not None)
        dA = _empty((batch, nseg, state, channels), dtype=acc, device=dev)
        dR = _empty((batch, nseg, state, channels), dtype=acc, device=dev) \
            if Rt is not None else None
        dD = _empty((batch, nseg, channels), dtype=acc, device=dev) if D is not None else None
        dh0 = _empty((batch, channels, state), dtype=acc, device=dev)
        tile = flags["BLOCK_N"] * block_d
        scratch = _empty((batch * num_blocks * nseg, flags["CHUNK"] + 1, tile), dtype=acc,
                         device=dev)
        _rec_bwd_kernel[(batch, num_blocks, nseg)](
            u, delta, At, Bg, Cg, _opt(D, u), _opt(Rt, u), _opt(z, u), _opt(delta_bias, u),
            _opt(h0, u), states, carries, dout, dlast, scratch,
            du, ddelta, _opt(dz, ddelta), dB, dC, dA, _opt(dR, dA), _opt(dD, dA), dh0,
            *sizes, num_blocks, **flags, ATOMIC=atomic, **launch)
        blocks = groups if atomic else num_blocks
        return (du, ddelta.to(delta.dtype), dA.sum((0, 1)).t().to(A_dtype),
                _reduce_grouped(dB, layouts[0], groups, blocks),
                _reduce_grouped(dC, layouts[1], groups, blocks),
                None if D is None else dD.sum((0, 1)).to(D.dtype),
                None if Rt is None else dR.sum((0, 1)).t().to(R_dtype),
                _grad(z, dz),
                None if delta_bias is None else ddelta.sum(dim=(0, 2)).to(delta_bias.dtype),
                _grad(h0, dh0), None, None, None, None)
