r"""A lean Fourier Neural Operator: few tensor operations per call, for learned correctors.

A learned correction runs the model after every step of a coarse solver, so the model's cost
per call is part of every step (see ``docs/hybrid.md``). On a CPU a small network's time is
mostly the fixed cost of each tensor operation, not arithmetic, so this FNO (Li et al., 2021)
is written for the fewest operations: the features stay ``[batch, width, points]`` (the FFTs
run along contiguous axes), every pointwise linear map is one batched matrix product with its
bias or the spectral branch fused in, and there is no positional embedding (a correction of
a translation-invariant PDE does not need one). The model is

.. math::
    v_0 = P\,x + p, \qquad
    v_{l+1} = \sigma\big(\mathcal F^{-1}(R_l \cdot \mathcal F v_l) + W_l v_l + b_l\big),
    \qquad y = Q\,v_L + q,

with :math:`\sigma` the GELU after every layer but the last, :math:`R_l` a complex
``width × width`` matrix per kept Fourier mode, and :math:`P, W_l, Q` pointwise. Kept modes:
in 1D the first ``m`` of the real FFT; in 2D the two corners ``ky ∈ {0..m_y−1} ∪
{−m_y..−1}`` × ``kx ∈ {0..m_x−1}`` of the FNO paper. The model commutes with integer
translations of the grid (periodic boundaries).

Presets: ``ks-corrector`` (1D, 256 points, width 16, depth 2, 16 modes; under a millisecond
per call for a batch of 16 on one CPU thread), ``ns-corrector`` (2D, 64², width 16, depth 2,
12 × 12 modes per corner; about a tenth of the time of the FNO baseline's ``navier-stokes``
preset) and ``default``, the FNO paper's size (width 32, depth 4, 12 modes). Measured costs
are in ``docs/models/lean_fno.md``.

References
----------
Z. Li, N. Kovachki, K. Azizzadenesheli, B. Liu, K. Bhattacharya, A. Stuart, A. Anandkumar,
"Fourier Neural Operator for Parametric Partial Differential Equations", ICLR 2021.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from .base import ModelConfig, Surrogate, check_positive_ints, check_sizes, register_model

__all__ = ["LeanFNO", "LeanFNOConfig", "LeanFourierLayer", "mode_limits"]


def mode_limits(grid: tuple[int, ...]) -> tuple[int, ...]:
    """The most Fourier modes per axis that a lean FNO can keep on ``grid``.

    1D: ``n // 2 + 1`` (every mode of the real FFT). 2D: ``n_y // 2`` per corner along y (the
    two corners must not overlap) and ``n_x // 2 + 1`` along x.

    Examples
    --------
    >>> mode_limits((256,)), mode_limits((85, 85))
    ((129,), (42, 43))
    """
    if len(grid) == 1:
        return (grid[0] // 2 + 1,)
    return (grid[0] // 2, grid[1] // 2 + 1)


@dataclass(frozen=True)
class LeanFNOConfig(ModelConfig):
    """Configuration of :class:`LeanFNO`; validated on construction.

    Attributes
    ----------
    in_channels, out_channels : int
        Input channels (frames, the coarse prediction and conditioning folded in) and output
        channels.
    grid : tuple of int
        ``(length,)`` or ``(height, width)``; checked against the inputs.
    modes : tuple of int
        Fourier modes kept per axis: 1D the first ``m`` (at most ``n // 2 + 1``); 2D ``m_y``
        per corner along y (at most ``n_y // 2``) and the first ``m_x`` along x (at most
        ``n_x // 2 + 1``), the FNO paper's counting. Fitting a task caps them at these limits.
    width : int
        Hidden channels.
    depth : int
        Number of Fourier layers.
    """

    in_channels: int = 1
    out_channels: int = 1
    grid: tuple[int, ...] = (64, 64)
    modes: tuple[int, ...] = (12, 12)
    width: int = 32
    depth: int = 4

    spatial_fields: ClassVar[tuple[str, ...]] = ("modes",)
    label: ClassVar[str] = "lean FNO"

    @classmethod
    def adapt(cls, task, values):
        """Cap ``modes`` at :func:`mode_limits` of the task's grid (the base class caps them
        at the grid size only)."""
        limits = mode_limits(tuple(task.grid))
        return {"modes": tuple(min(m, limit) for m, limit in zip(values["modes"], limits))}

    def __post_init__(self):
        check_positive_ints("lean FNO", self, ("in_channels", "out_channels", "width", "depth"))
        check_sizes("lean FNO", self, ("grid", "modes"), (1, 2))
        if len(self.modes) != len(self.grid):
            raise ValueError(f"lean FNO modes {self.modes} must have one entry per grid "
                             f"dimension {self.grid}")
        limits = mode_limits(self.grid)
        if any(m > limit for m, limit in zip(self.modes, limits)):
            raise ValueError(f"lean FNO modes {self.modes} exceed what the grid {self.grid} "
                             f"holds: at most {limits} (1D n//2+1; 2D n_y//2 per corner, "
                             "n_x//2+1)")


class LeanFourierLayer(nn.Module):
    r"""One Fourier layer without its activation: :math:`\mathcal F^{-1}(R\cdot\mathcal F v)
    + W v + b` on ``v [batch, width, points]``.

    Parameters
    ----------
    width : int
    grid : tuple of int
        The grid that ``points`` flattens (1D or 2D).
    modes : tuple of int
        Kept modes, as in :class:`LeanFNOConfig`.

    Notes
    -----
    ``spectral [modes, width_in, width_out, 2]`` holds :math:`R` as real and imaginary parts
    (safetensors and every optimiser take real tensors), initialised complex normal with
    :math:`E|R|^2 = 1/\text{width}`, neuraloperator's default scale. ``skip`` is an
    ``nn.Linear`` (its default initialisation), applied by one ``baddbmm``.
    """

    def __init__(self, width: int, grid: tuple[int, ...], modes: tuple[int, ...]):
        super().__init__()
        self.grid, self.modes = tuple(grid), tuple(modes)
        kept = 2 * modes[0] * modes[1] if len(grid) == 2 else modes[0]
        self.spectral = nn.Parameter(torch.randn(kept, width, width, 2)
                                     * math.sqrt(0.5 / width))
        self.skip = nn.Linear(width, width)
        if len(grid) == 2:
            # Rows of the two corners ky = 0..m_y-1 and -m_y..-1, in that order.
            rows = torch.cat([torch.arange(modes[0]), torch.arange(grid[0] - modes[0], grid[0])])
            self.register_buffer("rows", rows, persistent=False)

    def _spectral(self, v: torch.Tensor) -> torch.Tensor:
        batch, width = v.shape[:2]
        weight = torch.view_as_complex(self.spectral)
        if len(self.grid) == 1:
            kept = torch.fft.rfft(v)[..., :self.modes[0]]              # [b, w, m]
            # bmm on a contiguous [modes, batch, width] is 3x faster than on the strided view.
            mixed = torch.bmm(kept.permute(2, 0, 1).contiguous(), weight)
            return torch.fft.irfft(mixed.permute(1, 2, 0), n=self.grid[0])
        height, length = self.grid
        m_x = self.modes[1]
        # The x transform first, then y on the m_x kept columns only: a third of the work of
        # rfftn, which transforms every column along y.
        columns = torch.fft.rfft(v.view(batch, width, height, length))[..., :m_x]
        spectrum = torch.fft.fft(columns, dim=2)                         # [b, w, ny, m_x]
        kept = spectrum.index_select(2, self.rows)                       # [b, w, 2 m_y, m_x]
        mixed = torch.bmm(kept.flatten(2).permute(2, 0, 1).contiguous(), weight)
        placed = torch.zeros_like(spectrum)
        placed.index_copy_(2, self.rows, mixed.permute(1, 2, 0).unflatten(2, kept.shape[2:]))
        # irfft pads the x axis from m_x to length // 2 + 1 modes with zeros.
        return torch.fft.irfft(torch.fft.ifft(placed, dim=2), n=length).flatten(2)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        """``v [batch, width, points]`` → the layer's output, same shape (before σ)."""
        out = torch.baddbmm(self._spectral(v), self.skip.weight.expand(v.shape[0], -1, -1), v)
        return out.add_(self.skip.bias[:, None])


@register_model("lean-fno")
class LeanFNO(Surrogate):
    """A Fourier Neural Operator written for few operations per call; see the module docstring.

    ``[batch, in_channels, *grid] -> [batch, out_channels, *grid]``.

    Examples
    --------
    >>> from ssmpde.surrogates import build_model
    >>> model = build_model("lean-fno", preset="ks-corrector")
    >>> model(torch.randn(2, 3, 256)).shape
    torch.Size([2, 1, 256])
    """

    Config = LeanFNOConfig
    PRESETS = {
        "default": dict(),
        # KS corrector: the frame and the coarse prediction, plus one conditioning channel.
        "ks-corrector": dict(in_channels=3, out_channels=1, grid=(256,), modes=(16,),
                             width=16, depth=2),
        "ns-corrector": dict(in_channels=3, out_channels=1, grid=(64, 64), modes=(12, 12),
                             width=16, depth=2),
    }

    def __init__(self, config: LeanFNOConfig):
        super().__init__(config)
        self.lift = nn.Linear(config.in_channels, config.width)
        self.layers = nn.ModuleList(LeanFourierLayer(config.width, config.grid, config.modes)
                                    for _ in range(config.depth))
        self.project = nn.Linear(config.width, config.out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.config
        x = self.check_input(x)
        batch = x.shape[0]
        v = torch.baddbmm(self.lift.bias[:, None], self.lift.weight.expand(batch, -1, -1),
                          x.reshape(batch, c.in_channels, -1))           # [b, width, points]
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            v = layer(v)
            if index < last:
                v = F.gelu(v)
        out = torch.baddbmm(self.project.bias[:, None],
                            self.project.weight.expand(batch, -1, -1), v)
        return out.view(batch, c.out_channels, *c.grid)

    def extra_repr(self) -> str:
        c = self.config
        return (f"grid={c.grid}, modes={c.modes}, width={c.width}, depth={c.depth}, "
                f"parameters={sum(p.numel() for p in self.parameters()):,}")
