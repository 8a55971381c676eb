r"""MNO, Mamba Neural Operators: attention against SSMs on the same backbones.

Cheng et al. ("Mamba neural operator: Who wins? Transformers vs. state-space models for
PDEs", arXiv 2410.02113) take three Transformer neural operators and swap their attention for
selective state-space blocks, so that "attention vs Mamba" is compared with everything else
held fixed. This module builds the three backbones with a ``mixer`` switch:

* ``mixer="mamba"``: :class:`~ssmpde.surrogates.s6.BidirectionalS6` for every
  self-attention, :class:`~ssmpde.surrogates.s6.CrossS6` for every cross-attention (the
  released MNO blocks);
* ``mixer="attention"``: the backbone's own attention: Galerkin attention (Cao 2021) in the
  Galerkin Transformer and OFormer, GNOT's normalised linear attention in GNOT;
* ``mixer="softmax"``: plain multi-head softmax attention (self and cross) everywhere.

Backbones (``backbone``), all on a regular grid flattened to a point set with the coordinates
in [0, 1] concatenated, so the model maps ``[batch, in_channels, *grid]`` to
``[batch, out_channels, *grid]`` like the other surrogates (1D and 2D grids):

* ``galerkin``: the Galerkin Transformer (Cao, NeurIPS 2021): lift ``[a, x]`` → ``depth``
  encoder layers ``z ← z + Mixer(z); z ← z + FFN(z)`` (ReLU FFN; no layer norm around them,
  the configuration MNO trains: ``layer_norm: False, attn_norm: True``, the attention
  normalising its own keys and values) → spectral regressor (lift ``[z, x]`` to
  ``regressor_width`` channels, ``regressor_layers`` Fourier layers with ``regressor_modes``
  modes per axis, ``SiLU(K v + W v)``, then a two-layer head; Cao's ``ifft2`` decoder).
* ``gnot``: GNOT (Hao et al., ICML 2023): a trunk MLP embeds the query points (coordinates),
  a branch MLP the input function (values and coordinates); each block is
  ``x ← x + Cross(LN x, LN z); x ← x + LN(FFN(x)); x ← x + Self(LN x); x ← x + LN(FFN(x))``
  with an output MLP. GNOT's geometric mixture of experts (FFN experts weighted by a softmax
  gate of the coordinates) is kept: ``experts = 1`` (the released MNO runs, and the preset)
  is a single FFN, and the gate, which would be a softmax over one expert (identically 1, zero
  gradient), is then left out.
* ``oformer``: OFormer (Li, Meidani, Farimani, TMLR 2023): encoder ``Linear([a, x])`` →
  ``depth`` layers ``z ← LN z; z ← z + Self(z); z ← LN z; z ← z + FFN(z)`` → a linear
  map to ``latent_width``; decoder: Gaussian Fourier features of the query coordinates
  (fixed random frequencies of standard deviation ``fourier_scale``) and an MLP give the
  queries, one cross layer ``q ← q + Cross(q, z); q ← q + FFN(q)`` reads the encoded input,
  and an MLP of ``[q, x]`` gives the output (the Darcy decoder, ``PointWiseDecoder2DSimple``).
  The query points are the grid points themselves. Its feed-forwards are GEGLU, as released:
  ``Linear(E → 2h)``, ``GELU(a) ⊙ g`` of the two halves, ``Linear(h → E)``, h =
  ``mlp_ratio · E``.

One registered model with a ``backbone`` option, rather than three: the three share the
config, the mixers and the comparison they exist for, and ``mixer`` is an option in the same
way. Fields that belong to one backbone say so and are ignored by the others.

Presets (64² PDEBench-like Darcy, 1 → 1 channel, ``mixer="mamba"``; set ``mixer`` to compare):
``galerkin``, ``gnot``, ``oformer``, and ``1d`` (the Galerkin Transformer on a 1024-point
line; the paper has no 1D problem). Their sizes are scaled down from the released Darcy
configurations for CPU training; the released ones are reached with overrides:

* Galerkin: width 256, 6 layers, 4 heads, FFN 256 (``mlp_ratio=1``), regressor 32 channels,
  2 layers, 12 modes: ``width=256, depth=6, mlp_ratio=1``;
* GNOT: width 96, 4 layers, 8 heads, MLPs of 4 layers, FFN ratio 2, 1 expert:
  ``width=96, depth=4, heads=8, mlp_layers=4``;
* OFormer: encoder width 96, 6 layers, 4 heads, latent 256, FFN ratio 1, Fourier-feature
  scale 0.5: ``width=96, depth=6, latent_width=256``.

The S6 blocks use state 16 and expand 2 as released (``state_size``, ``expand``).

Parameters of the presets (mamba / attention / softmax): ``galerkin`` 1,413,537 / 1,322,401 /
1,321,377 (about 1.18 M of them in the spectral regressor); ``gnot`` 282,689 / 172,097 /
172,097; ``oformer`` 478,337 / 300,673 / 299,137; ``1d`` (mamba) 297,153. An S6 block of width
E has 2·(2E)·E + 2·(R + 2N)·2E + 2·2E·R + 2·2E·(N + 2) + 2·2E + 2E·E parameters against the
4·(E² + E) of a linear or softmax attention layer.

At the released sizes (the overrides above) the Mamba models have the release's parameter
counts: Galerkin 4,854,177 and OFormer 1,626,465 exactly; GNOT 1,135,777, the release's
1,287,173 less two things that never train: the coordinate gate MLP the release builds in
every block even for one expert (4 × 37,825 parameters; a softmax over one expert is 1
whatever its input, so they get no gradient) and the 96 weights of the trunk MLP's third
input, which the release feeds the dataset's empty parameter vector (a constant 0).
``docs/models/mno.md`` lists the attention mixers' counts against the release's.

Notes
-----
Further differences from the released code, this module's choices:

* dropout is left out (the trainer has none to switch off at evaluation);
* GNOT builds no gate for one expert and no trunk input for the empty parameter vector
  (above);
* Galerkin attention does not concatenate the coordinates to every head, and its weights
  keep PyTorch's initialisation (see :class:`~ssmpde.surrogates.attention.GalerkinAttention`);
  Cao's Darcy model also has a convolutional down/up-scaler, which the MNO runs disable at
  64² (``downscaler_size: null``) and which is not built here;
* OFormer's attention has ``heads`` heads of ``width`` channels each (bias-free q, k, v
  maps to ``heads · width``), instance normalisation of keys and values and rotary relative
  position embeddings; ``mixer="attention"`` uses the Galerkin attention above (heads
  splitting ``width``, layer norms, coordinates in the features) for it too;
* Cross S6 with a context of another length resamples the context projections (see
  :class:`~ssmpde.surrogates.s6.CrossS6`); here queries and context are the same grid.

References
----------
C.-W. Cheng, J. Huang, Y. Zhang, G. Yang, C.-B. Schönlieb, A. I. Aviles-Rivero, "Mamba
neural operator: Who wins? Transformers vs. state-space models for PDEs", arXiv:2410.02113
(code: github.com/Math-ML-X/Mamba-Neural-Operator).
S. Cao, "Choose a Transformer: Fourier or Galerkin", NeurIPS 2021.
Z. Hao et al., "GNOT: A general neural operator transformer for operator learning", ICML 2023.
Z. Li, K. Meidani, A. B. Farimani, "Transformer for partial differential equations' operator
learning", TMLR 2023.
A. Gu and T. Dao, "Mamba: Linear-time sequence modeling with selective state spaces", 2023.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ssmpde.kernels import BACKENDS

from .base import ModelConfig, Surrogate, check_positive_ints, check_sizes, register_model
from .attention import GalerkinAttention, NormalizedLinearAttention, SoftmaxAttention
from .layers import unit_coordinates
from .s6 import BidirectionalS6, CrossS6

__all__ = ["BACKBONES", "MIXERS", "MNO", "MNOConfig", "SpectralRegressor"]

#: The Transformer neural operators whose attention is swapped.
BACKBONES = ("galerkin", "gnot", "oformer")
#: Token mixers: the MNO S6 blocks, the backbone's own attention, plain softmax attention.
MIXERS = ("mamba", "attention", "softmax")

#: The attention each backbone was published with (``mixer="attention"``).
_OWN_ATTENTION = {"galerkin": GalerkinAttention, "gnot": NormalizedLinearAttention,
                  "oformer": GalerkinAttention}


@dataclass(frozen=True)
class MNOConfig(ModelConfig):
    """Configuration of :class:`MNO`; validated on construction.

    Attributes
    ----------
    in_channels, out_channels : int
        Channels of the input and output fields.
    grid : tuple of int
        The data grid, ``(height, width)`` or ``(length,)``.
    backbone : {"galerkin", "gnot", "oformer"}
    mixer : {"mamba", "attention", "softmax"}
        Bidirectional S6 / Cross S6, the backbone's own attention, or softmax attention.
    width : int
        Token channels (OFormer: of the encoder).
    depth : int
        Encoder layers (Galerkin, OFormer) or blocks (GNOT, one cross and one self mixer each).
    heads : int
        Attention heads; must divide ``width`` (and ``latent_width``) whatever the mixer, so
        that switching ``mixer`` never turns a valid config into an invalid one.
    mlp_ratio : int
        Hidden width of the feed-forward layers as a multiple of their width.
    state_size : int
        S6 state per channel (d_state, 16 in MNO).
    expand : int
        S6 inner width as a multiple of the width (2 in MNO).
    cross_ratio : float
        q of Cross S6, the weight of the context's selection parameters (1 in the released
        code, which adds them).
    experts : int
        GNOT: FFN experts of the geometric mixture of experts (1: a plain FFN).
    mlp_layers : int
        GNOT: hidden layers of the trunk, branch and output MLPs.
    latent_width : int
        OFormer: channels of the encoded input and of the decoder (even: Fourier features
        come in sine/cosine pairs).
    fourier_scale : float
        OFormer: standard deviation of the Gaussian Fourier-feature frequencies.
    regressor_width, regressor_layers : int
        Galerkin: channels and Fourier layers of the spectral regressor.
    regressor_modes : tuple of int
        Galerkin: Fourier modes per axis of the regressor (12 in the paper), capped at what the
        grid holds (first axis: both signs, up to the grid; last axis: up to ``n // 2 + 1``).
    scan_backend : {"auto", "reference", "cpu", "triton"}
        Which selective-scan implementation runs; all compute the same function.
    """

    in_channels: int = 1
    out_channels: int = 1
    grid: tuple[int, ...] = (64, 64)
    backbone: str = "galerkin"
    mixer: str = "mamba"
    width: int = 64
    depth: int = 4
    heads: int = 4
    mlp_ratio: int = 2
    state_size: int = 16
    expand: int = 2
    cross_ratio: float = 1.0
    experts: int = 1
    mlp_layers: int = 2
    latent_width: int = 128
    fourier_scale: float = 0.5
    regressor_width: int = 32
    regressor_layers: int = 2
    regressor_modes: tuple[int, ...] = (12, 12)
    scan_backend: str = "auto"

    spatial_fields: ClassVar[tuple[str, ...]] = ("regressor_modes",)
    label: ClassVar[str] = "MNO"

    def __post_init__(self):
        check_positive_ints("MNO", self, (
            "in_channels", "out_channels", "width", "depth", "heads", "mlp_ratio", "state_size",
            "expand", "experts", "mlp_layers", "latent_width", "regressor_width",
            "regressor_layers"))
        check_sizes("MNO", self, ("grid", "regressor_modes"), (1, 2))
        if self.backbone not in BACKBONES:
            raise ValueError(f"unknown MNO backbone {self.backbone!r}; choose one of "
                             f"{', '.join(BACKBONES)}")
        if self.mixer not in MIXERS:
            raise ValueError(f"unknown MNO mixer {self.mixer!r}; choose one of "
                             f"{', '.join(MIXERS)}")
        if len(self.regressor_modes) != len(self.grid):
            raise ValueError(f"MNO regressor_modes {self.regressor_modes} must have one entry "
                             f"per grid dimension {self.grid}")
        for name in ("width", "latent_width"):
            if getattr(self, name) % self.heads:
                raise ValueError(f"MNO heads={self.heads} must divide {name}="
                                 f"{getattr(self, name)} (each attention head takes "
                                 f"{name} / heads channels)")
        if self.latent_width % 2:
            raise ValueError(f"MNO latent_width={self.latent_width} must be even (OFormer's "
                             "Fourier features are sine/cosine pairs)")
        for name in ("cross_ratio", "fourier_scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise ValueError(f"MNO {name} must be a finite number, got {value!r}")
        if self.fourier_scale <= 0:
            raise ValueError(f"MNO fourier_scale must be positive, got {self.fourier_scale!r}")
        if self.scan_backend not in BACKENDS:
            raise ValueError(f"unknown scan_backend {self.scan_backend!r}; choose one of "
                             f"{BACKENDS}")


def _self_mixer(config: MNOConfig, width: int) -> nn.Module:
    """The mixer that replaces self-attention: ``mixer(tokens)``."""
    if config.mixer == "mamba":
        return BidirectionalS6(width, state_size=config.state_size, expand=config.expand,
                               scan_backend=config.scan_backend)
    if config.mixer == "softmax":
        return SoftmaxAttention(width, config.heads)
    return _OWN_ATTENTION[config.backbone](width, config.heads)


def _cross_mixer(config: MNOConfig, width: int) -> nn.Module:
    """The mixer that replaces cross-attention: ``mixer(tokens, context)``."""
    if config.mixer == "mamba":
        return CrossS6(width, state_size=config.state_size, expand=config.expand,
                       ratio=config.cross_ratio, scan_backend=config.scan_backend)
    return _self_mixer(config, width)   # the attention layers take an optional context


def _feed_forward(width: int, hidden: int, activation: type[nn.Module]) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width, hidden), activation(), nn.Linear(hidden, width))


class _GEGLU(nn.Module):
    r"""Gated GELU (Shazeer 2020): the last axis split into halves a and g,
    :math:`\mathrm{GELU}(a) \odot g`, so ``[..., 2h] -> [..., h]``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, g = x.chunk(2, dim=-1)
        return F.gelu(a) * g


def _gated_feed_forward(width: int, hidden: int) -> nn.Sequential:
    r"""OFormer's feed-forward: Linear(E → 2h), GEGLU, Linear(h → E) (the released code's
    ``FeedForward``; 2·E·h + E·h + 2h + E parameters against the E·h + E·h + h + E of a
    plain MLP)."""
    return nn.Sequential(nn.Linear(width, 2 * hidden), _GEGLU(), nn.Linear(hidden, width))


# ---------------------------------------------------------------------------------------
# Galerkin Transformer.
# ---------------------------------------------------------------------------------------
def _spectral_modes(grid: tuple[int, ...], modes: tuple[int, ...]) -> list[tuple[int, int]]:
    """Per axis, (non-negative, negative) frequencies kept by the real FFT of ``grid``.

    The last (rfft) axis has ``n // 2 + 1`` non-negative frequencies and no negative ones;
    an earlier axis keeps up to ``m`` of each sign, as the FNO's two corners, never more than
    the axis has (``⌈n/2⌉`` and ``⌊n/2⌋``), so no frequency is counted twice.
    """
    kept = []
    for axis, (n, m) in enumerate(zip(grid, modes)):
        if axis == len(grid) - 1:
            kept.append((min(m, n // 2 + 1), 0))
        else:
            kept.append((min(m, (n + 1) // 2), min(m, n // 2)))
    return kept


class _SpectralConv(nn.Module):
    r"""Fourier layer :math:`(Kv)(x) = \mathcal{F}^{-1}\big(R \cdot \mathcal{F}v\big)(x)` with
    a complex channel-mixing weight R per kept mode (Li et al., 2021), on a 1D or 2D grid.

    Weights are stored as real tensors with a trailing (real, imaginary) axis: safetensors
    and ``.double()`` handle them like any other parameter.
    """

    def __init__(self, channels: int, grid: tuple[int, ...], modes: tuple[int, ...]):
        super().__init__()
        self.grid = tuple(grid)
        kept = _spectral_modes(self.grid, modes)
        scale = 1.0 / (channels * channels)
        if len(self.grid) == 1:
            blocks = [(kept[0][0],)]
        else:
            (positive, negative), (last, _) = kept
            blocks = [(positive, last)] + ([(negative, last)] if negative else [])
        self.weights = nn.ParameterList(
            nn.Parameter(scale * torch.rand(channels, channels, *block, 2)) for block in blocks)
        self.kept = kept

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        """``[batch, channels, *grid] -> [batch, channels, *grid]``."""
        axes = tuple(range(-len(self.grid), 0))
        spectrum = torch.fft.rfftn(v, dim=axes)
        out = torch.zeros_like(spectrum)
        weights = [torch.view_as_complex(w) for w in self.weights]
        if len(self.grid) == 1:
            m = self.kept[0][0]
            out[..., :m] = torch.einsum("bix,iox->box", spectrum[..., :m], weights[0])
        else:
            (positive, negative), (last, _) = self.kept
            out[..., :positive, :last] = torch.einsum(
                "bixy,ioxy->boxy", spectrum[..., :positive, :last], weights[0])
            if negative:
                out[..., -negative:, :last] = torch.einsum(
                    "bixy,ioxy->boxy", spectrum[..., -negative:, :last], weights[1])
        return torch.fft.irfftn(out, s=self.grid, dim=axes)


class SpectralRegressor(nn.Module):
    r"""The Galerkin Transformer's spectral decoder (Cao 2021, ``decoder_type="ifft2"``).

    .. math:: h_0 = W_0 [z, x],\qquad h_{j+1} = \mathrm{SiLU}(K_j h_j + W_j h_j),\qquad
              u = W_2\,\mathrm{SiLU}(W_1 h_L)

    with Fourier layers :math:`K_j` (``modes`` per axis) on the grid and pointwise linear maps
    :math:`W_j`; the head's hidden width is 2·d times the regressor's on a d-dimensional grid
    (128 for the released 32 channels in 2D).

    Parameters
    ----------
    features : int
        Point features in (encoder width plus coordinates).
    width : int
        Channels of the Fourier layers.
    out_channels : int
    grid, modes : tuple of int
    layers : int

    Shapes
    ------
    ``[batch, points, features] -> [batch, points, out_channels]``, points in row-major grid
    order.
    """

    def __init__(self, features: int, width: int, out_channels: int, grid: tuple[int, ...],
                 modes: tuple[int, ...], layers: int):
        super().__init__()
        self.grid = tuple(grid)
        self.lift = nn.Linear(features, width)
        self.spectral = nn.ModuleList(_SpectralConv(width, self.grid, modes)
                                      for _ in range(layers))
        self.pointwise = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        # The released head (Cao's ``dim_feedforward = 2 · spacial_dim · freq_dim``).
        hidden = 2 * len(self.grid) * width
        self.head = nn.Sequential(nn.Linear(width, hidden), nn.SiLU(),
                                  nn.Linear(hidden, out_channels))

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        h = self.lift(points)                                            # [b, P, w]
        for spectral, pointwise in zip(self.spectral, self.pointwise):
            field = spectral(h.transpose(1, 2).unflatten(2, self.grid))  # [b, w, *grid]
            h = F.silu(field.flatten(2).transpose(1, 2) + pointwise(h))
        return self.head(h)


class _GalerkinLayer(nn.Module):
    """Cao's encoder layer as MNO trains it: z ← z + Mixer(z); z ← z + FFN(z) (ReLU)."""

    def __init__(self, width: int, mixer: nn.Module, hidden: int):
        super().__init__()
        self.mixer = mixer
        self.ffn = _feed_forward(width, hidden, nn.ReLU)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z = z + self.mixer(z)
        return z + self.ffn(z)


class GalerkinTransformer(nn.Module):
    """Galerkin Transformer backbone: lift, encoder layers, spectral regressor.

    ``values [batch, P, in_channels]``, ``coordinates [batch, P, d]`` ->
    ``[batch, P, out_channels]``.
    """

    def __init__(self, config: MNOConfig):
        super().__init__()
        c, dims = config, len(config.grid)
        self.lift = nn.Linear(c.in_channels + dims, c.width)
        self.layers = nn.ModuleList(
            _GalerkinLayer(c.width, _self_mixer(c, c.width), c.mlp_ratio * c.width)
            for _ in range(c.depth))
        self.regressor = SpectralRegressor(c.width + dims, c.regressor_width, c.out_channels,
                                           c.grid, c.regressor_modes, c.regressor_layers)

    def forward(self, values: torch.Tensor, coordinates: torch.Tensor) -> torch.Tensor:
        z = self.lift(torch.cat([values, coordinates], dim=-1))
        for layer in self.layers:
            z = layer(z)
        return self.regressor(torch.cat([z, coordinates], dim=-1))


# ---------------------------------------------------------------------------------------
# GNOT.
# ---------------------------------------------------------------------------------------
class _ResidualMLP(nn.Module):
    """GNOT's MLP: GELU(W_in x), then ``layers`` residual GELU layers, then W_out."""

    def __init__(self, features: int, hidden: int, out: int, layers: int):
        super().__init__()
        self.pre = nn.Linear(features, hidden)
        self.hidden = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(layers))
        self.post = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.pre(x))
        for layer in self.hidden:
            x = F.gelu(layer(x)) + x
        return self.post(x)


class _GeometricExperts(nn.Module):
    r"""GNOT's geometric mixture of experts: :math:`\sum_m g_m(x)\,\mathrm{FFN}_m(z)` with
    :math:`g = \mathrm{softmax}(\mathrm{MLP}(x))` of the point coordinates x; one expert is a
    plain FFN (no gate)."""

    def __init__(self, width: int, hidden: int, experts: int, dims: int):
        super().__init__()
        self.experts = nn.ModuleList(_feed_forward(width, hidden, nn.GELU)
                                     for _ in range(experts))
        self.gate = None
        if experts > 1:
            self.gate = nn.Sequential(nn.Linear(dims, hidden), nn.GELU(),
                                      nn.Linear(hidden, hidden), nn.GELU(),
                                      nn.Linear(hidden, experts))

    def forward(self, z: torch.Tensor, coordinates: torch.Tensor) -> torch.Tensor:
        if self.gate is None:
            return self.experts[0](z)
        weights = self.gate(coordinates).softmax(dim=-1)                  # [b, P, m]
        outputs = torch.stack([expert(z) for expert in self.experts], dim=-1)
        return (outputs * weights.unsqueeze(2)).sum(dim=-1)


class _GNOTBlock(nn.Module):
    """x ← x + Cross(LN x, LN z); x ← x + LN(MoE(x)); x ← x + Self(LN x); x ← x + LN(MoE(x))."""

    def __init__(self, config: MNOConfig):
        super().__init__()
        c, width, dims = config, config.width, len(config.grid)
        hidden = c.mlp_ratio * width
        self.norm_query = nn.LayerNorm(width)
        self.norm_context = nn.LayerNorm(width)
        self.cross = _cross_mixer(c, width)
        self.norm_experts1 = nn.LayerNorm(width)
        self.experts1 = _GeometricExperts(width, hidden, c.experts, dims)
        self.norm_self = nn.LayerNorm(width)
        self.mixer = _self_mixer(c, width)
        self.norm_experts2 = nn.LayerNorm(width)
        self.experts2 = _GeometricExperts(width, hidden, c.experts, dims)

    def forward(self, x: torch.Tensor, context: torch.Tensor,
                coordinates: torch.Tensor) -> torch.Tensor:
        x = x + self.cross(self.norm_query(x), self.norm_context(context))
        x = x + self.norm_experts1(self.experts1(x, coordinates))
        x = x + self.mixer(self.norm_self(x))
        return x + self.norm_experts2(self.experts2(x, coordinates))


class GNOT(nn.Module):
    """GNOT backbone: trunk (query coordinates) and branch (input function) MLPs, blocks of
    cross and self mixers, output MLP.

    ``values [batch, P, in_channels]``, ``coordinates [batch, P, d]`` ->
    ``[batch, P, out_channels]``.
    """

    def __init__(self, config: MNOConfig):
        super().__init__()
        c, dims = config, len(config.grid)
        self.trunk = _ResidualMLP(dims, c.width, c.width, c.mlp_layers)
        self.branch = _ResidualMLP(c.in_channels + dims, c.width, c.width, c.mlp_layers)
        self.blocks = nn.ModuleList(_GNOTBlock(c) for _ in range(c.depth))
        self.head = _ResidualMLP(c.width, c.width, c.out_channels, c.mlp_layers)

    def forward(self, values: torch.Tensor, coordinates: torch.Tensor) -> torch.Tensor:
        x = self.trunk(coordinates)
        context = self.branch(torch.cat([values, coordinates], dim=-1))
        for block in self.blocks:
            x = block(x, context, coordinates)
        return self.head(x)


# ---------------------------------------------------------------------------------------
# OFormer.
# ---------------------------------------------------------------------------------------
class _OFormerLayer(nn.Module):
    """OFormer's encoder layer (``use_ln=True``): z ← LN z; z ← z + Mixer(z); z ← LN z;
    z ← z + FFN(z) (the GEGLU feed-forward)."""

    def __init__(self, width: int, mixer: nn.Module, hidden: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.mixer = mixer
        self.norm2 = nn.LayerNorm(width)
        self.ffn = _gated_feed_forward(width, hidden)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        z = self.norm1(z)
        z = z + self.mixer(z)
        z = self.norm2(z)
        return z + self.ffn(z)


class OFormer(nn.Module):
    r"""OFormer backbone: self-mixer encoder of the input, cross-mixer decoder at the query
    points.

    Query embedding: :math:`\gamma(x) = [\sin 2\pi x\Phi, \cos 2\pi x\Phi]` with fixed
    :math:`\Phi \sim \mathcal{N}(0, s^2)^{d \times L/2}` (Tancik et al., 2020; a persistent
    buffer, saved with the weights), then two bias-free linear layers with a GELU.

    ``values [batch, P, in_channels]``, ``coordinates [batch, P, d]`` ->
    ``[batch, P, out_channels]``.
    """

    def __init__(self, config: MNOConfig):
        super().__init__()
        c, dims, latent = config, len(config.grid), config.latent_width
        self.embed = nn.Linear(c.in_channels + dims, c.width, bias=False)
        self.layers = nn.ModuleList(
            _OFormerLayer(c.width, _self_mixer(c, c.width), c.mlp_ratio * c.width)
            for _ in range(c.depth))
        self.to_latent = nn.Linear(c.width, latent, bias=False)
        self.register_buffer("frequencies", c.fourier_scale * torch.randn(dims, latent // 2))
        self.query_embed = nn.Sequential(nn.Linear(latent, latent, bias=False), nn.GELU(),
                                         nn.Linear(latent, latent, bias=False))
        self.cross = _cross_mixer(c, latent)
        self.cross_ffn = _gated_feed_forward(latent, c.mlp_ratio * latent)
        self.head = nn.Sequential(nn.Linear(latent + dims, latent, bias=False), nn.GELU(),
                                  nn.Linear(latent, latent // 2, bias=False), nn.GELU(),
                                  nn.Linear(latent // 2, c.out_channels))

    def forward(self, values: torch.Tensor, coordinates: torch.Tensor) -> torch.Tensor:
        z = self.embed(torch.cat([values, coordinates], dim=-1))
        for layer in self.layers:
            z = layer(z)
        z = self.to_latent(z)
        angle = 2 * math.pi * coordinates @ self.frequencies.to(coordinates.dtype)
        q = self.query_embed(torch.cat([angle.sin(), angle.cos()], dim=-1))
        q = q + self.cross(q, z)
        q = q + self.cross_ffn(q)
        return self.head(torch.cat([q, coordinates], dim=-1))


_BACKBONE_CLASSES = {"galerkin": GalerkinTransformer, "gnot": GNOT, "oformer": OFormer}

#: Backbone → (weights that changed shape when MNO followed the released code, the change):
#: the first dimension of these weights doubled.
_EARLIER_LAYOUT = {
    "galerkin": (r"regressor\.head\.0\.weight$",
                 "the 2D Galerkin regressor head is now 4 times the regressor's width (it "
                 "was 2)"),
    "oformer": (r"ffn\.0\.weight$",
                "OFormer's feed-forwards are now GEGLU, Linear E → 2h (they were plain GELU "
                "MLPs, Linear E → h)"),
}


@register_model("mno")
class MNO(Surrogate):
    r"""Mamba Neural Operator comparison model: one of three Transformer neural-operator
    backbones with S6, its own attention or softmax attention as the token mixer; see the
    module docstring.

    .. math:: u = \mathcal{B}_{\text{mixer}}\big(a(x_p), x_p\big)_{p = 1..P}

    for the backbone :math:`\mathcal{B}` on the P grid points :math:`x_p \in [0, 1]^d`
    (row-major order: the order the S6 blocks scan).

    Parameters
    ----------
    config : MNOConfig

    Shapes
    ------
    ``[batch, in_channels, *grid] -> [batch, out_channels, *grid]``.

    Examples
    --------
    >>> from ssmpde.surrogates import build_model
    >>> model = build_model("mno", preset="gnot", grid=(9, 9), width=16, depth=1)
    >>> model(torch.randn(2, 1, 9, 9)).shape
    torch.Size([2, 1, 9, 9])
    """

    Config = MNOConfig
    PRESETS = {
        "galerkin": dict(in_channels=1, out_channels=1, grid=(64, 64), backbone="galerkin",
                         mixer="mamba", width=64, depth=4, heads=4, mlp_ratio=2,
                         regressor_width=32, regressor_layers=2, regressor_modes=(12, 12)),
        "gnot": dict(in_channels=1, out_channels=1, grid=(64, 64), backbone="gnot",
                     mixer="mamba", width=64, depth=2, heads=4, mlp_ratio=2, mlp_layers=2,
                     experts=1),
        "oformer": dict(in_channels=1, out_channels=1, grid=(64, 64), backbone="oformer",
                        mixer="mamba", width=64, depth=4, heads=4, mlp_ratio=1,
                        latent_width=128, fourier_scale=0.5),
        # 1D problems (Burgers, KS): not in the paper, this package's choice.
        "1d": dict(in_channels=1, out_channels=1, grid=(1024,), backbone="galerkin",
                   mixer="mamba", width=64, depth=4, heads=4, mlp_ratio=2,
                   regressor_width=32, regressor_layers=2, regressor_modes=(16,)),
    }

    def __init__(self, config: MNOConfig):
        super().__init__(config)
        coordinates = unit_coordinates(config.grid).flatten(1).T.contiguous()   # [P, d]
        self.register_buffer("coordinates", coordinates, persistent=False)
        self.backbone = _BACKBONE_CLASSES[config.backbone](config)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """:meth:`torch.nn.Module.load_state_dict`, refusing with a clear RuntimeError the
        weights of ssmpde's MNO from before it built the released layers (see
        :data:`_EARLIER_LAYOUT`): they do not fit, and no option rebuilds the old layers."""
        if self.config.backbone in _EARLIER_LAYOUT:
            pattern, change = _EARLIER_LAYOUT[self.config.backbone]
            own = self.state_dict()
            stale = [name for name, saved in state_dict.items()
                     if re.search(pattern, name) and name in own
                     and 2 * saved.shape[0] == own[name].shape[0]
                     and saved.shape[1:] == own[name].shape[1:]]
            if stale:
                names = ", ".join(stale[:2]) + (f" and {len(stale) - 2} more"
                                                if len(stale) > 2 else "")
                raise RuntimeError(
                    f"these MNO weights were written by an earlier ssmpde: {change}, as in "
                    f"the released MNO code, and {names} in these weights are half as wide; "
                    "no option builds the earlier layers, so retrain")
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, in_channels, *grid] -> [batch, out_channels, *grid]``."""
        c = self.config
        x = self.check_input(x)
        values = x.flatten(2).transpose(1, 2)                              # [b, P, in]
        coordinates = self.coordinates.to(x.dtype).expand(x.shape[0], -1, -1)
        out = self.backbone(values, coordinates)                           # [b, P, out]
        return out.transpose(1, 2).unflatten(2, c.grid)

    def extra_repr(self) -> str:
        c = self.config
        return (f"backbone={c.backbone!r}, mixer={c.mixer!r}, grid={c.grid}, width={c.width}, "
                f"depth={c.depth}, parameters={sum(p.numel() for p in self.parameters()):,}")
