r"""SS-NO, the State Space Neural Operator (Koren & Lanthaler, arXiv 2507.23428).

Pipeline: the input frames with the grid coordinates concatenated → a pointwise lifting MLP
(``lifting`` hidden channels) → ``depth`` blocks → a pointwise projection MLP. A block is

.. math::
    v \leftarrow v + W\,\mathrm{GELU}\big(\mathcal K_y \mathcal K_x v\big)

with :math:`\mathcal K_a` a bidirectional S4D convolution along grid axis ``a`` (one per axis,
applied one after the other; ``mixing="parallel"`` sums them instead: the paper's "SS-NO-FF")
and ``W`` a pointwise channel mixing. Each S4D has per-channel diagonal complex
``A = −softplus(ρ̃) + iω`` (``ρ = softplus(ρ̃) ≥ 0``: the paper's adaptive damping; S4D-Lin
initialisation ``ρ = ½``, ``ω_n = π n``), shared by its forward and backward kernels, each with
its own ``C``; see :mod:`ssmpde.kernels.s4d`. ``learn_damping`` / ``learn_frequency`` switch the
paper's ablations (a fixed one keeps its initial value).

Temporal memory (MemNO style, ``memory=True``): the ``window`` input frames are lifted one by
one and pass the first ``memory_after`` blocks separately; then a causal S4D along time, per grid
point and channel, summarises them into the last frame (``v_T + \mathcal K_t v``), and the
remaining blocks and the projection act on that frame. Without memory the frames are folded
into channels before the lifting.

Presets: ``ks`` (1D, 128 points, state 64, memory after 2 of 4 blocks, window 4) and ``torus``
(2D 64², state 64, memory, window 10). Widths are the paper's (64, lifting/projection 128).
How the paper enforces ρ ≥ 0 and initialises ω is not in the text we have: softplus and
S4D-Lin are this package's choices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ssmpde.kernels.s4d import s4d

from .base import ModelConfig, Surrogate, check_positive_ints, check_sizes, register_model
from .layers import unit_coordinates, with_coordinates

__all__ = ["S4DLayer", "SSNO", "SSNOConfig"]

MIXINGS = ("sequential", "parallel")
S4D_BACKENDS = ("fft", "reference")


@dataclass(frozen=True)
class SSNOConfig(ModelConfig):
    """Configuration of :class:`SSNO`; validated on construction.

    Attributes
    ----------
    in_channels, out_channels : int
        Channels per input frame (fields and conditioning) and of the predicted frame.
    grid : tuple of int
        ``(length,)`` or ``(height, width)``.
    window : int
        Input frames (1 for operator tasks).
    width : int
        Channels of the blocks.
    lifting : int
        Hidden channels of the lifting and projection MLPs.
    depth : int
        Number of blocks.
    state_size : int
        S4D modes per channel (complex; each has its own ρ̃, ω and C per direction).
    learn_damping, learn_frequency : bool
        Learn ρ̃ and ω of the spatial S4D layers, or keep them at the S4D-Lin initialisation
        (the paper's ablations; the temporal memory always learns both).
    mixing : {"sequential", "parallel"}
        On 2D grids: S4D along x then along y, or their sum ("SS-NO-FF").
    memory : bool
        Temporal memory over the input window (with ``window = 1`` it reduces to a
        per-channel linear map ``(K[0] + D) v`` of the one frame).
    memory_after : int or None
        Blocks applied to every frame before the memory (0..depth); None: half of them,
        ``depth // 2`` (the paper: after the first two of four).
    memory_state_size : int
        Modes of the temporal S4D.
    s4d_backend : {"fft", "reference"}
        FFT convolution, or the loop recurrence (tests and benchmarks).
    """

    in_channels: int = 1
    out_channels: int = 1
    grid: tuple[int, ...] = (128,)
    window: int = 1
    width: int = 64
    lifting: int = 128
    depth: int = 4
    state_size: int = 64
    learn_damping: bool = True
    learn_frequency: bool = True
    mixing: str = "sequential"
    memory: bool = False
    memory_after: int | None = None
    memory_state_size: int = 64
    s4d_backend: str = "fft"

    input_layout: ClassVar[str] = "history"
    label: ClassVar[str] = "SS-NO"

    @property
    def blocks_before_memory(self) -> int:
        return self.depth // 2 if self.memory_after is None else self.memory_after

    @classmethod
    def adapt(cls, task, values):
        """Operator tasks (steady data) have no history: one frame."""
        return {"window": 1} if task.kind == "operator" else {}

    def __post_init__(self):
        check_positive_ints("SS-NO", self, ("in_channels", "out_channels", "window", "width",
                                            "lifting", "depth", "state_size",
                                            "memory_state_size"))
        check_sizes("SS-NO", self, ("grid",), (1, 2))
        for name in ("learn_damping", "learn_frequency", "memory"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"SS-NO {name} must be true or false, got "
                                 f"{getattr(self, name)!r}")
        if self.mixing not in MIXINGS:
            raise ValueError(f"SS-NO mixing must be one of {MIXINGS}, got {self.mixing!r}")
        if self.s4d_backend not in S4D_BACKENDS:
            raise ValueError(f"unknown s4d_backend {self.s4d_backend!r}; choose one of "
                             f"{S4D_BACKENDS}")
        if self.memory_after is not None and (
                not isinstance(self.memory_after, int) or isinstance(self.memory_after, bool)
                or not 0 <= self.memory_after <= self.depth):
            raise ValueError(f"SS-NO memory_after must be an integer in 0..depth={self.depth}, "
                             f"got {self.memory_after!r}")


class S4DLayer(nn.Module):
    """An S4D convolution over the last axis of ``[..., channels, L]`` (causal or bidirectional).

    Parameters: ``log_dt [H]`` (``Δ ~ logU[1e-3, 1e-1]``), ``damping``/``frequency [H, N]``
    (parameters, or buffers when fixed), ``C [S, H, N, 2]`` (S = 2 if bidirectional), ``D [H]``.
    """

    def __init__(self, channels: int, state_size: int, *, bidirectional: bool,
                 learn_damping: bool = True, learn_frequency: bool = True,
                 backend: str = "fft"):
        super().__init__()
        self.backend = backend
        low, high = math.log(1e-3), math.log(1e-1)
        self.log_dt = nn.Parameter(low + (high - low) * torch.rand(channels))
        # S4D-Lin: Re A = −½ (softplus(ρ̃) = ½), Im A = π n.
        damping = torch.full((channels, state_size), math.log(math.expm1(0.5)))
        frequency = math.pi * torch.arange(state_size, dtype=torch.float32).repeat(channels, 1)
        for name, value, learn in (("damping", damping, learn_damping),
                                   ("frequency", frequency, learn_frequency)):
            if learn:
                setattr(self, name, nn.Parameter(value))
            else:
                self.register_buffer(name, value)
        kernels = 2 if bidirectional else 1
        self.C = nn.Parameter(torch.randn(kernels, channels, state_size, 2) * math.sqrt(0.5))
        self.D = nn.Parameter(torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return s4d(x, self.log_dt, self.damping, self.frequency, self.C, self.D,
                   backend=self.backend)


def _along(v: torch.Tensor, axis: int, layer: nn.Module) -> torch.Tensor:
    """Apply ``layer`` (acting on ``[..., channels, L]``) along grid ``axis`` of
    ``v [batch, channels, *grid]``."""
    x = v.movedim(2 + axis, -1).movedim(1, -2)
    return layer(x).movedim(-2, 1).movedim(-1, 2 + axis)


class SSNOBlock(nn.Module):
    """Bidirectional S4D along every grid axis (sequential or summed), GELU, pointwise channel
    mixing, residual."""

    def __init__(self, config: SSNOConfig):
        super().__init__()
        self.parallel = config.mixing == "parallel"
        self.axes = nn.ModuleList(
            S4DLayer(config.width, config.state_size, bidirectional=True,
                     learn_damping=config.learn_damping, learn_frequency=config.learn_frequency,
                     backend=config.s4d_backend)
            for _ in config.grid)
        self.mix = nn.Linear(config.width, config.width)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        if self.parallel:
            y = sum(_along(v, axis, layer) for axis, layer in enumerate(self.axes))
        else:
            y = v
            for axis, layer in enumerate(self.axes):
                y = _along(y, axis, layer)
        return v + self.mix(F.gelu(y).movedim(1, -1)).movedim(-1, 1)


class _PointwiseMLP(nn.Module):
    """Two pointwise linear maps with a GELU between, on ``[batch, channels, *grid]``."""

    def __init__(self, features: int, hidden: int, out: int):
        super().__init__()
        self.first, self.second = nn.Linear(features, hidden), nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(F.gelu(self.first(x.movedim(1, -1)))).movedim(-1, 1)


@register_model("ssno")
class SSNO(Surrogate):
    """The State Space Neural Operator; see the module docstring.

    Takes ``[batch, window, in_channels, *grid]`` (or ``[batch, in_channels, *grid]`` when
    ``window == 1``) and returns ``[batch, out_channels, *grid]``.
    """

    Config = SSNOConfig
    PRESETS = {
        "ks": dict(grid=(128,), window=4, width=64, lifting=128, depth=4, state_size=64,
                   memory=True),
        "torus": dict(grid=(64, 64), window=10, width=64, lifting=128, depth=4, state_size=64,
                      memory=True),
    }

    def __init__(self, config: SSNOConfig):
        super().__init__(config)
        dims = len(config.grid)
        self.register_buffer("coordinates", unit_coordinates(config.grid), persistent=False)
        frames = 1 if config.memory else config.window
        self.lift = _PointwiseMLP(frames * config.in_channels + dims, config.lifting,
                                  config.width)
        self.blocks = nn.ModuleList(SSNOBlock(config) for _ in range(config.depth))
        if config.memory:
            self.memory = S4DLayer(config.width, config.memory_state_size, bidirectional=False,
                                   backend=config.s4d_backend)
        self.project = _PointwiseMLP(config.width, config.lifting, config.out_channels)

    def _lift(self, x: torch.Tensor) -> torch.Tensor:
        return self.lift(with_coordinates(x, self.coordinates))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        x = self.check_input(x)
        if not c.memory:
            v = self._lift(x.flatten(1, 2))
            for block in self.blocks:
                v = block(v)
            return self.project(v)
        batch, frames = x.shape[:2]
        v = self._lift(x.flatten(0, 1))                         # [batch·T, width, *grid]
        for block in self.blocks[:c.blocks_before_memory]:
            v = block(v)
        v = v.unflatten(0, (batch, frames))                     # [batch, T, width, *grid]
        # Causal S4D along time per point and channel: [batch, *grid, width, T].
        history = v.movedim(1, -1).movedim(1, -2)
        summary = self.memory(history)[..., -1].movedim(-1, 1)  # [batch, width, *grid]
        v = v[:, -1] + summary
        for block in self.blocks[c.blocks_before_memory:]:
            v = block(v)
        return self.project(v)

    def extra_repr(self) -> str:
        c = self.config
        return (f"grid={c.grid}, window={c.window}, width={c.width}, depth={c.depth}, "
                f"state_size={c.state_size}, memory={c.memory}, mixing={c.mixing!r}, "
                f"parameters={sum(p.numel() for p in self.parameters()):,}")
