r"""GeoMaNO's geometry-aware encoder and decoder (Eq. 6 and 7).

Input-adaptive softmax weights between the P grid points and the L latent tokens, which keep
a grid arrangement for the scans; :func:`geometric_prior` starts them as a soft patch
embedding. Tensors are ``[batch, channel, *grid]`` with grids of one or two dimensions. See
``docs/models/geomano.md``.

References
----------
X. Han, J. Zhang, D. Samaras, F. Hou, H. Qin, "GeoMaNO: Geometric Mamba Neural Operator for
Partial Differential Equations", 2025.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GeometryDecoder", "GeometryEncoder", "geometric_prior"]


def geometric_prior(grid: tuple[int, ...], latent_grid: tuple[int, ...]) -> torch.Tensor:
    r"""Log-weights ``[P, L]`` that make the encoder start as a soft patch embedding.

    Point p at :math:`x_p \in [0, 1]^d` (the grid's nodes) and token l at the centre
    :math:`c_l` of its patch (spacing :math:`h` per axis) get
    :math:`-2 \sum_i ((x_{p,i} - c_{l,i}) / h_i)^2`: a Gaussian of standard deviation h/2
    around each patch. Added to the input-adaptive logits, it gives the weights a
    geometric starting point (one-hot patches are its sharp limit), which the learned part
    then adapts; without it every token starts as the mean of all points.
    """
    if len(grid) != len(latent_grid):
        raise ValueError(f"grid {grid} and latent grid {latent_grid} differ in dimensions")
    prior = torch.zeros(math.prod(grid), math.prod(latent_grid))
    points = torch.meshgrid(*[torch.linspace(0.0, 1.0, n) for n in grid], indexing="ij")
    centres = torch.meshgrid(*[(torch.arange(m) + 0.5) / m for m in latent_grid],
                             indexing="ij")
    for x, c, m in zip(points, centres, latent_grid):
        prior -= 2.0 * ((x.reshape(-1, 1) - c.reshape(1, -1)) * m) ** 2
    return prior


class GeometryEncoder(nn.Module):
    r"""Geometry-aware encoder (GeoMaNO Eq. 6): grid values to a grid of latent tokens.

    .. math:: Y = \mathrm{GELU}(\mathrm{Linear}(X)),\quad
              W = \mathrm{Softmax}_L(\mathrm{Linear}(Y)),\quad
              Z = \mathrm{LayerNorm}(W^\top Y)

    Each of the P grid points spreads its lifted features over the L latent tokens with
    input-adaptive weights (softmax over tokens, so a one-hot W is patch embedding); the
    tokens keep the ``latent_grid`` arrangement for the scans. The weights are computed per
    point, so the encoder works on any number of points.

    Parameters
    ----------
    in_channels : int
        Channels of the input field (positional features included).
    width : int
        Token channels E.
    latent_grid : tuple of int
        Shape of the latent token grid (1D or 2D).
    """

    def __init__(self, in_channels: int, width: int, latent_grid: tuple[int, ...],
                 grid: tuple[int, ...] | None = None):
        super().__init__()
        self.latent_grid = tuple(latent_grid)
        self.lift = nn.Linear(in_channels, width)
        self.weights = nn.Linear(width, math.prod(self.latent_grid))
        self.norm = nn.LayerNorm(width)
        if grid is not None:
            self.register_buffer("prior", geometric_prior(grid, self.latent_grid),
                                 persistent=False)
        else:
            self.prior = None

    def forward(self, x: torch.Tensor, *, return_points: bool = False):
        """``[batch, in_channels, *grid] -> [batch, width, *latent_grid]`` (and the lifted
        point features ``[batch, P, width]`` if ``return_points``)."""
        z, y = self.encode(x)
        tokens = z.transpose(1, 2).unflatten(2, self.latent_grid)
        return (tokens, y) if return_points else tokens

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[batch, in_channels, *grid]`` -> the tokens channel-last, ``[batch, L, width]``,
        and the lifted point features ``[batch, P, width]``."""
        y = F.gelu(self.lift(x.flatten(2).transpose(1, 2)))       # [b, P, E]
        w = _softmax_last(self._logits(y))                         # [b, P, L]
        return self.norm(w.transpose(1, 2) @ y), y

    def _logits(self, y: torch.Tensor) -> torch.Tensor:
        """``Linear(Y)`` plus the prior, ``[batch, P, L]``."""
        if self.prior is None:
            return self.weights(y)
        # Bias and prior enter as the matrix product's added term, so the large logits are
        # written once rather than once more for the sum.
        shift = (self.prior + self.weights.bias).to(y.dtype)
        batch = y.shape[0]
        return torch.baddbmm(shift.expand(batch, -1, -1), y,
                             self.weights.weight.T.expand(batch, -1, -1))


class GeometryDecoder(nn.Module):
    r"""Decoder (GeoMaNO Eq. 7): latent tokens back to the grid.

    .. math:: W = \mathrm{Softmax}_L(\mathrm{Linear}(Z)),\quad Y = W^\top Z,\quad
              X = \mathrm{LayerNorm}(\mathrm{Linear}(Y))

    ``Linear(Z)`` gives each latent token one logit per grid point (so the decoder is tied to
    ``grid``); the softmax over tokens makes every point a convex combination of tokens. A
    final linear head maps X to the output channels.
    """

    def __init__(self, width: int, out_channels: int, grid: tuple[int, ...],
                 latent_grid: tuple[int, ...] | None = None):
        super().__init__()
        self.grid = tuple(grid)
        self.weights = nn.Linear(width, math.prod(self.grid))
        if latent_grid is not None:
            # [P, L], the encoder's prior: the decoder computes its logits point by token.
            self.register_buffer("prior", geometric_prior(grid, latent_grid), persistent=False)
        else:
            self.prior = None
        self.proj = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, out_channels)

    def forward(self, z: torch.Tensor, points: torch.Tensor | None = None) -> torch.Tensor:
        """``[batch, width, *latent_grid] -> [batch, out_channels, *grid]``.

        ``points`` (``[batch, P, width]``, the encoder's lifted point features), if given,
        are added to X before the head: a skip connection that carries each point's own
        values past the latent bottleneck.
        """
        return self.decode(z.flatten(2).transpose(1, 2), points)

    def decode(self, tokens: torch.Tensor, points: torch.Tensor | None = None) -> torch.Tensor:
        """The same map from channel-last tokens ``[batch, L, width]``.

        Computed point by token (``[batch, P, L]``), so that the softmax runs over contiguous
        memory, with bias and prior entering as the matrix product's added term. Each point's
        weights sum to one, so ``proj(W^T Z) = W^T proj(Z)``: ``proj`` is applied to the L
        tokens instead of the P points.
        """
        batch = tokens.shape[0]
        shift = self.weights.bias[:, None]                          # [P, 1]
        if self.prior is not None:
            shift = shift + self.prior
        shift = shift.to(tokens.dtype).expand(batch, -1, tokens.shape[1])
        logits = torch.baddbmm(shift, self.weights.weight.expand(batch, -1, -1),
                               tokens.transpose(1, 2))             # [b, P, L]
        y = _softmax_last(logits) @ self.proj(tokens)               # [b, P, E]
        x = self.norm(y)
        if points is not None:
            x = x + points
        out = self.head(x)                                         # [b, P, out]
        return out.transpose(1, 2).unflatten(2, self.grid)


def _softmax_last(logits: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, in place where autograd does not need the logits
    (a fresh buffer of this size costs about as much as the softmax itself)."""
    if logits.requires_grad:
        return torch.softmax(logits, dim=-1)
    return torch.softmax(logits, dim=-1, out=logits)
