r"""Fast CPU selective scans: numba kernels behind PyTorch custom operators.

The same two scans as :mod:`ssmpde.kernels.reference` (the oracle; semantics in
``docs/kernels/selective_scan.md``), computed by fused numba loops:

* :func:`selective_scan_cpu`, the 1D scan of Mamba's S6 with GeoMaNO's geometric correction,
* :func:`selective_scan_2d_cpu`, the 2D scan of 2DMamba / 2DGeoMamba (row pass, then column
  pass, with the same Ā).

The numba kernels are in ``_scan_cpu_kernels``; this module lays out their inputs, registers
the ``torch.library`` operators with their autograd, and holds the public functions.

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

import numpy as np
import torch

from ._numba_cpu import compute_dtype, numba_threads
from ._scan_cpu_kernels import (
    SOFTPLUS_THRESHOLD,
    _FULL_BLOCK,
    _scan_1d_backward,
    _scan_1d_forward,
    _scan_2d_backward,
    _scan_2d_forward,
    _softplus_kernel,
)

__all__ = ["selective_scan_2d_cpu", "selective_scan_cpu"]


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
