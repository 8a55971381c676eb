r"""Attention layers of the MNO comparison, the mixers the S6 blocks replace.

:class:`GalerkinAttention` (Galerkin Transformer, OFormer), :class:`NormalizedLinearAttention`
(GNOT) and :class:`SoftmaxAttention`, multi-head, self-attention without ``context`` and
cross-attention with it. Layout ``[batch, tokens, width]``, as
:class:`ssmpde.surrogates.s6.BidirectionalS6` and :class:`ssmpde.surrogates.s6.CrossS6`.
See ``docs/models/mno.md``.

References
----------
C.-W. Cheng, J. Huang, Y. Zhang, G. Yang, C.-B. Schönlieb, A. I. Aviles-Rivero, "Mamba
neural operator: Who wins? Transformers vs. state-space models for PDEs", arXiv:2410.02113.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GalerkinAttention", "NormalizedLinearAttention", "SoftmaxAttention"]


class _HeadNorm(nn.Module):
    """LayerNorm over each head's channels with per-head scale and shift (the Galerkin
    Transformer keeps one LayerNorm per head). ``[batch, heads, tokens, head_dim]``."""

    def __init__(self, heads: int, head_dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(heads, 1, head_dim))
        self.bias = nn.Parameter(torch.zeros(heads, 1, head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), eps=self.eps) * self.weight + self.bias


class _MultiHeadMixer(nn.Module):
    """Query/key/value and output maps (``nn.Linear`` with bias, width → width), split into
    heads; self-attention without ``context``, cross-attention with it."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        for name, value in (("width", width), ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if width % heads:
            raise ValueError(f"heads={heads} must divide width={width} (each head takes "
                             "width / heads channels)")
        self.heads, self.head_dim = heads, width // heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.out_proj = nn.Linear(width, width)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)   # [b, h, n, d]

    def _qkv(self, tokens: torch.Tensor, context: torch.Tensor | None):
        context = tokens if context is None else context
        if context.dim() != 3 or context.shape[0] != tokens.shape[0] \
                or context.shape[2] != tokens.shape[2]:
            raise ValueError(f"context must be [batch={tokens.shape[0]}, tokens, "
                             f"width={tokens.shape[2]}], got {list(context.shape)}")
        return (self._split(self.query(tokens)), self._split(self.key(context)),
                self._split(self.value(context)))

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_proj(x.transpose(1, 2).flatten(2))


class GalerkinAttention(_MultiHeadMixer):
    r"""Galerkin-type (softmax-free, linear) attention of Cao (2021), multi-head.

    .. math:: \mathrm{Attn}(x, x') = \mathrm{out\_proj}\Big(\big\Vert_h\,
              Q_h\,\big(\tilde K_h^\top \tilde V_h\big) / n\Big),\qquad
              \tilde K_h = \mathrm{LN}_h(K_h),\ \tilde V_h = \mathrm{LN}_h(V_h)

    with :math:`Q = xW_Q + b_Q`, :math:`K = x'W_K + b_K`, :math:`V = x'W_V + b_V`, n the number
    of context tokens (x′ = x for self-attention) and one LayerNorm per head on the keys and
    values (the Galerkin Transformer's ``attn_norm``), so the cost is linear in n: a
    Petrov–Galerkin projection onto the span of the values.

    Differences from Cao's code, stated so the reader need not guess: the coordinates are
    not concatenated to every head's q, k, v (the MNO models feed them to the lift instead),
    and the weights keep PyTorch's initialisation (Cao: Xavier with gain 0.01 plus 0.01 · I).

    Parameters
    ----------
    width : int
    heads : int
        Must divide ``width``.

    Shapes
    ------
    ``[batch, n_q, width]`` (and context ``[batch, n, width]``) -> ``[batch, n_q, width]``.

    References
    ----------
    S. Cao, "Choose a Transformer: Fourier or Galerkin", NeurIPS 2021.
    """

    def __init__(self, width: int, heads: int):
        super().__init__(width, heads)
        self.norm_key = _HeadNorm(heads, self.head_dim)
        self.norm_value = _HeadNorm(heads, self.head_dim)

    def forward(self, tokens: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self._qkv(tokens, context)
        k, v = self.norm_key(k), self.norm_value(v)
        # Kᵀ V first: [d, d] per head, linear in the number of tokens.
        return self._merge(q @ (k.transpose(-2, -1) @ v) / k.shape[-2])


class NormalizedLinearAttention(_MultiHeadMixer):
    r"""GNOT's normalised linear attention (Hao et al., 2023), multi-head, self or cross.

    .. math:: \mathrm{Attn}(x, x')_h = \frac{\tilde Q_h (\tilde K_h^\top V_h)}
              {\tilde Q_h \sum_j \tilde K_{h,j}^\top} + \tilde Q_h,\qquad
              \tilde Q = \mathrm{softmax}_d(Q),\ \tilde K = \mathrm{softmax}_d(K)

    (softmax over each head's channels, so every row of :math:`\tilde Q \tilde K^\top` is a
    probability distribution over the context tokens: a linear-cost stand-in for softmax
    attention), then the heads are concatenated and mapped by out_proj. The ``+ Q̃`` term is
    in GNOT's code.

    Parameters
    ----------
    width, heads : int

    References
    ----------
    Z. Hao et al., "GNOT: A general neural operator transformer for operator learning",
    ICML 2023.
    """

    def forward(self, tokens: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self._qkv(tokens, context)
        q, k = q.softmax(dim=-1), k.softmax(dim=-1)
        normaliser = (q * k.sum(dim=-2, keepdim=True)).sum(dim=-1, keepdim=True)
        return self._merge(q @ (k.transpose(-2, -1) @ v) / normaliser + q)


class SoftmaxAttention(_MultiHeadMixer):
    r"""Plain multi-head softmax attention (Vaswani et al., 2017), self or cross.

    .. math:: \mathrm{Attn}(x, x')_h = \mathrm{softmax}\big(Q_h K_h^\top / \sqrt{d}\big) V_h

    through :func:`torch.nn.functional.scaled_dot_product_attention` (memory-efficient kernels
    where PyTorch has them); quadratic in the number of tokens.

    Parameters
    ----------
    width, heads : int
    """

    def forward(self, tokens: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self._qkv(tokens, context)
        return self._merge(F.scaled_dot_product_attention(q, k, v))
