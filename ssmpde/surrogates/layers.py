r"""Layers shared by several surrogates: layout helpers, coordinate channels, the residual layer.

* :func:`channels_last` / :func:`channels_first`: the ``[batch, channel, *grid]`` layout of the
  models and the ``[batch, *grid, channel]`` layout that ``nn.Linear`` and ``nn.LayerNorm`` act
  on.
* :func:`unit_coordinates` / :func:`with_coordinates`: grid coordinates in [0, 1] as extra
  input channels (GeoMaNO, LaMO, MNO, SS-NO).
* :class:`ResidualLayer`, the pre-norm residual layer of GeoMaNO and LaMO (GeoMaNO Eq. 8):
  S = Z + Mixer(LN(Z)), Z' = S + MLP(LN(S)), on ``[batch, width, *grid]`` or, for GeoMaNO,
  channel-last ``[batch, *grid, width]`` tokens.

The blocks that serve one family of models live beside this module: the selective-scan (S6)
blocks in :mod:`ssmpde.surrogates.s6`, the attention layers of the MNO comparison in
:mod:`ssmpde.surrogates.attention`, GeoMaNO's geometry-aware encoder and decoder in
:mod:`ssmpde.surrogates.geometry`. See ``docs/models/geomano.md`` and ``docs/models/lamo.md``.

References
----------
X. Han, J. Zhang, D. Samaras, F. Hou, H. Qin, "GeoMaNO: Geometric Mamba Neural Operator for
Partial Differential Equations", 2025.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ResidualLayer", "channels_first", "channels_last", "unit_coordinates",
           "with_coordinates"]


def channels_last(x: torch.Tensor) -> torch.Tensor:
    """``[batch, channel, *grid] -> [batch, *grid, channel]`` (a view)."""
    return x.movedim(1, -1)


def channels_first(x: torch.Tensor) -> torch.Tensor:
    """``[batch, *grid, channel] -> [batch, channel, *grid]`` (a view)."""
    return x.movedim(-1, 1)


def unit_coordinates(grid: tuple[int, ...]) -> torch.Tensor:
    """``[len(grid), *grid]``: each point's coordinates in [0, 1], endpoints included."""
    axes = [torch.linspace(0.0, 1.0, n) for n in grid]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=0)


def with_coordinates(x: torch.Tensor, coordinates: torch.Tensor) -> torch.Tensor:
    """``x [batch, channels, *grid]`` with the coordinate channels appended."""
    coords = coordinates.to(x.dtype).expand(x.shape[0], *coordinates.shape)
    return torch.cat([x, coords], dim=1)


class ResidualLayer(nn.Module):
    """Pre-norm residual layer (GeoMaNO Eq. 8): S = Z + Mixer(LN(Z)); Z' = S + MLP(LN(S)).

    The MLP is Linear(E → mlp_ratio · E), GELU, Linear(→ E). ``[batch, width, *grid]`` in
    and out.
    """

    def __init__(self, width: int, mixer: nn.Module, *, mlp_ratio: int = 2):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.mixer = mixer
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(),
                                 nn.Linear(mlp_ratio * width, width))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        s = tokens + self.mixer(channels_first(self.norm1(channels_last(tokens))))
        return s + channels_first(self.mlp(self.norm2(channels_last(s))))

    def forward_channels_last(self, tokens: torch.Tensor) -> torch.Tensor:
        """The same layer on channel-last tokens ``[batch, *grid, width]``, for mixers that
        have a ``forward_channels_last`` of their own (GeoMaNO's): no layout copies between
        the norms, the mixer and the MLP."""
        s = tokens + self.mixer.forward_channels_last(self.norm1(tokens))
        return s + self.mlp(self.norm2(s))
