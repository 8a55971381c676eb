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

The kernels are one file per family, after flash-linear-attention's file per algorithm, each
with its ``torch.autograd.Function``: the chunked 1D kernels (``_scan_triton_chunked``), the
recurrent 1D kernels with segments (``_scan_triton_recurrent``) and the 2D kernels
(``_scan_triton_2d``), with what they share (device helpers, ``TUNING``, buffers and layouts)
in ``_scan_triton_common``. This module holds the entry points, the chunk sizes and the choice
of 1D kernel; ``TUNING`` is importable from here too.
"""

from __future__ import annotations

from ._scan_triton_2d import _SelectiveScan2dFn
from ._scan_triton_chunked import _SelectiveScanFn
from ._scan_triton_common import TUNING  # noqa: F401 (public: the tuning callers set)
from ._scan_triton_recurrent import _SelectiveScanRecurrentFn

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

#: Default number of rows between the 2D forward's saved states (checkpoints). The 2D backward
#: recomputes that many rows into a per-program scratch buffer.
DEFAULT_ROW_CHUNK = 16


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
