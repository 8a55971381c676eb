"""Triton selective scans (1D and 2D), forward and backward, behind ``torch.autograd.Function``.

The semantics are those of :mod:`ssmpde.kernels.reference` (the oracle) and of
``docs/kernels/selective_scan.md``; every kernel here is tested against it, values and gradients.

Design, shared by both scans:

* One program per ``(batch, block of channels)``. A channel block never straddles a group of
  grouped ``B``/``C`` (its size divides ``channel // groups``), so a program loads one ``B``/``C``
  tile and broadcasts it over its channels.
* The state dimension is vectorised: ``tl.arange`` over ``state`` padded to a power of two, with
  masks. Padded lanes carry ``A = 0, B = 0`` so they hold the identity ``Ā = 1, B̄x = 0``.
* Work tiles are ``[BLOCK_D, BLOCK_N, T]`` register tensors; the linear recurrence
  ``h_t = Ā_t h_{t-1} + B̄x_t`` along ``T`` is a ``tl.associative_scan`` with the operator
  ``(a1, b1) ∘ (a2, b2) = (a1 a2, a2 b1 + b2)``. Only products of ``Ā ∈ (0, 1]`` appear: no
  positive cumulative sum is ever exponentiated.
* Accumulation is float32 (float64 when the inputs are float64); outputs come back in the
  inputs' dtypes.
* The backward recomputes states from a few saved checkpoints instead of storing
  ``[batch, channel, state, length]`` (mamba-ssm's strategy).
* Reductions across programs (``dA, dR, dD`` over batch; ``dB, dC`` over the channels of a group;
  ``d delta_bias``) are written to per-program partial buffers and summed in torch afterwards, so
  results do not depend on scheduling order. The one exception is the 1D backward's ``dB, dC``
  (partials of ``[batch, channel blocks, state, L]`` would be the largest buffer by far): it adds
  them atomically, as mamba-ssm does, unless ``torch.use_deterministic_algorithms(True)`` is on.

Under ``TRITON_INTERPRET=1`` the kernels run on CPU tensors (that is how the tests run without a
GPU); compiled, they need CUDA tensors.

The arguments are validated by the dispatchers of :mod:`ssmpde.kernels` (shapes, dtypes, one
device); the entry points here check only their power-of-two tile sizes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["selective_scan_2d_triton", "selective_scan_triton"]

#: Default number of positions a 1D program scans per chunk (a power of two). mamba-ssm scans up
#: to 2048 per chunk with a thread-block scan; a Triton program holds a
#: ``[BLOCK_D, BLOCK_N, CHUNK]`` tile in registers, so a smaller chunk keeps register pressure
#: bounded while the carry still crosses chunks in registers.
DEFAULT_CHUNK_SIZE = 32

#: Default positions per chunk of the recurrent 1D kernels: the backward's recomputation
#: unit (a per-program scratch of that many states).
RECURRENT_CHUNK_SIZE = 32

#: The 1D kernels: ``"chunked"`` (chunks scanned with ``tl.associative_scan``) or
#: ``"recurrent"`` (one position at a time, segments in parallel). See
#: :func:`selective_scan_triton`.
KERNELS = ("chunked", "recurrent")
DEFAULT_KERNEL = "chunked"

#: ``log2(e)``: the recurrent kernels take ``exp(ΔA)`` as ``exp2(Δ · A log2 e)``.
LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
LN2: tl.constexpr = tl.constexpr(0.6931471805599453)

#: Default number of rows between the 2D forward's saved states (checkpoints). The 2D backward
#: recomputes that many rows into a per-program scratch buffer.
DEFAULT_ROW_CHUNK = 16

#: Tuning of each kernel: ``max_block_d`` bounds the channels per program (the block is the
#: largest power of two not above it that divides the channels per group: more channels share
#: one ``B``/``C`` load but multiply the register tile) and the rest are Triton launch options
#: (``num_warps``, ``num_stages``). Results do not depend on it beyond rounding;
#: ``benchmarks/gpu/tune_scan.py`` measures the choices on a GPU.
TUNING: dict[str, dict] = {
    "scan_fwd": dict(max_block_d=4, num_warps=2),
    "scan_bwd": dict(max_block_d=2, num_warps=4),
    # The recurrent kernels (``kernel="recurrent"``) also take ``unroll`` (the position loop's
    # unroll factor) and ``min_programs`` (segments are added until the grid has that many
    # programs; an H100 has 132 SMs). Not yet timed on a GPU: chosen from the registers of the
    # sm_90 build (benchmarks/gpu/kernel_resources.py): 32 channels on 2 warps put a channel's
    # 16 states on 2 threads, the backward fits in 222 registers without spilling (one thread
    # per channel spills), and unrolling spills the forward. 1024 programs: 256 sequences of
    # length 64 at 128 channels run unsegmented (one launch: short sequences are launch-bound).
    "scan_rec_fwd": dict(max_block_d=32, num_warps=2, unroll=1, min_programs=1024),
    "scan_rec_bwd": dict(max_block_d=32, num_warps=2, unroll=1, min_programs=1024),
    "scan_2d_fwd": dict(max_block_d=4),
    "scan_2d_bwd": dict(max_block_d=4),
}


# ----------------------------------------------------------------------------------------------
# Device helpers
# ----------------------------------------------------------------------------------------------


@triton.jit
def _combine(a1, b1, a2, b2):
    """Compose two affine maps ``h -> a h + b`` (first ``1`` then ``2``): the scan operator."""
    return a1 * a2, a2 * b1 + b2


@triton.jit
def _sigmoid(x):
    """Logistic function, overflow-free: ``exp`` only ever sees ``-|x| <= 0``."""
    e = tl.exp(-tl.abs(x))
    return tl.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@triton.jit
def _softplus(x):
    """``softplus`` with torch's threshold 20 (identity above); overflow-free below it."""
    soft = tl.maximum(x, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(x)))
    return tl.where(x > 20.0, x, soft)


@triton.jit
def _softplus_grad(x):
    """Derivative of :func:`_softplus`: 1 above the threshold, ``sigmoid`` below (as torch)."""
    return tl.where(x > 20.0, 1.0, _sigmoid(x))


@triton.jit
def _last(x, offs_t, T: tl.constexpr):
    """``x[..., T - 1]`` of a ``[BD, BN, T]`` tile (Triton has no static indexing of tiles)."""
    return tl.sum(tl.where(offs_t[None, None, :] == T - 1, x, 0.0), axis=2)


@triton.jit
def _first(x, offs_t):
    """``x[..., 0]`` of a ``[BD, BN, T]`` tile."""
    return tl.sum(tl.where(offs_t[None, None, :] == 0, x, 0.0), axis=2)


@triton.jit
def _load_dt(delta_ptr, bias, offs, mask, HAS_BIAS: tl.constexpr, SOFTPLUS: tl.constexpr,
             DTYPE: tl.constexpr):
    """Raw ``x = delta + delta_bias`` and ``Δ = softplus(x)`` of a tile of ``delta``.

    ``bias`` comes shaped to broadcast against the tile (``bias[:, None]`` for ``[BD, T]``).

    Masked positions get ``Δ = 0`` (so ``Ā = 1``, ``B̄x = 0``: the identity step); the mask is
    applied before any ``exp`` so padding can never produce inf or NaN.
    """
    x = tl.load(delta_ptr + offs, mask=mask, other=0.0).to(DTYPE)
    if HAS_BIAS:
        x = x + bias
    x = tl.where(mask, x, 0.0)
    if SOFTPLUS:
        dt = _softplus(x)
    else:
        dt = x
    return x, tl.where(mask, dt, 0.0)


# ----------------------------------------------------------------------------------------------
# 1D kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _load_channel_parameters(A_ptr, R_ptr, D_ptr, bias_ptr, offs_d, mask_d, dn, mask_dn,
                             HAS_R: tl.constexpr, HAS_D: tl.constexpr, HAS_BIAS: tl.constexpr,
                             DTYPE: tl.constexpr):
    """A, R at the offsets ``dn`` of ``[channel, state]`` (a ``[BLOCK_D, BLOCK_N]`` tile, or
    ``[BLOCK_N, BLOCK_D]`` for the recurrent kernels) and D, delta_bias ``[BLOCK_D]`` of a
    block of channels.

    Absent ones come back as zeros (the kernels only read R and D under HAS_R / HAS_D; a zero
    bias is the right value when there is none).
    """
    A = tl.load(A_ptr + dn, mask=mask_dn, other=0.0).to(DTYPE)
    R = A * 0
    if HAS_R:
        R = tl.load(R_ptr + dn, mask=mask_dn, other=0.0).to(DTYPE)
    zeros = (offs_d * 0).to(DTYPE)
    Dv = zeros
    if HAS_D:
        Dv = tl.load(D_ptr + offs_d, mask=mask_d, other=0.0).to(DTYPE)
    bias = zeros
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_d, mask=mask_d, other=0.0).to(DTYPE)
    return A, R, Dv, bias


@triton.jit
def _prologue(A_ptr, R_ptr, D_ptr, bias_ptr, channels, state, channels_per_group,
              HAS_R: tl.constexpr, HAS_D: tl.constexpr, HAS_BIAS: tl.constexpr,
              BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, DTYPE: tl.constexpr):
    """What every kernel starts with, for its program ``(batch element, channel block)``.

    Returns ``pid_b`` (int64: offsets may exceed 2**31 on large batches), ``pid_d``, the
    block's channel and state offsets ``offs_d [BLOCK_D]``, ``offs_n [BLOCK_N]`` and their
    masks ``mask_d``, ``mask_n``, ``mask_dn [BLOCK_D, BLOCK_N]``, the ``group`` of B/C the
    block reads, and its parameters ``A, R, Dv, bias`` (:func:`_load_channel_parameters`).
    """
    pid_b = tl.program_id(0).to(tl.int64)
    pid_d = tl.program_id(1)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    mask_d = offs_d < channels
    mask_n = offs_n < state
    mask_dn = mask_d[:, None] & mask_n[None, :]
    group = (pid_d * BLOCK_D) // channels_per_group
    # Padded lanes read A = 0, so Ā = exp(0) = 1 there: they stay at their (zero) start.
    A, R, Dv, bias = _load_channel_parameters(A_ptr, R_ptr, D_ptr, bias_ptr, offs_d, mask_d,
                                              offs_d[:, None] * state + offs_n[None, :],
                                              mask_dn, HAS_R, HAS_D, HAS_BIAS, DTYPE)
    return pid_b, pid_d, offs_d, offs_n, mask_d, mask_n, mask_dn, group, A, R, Dv, bias


@triton.jit
def _row_tile(width, mask_dn, BLOCK_W: tl.constexpr):
    """The column offsets ``offs_w`` of a (power-of-two padded) row, its mask ``mask_w``, the
    ``[BLOCK_D, BLOCK_N, BLOCK_W]`` mask ``mask_dnw`` and a zero index tile ``zero_w``: loop
    indices are plain ints under the interpreter, so comparisons with them are made on
    ``zero_w + i`` to be tensors (masks) in both modes."""
    offs_w = tl.arange(0, BLOCK_W)
    mask_w = offs_w < width
    mask_dnw = mask_dn[:, :, None] & mask_w[None, None, :]
    return offs_w, mask_w, mask_dnw, offs_w * 0


@triton.jit
def _scan_fwd_kernel(
    u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, R_ptr, z_ptr, bias_ptr, h0_ptr,
    out_ptr, states_ptr,
    channels, length, state, groups, channels_per_group, num_chunks,
    HAS_D: tl.constexpr, HAS_R: tl.constexpr, HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_H0: tl.constexpr, SOFTPLUS: tl.constexpr, REVERSE: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr, DTYPE: tl.constexpr,
):
    """1D forward: one program per ``(batch, channel block)``, chunks of ``CHUNK`` positions.

    Positions are visited in *processing order* ``p`` (``p = l``, or ``p = length - 1 - l`` when
    ``REVERSE``), so one code path serves both directions. The state after every chunk is
    written to ``states[b, d, chunk, n]``; the last one is the returned last state and the
    others are the backward's restart points.
    """
    pid_b, pid_d, offs_d, offs_n, mask_d, mask_n, mask_dn, group, A, R, Dv, bias = _prologue(
        A_ptr, R_ptr, D_ptr, bias_ptr, channels, state, channels_per_group, HAS_R, HAS_D,
        HAS_BIAS, BLOCK_D, BLOCK_N, DTYPE)
    offs_t = tl.arange(0, CHUNK)
    dn_offs = (pid_b * channels + offs_d[:, None]) * state + offs_n[None, :]
    h = tl.zeros([BLOCK_D, BLOCK_N], dtype=DTYPE)
    if HAS_H0:
        h = tl.load(h0_ptr + dn_offs, mask=mask_dn, other=0.0).to(DTYPE)

    row = (pid_b * channels + offs_d) * length
    bc_row = ((pid_b * groups + group) * state + offs_n) * length
    for c in range(0, num_chunks):
        p = c * CHUNK + offs_t
        mask_t = p < length
        if REVERSE:
            pos = length - 1 - p
        else:
            pos = p
        mask = mask_d[:, None] & mask_t[None, :]
        offs = row[:, None] + pos[None, :]
        u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(DTYPE)
        _, dt = _load_dt(delta_ptr, bias[:, None], offs, mask, HAS_BIAS, SOFTPLUS, DTYPE)
        mask_nt = mask_n[:, None] & mask_t[None, :]
        bc_offs = bc_row[:, None] + pos[None, :]
        Bt = tl.load(B_ptr + bc_offs, mask=mask_nt, other=0.0).to(DTYPE)
        Ct = tl.load(C_ptr + bc_offs, mask=mask_nt, other=0.0).to(DTYPE)

        dA = tl.exp(dt[:, None, :] * A[:, :, None])
        bx = (dt * u)[:, None, :] * Bt[None, :, :]
        a_cum, h_loc = tl.associative_scan((dA, bx), 2, _combine)
        hs = h_loc + a_cum * h[:, :, None]

        y = tl.sum(hs * Ct[None, :, :], axis=1)
        if HAS_R:
            y -= tl.sum(R[:, :, None] * bx, axis=1)
        if HAS_D:
            y += Dv[:, None] * u
        if HAS_Z:
            z = tl.load(z_ptr + offs, mask=mask, other=0.0).to(DTYPE)
            y *= z * _sigmoid(z)
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)

        # Padded positions are identity steps, so the tile's last column is the state after
        # the chunk's last real position.
        h = _last(hs, offs_t, CHUNK)
        tl.store(states_ptr + ((pid_b * channels + offs_d[:, None]) * num_chunks + c) * state
                 + offs_n[None, :], h.to(states_ptr.dtype.element_ty), mask=mask_dn)


@triton.jit
def _scan_bwd_kernel(
    u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, R_ptr, z_ptr, bias_ptr, h0_ptr, states_ptr,
    dout_ptr, dlast_ptr,
    du_ptr, ddelta_ptr, dz_ptr, dB_ptr, dC_ptr, dA_ptr, dR_ptr, dD_ptr, dh0_ptr,
    channels, length, state, groups, channels_per_group, num_chunks, num_blocks,
    HAS_D: tl.constexpr, HAS_R: tl.constexpr, HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_H0: tl.constexpr, SOFTPLUS: tl.constexpr, REVERSE: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr, DTYPE: tl.constexpr,
    ATOMIC: tl.constexpr,
):
    """1D backward: chunks in reverse processing order, states recomputed per chunk.

    For each chunk the states are recomputed in registers from the saved state of the chunk
    before (or the initial state), so nothing of size ``[batch, channel, state, length]`` is ever
    stored. The adjoint ``g_t = ∂L/∂h_t`` obeys the reversed recurrence
    ``g_t = dy_t C_t + Ā_{t+1} g_{t+1}`` and is a reverse associative scan; its carry between
    chunks is ``G = Ā_first g_first`` (∂L/∂h just before the chunk), which after the first chunk is
    ``∂L/∂initial_state``. ``Ā_t h_{t-1}`` is taken as ``h_t − B̄x_t`` (as mamba-ssm does), so no
    shifted state is needed. Per-position gradients are stored directly; ``dB, dC`` are added
    atomically into ``[batch, groups, state, L]`` (``ATOMIC``) or stored as one partial per
    channel block; ``dA, dR, dD`` as one partial per batch element.
    """
    pid_b, pid_d, offs_d, offs_n, mask_d, mask_n, mask_dn, group, A, R, Dv, bias = _prologue(
        A_ptr, R_ptr, D_ptr, bias_ptr, channels, state, channels_per_group, HAS_R, HAS_D,
        HAS_BIAS, BLOCK_D, BLOCK_N, DTYPE)
    offs_t = tl.arange(0, CHUNK)
    dn_offs = (pid_b * channels + offs_d[:, None]) * state + offs_n[None, :]
    # Loop indices are plain ints under the interpreter: add them to a zero index tile so that
    # comparisons with them are tensors (masks) in both modes.
    zero_dn = dn_offs * 0

    # ∂L/∂last_state enters as the carry into the last processed position.
    G = tl.load(dlast_ptr + dn_offs, mask=mask_dn, other=0.0).to(DTYPE)
    dA_acc = tl.zeros([BLOCK_D, BLOCK_N], dtype=DTYPE)
    dR_acc = tl.zeros([BLOCK_D, BLOCK_N], dtype=DTYPE)
    dD_acc = tl.zeros([BLOCK_D], dtype=DTYPE)

    row = (pid_b * channels + offs_d) * length
    bc_row = ((pid_b * groups + group) * state + offs_n) * length
    state_row = (pid_b * channels + offs_d[:, None]) * num_chunks
    for cc in range(0, num_chunks):
        c = num_chunks - 1 - cc
        # Start state of this chunk: the saved end state of the previous one, else h0 (or 0).
        h_start = tl.load(states_ptr + (state_row + c - 1) * state + offs_n[None, :],
                          mask=mask_dn & ((zero_dn + c) > 0), other=0.0).to(DTYPE)
        if HAS_H0:
            h_start += tl.load(h0_ptr + dn_offs, mask=mask_dn & ((zero_dn + c) == 0),
                               other=0.0).to(DTYPE)

        p = c * CHUNK + offs_t
        mask_t = p < length
        mask_next = (p + 1) < length
        if REVERSE:
            pos = length - 1 - p
            pos_next = pos - 1
        else:
            pos = p
            pos_next = pos + 1
        mask = mask_d[:, None] & mask_t[None, :]
        offs = row[:, None] + pos[None, :]
        u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(DTYPE)
        x, dt = _load_dt(delta_ptr, bias[:, None], offs, mask, HAS_BIAS, SOFTPLUS, DTYPE)
        mask_nt = mask_n[:, None] & mask_t[None, :]
        bc_offs = bc_row[:, None] + pos[None, :]
        Bt = tl.load(B_ptr + bc_offs, mask=mask_nt, other=0.0).to(DTYPE)
        Ct = tl.load(C_ptr + bc_offs, mask=mask_nt, other=0.0).to(DTYPE)

        dA = tl.exp(dt[:, None, :] * A[:, :, None])
        bx = (dt * u)[:, None, :] * Bt[None, :, :]
        a_cum, h_loc = tl.associative_scan((dA, bx), 2, _combine)
        hs = h_loc + a_cum * h_start[:, :, None]

        dout = tl.load(dout_ptr + offs, mask=mask, other=0.0).to(DTYPE)
        if HAS_Z:
            y = tl.sum(hs * Ct[None, :, :], axis=1)
            if HAS_R:
                y -= tl.sum(R[:, :, None] * bx, axis=1)
            if HAS_D:
                y += Dv[:, None] * u
            z = tl.load(z_ptr + offs, mask=mask, other=0.0).to(DTYPE)
            sz = _sigmoid(z)
            dz = dout * y * sz * (1.0 + z * (1.0 - sz))
            tl.store(dz_ptr + offs, dz.to(dz_ptr.dtype.element_ty), mask=mask)
            dy = dout * z * sz
        else:
            dy = dout

        # Ā of the *next* processed position (the coefficient of g_{t+1}); the last column's
        # value is never used by the reverse scan, and the carry G enters through b there.
        _, dt_next = _load_dt(delta_ptr, bias[:, None], row[:, None] + pos_next[None, :],
                              mask_d[:, None] & mask_next[None, :], HAS_BIAS, SOFTPLUS, DTYPE)
        dA_next = tl.exp(dt_next[:, None, :] * A[:, :, None])
        rhs = dy[:, None, :] * Ct[None, :, :]
        rhs += tl.where(offs_t[None, None, :] == CHUNK - 1, G[:, :, None], 0.0)
        _, g = tl.associative_scan((dA_next, rhs), 2, _combine, reverse=True)
        G = _first(dA * g, offs_t)

        dbx = g
        if HAS_R:
            dbx -= R[:, :, None] * dy[:, None, :]
            dR_acc -= tl.sum(dy[:, None, :] * bx, axis=2)
        dAA = g * (hs - bx)  # ∂L/∂Ā · Ā, with Ā_t h_{t-1} = h_t − B̄x_t
        dbxB = tl.sum(dbx * Bt[None, :, :], axis=1)
        ddt = dbxB * u + tl.sum(dAA * A[:, :, None], axis=1)
        du = dbxB * dt
        if HAS_D:
            du += dy * Dv[:, None]
            dD_acc += tl.sum(dy * u, axis=1)
        dA_acc += tl.sum(dAA * dt[:, None, :], axis=2)
        if SOFTPLUS:
            ddt = ddt * _softplus_grad(x)
        tl.store(du_ptr + offs, du.to(du_ptr.dtype.element_ty), mask=mask)
        tl.store(ddelta_ptr + offs, ddt.to(ddelta_ptr.dtype.element_ty), mask=mask)

        # dB, dC summed over this block's channels (all in one group). ATOMIC: added into the
        # group's gradient directly (mamba-ssm's way; the order of the additions, and so the
        # last bits, depend on scheduling); otherwise one partial per block, reduced over the
        # blocks of a group in torch (deterministic, but [batch, blocks, state, L] of memory).
        dBt = tl.sum(dbx * (dt * u)[:, None, :], axis=0)
        dCt = tl.sum(dy[:, None, :] * hs, axis=0)
        if ATOMIC:
            part = ((pid_b * groups + group) * state + offs_n[:, None]) * length + pos[None, :]
            tl.atomic_add(dB_ptr + part, dBt.to(dB_ptr.dtype.element_ty), mask=mask_nt)
            tl.atomic_add(dC_ptr + part, dCt.to(dC_ptr.dtype.element_ty), mask=mask_nt)
        else:
            part = ((pid_b * num_blocks + pid_d) * state + offs_n[:, None]) * length \
                + pos[None, :]
            tl.store(dB_ptr + part, dBt.to(dB_ptr.dtype.element_ty), mask=mask_nt)
            tl.store(dC_ptr + part, dCt.to(dC_ptr.dtype.element_ty), mask=mask_nt)

    tl.store(dh0_ptr + dn_offs, G.to(dh0_ptr.dtype.element_ty), mask=mask_dn)
    tl.store(dA_ptr + dn_offs, dA_acc.to(dA_ptr.dtype.element_ty), mask=mask_dn)
    if HAS_R:
        tl.store(dR_ptr + dn_offs, dR_acc.to(dR_ptr.dtype.element_ty), mask=mask_dn)
    if HAS_D:
        tl.store(dD_ptr + pid_b * channels + offs_d, dD_acc.to(dD_ptr.dtype.element_ty),
                 mask=mask_d)


# ----------------------------------------------------------------------------------------------
# 1D recurrent kernels: one position at a time, states in registers, segments in parallel
# ----------------------------------------------------------------------------------------------


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
# 2D kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _scan_2d_fwd_kernel(
    u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, R_ptr, z_ptr, bias_ptr,
    out_ptr, ckpt_ptr,
    channels, height, width, state, groups, channels_per_group, num_ckpt,
    HAS_D: tl.constexpr, HAS_R: tl.constexpr, HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr,
    SOFTPLUS: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_W: tl.constexpr, ROWS: tl.constexpr, DTYPE: tl.constexpr,
):
    """2D forward: a row sweep with the vertical carry (the previous row of h) in registers.

    For each row ``i``: the horizontal pass ``g_i`` is an associative scan along the (padded)
    width, then the vertical pass is the elementwise ``h_i = Ā_i h_{i-1} + g_i``. The state row
    after every ``ROWS`` rows is saved to ``ckpt[b, d, k, n, w]`` for the backward.
    """
    pid_b, pid_d, offs_d, offs_n, mask_d, mask_n, mask_dn, group, A, R, Dv, bias = _prologue(
        A_ptr, R_ptr, D_ptr, bias_ptr, channels, state, channels_per_group, HAS_R, HAS_D,
        HAS_BIAS, BLOCK_D, BLOCK_N, DTYPE)
    offs_w, mask_w, mask_dnw, zero_w = _row_tile(width, mask_dn, BLOCK_W)

    plane = height * width
    mask = mask_d[:, None] & mask_w[None, :]
    mask_nw = mask_n[:, None] & mask_w[None, :]
    ckpt_offs = (((pid_b * channels + offs_d[:, None, None]) * num_ckpt) * state
                 + offs_n[None, :, None]) * width + offs_w[None, None, :]
    h = tl.zeros([BLOCK_D, BLOCK_N, BLOCK_W], dtype=DTYPE)
    for i in range(0, height):
        offs = (pid_b * channels + offs_d[:, None]) * plane + i * width + offs_w[None, :]
        u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(DTYPE)
        _, dt = _load_dt(delta_ptr, bias[:, None], offs, mask, HAS_BIAS, SOFTPLUS, DTYPE)
        bc_offs = ((pid_b * groups + group) * state + offs_n[:, None]) * plane + i * width \
            + offs_w[None, :]
        Bt = tl.load(B_ptr + bc_offs, mask=mask_nw, other=0.0).to(DTYPE)
        Ct = tl.load(C_ptr + bc_offs, mask=mask_nw, other=0.0).to(DTYPE)

        dA = tl.exp(dt[:, None, :] * A[:, :, None])
        bx = (dt * u)[:, None, :] * Bt[None, :, :]
        _, g = tl.associative_scan((dA, bx), 2, _combine)
        # Zero the padded columns: they would otherwise carry the row's last g downwards.
        h = tl.where(mask_dnw, dA * h + g, 0.0)

        y = tl.sum(h * Ct[None, :, :], axis=1)
        if HAS_R:
            y -= tl.sum(R[:, :, None] * bx, axis=1)
        if HAS_D:
            y += Dv[:, None] * u
        if HAS_Z:
            z = tl.load(z_ptr + offs, mask=mask, other=0.0).to(DTYPE)
            y *= z * _sigmoid(z)
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
        k = i // ROWS
        # Save the state row that ends a row chunk (only restart points: k < num_ckpt).
        is_ckpt = ((zero_w + i) % ROWS == ROWS - 1) & ((zero_w + k) < num_ckpt)
        tl.store(ckpt_ptr + ckpt_offs + k * state * width, h.to(ckpt_ptr.dtype.element_ty),
                 mask=mask_dnw & is_ckpt[None, None, :])


@triton.jit
def _scan_2d_bwd_kernel(
    u_ptr, delta_ptr, A_ptr, B_ptr, C_ptr, D_ptr, R_ptr, z_ptr, bias_ptr, ckpt_ptr, scratch_ptr,
    dout_ptr,
    du_ptr, ddelta_ptr, dz_ptr, dB_ptr, dC_ptr, dA_ptr, dR_ptr, dD_ptr,
    channels, height, width, state, groups, channels_per_group, num_ckpt, num_row_chunks,
    num_blocks,
    HAS_D: tl.constexpr, HAS_R: tl.constexpr, HAS_Z: tl.constexpr, HAS_BIAS: tl.constexpr,
    SOFTPLUS: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_W: tl.constexpr, ROWS: tl.constexpr, DTYPE: tl.constexpr,
):
    """2D backward: row chunks bottom-up, each recomputed from its checkpoint into scratch.

    For row chunk ``k`` (rows ``k·ROWS …``), the state rows are recomputed forward from
    checkpoint ``k − 1`` and written to this program's scratch ``[ROWS, BD, BN, BW]``; then the
    rows are walked upwards. With ``φ_i = ∂L/∂h_i = dy_i C_i + Ā_{i+1} φ_{i+1}`` (vertical
    adjoint, carried in registers) the horizontal adjoint is the reverse scan
    ``ψ_{i,j} = φ_{i,j} + Ā_{i,j+1} ψ_{i,j+1}``; then ``∂L/∂B̄x = ψ`` and
    ``∂L/∂Ā · Ā = φ (h − g) + ψ (g − B̄x)`` (the vertical and horizontal uses of the same Ā).
    """
    pid_b, pid_d, offs_d, offs_n, mask_d, mask_n, mask_dn, group, A, R, Dv, bias = _prologue(
        A_ptr, R_ptr, D_ptr, bias_ptr, channels, state, channels_per_group, HAS_R, HAS_D,
        HAS_BIAS, BLOCK_D, BLOCK_N, DTYPE)
    offs_w, mask_w, mask_dnw, zero_w = _row_tile(width, mask_dn, BLOCK_W)

    plane = height * width
    mask_nw = mask_n[:, None] & mask_w[None, :]
    ckpt_offs = (((pid_b * channels + offs_d[:, None, None]) * num_ckpt) * state
                 + offs_n[None, :, None]) * width + offs_w[None, None, :]
    tile = BLOCK_D * BLOCK_N * BLOCK_W
    scratch_offs = ((pid_b * num_blocks + pid_d) * ROWS * tile
                    + (tl.arange(0, BLOCK_D)[:, None, None] * BLOCK_N + offs_n[None, :, None])
                    * BLOCK_W + offs_w[None, None, :])

    phi_carry = tl.zeros([BLOCK_D, BLOCK_N, BLOCK_W], dtype=DTYPE)
    dA_acc = tl.zeros([BLOCK_D, BLOCK_N], dtype=DTYPE)
    dR_acc = tl.zeros([BLOCK_D, BLOCK_N], dtype=DTYPE)
    dD_acc = tl.zeros([BLOCK_D], dtype=DTYPE)
    for kk in range(0, num_row_chunks):
        k = num_row_chunks - 1 - kk
        has_ckpt = (zero_w + k) > 0
        h = tl.load(ckpt_ptr + ckpt_offs + (k - 1) * state * width,
                    mask=mask_dnw & has_ckpt[None, None, :], other=0.0).to(DTYPE)
        # Recompute this chunk's state rows (rows past the grid are identity steps).
        for r in range(0, ROWS):
            i = k * ROWS + r
            row_ok = (zero_w + i) < height
            mask = mask_d[:, None] & mask_w[None, :] & row_ok[None, :]
            offs = (pid_b * channels + offs_d[:, None]) * plane + i * width + offs_w[None, :]
            u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(DTYPE)
            _, dt = _load_dt(delta_ptr, bias[:, None], offs, mask, HAS_BIAS, SOFTPLUS, DTYPE)
            bc_offs = ((pid_b * groups + group) * state + offs_n[:, None]) * plane + i * width \
                + offs_w[None, :]
            Bt = tl.load(B_ptr + bc_offs, mask=mask_nw & row_ok[None, :], other=0.0).to(DTYPE)
            dA = tl.exp(dt[:, None, :] * A[:, :, None])
            bx = (dt * u)[:, None, :] * Bt[None, :, :]
            _, g = tl.associative_scan((dA, bx), 2, _combine)
            h = tl.where(mask_dnw, dA * h + g, 0.0)
            tl.store(scratch_ptr + scratch_offs + r * tile, h)
        # The scratch rows are read back below with the same layout; the barrier orders the
        # stores before those loads across the threads of a compiled program.
        tl.debug_barrier()
        for rr in range(0, ROWS):
            r = ROWS - 1 - rr
            i = k * ROWS + r
            row_ok = (zero_w + i) < height
            mask = mask_d[:, None] & mask_w[None, :] & row_ok[None, :]
            offs = (pid_b * channels + offs_d[:, None]) * plane + i * width + offs_w[None, :]
            hs = tl.load(scratch_ptr + scratch_offs + r * tile)
            u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(DTYPE)
            x, dt = _load_dt(delta_ptr, bias[:, None], offs, mask, HAS_BIAS, SOFTPLUS, DTYPE)
            bc_offs = ((pid_b * groups + group) * state + offs_n[:, None]) * plane + i * width \
                + offs_w[None, :]
            Bt = tl.load(B_ptr + bc_offs, mask=mask_nw & row_ok[None, :], other=0.0).to(DTYPE)
            Ct = tl.load(C_ptr + bc_offs, mask=mask_nw & row_ok[None, :], other=0.0).to(DTYPE)
            dA = tl.exp(dt[:, None, :] * A[:, :, None])
            bx = (dt * u)[:, None, :] * Bt[None, :, :]
            _, g = tl.associative_scan((dA, bx), 2, _combine)

            dout = tl.load(dout_ptr + offs, mask=mask, other=0.0).to(DTYPE)
            if HAS_Z:
                y = tl.sum(hs * Ct[None, :, :], axis=1)
                if HAS_R:
                    y -= tl.sum(R[:, :, None] * bx, axis=1)
                if HAS_D:
                    y += Dv[:, None] * u
                z = tl.load(z_ptr + offs, mask=mask, other=0.0).to(DTYPE)
                sz = _sigmoid(z)
                dz = dout * y * sz * (1.0 + z * (1.0 - sz))
                tl.store(dz_ptr + offs, dz.to(dz_ptr.dtype.element_ty), mask=mask)
                dy = dout * z * sz
            else:
                dy = dout

            phi = dy[:, None, :] * Ct[None, :, :] + phi_carry
            # Ā one column to the right: the coefficient of ψ_{j+1} in the reverse scan.
            _, dt_next = _load_dt(delta_ptr, bias[:, None], offs + 1,
                                  mask & ((offs_w + 1) < width)[None, :], HAS_BIAS, SOFTPLUS,
                                  DTYPE)
            dA_next = tl.exp(dt_next[:, None, :] * A[:, :, None])
            _, psi = tl.associative_scan((dA_next, phi), 2, _combine, reverse=True)
            phi_carry = dA * phi

            dbx = psi
            if HAS_R:
                dbx -= R[:, :, None] * dy[:, None, :]
                dR_acc -= tl.sum(dy[:, None, :] * bx, axis=2)
            dAA = phi * (hs - g) + psi * (g - bx)
            dbxB = tl.sum(dbx * Bt[None, :, :], axis=1)
            ddt = dbxB * u + tl.sum(dAA * A[:, :, None], axis=1)
            du = dbxB * dt
            if HAS_D:
                du += dy * Dv[:, None]
                dD_acc += tl.sum(dy * u, axis=1)
            dA_acc += tl.sum(dAA * dt[:, None, :], axis=2)
            if SOFTPLUS:
                ddt = ddt * _softplus_grad(x)
            tl.store(du_ptr + offs, du.to(du_ptr.dtype.element_ty), mask=mask)
            tl.store(ddelta_ptr + offs, ddt.to(ddelta_ptr.dtype.element_ty), mask=mask)

            part = ((pid_b * num_blocks + pid_d) * state + offs_n[:, None]) * plane \
                + i * width + offs_w[None, :]
            dBt = tl.sum(dbx * (dt * u)[:, None, :], axis=0)
            dCt = tl.sum(dy[:, None, :] * hs, axis=0)
            tl.store(dB_ptr + part, dBt.to(dB_ptr.dtype.element_ty), mask=mask_nw & row_ok[None, :])
            tl.store(dC_ptr + part, dCt.to(dC_ptr.dtype.element_ty), mask=mask_nw & row_ok[None, :])
        # The next (upper) chunk overwrites the scratch rows just read.
        tl.debug_barrier()

    dn_offs = (pid_b * channels + offs_d[:, None]) * state + offs_n[None, :]
    tl.store(dA_ptr + dn_offs, dA_acc.to(dA_ptr.dtype.element_ty), mask=mask_dn)
    if HAS_R:
        tl.store(dR_ptr + dn_offs, dR_acc.to(dR_ptr.dtype.element_ty), mask=mask_dn)
    if HAS_D:
        tl.store(dD_ptr + pid_b * channels + offs_d, dD_acc.to(dD_ptr.dtype.element_ty),
                 mask=mask_d)


# ----------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------


_HALF = (torch.float16, torch.bfloat16)


def _empty(shape, *, dtype, device):
    """Allocate an uninitialised buffer (kernels write every element they return).

    A single allocation point lets the tests fill fresh buffers with NaN (fla's trick) so that
    an element a kernel forgets to write fails loudly.
    """
    return torch.empty(shape, dtype=dtype, device=device)


def _compute_dtype(u):
    """Accumulation dtype: float64 for float64 inputs, float32 otherwise (as torch / triton)."""
    return (torch.float64, tl.float64) if u.dtype == torch.float64 else (torch.float32,
                                                                         tl.float32)


def _tuning(kernel, channels_per_group):
    """``(BLOCK_D, launch options)`` of ``kernel`` from :data:`TUNING`.

    ``BLOCK_D`` is the largest power of two ``<= max_block_d`` dividing ``channels_per_group``:
    a channel block then lies inside one group of ``B``/``C``, so a program loads one tile of
    them and the ``dB``/``dC`` partials reduce per group by a reshape.
    """
    options = dict(TUNING[kernel])
    limit = options.pop("max_block_d")
    block = 1
    while block * 2 <= limit and channels_per_group % (block * 2) == 0:
        block *= 2
    return block, options


def _as_grouped(x, spatial):
    """B or C as a contiguous ``[batch, groups, state, *space]`` (ungrouped: ``groups = 1``)."""
    return (x.unsqueeze(1) if x.dim() == 2 + spatial else x).contiguous()


def _grouped_b_c(B, C, spatial):
    """``(Bg, Cg, groups, layouts)``: B and C as contiguous ``[batch, groups, state, *space]``
    with one number of groups (a shared one expanded to the other's groups), and the layouts
    ``(grouped, dtype)`` of the inputs, all the backward needs of them (no input tensors are
    kept on ctx)."""
    layouts = ((B.dim() == 3 + spatial, B.dtype), (C.dim() == 3 + spatial, C.dtype))
    Bg, Cg = _as_grouped(B, spatial), _as_grouped(C, spatial)
    batch, groups = Bg.shape[:2]
    if Cg.shape[1] != groups:  # one of B, C grouped, the other shared: expand the shared
        groups = max(groups, Cg.shape[1])
        Bg = Bg.expand(batch, groups, *Bg.shape[2:]).contiguous()
        Cg = Cg.expand(batch, groups, *Cg.shape[2:]).contiguous()
    return Bg, Cg, groups, layouts


def _reduce_grouped(part, layout, groups, num_blocks):
    """Sum a ``[batch, blocks, state, *space]`` partial into the gradient of B or C.

    ``layout = (grouped, dtype)`` of the input: a grouped input gets one sum per group (a
    group's blocks are consecutive); an ungrouped one, shared by all channels, the sum over all
    blocks (also when the other of B, C was grouped and this one was expanded to match).
    """
    grouped, dtype = layout
    if not grouped:
        return part.sum(dim=1).to(dtype)
    batch = part.shape[0]
    return part.reshape(batch, groups, num_blocks // groups, *part.shape[2:]).sum(dim=2).to(dtype)


def _opt(x, fallback):
    """A tensor for a pointer argument that the kernel will not read (HAS_* is False)."""
    return fallback if x is None else x.contiguous()


def _grad(x, g):
    return None if x is None else g.to(x.dtype)


def _scan_1d_flags(D, R, z, delta_bias, h0, delta_softplus, reverse, block_d, state, chunk_size,
                   acc_tl, **extra):
    """The compile-time flags of the 1D kernels (``extra``: a kernel's own, as ``UNROLL``)."""
    return dict(HAS_D=D is not None, HAS_R=R is not None, HAS_Z=z is not None,
                HAS_BIAS=delta_bias is not None, HAS_H0=h0 is not None,
                SOFTPLUS=bool(delta_softplus), REVERSE=bool(reverse), BLOCK_D=block_d,
                BLOCK_N=triton.next_power_of_2(state), CHUNK=chunk_size, DTYPE=acc_tl, **extra)


def _position_gradients(u, groups, num_blocks, state, acc, has_z):
    """``(du, ddelta, dz, dB, dC, atomic)``: the per-position gradient buffers of a 1D backward.

    dB, dC are added atomically into zeroed ``[batch, groups, state, L]`` unless the user asked
    torch for deterministic algorithms; then each channel block writes its own partial
    ``[batch, blocks, state, L]`` (summed by :func:`_reduce_grouped`).
    """
    batch, _, length = u.shape
    dev = u.device
    du = _empty(u.shape, dtype=u.dtype, device=dev)
    ddelta = _empty(u.shape, dtype=acc, device=dev)
    dz = _empty(u.shape, dtype=acc, device=dev) if has_z else None
    atomic = not torch.are_deterministic_algorithms_enabled()
    if atomic:
        dB = torch.zeros((batch, groups, state, length), dtype=acc, device=dev)
        dC = torch.zeros((batch, groups, state, length), dtype=acc, device=dev)
    else:
        dB = _empty((batch, num_blocks, state, length), dtype=acc, device=dev)
        dC = _empty((batch, num_blocks, state, length), dtype=acc, device=dev)
    return du, ddelta, dz, dB, dC, atomic


class _SelectiveScanFn(torch.autograd.Function):
    """1D selective scan: Triton forward, Triton backward that recomputes chunk states."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, R, z, delta_bias, initial_state, delta_softplus,
                reverse, chunk_size):
        u, delta, A = u.contiguous(), delta.contiguous(), A.contiguous()
        Bg, Cg, groups, layouts = _grouped_b_c(B, C, 1)
        batch, channels, length = u.shape
        state = A.shape[1]
        cpg = channels // groups
        block_d, launch = _tuning("scan_fwd", cpg)
        num_blocks = channels // block_d
        num_chunks = max(triton.cdiv(length, chunk_size), 1)
        acc, acc_tl = _compute_dtype(u)
        out = _empty((batch, channels, length), dtype=u.dtype, device=u.device)
        states = _empty((batch, channels, num_chunks, state), dtype=acc, device=u.device)
        h0 = None if initial_state is None else initial_state.contiguous()
        flags = _scan_1d_flags(D, R, z, delta_bias, h0, delta_softplus, reverse, block_d, state,
                               chunk_size, acc_tl)
        _scan_fwd_kernel[(batch, num_blocks)](
            u, delta, A, Bg, Cg, _opt(D, u), _opt(R, u), _opt(z, u), _opt(delta_bias, u),
            _opt(h0, u), out, states,
            channels, length, state, groups, cpg, num_chunks, **flags, **launch)
        ctx.save_for_backward(u, delta, A, Bg, Cg, D, R, z, delta_bias, h0, states)
        ctx.meta = (layouts, groups, cpg, num_chunks, flags)
        last_state = states[:, :, -1].to(u.dtype)
        return out, last_state

    @staticmethod
    def backward(ctx, dout, dlast):
        u, delta, A, Bg, Cg, D, R, z, delta_bias, h0, states = ctx.saved_tensors
        layouts, groups, cpg, num_chunks, flags = ctx.meta
        batch, channels, length = u.shape
        block_d, launch = _tuning("scan_bwd", cpg)
        num_blocks = channels // block_d
        flags = dict(flags, BLOCK_D=block_d)
        state = A.shape[1]
        acc = states.dtype
        dev = u.device
        dout = dout.contiguous()
        dlast = dlast.to(acc).contiguous()
        du, ddelta, dz, dB, dC, atomic = _position_gradients(u, groups, num_blocks, state, acc,
                                                             z is not None)
        dA = _empty((batch, channels, state), dtype=acc, device=dev)
        dR = _empty((batch, channels, state), dtype=acc, device=dev) if R is not None else None
        dD = _empty((batch, channels), dtype=acc, device=dev) if D is not None else None
        dh0 = _empty((batch, channels, state), dtype=acc, device=dev)
        _scan_bwd_kernel[(batch, num_blocks)](
            u, delta, A, Bg, Cg, _opt(D, u), _opt(R, u), _opt(z, u), _opt(delta_bias, u),
            _opt(h0, u), states, dout, dlast,
            du, ddelta, _opt(dz, ddelta), dB, dC, dA, _opt(dR, dA), _opt(dD, dA), dh0,
            channels, length, state, groups, cpg, num_chunks, num_blocks, **flags,
            ATOMIC=atomic, **launch)
        blocks = groups if atomic else num_blocks
        return (du, ddelta.to(delta.dtype), dA.sum(0).to(A.dtype),
                _reduce_grouped(dB, layouts[0], groups, blocks),
                _reduce_grouped(dC, layouts[1], groups, blocks),
                None if D is None else dD.sum(0).to(D.dtype),
                None if R is None else dR.sum(0).to(R.dtype),
                _grad(z, dz),
                None if delta_bias is None else ddelta.sum(dim=(0, 2)).to(delta_bias.dtype),
                _grad(h0, dh0), None, None, None)


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


class _SelectiveScan2dFn(torch.autograd.Function):
    """2D selective scan: Triton row-sweep forward, checkpointed Triton backward."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, R, z, delta_bias, delta_softplus, row_chunk):
        u, delta, A = u.contiguous(), delta.contiguous(), A.contiguous()
        Bg, Cg, groups, layouts = _grouped_b_c(B, C, 2)
        batch, channels, height, width = u.shape
        state = A.shape[1]
        cpg = channels // groups
        block_d, launch = _tuning("scan_2d_fwd", cpg)
        num_blocks = channels // block_d
        num_row_chunks = triton.cdiv(height, row_chunk)
        # Only chunks 0 … num_row_chunks − 2 need their end state (restart points).
        num_ckpt = max(num_row_chunks - 1, 1)
        acc, acc_tl = _compute_dtype(u)
        out = _empty(u.shape, dtype=u.dtype, device=u.device)
        ckpt = _empty((batch, channels, num_ckpt, state, width), dtype=acc, device=u.device)
        flags = dict(HAS_D=D is not None, HAS_R=R is not None, HAS_Z=z is not None,
                     HAS_BIAS=delta_bias is not None, SOFTPLUS=bool(delta_softplus),
                     BLOCK_D=block_d, BLOCK_N=triton.next_power_of_2(state),
                     BLOCK_W=triton.next_power_of_2(width), ROWS=row_chunk, DTYPE=acc_tl)
        _scan_2d_fwd_kernel[(batch, num_blocks)](
            u, delta, A, Bg, Cg, _opt(D, u), _opt(R, u), _opt(z, u), _opt(delta_bias, u),
            out, ckpt, channels, height, width, state, groups, cpg, num_ckpt, **flags, **launch)
        ctx.save_for_backward(u, delta, A, Bg, Cg, D, R, z, delta_bias, ckpt)
        ctx.meta = (layouts, groups, cpg, num_ckpt, num_row_chunks, flags)
        return out

    @staticmethod
    def backward(ctx, dout):
        u, delta, A, Bg, Cg, D, R, z, delta_bias, ckpt = ctx.saved_tensors
        layouts, groups, cpg, num_ckpt, num_row_chunks, flags = ctx.meta
        batch, channels, height, width = u.shape
        state = A.shape[1]
        acc = ckpt.dtype
        dev = u.device
        dout = dout.contiguous()
        # Gradients come back in the inputs' own dtypes.
        dtypes = [None if t is None else t.dtype for t in (u, delta, A, D, R, z, delta_bias)]
        if u.is_cuda and any(t is not None and t.dtype in _HALF for t in
                             (u, delta, A, Bg, Cg, D, R, z, delta_bias, dout)):
            # Triton 3.6 compiles this kernel for 16-bit inputs into code that faults with
            # "misaligned address" on an H100 once BLOCK_W >= 32 (the forward and the 1D
            # kernels are fine): the backward reads float32 copies instead. It accumulates in
            # float32 either way, so only memory traffic changes.
            u, delta, A, Bg, Cg, D, R, z, delta_bias, dout = (
                None if t is None else t.float()
                for t in (u, delta, A, Bg, Cg, D, R, z, delta_bias, dout))
        block_d, launch = _tuning("scan_2d_bwd", cpg)
        num_blocks = channels // block_d
        flags = dict(flags, BLOCK_D=block_d)
        tile = flags["BLOCK_D"] * flags["BLOCK_N"] * flags["BLOCK_W"]
        # Per-program scratch for one chunk of recomputed state rows: O(B·D·N·ROWS·W).
        scratch = _empty((batch, num_blocks, flags["ROWS"], tile), dtype=acc, device=dev)
        du = _empty(u.shape, dtype=u.dtype, device=dev)
        ddelta = _empty(u.shape, dtype=acc, device=dev)
        dz = _empty(u.shape, dtype=acc, device=dev) if z is not None else None
        dB = _empty((batch, num_blocks, state, height, width), dtype=acc, device=dev)
        dC = _empty((batch, num_blocks, state, height, width), dtype=acc, device=dev)
        dA = _empty((batch, channels, state), dtype=acc, device=dev)
        dR = _empty((batch, channels, state), dtype=acc, device=dev) if R is not None else None
        dD = _empty((batch, channels), dtype=acc, device=dev) if D is not None else None
        _scan_2d_bwd_kernel[(batch, num_blocks)](
            u, delta, A, Bg, Cg, _opt(D, u), _opt(R, u), _opt(z, u), _opt(delta_bias, u), ckpt,
            scratch, dout,
            du, ddelta, _opt(dz, ddelta), dB, dC, dA, _opt(dR, dA), _opt(dD, dA),
            channels, height, width, state, groups, cpg, num_ckpt, num_row_chunks, num_blocks,
            **flags, **launch)
        u_t, delta_t, A_t, D_t, R_t, z_t, bias_t = dtypes
        return (du.to(u_t), ddelta.to(delta_t), dA.sum(0).to(A_t),
                _reduce_grouped(dB, layouts[0], groups, num_blocks),
                _reduce_grouped(dC, layouts[1], groups, num_blocks),
                None if D is None else dD.sum(0).to(D_t),
                None if R is None else dR.sum(0).to(R_t),
                None if z is None else dz.to(z_t),
                None if delta_bias is None else ddelta.sum(dim=(0, 2, 3)).to(bias_t),
                None, None)


def _check_power_of_two(name, value):
    if value < 1 or value & (value - 1):
        raise ValueError(f"{name} must be a power of two (a tl.arange extent); got {value}")


def selective_scan_triton(u, delta, A, B, C, *, D=None, R=None, z=None, delta_bias=None,
                          delta_softplus=True, reverse=False, initial_state=None,
                          return_last_state=False, chunk_size=None, kernel=None,
                          segments=None):
    r"""1D selective scan with GeoMaNO's geometric correction, as Triton kernels.

    .. math::
        h_l = \bar A_l h_{l-1} + \bar B_l x_l,\qquad
        y_l = \sum_n (C_l h_l - R\,\bar B_l x_l) + D x_l,\qquad
        \text{out} = y \cdot \mathrm{silu}(z)

    with Δ = softplus(delta + delta_bias) (threshold 20), Ā = exp(ΔA), B̄x = Δ B u; the
    semantics of :func:`ssmpde.kernels.reference.selective_scan_ref`, values and gradients.

    Parameters
    ----------
    u, delta : ``[batch, channel, length]``
    A : ``[channel, state]`` (negative, so that Ā ∈ (0, 1])
    B, C : ``[batch, state, length]`` or grouped ``[batch, groups, state, length]``
        (channel ``d`` reads group ``d // (channel // groups)``).
    D, delta_bias : ``[channel]``, optional
    R : ``[channel, state]``, optional
        Geometric correction; None gives plain Mamba.
    z : ``[batch, channel, length]``, optional
        Gate: the output is multiplied by ``silu(z)``.
    delta_softplus : bool
        Apply softplus to ``delta + delta_bias``.
    reverse : bool
        Run the recurrence from the last position to the first.
    initial_state : ``[batch, channel, state]``, optional
        h before the first processed position (zero by default); differentiable.
    return_last_state : bool
        Also return h after the last processed position (differentiable).
    chunk_size : int, optional
        Positions per chunk (a power of two; :data:`DEFAULT_CHUNK_SIZE`, or
        :data:`RECURRENT_CHUNK_SIZE` for the recurrent kernels); the backward restarts from the
        saved state at each chunk boundary. Tuning only: results do not depend on it beyond rounding.
    kernel : {"chunked", "recurrent"}, optional
        The 1D kernels to run (:data:`DEFAULT_KERNEL`); see Notes. Tuning only.
    segments : int, optional
        ``kernel="recurrent"`` only: stretches of the sequence scanned in parallel (at most
        one per chunk). By default as few as give ``TUNING[...]["min_programs"]`` programs.
        Tuning only.

    Returns
    -------
    out : ``[batch, channel, length]`` in ``u``'s dtype; and ``last_state``
    ``[batch, channel, state]`` in ``u``'s dtype if ``return_last_state``.

    Notes
    -----
    Grid ``(batch, channel // BLOCK_D)``; each program holds ``[BLOCK_D, state_pow2, chunk]``
    tiles, scans each chunk with ``tl.associative_scan`` and carries the state to the next chunk
    in registers. The forward saves only the chunk-end states ``[batch, channel, chunks,
    state]``; the backward walks the chunks in reverse, recomputes each chunk's states in
    registers from the saved start state (no scratch buffer) and runs the adjoint recurrence as
    a reverse associative scan. ``dA, dR, dD, d delta_bias`` (over batch) come from per-program
    partial buffers summed in torch. ``dB, dC`` (over the channels of a group) are added
    atomically, as in mamba-ssm, so their last bits depend on scheduling; under
    ``torch.use_deterministic_algorithms(True)`` they too come from partials summed in torch
    (bit-reproducible, at ``2 · batch · channel / BLOCK_D · state · length`` extra floats).
    Accumulation is float32, or float64 for float64 inputs.

    ``kernel="recurrent"`` walks the positions one at a time instead, with each channel's
    states in one thread's registers (``[state, channel]`` tiles: no exchange between threads
    for ``Σ_n C h``) and ``Ā = exp2(Δ · A log2 e)``. For parallelism beyond
    ``batch × channel blocks`` it cuts the sequence into segments: a first pass scans every
    segment from zero for its end state and decay ``Π Ā = exp(A ΣΔ)`` (one sum of Δ per
    channel), a small kernel joins them (``H ← decay · H + end``), and the second pass scans
    every segment from its true start state, writing outputs and chunk-end states. Its backward
    recomputes each chunk's states into a per-program scratch buffer of ``chunk`` states and
    walks them backwards with the adjoint in registers (Ā at the current position only: no
    second exp for the next position); segments get their incoming adjoint from the same
    two-pass scheme run backwards.

    References
    ----------
    Gu & Dao, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces" (2023), and
    mamba-ssm's ``selective_scan`` CUDA kernel (chunked scan, chunk-end states, recomputation);
    ggml's ``ssm-scan.cu`` (a channel's states in registers, the sequence walked in order);
    flash-linear-attention's chunked scans (``fla/ops/hgrn``: chunk states joined by a second
    pass).

    Examples
    --------
    >>> out, h = selective_scan_triton(u, delta, A, B, C, D=D, z=z, delta_bias=bias,
    ...                                return_last_state=True)  # doctest: +SKIP
    """
    kernel = DEFAULT_KERNEL if kernel is None else kernel
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {KERNELS}")
    if chunk_size is None:
        chunk_size = RECURRENT_CHUNK_SIZE if kernel == "recurrent" else DEFAULT_CHUNK_SIZE
    _check_power_of_two("chunk_size", chunk_size)
    if segments is not None and (kernel != "recurrent" or int(segments) != segments
                                 or segments < 1):
        raise ValueError("segments (a positive integer) applies to kernel='recurrent' only; "
                         f"got segments={segments!r} with kernel={kernel!r}")
    if kernel == "recurrent":
        out, last_state = _SelectiveScanRecurrentFn.apply(
            u, delta, A, B, C, D, R, z, delta_bias, initial_state, delta_softplus, reverse,
            chunk_size, segments)
    else:
        out, last_state = _SelectiveScanFn.apply(u, delta, A, B, C, D, R, z, delta_bias,
                                                 initial_state, delta_softplus, reverse,
                                                 chunk_size)
    return (out, last_state) if return_last_state else out


def selective_scan_2d_triton(u, delta, A, B, C, *, D=None, R=None, z=None, delta_bias=None,
                             delta_softplus=True, row_chunk=DEFAULT_ROW_CHUNK):
    r"""2D selective scan (2DMamba / GeoMaNO Eq. 4, 10), as Triton kernels.

    Per (batch, channel, state), with the same Ā in both passes:

    .. math::
        g_{i,j} = \bar A_{i,j}\, g_{i,j-1} + \bar B x_{i,j},\qquad
        h_{i,j} = \bar A_{i,j}\, h_{i-1,j} + g_{i,j},\qquad
        y_{i,j} = \sum_n (C_{i,j} h_{i,j} - R\,\bar B x_{i,j}) + D u_{i,j}

    and ``out = y · silu(z)``; the semantics of
    :func:`ssmpde.kernels.reference.selective_scan_2d_ref`, values and gradients.

    Parameters
    ----------
    u, delta : ``[batch, channel, height, width]``
    A : ``[channel, state]`` (negative)
    B, C : ``[batch, state, height, width]`` or ``[batch, groups, state, height, width]``
    D, delta_bias : ``[channel]``, optional
    R : ``[channel, state]``, optional
    z : ``[batch, channel, height, width]``, optional
    delta_softplus : bool
        Apply softplus to ``delta + delta_bias``.
    row_chunk : int
        Rows between saved states (a power of two); the backward recomputes that many rows
        per step into a scratch buffer. Tuning only.

    Returns
    -------
    out : ``[batch, channel, height, width]`` in ``u``'s dtype.

    Notes
    -----
    This is the simpler *row sweep* version, not 2DMamba's square tiles: grid
    ``(batch, channel // BLOCK_D)``; each program walks the rows top to bottom holding a whole
    (power-of-two padded) row ``[BLOCK_D, state_pow2, width_pow2]`` in registers; the horizontal
    pass of a row is an associative scan along the width and the vertical pass is the
    elementwise update with the previous row (the vertical carry, in registers). Very wide grids
    therefore cost registers in proportion to the width (a width-tiled variant would carry a
    per-row horizontal state between column tiles). The forward saves the state row after every
    ``row_chunk`` rows; the backward walks the row chunks bottom-up, recomputes a chunk's rows
    into a per-program scratch buffer of ``row_chunk`` rows, and runs the vertical adjoint
    (carried in registers) and the horizontal adjoint (a reverse scan) row by row. Reductions as
    in :func:`selective_scan_triton`.

    References
    ----------
    Zhang et al., "2DMamba: Efficient State Space Model for Image Representation" (2024);
    GeoMaNO (Eq. 4, 10, 23).

    Examples
    --------
    >>> out = selective_scan_2d_triton(u, delta, A, B, C, D=D, delta_bias=bias)  # doctest: +SKIP
    """
    _check_power_of_two("row_chunk", row_chunk)
    return _SelectiveScan2dFn.apply(u, delta, A, B, C, D, R, z, delta_bias, delta_softplus,
                                    row_chunk)
