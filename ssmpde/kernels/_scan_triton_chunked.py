"""The chunked 1D Triton kernels: chunks of positions scanned with ``tl.associative_scan``.

``selective_scan_triton(..., kernel="chunked")`` (the default) runs these: one program per
``(batch, channel block)`` scans each chunk of ``[BLOCK_D, BLOCK_N, CHUNK]`` tiles and carries
the state to the next chunk in registers; the backward recomputes each chunk's states in
registers from the saved chunk-end state and runs the adjoint as a reverse associative scan.
Design notes in :mod:`.scan_triton`; shared helpers in :mod:`._scan_triton_common`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._scan_triton_common import (
    _combine,
    _compute_dtype,
    _empty,
    _grad,
    _grouped_b_c,
    _load_dt,
    _opt,
    _position_gradients,
    _prologue,
    _reduce_grouped,
    _scan_1d_flags,
    _sigmoid,
    _softplus_grad,
    _tuning,
)


@triton.jit
def _last(x, offs_t, T: tl.constexpr):
    """``x[..., T - 1]`` of a ``[BD, BN, T]`` tile (Triton has no static indexing of tiles)."""
    return tl.sum(tl.where(offs_t[None, None, :] == T - 1, x, 0.0), axis=2)


@triton.jit
def _first(x, offs_t):
    """``x[..., 0]`` of a ``[BD, BN, T]`` tile."""
    return tl.sum(tl.where(offs_t[None, None, :] == 0, x, 0.0), axis=2)


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
# Host side
# ----------------------------------------------------------------------------------------------


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
