r"""SSD: Mamba-2's multi-head scan as chunked matrix products (state space duality; LaMO).

Each head ``h`` has a scalar decay ``A_h < 0`` and a ``head_dim × d_state`` state:

.. math::
    H_t = e^{Δ_t A_h} H_{t-1} + Δ_t\, x_t B_t^{\mathsf T},\qquad
    y_t = H_t C_t + D x_t,\qquad \text{out}_t = y_t \cdot \mathrm{silu}(z_t),

``Δ = softplus(dt + dt_bias)`` (``docs/kernels/ssd.md``). Because the decay is one
number per head and position, the map from the inputs of a chunk of ``Q`` positions to its
outputs is a masked matrix (the "state space duality" of Dao & Gu, 2024):

.. math::
    y_t = \sum_{s \le t} L_{ts}\, (C_t \cdot B_s)\, Δ_s x_s
          + e^{a_{0..t}}\, H_{\text{in}} C_t,\qquad
    L_{ts} = \exp\Bigl(\sum_{s < r \le t} Δ_r A\Bigr)\ (t \ge s),\ 0\ (t < s),

where ``a_{0..t} = Σ_{r≤t} Δ_r A`` and ``H_in`` is the state entering the chunk. So one
chunk costs a few batched matrix products (BLAS on a CPU, tensor cores on a GPU), and the
chunks are tied together by a short recurrence on their boundary states:

1. intra-chunk: ``Y = (L ∘ C Bᵀ ∘ Δ) X`` per chunk and head (``C Bᵀ`` once per group);
2. chunk states: ``S_c = Σ_s L_{Q−1,s} Δ_s x_s B_sᵀ``, the state a chunk leaves from zero;
3. state passing: ``H_{c+1} = e^{a_c} H_c + S_c`` over the chunks (``a_c``: the chunk's total
   ``Σ Δ A``), starting from ``initial_state``; ``H_{n_chunks}`` is the last state;
4. inter-chunk: ``e^{a_{0..t}} H_c C_t`` added to the intra-chunk output.

Everything is plain PyTorch, so the same code runs on a CPU and on a GPU, and autograd gives
the backward; on a CPU the masked decay matrix times the scores is one fused numba operator
with its own backward (:func:`ssmpde.kernels.ssd_cpu.decay_weighted_scores`, the same
numbers as the torch composition it replaces). The loop recurrence
:func:`ssmpde.kernels.reference.ssd_ref` is the oracle; the tests tie the two together in
values and the gradients of every input.

Numerics. No exponent is ever positive (``Δ ≥ 0``, ``A ≤ 0``):

* ``L = exp(S)`` with ``S_ts = c_t − c_s`` (``c_t = Σ_{r≤t} Δ_r A``, the running sum within
  the chunk) for ``t ≥ s``, always ≤ 0, and ``S = −inf`` above the diagonal, set *before*
  ``exp`` (masking after would meet ``exp(+big) · 0`` and NaN gradients). The running sums are
  accumulated in float64 even for float32 inputs: a float32 running sum carries an absolute
  error ``eps · |c_t|`` into each difference, a relative error of ``L`` that grows with the
  chunk's total decay even where ``L`` is of order one.
* The decays to the chunk end are the last row of ``L``; the decays from the chunk start are
  ``exp`` of a plain running sum (≤ 0). Large steps only underflow to 0, which is the exact
  limit.
* Lengths that are not a multiple of the chunk are padded with ``Δ = 0`` steps (identity decay,
  no input) after the softplus and cropped; the padding leaves the last state unchanged.
* float64 inputs are computed in float64, every other floating dtype in float32, and the
  output is cast back to ``x``'s dtype.

Layouts (those of mamba-ssm's ``mamba_chunk_scan_combined``; fixed, no layout flags):
``x, z: [batch, length, heads, head_dim]``, ``dt: [batch, length, heads]``, ``A, dt_bias:
[heads]``, ``B, C: [batch, length, groups, d_state]`` (head ``h`` reads group
``h // (heads // groups)``), ``D: [heads]`` or ``[heads, head_dim]``, states
``[batch, heads, head_dim, d_state]``.

References
----------
T. Dao and A. Gu, "Transformers are SSMs: Generalized Models and Efficient Algorithms Through
Structured State Space Duality", ICML 2024 (arXiv:2405.21060), Section 6 (the chunked SSD
algorithm). mamba-ssm's ``ssd_minimal.py`` and ``ssd_combined.py`` fix the layouts used here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._checks import _check_shape
from .ssd_cpu import decay_weighted_scores

__all__ = ["SSD_BACKENDS", "check_ssd_inputs", "segment_sums", "ssd_chunked", "ssd_scan"]

#: The choices of ``ssd_scan(..., backend=)``: the chunked torch path, or the loop reference.
SSD_BACKENDS = ("auto", "reference")

#: torch's softplus threshold, as in mamba-ssm and :func:`ssmpde.kernels.reference.ssd_ref`.
SOFTPLUS_THRESHOLD = 20.0


# ---------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------
def _check_tensor(name, value, device):
    """A floating-point torch.Tensor on ``device`` (None: any), or ValueError saying how."""
    if not isinstance(value, torch.Tensor):
        message = (f"{name} must be a torch.Tensor; got {type(value).__name__}. Pass it as a "
                   f"floating-point tensor, e.g. torch.as_tensor({name}).")
        raise ValueError(message)  # noqa: TRY004 - ValueError for all bad input, as _checks.py
    if not value.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor; got {value.dtype}. "
                         f"Convert it, e.g. {name}.float() or {name}.double().")
    if device is not None and value.device != device:
        raise ValueError(f"{name} must be on x's device {device}; got {value.device}. "
                         f"Move it with {name}.to(x.device).")


def check_ssd_inputs(x, dt, A, B, C, D=None, z=None, dt_bias=None, initial_state=None):
    """Raise ValueError, naming the argument, its expected shape and the fix, unless the SSD
    arguments fit the layouts of the module docstring (every tensor floating point, on
    ``x``'s device, non-empty; groups dividing heads)."""
    _check_tensor("x", x, None)  # x sets the device of the others
    device = x.device
    if x.dim() != 4 or 0 in x.shape:
        raise ValueError(f"x must be a non-empty [batch, length, heads, head_dim] tensor; got "
                         f"shape {list(x.shape)}. Split the channels into heads, e.g. "
                         f"x.reshape(batch, length, heads, channels // heads).")
    batch, length, heads, head_dim = x.shape
    _check_tensor("dt", dt, device)
    _check_shape("dt", dt, "batch, length, heads", [batch, length, heads],
                 "Give one step per position and head.")
    _check_tensor("A", A, device)
    _check_shape("A", A, "heads", [heads], "SSD has one scalar decay per head (Mamba-2).")
    for name, value in (("B", B), ("C", C)):
        _check_tensor(name, value, device)
        if (value.dim() != 4 or list(value.shape[:2]) != [batch, length] or 0 in value.shape
                or heads % value.shape[2] != 0):
            raise ValueError(
                f"{name} must have shape [batch, length, groups, d_state] = "
                f"{[batch, length, 'groups', 'd_state']} with groups dividing heads={heads}; "
                f"got {list(value.shape)}. Match batch and length to x, and pick groups among "
                f"the divisors of {heads} (head h reads group h // (heads // groups)).")
    if B.shape != C.shape:
        raise ValueError(f"B and C must have the same shape [batch, length, groups, d_state]; "
                         f"got B {list(B.shape)} and C {list(C.shape)}. Give them the same "
                         f"groups and d_state.")
    d_state = B.shape[3]
    if D is not None:
        _check_tensor("D", D, device)
        if list(D.shape) not in ([heads], [heads, head_dim]):
            raise ValueError(f"D must have shape [heads] = [{heads}] or [heads, head_dim] = "
                             f"[{heads}, {head_dim}]; got {list(D.shape)}. One skip weight per "
                             f"head, or per head and head channel.")
    for name, value, layout, shape, fix in (
            ("z", z, "batch, length, heads, head_dim", list(x.shape), "The gate has x's shape."),
            ("dt_bias", dt_bias, "heads", [heads], "One bias per head."),
            ("initial_state", initial_state, "batch, heads, head_dim, d_state",
             [batch, heads, head_dim, d_state], "Pass the last state of the previous scan.")):
        if value is not None:
            _check_tensor(name, value, device)
            _check_shape(name, value, layout, shape, fix)


# ---------------------------------------------------------------------------------------
# The chunked algorithm
# ---------------------------------------------------------------------------------------
def segment_sums(running: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``S[..., t, s] = c_t − c_s = Σ_{s<r≤t} a_r`` for ``t ≥ s`` (0 on the diagonal) and
    ``−inf`` for ``t < s``: the exponents of the decay matrix ``L = exp(S)`` of one chunk.

    ``running``: ``[..., Q]``, the running sums ``c_t = Σ_{r≤t} a_r`` of non-positive steps
    ``a``, so every finite entry is ``≤ 0``. The upper triangle is set to ``−inf`` before any
    ``exp`` (masking after would meet ``exp(+big) · 0`` and NaN gradients). Pass the running
    sums in float64 (and ``dtype`` for the result) to keep the entries accurate to their own
    size however large ``c_t`` grows. Returns ``[..., Q, Q]`` in ``dtype`` (default: that of
    ``running``).
    """
    size = running.shape[-1]
    lower = torch.ones(size, size, dtype=torch.bool, device=running.device).tril()
    # + (−c_s), not − c_s: the backward then negates [..., Q], not a [..., Q, Q] gradient
    differences = (running.unsqueeze(-1) + (-running).unsqueeze(-2)).to(dtype or running.dtype)
    return torch.where(lower, differences, -math.inf)  # (faster than masked_fill on a CPU)


def ssd_chunked(x, delta, A, B, C, *, chunk_size=64, initial_state=None):
    """The chunked SSD on discretised steps, without skip, gate or checks.

    Parameters
    ----------
    x : ``[batch, length, heads, head_dim]``
    delta : ``[batch, length, heads]``, the steps Δ (≥ 0; softplus already applied)
    A : ``[heads]`` (≤ 0)
    B, C : ``[batch, length, groups, d_state]``
    chunk_size : int, the chunk length ``Q`` (capped at ``length``)
    initial_state : ``[batch, heads, head_dim, d_state]``, optional

    Returns
    -------
    y : ``[batch, length, heads, head_dim]`` (``Σ_n H C``), and the last state
    ``[batch, heads, head_dim, d_state]``, both in the inputs' (common) dtype.
    """
    batch, length, heads, head_dim = x.shape
    groups, d_state = B.shape[2:]
    per_group = heads // groups
    size = min(chunk_size, length)
    chunks = -(-length // size)
    pad = chunks * size - length
    if pad:
        # Δ = 0 steps: decay exp(0) = 1 and no input, so the state passes through unchanged
        x, delta, B, C = (F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad)) for t in (x, delta, B, C))
    # Heads split as (groups, heads per group) so C Bᵀ is formed once per group.
    x = x.reshape(batch, chunks, size, groups, per_group, head_dim).permute(0, 1, 3, 4, 2, 5)
    delta = delta.reshape(batch, chunks, size, groups, per_group).permute(0, 1, 3, 4, 2)
    B = B.reshape(batch, chunks, size, groups, d_state).transpose(2, 3)   # [b, c, g, Q, n]
    C = C.reshape(batch, chunks, size, groups, d_state).transpose(2, 3)
    steps = delta * A.reshape(groups, per_group, 1)                       # [b, c, g, r, Q] ≤ 0
    # Running sums in float64: a float32 one carries an error eps·|c_t| into every difference
    # c_t − c_s, a relative error of L that grows with the chunk's total decay (2.7e-5 at
    # Δ = 50 against 1.6e-7 here); the cost is one float64 subtraction over [..., Q, Q].
    running = steps.to(torch.float64).cumsum(dim=-1)                      # a_0..t ≤ 0
    from_start = torch.exp(running.to(steps.dtype))                       # e^{a_0..t}
    chunk_decay = from_start[..., -1]                                     # [b, c, g, r]

    # Δ is folded into x once ([..., Q, p]) rather than into the Q × Q matrices
    x = x * delta.unsqueeze(-1)                                           # Δ_s x_s

    # 1. intra-chunk: y_t = Σ_{s≤t} L_ts (C_t·B_s) Δ_s x_s
    scores = C @ B.transpose(-1, -2)                                      # [b, c, g, Q, Q]
    if x.device.type == "cpu":
        # one fused pass instead of five over [..., Q, Q] (the same numbers; ssd_cpu)
        weighted = decay_weighted_scores(running, scores)                 # [b, c, g, r, Q, Q]
    else:
        weighted = torch.exp(segment_sums(running, steps.dtype)) * scores.unsqueeze(3)
    y = weighted @ x                                                      # [b, c, g, r, Q, p]

    # 2. the state each chunk leaves from a zero start: Σ_s L_{Q-1,s} Δ_s x_s B_sᵀ, with
    # L_{Q-1,s} = e^{c_{Q-1} − c_s}, the last row of L (differences in float64, as L's)
    to_end = torch.exp((running[..., -1:] - running).to(steps.dtype)).unsqueeze(-1)
    leaving = (x * to_end).transpose(-1, -2) @ B.unsqueeze(3)             # [b, c, g, r, p, n]

    # 3. state passing: a short recurrence over the chunk boundaries (unbind, not [:, k]:
    # indexing in a loop makes autograd add a full-size zero gradient per chunk)
    state = (x.new_zeros(batch, groups, per_group, head_dim, d_state) if initial_state is None
             else initial_state.reshape(batch, groups, per_group, head_dim, d_state))
    entering = []
    for decay_k, leaving_k in zip(chunk_decay.unbind(1), leaving.unbind(1)):
        entering.append(state)
        state = decay_k[..., None, None] * state + leaving_k
    entering = torch.stack(entering, dim=1)                               # [b, c, g, r, p, n]

    # 4. inter-chunk: e^{a_0..t} H_in C_t
    y = y + from_start.unsqueeze(-1) * (C.unsqueeze(3) @ entering.transpose(-1, -2))
    y = y.permute(0, 1, 4, 2, 3, 5).reshape(batch, chunks * size, heads, head_dim)
    return y[:, :length], state.reshape(batch, heads, head_dim, d_state)


def _compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def ssd_scan(x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=True, chunk_size=64,
             initial_state=None, return_last_state=False, backend="auto"):
    r"""Mamba-2's multi-head selective scan (SSD), chunked; semantics of
    :func:`ssmpde.kernels.reference.ssd_ref`.

    .. math::
        Δ_t = \mathrm{softplus}(dt_t + dt_{bias}),\quad
        H_t = e^{Δ_t A_h} H_{t-1} + Δ_t\, x_t B_t^{\mathsf T},\quad
        y_t = H_t C_t + D x_t,\quad \text{out}_t = y_t \cdot \mathrm{silu}(z_t)

    per head ``h`` (state ``H_t``: ``head_dim × d_state``). The algorithm and its numerics are
    in the module docstring.

    Parameters
    ----------
    x : ``[batch, length, heads, head_dim]``
    dt : ``[batch, length, heads]``, raw steps (before ``dt_bias`` and softplus)
    A : ``[heads]``, the decay per head. Must be ≤ 0 (Mamba-2 uses ``A = −exp(A_log)``), and the
        steps ``Δ`` must be ≥ 0 (always so with ``dt_softplus``); these values are not checked
        (a check would synchronise a GPU), and violating them makes the chunk decays grow.
    B, C : ``[batch, length, groups, d_state]``; ``groups`` divides ``heads`` and head ``h``
        reads group ``h // (heads // groups)``.
    D : ``[heads]`` or ``[heads, head_dim]``, optional skip weight.
    z : ``[batch, length, heads, head_dim]``, optional gate: ``out = y · silu(z)``.
    dt_bias : ``[heads]``, optional, added to ``dt`` before the softplus.
    dt_softplus : bool
        ``Δ = softplus(dt + dt_bias)`` (threshold 20) if True, else ``Δ = dt + dt_bias``.
    chunk_size : int
        Positions per chunk (64 in LaMO; capped at ``length``). Any positive value gives the
        same result up to rounding.
    initial_state : ``[batch, heads, head_dim, d_state]``, optional
        ``H`` before the first position (zero by default).
    return_last_state : bool
        Also return ``H`` after the last position, to continue the scan on the next segment.
    backend : {"auto", "reference"}
        "auto": the chunked PyTorch path (CPU or GPU); "reference": the float64 loop
        :func:`~ssmpde.kernels.reference.ssd_ref`.

    Returns
    -------
    out : ``[batch, length, heads, head_dim]`` in ``x``'s dtype; and, if
    ``return_last_state``, ``last_state`` ``[batch, heads, head_dim, d_state]`` in ``x``'s
    dtype.

    Raises
    ------
    ValueError
        For an unknown backend or a chunk_size that is not a positive integer; naming the
        argument, if one has the wrong shape, is not a floating-point tensor on ``x``'s device,
        or is empty; if the groups of B and C do not divide the heads, or B and C differ.

    Notes
    -----
    The scan runs from the first position to the last. The reverse direction (bidirectional
    layers) is the same scan on flipped sequences, flipped back::

        out_rev = ssd_scan(x.flip(1), dt.flip(1), A, B.flip(1), C.flip(1), ...).flip(1)

    (``z`` flipped too, if given; the last state is then the one at position 0.)

    References
    ----------
    T. Dao and A. Gu, "Transformers are SSMs: Generalized Models and Efficient Algorithms
    Through Structured State Space Duality", ICML 2024. Layouts: mamba-ssm's
    ``mamba_chunk_scan_combined`` (``ssd_combined.py``) and ``ssd_minimal.py``.

    Examples
    --------
    >>> import torch
    >>> from ssmpde.kernels import ssd_scan
    >>> x = torch.randn(2, 100, 4, 8)                        # batch, length, heads, head_dim
    >>> dt, A = torch.randn(2, 100, 4), -torch.rand(4)
    >>> B = C = torch.randn(2, 100, 1, 16)                   # one group of d_state 16
    >>> out, last = ssd_scan(x, dt, A, B, C, D=torch.ones(4), return_last_state=True)
    >>> out.shape, last.shape
    (torch.Size([2, 100, 4, 8]), torch.Size([2, 4, 8, 16]))
    """
    if backend not in SSD_BACKENDS:
        raise ValueError(f"unknown SSD backend {backend!r}; choose one of {SSD_BACKENDS}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer; got {chunk_size!r}")
    check_ssd_inputs(x, dt, A, B, C, D, z, dt_bias, initial_state)
    if backend == "reference":
        from .reference import ssd_ref

        return ssd_ref(x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                       initial_state=initial_state, return_last_state=return_last_state)
    dtype = x.dtype
    work = _compute_dtype(dtype)
    x_w, dt, A, B, C = (t.to(work) for t in (x, dt, A, B, C))
    if dt_bias is not None:
        dt = dt + dt_bias.to(work)
    delta = F.softplus(dt, beta=1.0, threshold=SOFTPLUS_THRESHOLD) if dt_softplus else dt
    y, last = ssd_chunked(x_w, delta, A, B, C, chunk_size=chunk_size,
                          initial_state=None if initial_state is None
                          else initial_state.to(work))
    if D is not None:
        D = D.to(work)
        y = y + (D[:, None] if D.dim() == 1 else D) * x_w
    if z is not None:
        y = y * F.silu(z.to(work))
    y = y.to(dtype)
    return (y, last.to(dtype)) if return_last_state else y
