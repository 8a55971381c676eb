"""The 2D Triton kernels: a row sweep with the vertical carry in registers.

``selective_scan_2d_triton`` runs these: one program per ``(batch, channel block)`` walks the
rows top to bottom, the horizontal pass of a row an associative scan along the padded width and
the vertical pass an elementwise update with the previous row; the backward walks row chunks
bottom-up, recomputing each from its checkpoint into a per-program scratch buffer. Design notes
in :mod:`.scan_triton`; shared helpers in :mod:`._scan_triton_common`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._scan_triton_common import (
    _combine,
    _compute_dtype,
    _empty,
    _grouped_b_c,
    _load_dt,
    _opt,
    _prologue,
    _reduce_grouped,
    _sigmoid,
    _softplus_grad,
    _tuning,
)


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
