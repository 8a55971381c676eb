"""What the Triton selective scans share: device helpers, tuning, buffers and layouts.

The scans are one file per kernel family, after flash-linear-attention's file per algorithm:
the chunked 1D kernels (:mod:`._scan_triton_chunked`), the recurrent 1D kernels with segments
(:mod:`._scan_triton_recurrent`) and the 2D kernels (:mod:`._scan_triton_2d`), each with its
``torch.autograd.Function``; :mod:`.scan_triton` holds the design notes and the public entry
points. This module holds what more than one family uses:

* device helpers: the scan operator, an overflow-free sigmoid and softplus (and its
  derivative), the step Δ of a tile, the parameters of a channel block, and the prologue of
  the chunked and 2D kernels;
* :data:`TUNING` and the channel block it gives a kernel (:func:`_tuning`);
* host helpers: buffer allocation (:func:`_empty`, which every family allocates through, so
  the tests can fill the buffers with NaN), the accumulation dtype, B and C in one grouped
  layout and the reduction of their gradients, and the 1D kernels' compile-time flags and
  per-position gradient buffers.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

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


# ----------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------


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
