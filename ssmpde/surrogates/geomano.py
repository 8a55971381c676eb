r"""GeoMaNO, the Geometric Mamba Neural Operator (Han, Zhang, Samaras, Hou, Qin, 2025).

Pipeline (Eq. 5): a → geometry-aware encoder (Eq. 6) → depth × pre-norm GeoMamba layers
(Eq. 8, mixer of Algorithm 1 with the corrected scans of Eq. 9 / Eq. 10) → decoder (Eq. 7) → u.
The building blocks are in :mod:`ssmpde.surrogates.geometry` (encoder and decoder),
:mod:`ssmpde.surrogates.s6` (the GeoMamba mixer) and :mod:`ssmpde.surrogates.layers` (the
residual layer); equation numbers refer to the paper. See ``docs/models/geomano.md``.

Presets follow the paper's best configurations (Table 3, Tables 4–5):

* ``darcy``: 85×85 → 85×85, 2D scan, correction ``0011``, no positional encoding, width 64,
  depth 8, state 16;
* ``navier-stokes``: 64×64, 10 frames folded into channels → the next frame, 1D ("vanilla")
  scan, learnable correction, positional encoding, width 256, depth 8, state 16.
* ``1d``: 1D scan, learnable correction, positional encoding, width 64, depth 8, 64 tokens.

These three carry this package's additions, each a named option: the point coordinates as
encoder inputs (``input_coordinates``), a geometric prior on the encoder's and decoder's
logits (``geometric_prior``) and a point skip past the latent bottleneck (``point_skip``);
and they gate with ``LN(Y) ⊙ SiLU(Z)`` where Algorithm 1 (line 10) has
``SiLU(LN(Y)) ⊙ SiLU(Z)`` (``norm_activation``). ``paper-darcy`` and
``paper-navier-stokes`` are the same models exactly as the paper writes them: none of the
additions, the activation of line 10, and no positional information where the best model
has none (Darcy: no coordinates, no positional encoding; Navier–Stokes: the positional
encoding of its best model, no coordinates).

The latent token grids (17×17, 16×16, 64), the MLP ratio and the convolution's kernel are
this package's choices (the paper does not give them), stated in the config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from ssmpde.kernels import BACKENDS

from .base import ModelConfig, Surrogate, check_positive_ints, check_sizes, register_model
from .geometry import GeometryDecoder, GeometryEncoder
from .layers import ResidualLayer, unit_coordinates, with_coordinates
from .s6 import CORRECTIONS, SelectiveScanMixer

__all__ = ["PAPER_OPTIONS", "GeoMaNO", "GeoMaNOConfig"]

#: The options that make a preset the paper's model: none of this package's additions, and
#: Algorithm 1's activation of the normalised scan output.
PAPER_OPTIONS = dict(input_coordinates=False, geometric_prior=False, point_skip=False,
                     norm_activation=True)


@dataclass(frozen=True)
class GeoMaNOConfig(ModelConfig):
    """Configuration of :class:`GeoMaNO`; validated on construction.

    Attributes
    ----------
    in_channels, out_channels : int
        Channels of the input and output fields (for time-dependent data, frames folded into
        channels).
    grid : tuple of int
        The data grid, ``(height, width)`` or ``(length,)``.
    latent_grid : tuple of int
        The grid of latent tokens the layers scan, same number of dimensions as ``grid`` and
        no larger than it in any dimension.
    width : int
        Token channels (the paper's embedding dimension).
    depth : int
        Number of GeoMaNO layers.
    state_size : int
        SSM state per channel (d_state).
    expand : int
        Inner width of the mixer as a multiple of ``width``.
    mlp_ratio : int
        Hidden width of each layer's MLP as a multiple of ``width``.
    scan : {"1d", "2d"}
        Four traversal-order 1D scans, or the 2D two-pass scan from the four corners.
    correction : {"none", "0001", "0011", "0111", "learnable"}
        Geometric correction R per direction.
    positional_encoding : bool
        Add a fixed sin-cos embedding of the latent token positions to the tokens (the
        paper's positional encoding of the latent patches).
    point_skip : bool
        Add the encoder's lifted point features to the decoder's before the output head (a
        skip past the latent bottleneck; ours: not in the paper's Eq. 7, which ``False``
        gives).
    input_coordinates : bool
        Give the encoder every point's coordinates in [0, 1] next to its values (ours: the
        paper's encoder reads the values only, Eq. 6, which ``False`` gives).
    geometric_prior : bool
        Add :func:`~ssmpde.surrogates.geometry.geometric_prior` to the encoder's and the
        decoder's logits, so both start as a soft patch embedding (ours: not in Eq. 6–7,
        which ``False`` gives).
    norm_activation : bool
        SiLU on the normalised scan output before the gate, ``SiLU(LN(Y)) ⊙ SiLU(Z)``, as
        Algorithm 1 (line 10) prints it; ``False``: ``LN(Y) ⊙ SiLU(Z)`` (VMamba's gate,
        which the ssmpde presets were trained with).
    scan_backend : {"auto", "reference", "cpu", "triton"}
        Which scan implementation runs; all compute the same function.
    """

    in_channels: int = 1
    out_channels: int = 1
    grid: tuple[int, ...] = (85, 85)
    latent_grid: tuple[int, ...] = (17, 17)
    width: int = 64
    depth: int = 8
    state_size: int = 16
    expand: int = 2
    mlp_ratio: int = 2
    scan: str = "2d"
    correction: str = "0011"
    positional_encoding: bool = False
    point_skip: bool = True
    input_coordinates: bool = True
    geometric_prior: bool = True
    norm_activation: bool = False
    scan_backend: str = "auto"

    spatial_fields: ClassVar[tuple[str, ...]] = ("latent_grid",)
    label: ClassVar[str] = "GeoMaNO"

    @classmethod
    def adapt(cls, task, values):
        """A 1D grid has two scan directions: the 1D scan, and a correction that is not one of
        the four-direction patterns (``learnable`` replaces them)."""
        if len(task.grid) != 1:
            return {}
        correction = values["correction"]
        return {"scan": "1d",
                "correction": correction if correction in ("none", "learnable") else "learnable"}

    def __post_init__(self):
        check_positive_ints("GeoMaNO", self, ("in_channels", "out_channels", "width", "depth",
                                              "state_size", "expand", "mlp_ratio"))
        check_sizes("GeoMaNO", self, ("grid", "latent_grid"), (1, 2))
        if len(self.latent_grid) != len(self.grid):
            raise ValueError(f"latent_grid {self.latent_grid} must have as many dimensions as "
                             f"grid {self.grid}")
        if any(n > m for n, m in zip(self.latent_grid, self.grid)):
            raise ValueError(f"latent_grid {self.latent_grid} is larger than the grid "
                             f"{self.grid} in some dimension; the encoder pools points into "
                             "fewer tokens, so choose at most the grid size")
        if self.scan not in ("1d", "2d"):
            raise ValueError(f"scan must be '1d' or '2d', got {self.scan!r}")
        if self.scan == "2d" and len(self.grid) != 2:
            raise ValueError(f"scan='2d' needs a 2D grid, got grid {self.grid}; use scan='1d'")
        if self.correction not in CORRECTIONS:
            raise ValueError(f"unknown correction {self.correction!r}; choose one of "
                             f"{', '.join(CORRECTIONS)}")
        if self.correction not in ("none", "learnable") and len(self.grid) != 2:
            raise ValueError(f"correction={self.correction!r} names four scan directions; a "
                             "1D grid has two: use 'none' or 'learnable'")
        if self.scan_backend not in BACKENDS:
            raise ValueError(f"unknown scan_backend {self.scan_backend!r}; choose one of "
                             f"{BACKENDS}")
        for name in ("positional_encoding", "point_skip", "input_coordinates",
                     "geometric_prior", "norm_activation"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false")


@register_model("geomano")
class GeoMaNO(Surrogate):
    r"""Geometric Mamba Neural Operator.

    .. math:: u = \mathcal{D} \circ \mathcal{L}_T \circ \dots \circ \mathcal{L}_1 \circ
              \mathcal{E}(a)

    with the encoder :math:`\mathcal{E}` (Eq. 6), layers
    :math:`\mathcal{L}_t(Z) = S + \mathrm{MLP}(\mathrm{LN}(S))`,
    :math:`S = Z + \mathrm{GeoMamba}(\mathrm{LN}(Z))` (Eq. 8) and the decoder
    :math:`\mathcal{D}` (Eq. 7).

    Parameters
    ----------
    config : GeoMaNOConfig

    Shapes
    ------
    ``[batch, in_channels, *grid] -> [batch, out_channels, *grid]``.

    Examples
    --------
    >>> from ssmpde.surrogates import build_model
    >>> model = build_model("geomano", preset="darcy", grid=(29, 29), latent_grid=(5, 5),
    ...                     depth=2, width=16)
    >>> model(torch.randn(3, 1, 29, 29)).shape
    torch.Size([3, 1, 29, 29])
    """

    Config = GeoMaNOConfig
    PRESETS = {
        "darcy": dict(in_channels=1, out_channels=1, grid=(85, 85), latent_grid=(17, 17),
                      width=64, depth=8, state_size=16, scan="2d", correction="0011",
                      positional_encoding=False),
        "navier-stokes": dict(in_channels=10, out_channels=1, grid=(64, 64),
                              latent_grid=(16, 16), width=256, depth=8, state_size=16,
                              scan="1d", correction="learnable", positional_encoding=True),
        # 1D problems (Burgers, Kuramoto-Sivashinsky): the paper's recipe for 1D is the 1D scan
        # with positional encoding; the latent sequence length is this package's choice.
        "1d": dict(in_channels=1, out_channels=1, grid=(1024,), latent_grid=(64,), width=64,
                   depth=8, state_size=16, scan="1d", correction="learnable",
                   positional_encoding=True),
    }
    # The paper's models exactly (its 2D problems; it has no 1D one).
    PRESETS["paper-darcy"] = {**PRESETS["darcy"], **PAPER_OPTIONS}
    PRESETS["paper-navier-stokes"] = {**PRESETS["navier-stokes"], **PAPER_OPTIONS}

    def __init__(self, config: GeoMaNOConfig):
        super().__init__(config)
        dims = len(config.grid)
        features = config.in_channels
        if config.input_coordinates:
            # Every point's coordinates in [0, 1] next to its values, so the input-adaptive
            # weights can group points by where they are.
            self.register_buffer("coordinates", unit_coordinates(config.grid),
                                 persistent=False)
            features += dims
        if config.positional_encoding:
            self.register_buffer("position_embedding",
                                 sincos_embedding(config.width, config.latent_grid),
                                 persistent=False)
        prior = config.geometric_prior
        self.encoder = GeometryEncoder(features, config.width, config.latent_grid,
                                       config.grid if prior else None)
        self.layers = nn.ModuleList(
            ResidualLayer(config.width,
                          SelectiveScanMixer(config.width, spatial_dims=dims,
                                             state_size=config.state_size,
                                             expand=config.expand, scan=config.scan,
                                             correction=config.correction,
                                             norm_activation=config.norm_activation,
                                             scan_backend=config.scan_backend),
                          mlp_ratio=config.mlp_ratio)
            for _ in range(config.depth))
        self.decoder = GeometryDecoder(config.width, config.out_channels, config.grid,
                                       config.latent_grid if prior else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[batch, in_channels, *grid] -> [batch, out_channels, *grid]``."""
        x = self.check_input(x)
        # The layers run on channel-last tokens [batch, *latent_grid, width]: the layout of
        # every linear map, norm and scan in them, so no layer copies its tokens around.
        if self.config.input_coordinates:
            x = with_coordinates(x, self.coordinates)
        tokens, points = self.encoder.encode(x)
        tokens = tokens.unflatten(1, self.config.latent_grid)
        if self.config.positional_encoding:
            tokens = tokens + self.position_embedding.movedim(0, -1).to(tokens.dtype)
        for layer in self.layers:
            tokens = layer.forward_channels_last(tokens)
        return self.decoder.decode(tokens.flatten(1, -2),
                                   points if self.config.point_skip else None)

    def extra_repr(self) -> str:
        c = self.config
        return (f"grid={c.grid}, latent_grid={c.latent_grid}, width={c.width}, "
                f"depth={c.depth}, scan={c.scan!r}, correction={c.correction!r}, "
                f"parameters={sum(p.numel() for p in self.parameters()):,}")


def sincos_embedding(width: int, grid: tuple[int, ...]) -> torch.Tensor:
    """Fixed sin-cos position embedding ``[width, *grid]`` (Vaswani et al.; per axis a share of
    the channels, frequencies 1 / 10000^(2i / share))."""
    dims = len(grid)
    share = width // dims // 2 * 2
    channels = []
    for axis, n in enumerate(grid):
        position = torch.arange(n, dtype=torch.float32)
        frequency = 1.0 / 10000 ** (torch.arange(0, share, 2, dtype=torch.float32) / max(share, 1))
        angle = position[:, None] * frequency[None, :]                       # [n, share/2]
        table = torch.cat([angle.sin(), angle.cos()], dim=1).T              # [share, n]
        shape = [share] + [1] * dims
        shape[1 + axis] = n
        channels.append(table.reshape(shape).expand(share, *grid))
    embedding = torch.cat(channels, dim=0) if channels else torch.zeros(0, *grid)
    pad = width - embedding.shape[0]
    return torch.cat([embedding, torch.zeros(pad, *grid)], dim=0)
