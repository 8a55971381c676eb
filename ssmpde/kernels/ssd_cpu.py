r"""The SSD chunk's decay-weighted scores on a CPU, fused: one numba pass forward and back.

In the chunked SSD (:func:`ssmpde.kernels.ssd.ssd_chunked`) each chunk and head multiplies its
inputs by

.. math:: W_{ts} = L_{ts}\,(C_t \cdot B_s),\qquad
          L_{ts} = e^{c_t - c_s}\ (t \ge s),\ 0\ (t < s),

with ``c`` the running sums of Δ A in float64. Composed from torch operations, that is five
passes over ``[..., Q, Q]`` per head (the float64 differences, their cast, the mask, the exp,
the product with the scores), about half of LaMO's forward on a CPU. Here one kernel writes W
and one writes its gradients, with the same numerics: each difference is formed in float64,
rounded once to the compute dtype, and exponentiated there (the inlined exp of
:func:`ssmpde.kernels._numba_cpu.exp`, within 1.1 ulp); nothing above the diagonal is ever
exponentiated. :func:`decay_weighted_scores` is a ``torch.library`` custom operator with a fake
implementation and a registered backward, so ``torch.compile`` traces through it.

Gradients, for an upstream gradient G of W (per chunk and head, summed over heads for the
scores, which the heads of a group share):

* dScores_ts = Σ_heads G_ts L_ts;
* with dS_ts = G_ts W_ts (t ≥ s), dc_t = Σ_s dS_ts − Σ_{t'} dS_{t't}, accumulated in float64.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ._numba_cpu import compute_dtype, exp, numba_threads

__all__ = ["decay_weighted_scores"]


@numba.njit(parallel=True, cache=True, fastmath={"contract"})
def _forward(running, scores, out):  # pragma: no cover
    """``out[k, j, t, s] = exp(c_t − c_s) scores[k, t, s]`` for t ≥ s, else 0, with
    ``c = running[k, j]``: ``running [n, heads, Q]`` (float64), ``scores [n, Q, Q]``,
    ``out [n, heads, Q, Q]`` in the compute dtype."""
    blocks, heads, size = running.shape
    zero = out.dtype.type(0)
    for k in numba.prange(blocks):
        score = scores[k]
        for j in range(heads):
            c = running[k, j]
            o = out[k, j]
            for t in range(size):
                row = o[t]
                score_row = score[t]
                ct = c[t]
                for s in range(t + 1):
                    row[s] = exp(out.dtype.type(ct - c[s])) * score_row[s]
                for s in range(t + 1, size):
                    row[s] = zero


@numba.njit(parallel=True, cache=True, fastmath={"contract"})
def _backward(running, scores, grad, d_running, d_scores):  # pragma: no cover
    """The gradients of :func:`_forward` for ``grad [n, heads, Q, Q]``: ``d_running [n,
    heads, Q]`` (float64) and ``d_scores [n, Q, Q]`` (summed over heads)."""
    blocks, heads, size = running.shape
    zero = grad.dtype.type(0)
    for k in numba.prange(blocks):
        score = scores[k]
        d_score = d_scores[k]
        d_score[:, :] = zero
        columns = np.empty(size, np.float64)
        for j in range(heads):
            c = running[k, j]
            g = grad[k, j]
            columns[:] = 0.0
            for t in range(size):
                ct = c[t]
                g_row = g[t]
                score_row = score[t]
                d_row = d_score[t]
                row_sum = 0.0
                for s in range(t + 1):
                    decay = exp(grad.dtype.type(ct - c[s]))
                    gl = g_row[s] * decay
                    d_row[s] += gl
                    ds = np.float64(gl * score_row[s])
                    row_sum += ds
                    columns[s] += ds
                d_running[k, j, t] = row_sum
            for t in range(size):
                d_running[k, j, t] -= columns[t]


@torch.library.custom_op("ssmpde::ssd_decay_weighted_scores", mutates_args=())
def _weighted_op(running: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    blocks, heads, size = running.shape
    dtype = compute_dtype(scores)
    numba_threads()  # before numba's first parallel kernel: see that function
    out = torch.empty(blocks, heads, size, size, dtype=dtype)
    _forward(running.detach().to(torch.float64).contiguous().numpy(),
             scores.detach().to(dtype).contiguous().numpy(), out.numpy())
    return out.to(scores.dtype)


@_weighted_op.register_fake
def _weighted_fake(running, scores):
    blocks, heads, size = running.shape
    return scores.new_empty(blocks, heads, size, size)


@torch.library.custom_op("ssmpde::ssd_decay_weighted_scores_backward", mutates_args=())
def _weighted_backward_op(running: torch.Tensor, scores: torch.Tensor,
                          grad: torch.Tensor) -> list[torch.Tensor]:
    blocks, heads, size = running.shape
    dtype = compute_dtype(scores)
    numba_threads()
    d_running = torch.empty(blocks, heads, size, dtype=torch.float64)
    d_scores = torch.empty(blocks, size, size, dtype=dtype)
    _backward(running.detach().to(torch.float64).contiguous().numpy(),
              scores.detach().to(dtype).contiguous().numpy(),
              grad.detach().to(dtype).contiguous().numpy(), d_running.numpy(),
              d_scores.numpy())
    return [d_running.to(running.dtype), d_scores.to(scores.dtype)]


@_weighted_backward_op.register_fake
def _weighted_backward_fake(running, scores, grad):
    return [running.new_empty(running.shape), scores.new_empty(scores.shape)]


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _autograd(ctx, grad):
    running, scores = ctx.saved_tensors
    d_running, d_scores = torch.ops.ssmpde.ssd_decay_weighted_scores_backward(
        running, scores, grad)
    return d_running, d_scores


_weighted_op.register_autograd(_autograd, setup_context=_setup)


def decay_weighted_scores(running: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    r"""``W[..., h, t, s] = exp(c_t − c_s) · scores[..., t, s]`` for ``t ≥ s``, 0 above the
    diagonal, with ``c = running[..., h, :]``: the masked decay matrix of every head times the
    scores its group shares, in one pass (CPU tensors).

    Parameters
    ----------
    running : torch.Tensor, ``[*blocks, heads, Q]``
        Running sums of the non-positive steps Δ A within each chunk, float64 (each
        difference is formed in float64 before it is rounded to the compute dtype).
    scores : torch.Tensor, ``[*blocks, Q, Q]``
        ``C_t · B_s`` of the heads' group; its dtype is the compute dtype (float64 stays
        float64, any other floating dtype is computed in float32).

    Returns
    -------
    torch.Tensor, ``[*blocks, heads, Q, Q]``, in ``scores``' dtype; differentiable in both
    inputs.

    Examples
    --------
    >>> running = (-torch.rand(2, 3, 4, dtype=torch.float64)).cumsum(-1)
    >>> decay_weighted_scores(running, torch.ones(2, 4, 4)).shape
    torch.Size([2, 3, 4, 4])
    """
    *blocks, heads, size = running.shape
    if list(scores.shape) != [*blocks, size, size]:
        raise ValueError(f"scores must have shape {[*blocks, size, size]} (the blocks of "
                         f"running, then Q × Q), got {list(scores.shape)}")
    out = _weighted_op(running.reshape(-1, heads, size), scores.reshape(-1, size, size))
    return out.reshape(*blocks, heads, size, size)
