r"""LaMO, the Latent Mamba Operator (Tiwari, Dutta, Krishnan, Prathosh; arXiv 2505.19105).

Pipeline on regular grids (the paper's Darcy and Navier–Stokes models):

1. the input fields with the grid coordinates in [0, 1] concatenated as channels;
2. zero padding on the right/bottom to a multiple of ``pad_multiple`` (a multiple of the
   patch; 8 gives the paper's padded grids, 85 → 88 for Darcy and 64 unchanged for
   Navier–Stokes);
3. ViT patch embedding: a convolution with kernel = stride = ``patch``, then LayerNorm
   (44² = 1936 tokens for Darcy with patch 2, 32² = 1024 for Navier–Stokes on 64²), plus a
   learnable positional embedding sized from the padded grid;
4. ``depth`` pre-norm residual layers (Eq. 11–12) :math:`S = Z + \mathrm{SSM}(\mathrm{LN}(Z))`,
   :math:`Z' = S + \mathrm{MLP}(\mathrm{LN}(S))`, MLP ratio 4 with GELU;
5. LayerNorm, a linear map of every token to ``patch^d · out_channels`` values, the inverse of
   the patching (a pixel shuffle), and the crop back to the grid.

The SSM (:class:`SSDMixer`, ``mamba_4D`` in the released code) is a Mamba-2 / SSD multi-head
scan (Dao & Gu, 2024) over the token grid, traversed VMamba-style (Liu et al., 2024) in
``directions`` orders whose outputs are summed. Time-dependent data fold the history into
channels (``input_layout = "channels"``, as GeoMaNO): ``in_channels = window · fields +
conditioning``, and the model predicts the next frame.

Presets (``PRESETS``):

* ``darcy``: 85² → 85², 1 → 1 channel, width 64, depth 8, state 64, four directions:
  1,145,924 parameters (the paper: "about 1.15 M");
* ``navier-stokes``: 64², 10 frames folded into channels → the next frame, width 256,
  depth 8, state 64: 10,061,060 parameters (the paper: "about 10 M");
* ``small``: the Darcy grid with width 32 and depth 4 (CPU experiments);
* ``1d``: a 1024-point line (Burgers, KS), width 64, depth 8, the two directions a line has.
  The paper has no 1D problem: this preset is this package's choice.

Training recipe (the paper's settings, all :class:`ssmpde.surrogates.train.TrainConfig` fields):
AdamW with OneCycleLR, peak lr 5e-4, 500 epochs; relative L2 loss (all of it is
``--recipe paper``). Darcy (the release clips the gradient at 0.1 on the batch *sum* of the
errors: 0.1 / 4 on the batch mean ssmpde's loss takes)::

    ssmpde train lamo --preset darcy --data darcy.nc --out runs/lamo-darcy --epochs 500 \
        --batch-size 4 --lr 5e-4 --weight-decay 1e-5 --max-grad-norm 0.025 \
        --gradient-loss-weight 0.1 --schedule onecycle

Navier–Stokes (10 frames in, one frame out, teacher forcing; the test error is the
autoregressive rollout over the remaining frames, 10 → 10 on the paper's data)::

    ssmpde train lamo --preset navier-stokes --data ns.nc --out runs/lamo-ns --epochs 500 \
        --batch-size 2 --lr 5e-4 --weight-decay 0.05 --window 10 --horizon 1 \
        --mode teacher-forcing --schedule onecycle

The Navier–Stokes command sets no ``--max-grad-norm``: the trainer's default (1.0) applies.
See ``docs/models/lamo.md`` and ``docs/models/training.md``.

Notes
-----
Where the paper's text and the released code disagree this module follows the code; the
other points are this module's choices, stated so a reader need not guess:

* heads: the code makes ``⌈width / 16⌉`` heads per direction (its ``dt_rank``, computed from
  the block width, not the expanded one), each of ``expand · width / heads`` channels: 4 heads of
  32 channels for Darcy, 16 for Navier–Stokes. The paper's text says one head for Darcy.
  ``heads`` in the config overrides the rule.
* activations: the gate is ``GELU(z)`` and the activation after the depthwise convolution is
  GELU too (the code's ``act_layer``); the paper writes SiLU.
* B and C are projected per direction, one group of the SSD scan per direction shared by that
  direction's heads, as in the code; Δ is projected per head (no low-rank up-projection).
* initialisation: A = −1 (``A_log = 0``), ``dt_bias ~ U[0, 0.1)``, D = 1 per head and
  channel, positional embedding zero, as in the ``mamba_4D`` code we consulted (an adaptation
  of the released model); linear and convolution layers keep PyTorch's defaults.
* the de-patchify head has an ordinary output bias (``out · patch^d`` values); the code adds
  a ``width``-sized bias to the tokens before its linear map, and keeps an unused 2-parameter
  ``placeholder``: its counts are 62 (Darcy) and 254 (Navier–Stokes) parameters above ours.
* ablations: VMamba's cross-scan helpers, which the code calls, keep four parameter groups
  in their unidirectional/bidirectional modes (scanning repeated orders), as we read them;
  here ``directions = 1`` or ``2`` has one or two groups (row-major, and its reverse), an
  ablation of the directions alone, with fewer parameters.

References
----------
K. Tiwari, N. Dutta, N. M. A. Krishnan, Prathosh A. P., "Latent Mamba Operator for Partial
Differential Equations", arXiv:2505.19105, 2025 (code: github.com/M3RG-IITD/LaMO).
T. Dao and A. Gu, "Transformers are SSMs: Generalized models and efficient algorithms through
structured state space duality", ICML 2024.
Y. Liu et al., "VMamba: Visual state space model", NeurIPS 2024.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ssmpde.kernels.cross_scan import traverse, untraverse
from ssmpde.kernels.ssd import SSD_BACKENDS, ssd_scan

from .base import ModelConfig, Surrogate, check_positive_ints, check_sizes, register_model
from .layers import (
    ResidualLayer,
    channels_first,
    channels_last,
    unit_coordinates,
    with_coordinates,
)

__all__ = ["LaMO", "LaMOConfig", "SSDMixer", "scan_orders"]


def scan_orders(directions: int, spatial_dims: int) -> tuple[int, ...]:
    """The :func:`ssmpde.kernels.cross_scan.traverse` orders scanned for ``directions``.

    1: row-major; 2: row-major and its reverse (on a line: forward and backward); 4 (2D grids
    only): row-major, column-major and their reverses, VMamba's cross scan.
    """
    orders = {1: (0,), 2: (0, 2), 4: (0, 1, 2, 3)}
    if (isinstance(directions, bool) or directions not in orders
            or (directions == 4 and spatial_dims != 2)):
        allowed = "1, 2 or 4" if spatial_dims == 2 else "1 or 2 (a line has two orders)"
        raise ValueError(f"directions must be {allowed} on a {spatial_dims}D grid, got "
                         f"{directions!r}")
    return orders[directions]


@dataclass(frozen=True)
class LaMOConfig(ModelConfig):
    """Configuration of :class:`LaMO`; validated on construction.

    Attributes
    ----------
    in_channels, out_channels : int
        Channels of the input and output fields (time-dependent data: frames folded into
        channels).
    grid : tuple of int
        The data grid, ``(height, width)`` or ``(length,)``.
    width : int
        Token channels E (the paper's embedding dimension).
    depth : int
        Number of residual layers.
    state_size : int
        SSD state per head channel (d_state, 64 in the paper).
    expand : int
        Inner width of the SSM block, ``expand · width``.
    patch : int
        Patch edge in grid points (the same along every axis).
    pad_multiple : int
        The grid is zero-padded on the right/bottom up to a multiple of this (a multiple of
        ``patch``). The released code sets the padded size by hand (88 for the 85² Darcy grid,
        1936 tokens); 8 reproduces it and leaves 64² unchanged. ``pad_multiple = patch`` pads
        as little as possible.
    mlp_ratio : int
        Hidden width of each layer's MLP as a multiple of ``width``.
    directions : {1, 2, 4}
        Scan orders summed in each SSM block (see :func:`scan_orders`); 4 needs a 2D grid.
    heads : int or None
        SSD heads per direction; must divide ``expand · width``. None: ``⌈width / 16⌉``, the
        released code's rule.
    chunk_size : int
        Chunk length of the SSD scan (a speed setting; the result does not depend on it).
    positional_embedding : bool
        Add a learnable embedding of the token positions after the patch embedding.
    scan_backend : {"auto", "reference"}
        Which SSD implementation runs; both compute the same function.
    """

    in_channels: int = 1
    out_channels: int = 1
    grid: tuple[int, ...] = (85, 85)
    width: int = 64
    depth: int = 8
    state_size: int = 64
    expand: int = 2
    patch: int = 2
    pad_multiple: int = 8
    mlp_ratio: int = 4
    directions: int = 4
    heads: int | None = None
    chunk_size: int = 64
    positional_embedding: bool = True
    scan_backend: str = "auto"

    label: ClassVar[str] = "LaMO"

    @classmethod
    def adapt(cls, task, values):
        """A line has two scan orders: four directions become two on a 1D grid."""
        if len(task.grid) == 1 and values["directions"] == 4:
            return {"directions": 2}
        return {}

    @property
    def inner(self) -> int:
        """Channels of the SSM block, ``expand · width``."""
        return self.expand * self.width

    @property
    def num_heads(self) -> int:
        """SSD heads per direction."""
        return math.ceil(self.width / 16) if self.heads is None else self.heads

    @property
    def padded_grid(self) -> tuple[int, ...]:
        """The grid padded up to a multiple of ``pad_multiple``."""
        return tuple(-(-n // self.pad_multiple) * self.pad_multiple for n in self.grid)

    @property
    def token_grid(self) -> tuple[int, ...]:
        """The grid of tokens the SSM blocks scan."""
        return tuple(n // self.patch for n in self.padded_grid)

    def __post_init__(self):
        check_positive_ints("LaMO", self, ("in_channels", "out_channels", "width", "depth",
                                           "state_size", "expand", "patch", "pad_multiple",
                                           "mlp_ratio", "chunk_size"))
        check_sizes("LaMO", self, ("grid",), (1, 2))
        if self.pad_multiple % self.patch:
            raise ValueError(f"LaMO pad_multiple={self.pad_multiple} must be a multiple of "
                             f"patch={self.patch}, so the padded grid splits into patches")
        if self.heads is not None:
            check_positive_ints("LaMO", self, ("heads",))
        if self.inner % self.num_heads:
            raise ValueError(f"LaMO heads={self.num_heads} must divide the inner width "
                             f"expand · width = {self.inner}; set heads to a divisor of it")
        scan_orders(self.directions, len(self.grid))
        if not isinstance(self.positional_embedding, bool):
            raise ValueError(f"LaMO positional_embedding must be true or false, got "
                             f"{self.positional_embedding!r}")
        if self.scan_backend not in SSD_BACKENDS:
            raise ValueError(f"unknown scan_backend {self.scan_backend!r}; choose one of "
                             f"{SSD_BACKENDS}")


class SSDMixer(nn.Module):
    r"""The SSM block of LaMO (``mamba_4D``): a multi-direction Mamba-2 (SSD) scan of a token
    grid.

    .. math::
        (x, z) &= \mathrm{in\_proj}(u),\qquad x \leftarrow \mathrm{GELU}(\mathrm{DWConv}_3(x)),\\
        h^{k,j}_t &= e^{\Delta^{k,j}_t A_{k,j}}\, h^{k,j}_{t-1}
                    + \Delta^{k,j}_t\, x^{k,j}_t\, (B^k_t)^\top,\qquad
        y^{k,j}_t = h^{k,j}_t C^k_t + D_{k,j} \odot x^{k,j}_t,\\
        y &= \mathrm{out\_proj}\Big(\mathrm{LN}\big(\textstyle\sum_k T_k^{-1} y^k\big)
             \odot \mathrm{GELU}(z)\Big)

    for direction k (traversal :math:`T_k`, :func:`scan_orders`) and head j: the head's
    channels :math:`x^{k,j}_t \in \mathbb{R}^P` share one scalar decay :math:`A_{k,j} < 0`
    (``A = −exp(A_log)``) and one step :math:`\Delta^{k,j}_t = \mathrm{softplus}(w_{k,j} \cdot
    x^k_t + b_{k,j})`; :math:`B^k_t, C^k_t \in \mathbb{R}^N` are linear in the token and shared
    by the direction's heads. All directions run as one :func:`ssmpde.kernels.ssd.ssd_scan`
    call, directions folded into heads and one B/C group per direction.

    Parameters
    ----------
    width : int
        Token channels E.
    spatial_dims : {1, 2}
        Dimensions of the token grid (a line is scanned as a 1 × L grid).
    state_size : int
        N.
    expand : int
        Inner width ``expand · E``.
    heads : int
        Heads per direction; P = inner / heads channels each.
    directions : {1, 2, 4}
    chunk_size : int
        SSD chunk length.
    scan_backend : {"auto", "reference"}

    Shapes
    ------
    ``[batch, width, *token_grid] -> [batch, width, *token_grid]``.
    """

    def __init__(self, width: int, *, spatial_dims: int, state_size: int = 64, expand: int = 2,
                 heads: int, directions: int = 4, chunk_size: int = 64,
                 scan_backend: str = "auto"):
        super().__init__()
        if spatial_dims not in (1, 2):
            raise ValueError(f"spatial_dims must be 1 or 2, got {spatial_dims}")
        inner = expand * width
        if inner % heads:
            raise ValueError(f"heads={heads} must divide the inner width {inner}")
        self.orders = scan_orders(directions, spatial_dims)
        self.spatial_dims, self.inner, self.heads = spatial_dims, inner, heads
        self.head_dim, self.state_size = inner // heads, state_size
        self.chunk_size, self.scan_backend = chunk_size, scan_backend
        k = len(self.orders)

        self.in_proj = nn.Linear(width, 2 * inner, bias=False)
        conv = nn.Conv2d if spatial_dims == 2 else nn.Conv1d
        # 3 wide and centred: the token grid is space, not time, so nothing is causal here.
        self.conv = conv(inner, inner, 3, padding=1, groups=inner)
        # Per direction: Δ for each head, then B and C (nn.Linear's default initialisation).
        bound = inner ** -0.5
        self.x_proj = nn.Parameter(
            torch.empty(k, heads + 2 * state_size, inner).uniform_(-bound, bound))
        self.A_log = nn.Parameter(torch.zeros(k * heads))             # A = −1 at start
        self.dt_bias = nn.Parameter(0.1 * torch.rand(k * heads))
        self.D = nn.Parameter(torch.ones(k * heads, self.head_dim))
        self.norm = nn.LayerNorm(inner)
        self.out_proj = nn.Linear(inner, width, bias=False)

    def scan(self, x: torch.Tensor) -> torch.Tensor:
        """The directional SSD scans of ``x [batch, inner, *token_grid]``, mapped back to the
        grid and summed (same shape)."""
        batch, _, *grid = x.shape
        plane = x if self.spatial_dims == 2 else x.unsqueeze(2)          # [b, inner, H, W]
        height, width = plane.shape[-2:]
        k, heads, n = len(self.orders), self.heads, self.state_size
        # [b, L, k, inner]: sequence-major, as the SSD kernel wants it.
        xs = torch.stack([traverse(plane, order) for order in self.orders], dim=2)
        xs = xs.permute(0, 3, 2, 1)
        projected = torch.einsum("blkd,kcd->blkc", xs, self.x_proj)
        dt, B, C = projected.split([heads, n, n], dim=-1)
        length = xs.shape[1]
        # Head h = direction · heads + j reads B/C group h // heads: its own direction's.
        y = ssd_scan(xs.reshape(batch, length, k * heads, self.head_dim),
                     dt.reshape(batch, length, k * heads), -torch.exp(self.A_log),
                     B.contiguous(), C.contiguous(), D=self.D, dt_bias=self.dt_bias,
                     dt_softplus=True, chunk_size=self.chunk_size, backend=self.scan_backend)
        y = y.reshape(batch, length, k, self.inner).permute(0, 2, 3, 1)  # [b, k, inner, L]
        merged = sum(untraverse(y[:, i], order, height, width)
                     for i, order in enumerate(self.orders))
        return merged.reshape(batch, self.inner, *grid)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[batch, width, *token_grid] -> [batch, width, *token_grid]``."""
        x, z = channels_first(self.in_proj(channels_last(tokens))).chunk(2, dim=1)
        y = self.scan(F.gelu(self.conv(x)))
        y = self.norm(channels_last(y)) * F.gelu(channels_last(z))
        return channels_first(self.out_proj(y))


@register_model("lamo")
class LaMO(Surrogate):
    r"""Latent Mamba Operator on regular grids; see the module docstring.

    .. math:: u = \mathcal{P}^{-1} \circ \mathcal{L}_T \circ \dots \circ \mathcal{L}_1 \circ
              \mathcal{P}\big(\mathrm{pad}([a, x])\big)\big|_{\text{grid}}

    with the patch embedding :math:`\mathcal{P}` (plus positional embedding), the layers
    :math:`\mathcal{L}_t(Z) = S + \mathrm{MLP}(\mathrm{LN}(S))`,
    :math:`S = Z + \mathrm{SSM}(\mathrm{LN}(Z))` (Eq. 11–12) and the linear de-patchify
    :math:`\mathcal{P}^{-1}`.

    Parameters
    ----------
    config : LaMOConfig

    Shapes
    ------
    ``[batch, in_channels, *grid] -> [batch, out_channels, *grid]``.

    Examples
    --------
    >>> from ssmpde.surrogates import build_model
    >>> model = build_model("lamo", preset="darcy", grid=(29, 29), depth=2, width=16)
    >>> model(torch.randn(3, 1, 29, 29)).shape
    torch.Size([3, 1, 29, 29])
    """

    Config = LaMOConfig
    PRESETS = {
        "darcy": dict(in_channels=1, out_channels=1, grid=(85, 85), width=64, depth=8,
                      state_size=64, patch=2, pad_multiple=8, directions=4),
        "navier-stokes": dict(in_channels=10, out_channels=1, grid=(64, 64), width=256,
                              depth=8, state_size=64, patch=2, pad_multiple=8, directions=4),
        # A CPU-sized Darcy model: a quarter of the layers' channels² and half the depth.
        "small": dict(in_channels=1, out_channels=1, grid=(85, 85), width=32, depth=4,
                      state_size=64, patch=2, pad_multiple=8, directions=4),
        # 1D problems (Burgers, Kuramoto–Sivashinsky): not in the paper, this package's choice.
        "1d": dict(in_channels=1, out_channels=1, grid=(1024,), width=64, depth=8,
                   state_size=64, patch=2, pad_multiple=8, directions=2),
    }

    def __init__(self, config: LaMOConfig):
        super().__init__(config)
        dims = len(config.grid)
        self.register_buffer("coordinates", unit_coordinates(config.grid), persistent=False)
        conv = nn.Conv2d if dims == 2 else nn.Conv1d
        self.embed = conv(config.in_channels + dims, config.width, config.patch,
                          stride=config.patch)
        self.embed_norm = nn.LayerNorm(config.width)
        if config.positional_embedding:
            self.position = nn.Parameter(torch.zeros(config.width, *config.token_grid))
        self.layers = nn.ModuleList(
            ResidualLayer(config.width,
                          SSDMixer(config.width, spatial_dims=dims,
                                   state_size=config.state_size, expand=config.expand,
                                   heads=config.num_heads, directions=config.directions,
                                   chunk_size=config.chunk_size,
                                   scan_backend=config.scan_backend),
                          mlp_ratio=config.mlp_ratio)
            for _ in range(config.depth))
        self.head_norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.out_channels * config.patch ** dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, in_channels, *grid] -> [batch, out_channels, *grid]``."""
        c = self.config
        x = self.check_input(x)
        x = with_coordinates(x, self.coordinates)
        # F.pad lists (before, after) from the last axis backwards: zeros right and bottom.
        padding = [p for n, m in zip(reversed(c.grid), reversed(c.padded_grid))
                   for p in (0, m - n)]
        tokens = self.embed(F.pad(x, padding))                    # [b, E, *token_grid]
        tokens = channels_first(self.embed_norm(channels_last(tokens)))
        if c.positional_embedding:
            tokens = tokens + self.position
        for layer in self.layers:
            tokens = layer(tokens)
        patches = self.head(self.head_norm(channels_last(tokens)))  # [b, *token_grid, out·p^d]
        return _unpatchify(patches, c.out_channels, c.patch)[(..., *map(slice, c.grid))]

    def extra_repr(self) -> str:
        c = self.config
        return (f"grid={c.grid}, token_grid={c.token_grid}, width={c.width}, "
                f"depth={c.depth}, directions={c.directions}, heads={c.num_heads}, "
                f"parameters={sum(p.numel() for p in self.parameters()):,}")


def _unpatchify(patches: torch.Tensor, channels: int, patch: int) -> torch.Tensor:
    """``[batch, *token_grid, channels · patch^d] -> [batch, channels, *padded_grid]``: each
    token's values laid out as its ``patch^d`` block of points (a pixel shuffle)."""
    batch, *tokens, _ = patches.shape
    if len(tokens) == 1:
        blocks = patches.reshape(batch, tokens[0], channels, patch)
        return blocks.permute(0, 2, 1, 3).reshape(batch, channels, tokens[0] * patch)
    height, width = tokens
    blocks = patches.reshape(batch, height, width, channels, patch, patch)
    return blocks.permute(0, 3, 1, 4, 2, 5).reshape(batch, channels, height * patch,
                                                    width * patch)
