r"""SS-NO, the State Space Neural Operator (Koren & Lanthaler, arXiv 2507.23428).

Pipeline: each input frame with the grid coordinates concatenated → a shared pointwise linear
lifting to ``width`` channels → ``depth`` blocks → a shared pointwise linear decoder. A block
is a sequence of spatial SSM layers, one per grid axis (x, then y), and a channel mixing:

.. math::
    u \leftarrow u + F_a\big(\mathrm{GELU}(\mathcal K_a\,\mathrm{LN}_a(u))\big)
    \quad\text{for each axis } a, \qquad
    v \leftarrow u + W\,\mathrm{GELU}\big(\mathrm{LN}(u)\big) + b,

with :math:`\mathcal K_a` a bidirectional S4D convolution along axis ``a`` and :math:`F_a` a
pointwise feed-forward ``width → mlp_ratio·width → width`` with GELU (the paper's intermediate
linear layers of width 128). ``mixing="parallel"`` sums the axes' branches on the same input
instead (the paper's "SS-NO-FF"). Each S4D has per-channel diagonal complex
``A = −softplus(ρ̃) + iω`` (the paper's adaptive damping ρ ≥ 0 and learnable frequency ω),
shared by its forward and backward kernels, each with its own ``C``; see
:mod:`ssmpde.kernels.s4d`. ``learn_damping=False`` removes the damping (ρ = 0: the paper's
"Frequency only" and "Fixed" ablations), ``learn_frequency=False`` keeps ω at its S4D-Lin
initial value ``π n``.

Temporal memory (MemNO, ``memory=True``): the ``window`` input frames are lifted one by one and
pass the first ``memory_after`` blocks separately; then an S4 block along time, per grid point,
summarises them into the last frame, ``v_T + W_t GELU((\mathcal K_t v)_T) + b_t`` with
:math:`\mathcal K_t` a causal S4D, and the remaining blocks and the decoder act on that frame.
Without memory the frames are folded into channels before the lifting.

This layout (``layout="paper"``, the default) reproduces all twelve parameter counts of the
paper's Table 2 (KS, 128 points) exactly and TorusLi's 369k; which of the count-equivalent
arrangements of the norms the authors used, the text does not say: see
``docs/models/ssno.md``. Presets: ``ks`` (1D, 128 points, state 64, memory after 2 of 4
blocks, window 4: 203,713 parameters) and ``torus`` (2D 64², window 10: 369,409).

``layout="ssmpde"`` is this package's earlier layout, kept because it trains faster in short
CPU runs: pointwise MLPs (``lifting`` hidden channels) for lifting and projection, blocks
``v + W GELU(K_y K_x v)`` without feed-forward or norms, and a linear memory
``v_T + (K_t v)_T``. A config with ``lifting`` and no ``layout`` (what checkpoints written
before the paper's layout hold) is that layout, so they load as they were written.
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
from .layers import channels_first, channels_last, unit_coordinates, with_coordinates

__all__ = ["S4DLayer", "SSNO", "SSNOConfig"]

MIXINGS = ("sequential", "parallel")
S4D_BACKENDS = ("fft", "reference")
LAYOUTS = ("paper", "ssmpde")
#: ``lifting`` of ``layout="ssmpde"`` when not given.
DEFAULT_LIFTING = 128


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
    layout : {"paper", "ssmpde"} or None
        The paper's model, or this package's earlier one (see the module docstring). None:
        ``"ssmpde"`` if ``lifting`` is given (the configs of checkpoints written before the
        paper's layout), else ``"paper"``; the config keeps the resolved value.
    width : int
        Channels of the blocks.
    mlp_ratio : int
        Hidden channels of each spatial layer's feed-forward, as a multiple of ``width`` (the
        paper: 128 = 2 × 64). Paper layout only.
    lifting : int or None
        Hidden channels of the lifting and projection MLPs of ``layout="ssmpde"`` (None:
        128); the paper's layout has linear ones and refuses it.
    depth : int
        Number of blocks.
    state_size : int
        S4D modes per channel of the spatial layers (complex; each has its own ρ̃, ω and C per
        direction).
    learn_damping : bool
        Learn the damping ρ of the spatial S4D layers (from ρ = ½), or have none (ρ = 0, the
        paper's "Frequency only" and "Fixed" ablations).
    learn_frequency : bool
        Learn the frequencies ω of the spatial S4D layers, or keep them at ``π n``. The
        temporal memory always learns both.
    mixing : {"sequential", "parallel"}
        On 2D grids: the SSM layer along x then the one along y, or the sum of their branches
        on the same input ("SS-NO-FF").
    memory : bool
        Temporal memory over the input window.
    memory_after : int or None
        Blocks applied to every frame before the memory (0..depth); None: half of them,
        ``depth // 2`` (the paper: after the first two of four).
    memory_state_size : int
        Modes of the temporal S4D.
    s4d_backend : {"fft", "reference"}
        FFT convolution, or the loop recurrence (tests and benchmarks; it needs damping).
    """

    in_channels: int = 1
    out_channels: int = 1
    grid: tuple[int, ...] = (128,)
    window: int = 1
    layout: str | None = None
    width: int = 64
    mlp_ratio: int = 2
    lifting: int | None = None
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
        self._resolve_layout()
        check_positive_ints("SS-NO", self, ("in_channels", "out_channels", "window", "width",
                                            "mlp_ratio", "depth", "state_size",
                                            "memory_state_size"))
        if self.layout == "ssmpde":
            check_positive_ints("SS-NO", self, ("lifting",))
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
        if self.s4d_backend == "reference" and not self.learn_damping:
            raise ValueError("s4d_backend='reference' needs learn_damping: the loop recurrence "
                             "divides by A, which is 0 for the ω = 0 mode without damping; "
                             "use s4d_backend='fft'")
        if self.memory_after is not None and (
                not isinstance(self.memory_after, int) or isinstance(self.memory_after, bool)
                or not 0 <= self.memory_after <= self.depth):
            raise ValueError(f"SS-NO memory_after must be an integer in 0..depth={self.depth}, "
                             f"got {self.memory_after!r}")

    def _resolve_layout(self) -> None:
        """``layout`` None → the layout ``lifting`` implies; ``lifting`` None → its default
        in ``layout="ssmpde"`` (the dataclass is frozen: set through ``object``)."""
        layout = self.layout
        if layout is None:
            layout = "paper" if self.lifting is None else "ssmpde"
        if layout not in LAYOUTS:
            raise ValueError(f"SS-NO layout must be one of {LAYOUTS}, got {layout!r}")
        if layout == "paper" and self.lifting is not None:
            raise ValueError(
                f"SS-NO lifting={self.lifting!r} is the hidden width of the lifting and "
                "projection MLPs of layout='ssmpde'; the paper's layout (the default) has "
                "linear ones and a feed-forward per spatial layer, sized by mlp_ratio. Set "
                "layout='ssmpde' for the earlier model")
        object.__setattr__(self, "layout", layout)
        if layout == "ssmpde" and self.lifting is None:
            object.__setattr__(self, "lifting", DEFAULT_LIFTING)


class S4DLayer(nn.Module):
    """An S4D convolution over the last axis of ``[..., channels, L]`` (causal or bidirectional).

    Parameters: ``log_dt [H]`` (``Δ ~ logU[1e-3, 1e-1]``), ``damping``/``frequency [H, N]``,
    ``C [S, H, N, 2]`` (S = 2 if bidirectional), ``D [H]``. S4D-Lin initialisation: damping
    ``ρ = softplus(ρ̃) = ½``, frequency ``ω_n = π n``. Without ``learn_damping`` there is no
    damping: ``ρ̃ = −∞`` (softplus gives exactly 0), a buffer that is not saved (a constant of
    the config). Without ``learn_frequency`` ω stays at ``π n`` (a saved buffer).
    """

    def __init__(self, channels: int, state_size: int, *, bidirectional: bool,
                 learn_damping: bool = True, learn_frequency: bool = True,
                 backend: str = "fft"):
        super().__init__()
        self.backend = backend
        low, high = math.log(1e-3), math.log(1e-1)
        self.log_dt = nn.Parameter(low + (high - low) * torch.rand(channels))
        if learn_damping:
            self.damping = nn.Parameter(torch.full((channels, state_size),
                                                   math.log(math.expm1(0.5))))
        else:
            self.register_buffer("damping", torch.full((channels, state_size), -math.inf),
                                 persistent=False)
        frequency = math.pi * torch.arange(state_size, dtype=torch.float32).repeat(channels, 1)
        if learn_frequency:
            self.frequency = nn.Parameter(frequency)
        else:
            self.register_buffer("frequency", frequency)
        kernels = 2 if bidirectional else 1
        self.C = nn.Parameter(torch.randn(kernels, channels, state_size, 2) * math.sqrt(0.5))
        self.D = nn.Parameter(torch.randn(channels))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if not isinstance(self.damping, nn.Parameter) and prefix + "damping" in state_dict:
            raise RuntimeError(
                f"{prefix}damping is in the weights but this layer has no damping "
                "(learn_damping=False: ρ = 0, the paper's ablation). Weights with it were "
                "written by an ssmpde version where learn_damping=False froze ρ at ½; this "
                "version cannot reproduce that model: retrain it")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def damping_rate(self) -> torch.Tensor:
        """``ρ = softplus(ρ̃) [H, N]``, the damping the kernel uses (``Re A = −ρ``)."""
        return F.softplus(self.damping)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return s4d(x, self.log_dt, self.damping, self.frequency, self.C, self.D,
                   backend=self.backend)


def _along(v: torch.Tensor, axis: int, layer: nn.Module) -> torch.Tensor:
    """Apply ``layer`` (acting on ``[..., channels, L]``) along grid ``axis`` of
    ``v [batch, channels, *grid]``."""
    x = v.movedim(2 + axis, -1).movedim(1, -2)
    return layer(x).movedim(-2, 1).movedim(-1, 2 + axis)


def _pointwise(module: nn.Module, v: torch.Tensor) -> torch.Tensor:
    """A channel-last module (``nn.Linear``, ``nn.LayerNorm``, ...) on ``[batch, C, *grid]``."""
    return channels_first(module(channels_last(v)))


class SpatialLayer(nn.Module):
    """The residual branch ``F(GELU(K_a(LN(u))))`` of the spatial SSM layer along one grid axis:
    a bidirectional S4D, GELU and the feed-forward ``width → mlp_ratio·width → width``."""

    def __init__(self, config: SSNOConfig, axis: int):
        super().__init__()
        self.axis = axis
        hidden = config.mlp_ratio * config.width
        self.norm = nn.LayerNorm(config.width)
        self.ssm = S4DLayer(config.width, config.state_size, bidirectional=True,
                            learn_damping=config.learn_damping,
                            learn_frequency=config.learn_frequency, backend=config.s4d_backend)
        self.feedforward = nn.Sequential(nn.Linear(config.width, hidden), nn.GELU(),
                                         nn.Linear(hidden, config.width))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        y = _along(_pointwise(self.norm, u), self.axis, self.ssm)
        return _pointwise(self.feedforward, F.gelu(y))


class SSNOBlock(nn.Module):
    """Spatial SSM layers along every grid axis (sequential or summed), each with its residual,
    then the pointwise channel mixing ``u + W GELU(LN(u)) + b``."""

    def __init__(self, config: SSNOConfig):
        super().__init__()
        self.parallel = config.mixing == "parallel"
        self.axes = nn.ModuleList(SpatialLayer(config, axis)
                                  for axis in range(len(config.grid)))
        self.norm = nn.LayerNorm(config.width)
        self.mix = nn.Linear(config.width, config.width)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        if self.parallel:
            u = v + sum(layer(v) for layer in self.axes)
        else:
            u = v
            for layer in self.axes:
                u = u + layer(u)
        return u + channels_first(self.mix(F.gelu(self.norm(channels_last(u)))))


class TemporalMemory(nn.Module):
    """The S4 block along time (MemNO): ``v_T + W GELU((K_t v)_T) + b`` with ``K_t`` a causal
    S4D, per grid point and channel."""

    def __init__(self, config: SSNOConfig):
        super().__init__()
        self.ssm = S4DLayer(config.width, config.memory_state_size, bidirectional=False,
                            backend=config.s4d_backend)
        self.mix = nn.Linear(config.width, config.width)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        """``v [batch, T, width, *grid]`` → ``[batch, width, *grid]``."""
        summary = self.mix(F.gelu(self.ssm(_time_last(v))[..., -1]))  # [batch, *grid, width]
        return v[:, -1] + channels_first(summary)

    summarise = forward


def _time_last(v: torch.Tensor) -> torch.Tensor:
    """``[batch, T, width, *grid]`` → ``[batch, *grid, width, T]`` (an S4D along time)."""
    return v.movedim(1, -1).movedim(1, -2)


class _PointwiseMLP(nn.Module):
    """``layout="ssmpde"``: two linear maps with a GELU between, channel-last."""

    def __init__(self, features: int, hidden: int, out: int):
        super().__init__()
        self.first, self.second = nn.Linear(features, hidden), nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(F.gelu(self.first(x)))


class _SSMPDEBlock(nn.Module):
    """``layout="ssmpde"``: ``v + W GELU(K_y K_x v)`` (or the sum of the axes' S4Ds)."""

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
        return v + _pointwise(self.mix, F.gelu(y))


class _SSMPDEMemory(S4DLayer):
    """``layout="ssmpde"``: the linear memory ``v_T + (K_t v)_T``, a causal S4D."""

    def summarise(self, v: torch.Tensor) -> torch.Tensor:
        return v[:, -1] + self(_time_last(v))[..., -1].movedim(-1, 1)


@register_model("ssno")
class SSNO(Surrogate):
    """The State Space Neural Operator; see the module docstring.

    Takes ``[batch, window, in_channels, *grid]`` (or ``[batch, in_channels, *grid]`` when
    ``window == 1``) and returns ``[batch, out_channels, *grid]``.
    """

    Config = SSNOConfig
    PRESETS = {
        "ks": dict(grid=(128,), window=4, width=64, mlp_ratio=2, depth=4, state_size=64,
                   memory=True),
        "torus": dict(grid=(64, 64), window=10, width=64, mlp_ratio=2, depth=4, state_size=64,
                      memory=True),
    }

    def __init__(self, config: SSNOConfig):
        super().__init__(config)
        self.register_buffer("coordinates", unit_coordinates(config.grid), persistent=False)
        frames = 1 if config.memory else config.window
        features = frames * config.in_channels + len(config.grid)
        paper = config.layout == "paper"
        # (Construction order as in the first version: its checkpoints' initialisation and
        # golden output are reproduced by layout="ssmpde".)
        self.lift = (nn.Linear(features, config.width) if paper
                     else _PointwiseMLP(features, config.lifting, config.width))
        block = SSNOBlock if paper else _SSMPDEBlock
        self.blocks = nn.ModuleList(block(config) for _ in range(config.depth))
        if config.memory:
            self.memory = (TemporalMemory(config) if paper else
                           _SSMPDEMemory(config.width, config.memory_state_size,
                                         bidirectional=False, backend=config.s4d_backend))
        self.project = (nn.Linear(config.width, config.out_channels) if paper
                        else _PointwiseMLP(config.width, config.lifting, config.out_channels))

    def _lift(self, x: torch.Tensor) -> torch.Tensor:
        return _pointwise(self.lift, with_coordinates(x, self.coordinates))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        x = self.check_input(x)
        if not c.memory:
            v = self._lift(x.flatten(1, 2))
            for block in self.blocks:
                v = block(v)
            return _pointwise(self.project, v)
        batch, frames = x.shape[:2]
        v = self._lift(x.flatten(0, 1))                         # [batch·T, width, *grid]
        for block in self.blocks[:c.blocks_before_memory]:
            v = block(v)
        v = self.memory.summarise(v.unflatten(0, (batch, frames)))   # [batch, width, *grid]
        for block in self.blocks[c.blocks_before_memory:]:
            v = block(v)
        return _pointwise(self.project, v)

    def extra_repr(self) -> str:
        c = self.config
        return (f"layout={c.layout!r}, grid={c.grid}, window={c.window}, width={c.width}, "
                f"depth={c.depth}, state_size={c.state_size}, memory={c.memory}, "
                f"mixing={c.mixing!r}, parameters={sum(p.numel() for p in self.parameters()):,}")
