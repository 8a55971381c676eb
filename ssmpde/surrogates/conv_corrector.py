r"""A local convolutional corrector: a small periodic ResNet with the inductive bias of a stencil.

Learned corrections of coarse PDE solvers work best with local models: the error of a
discretisation on an under-resolved grid is a function of the solution's neighbourhood, which
is what Bar-Sinai et al.'s learned stencils (PNAS 2019) and Kochkov et al.'s learned
interpolation (PNAS 2021) exploit. This model is that inductive bias and no more:

.. math::
    v_0 = \sigma(P * x), \qquad
    v_{l+1} = v_l + K_{l,2} * \sigma(K_{l,1} * v_l), \qquad y = Q\,v_L,

with :math:`*` a periodic ("circular") convolution of ``kernel`` points per axis (3 or 5:
each layer sees one or two neighbours), :math:`P` of the same size, :math:`Q` pointwise,
:math:`\sigma` the GELU; PyTorch's default initialisation throughout. Its receptive field is ``(1 + 2 depth) (kernel − 1) + 1`` points
per axis; it commutes with integer translations of the periodic grid, and its cost per call
grows with the grid linearly, with no FFT.

Presets: ``ks`` (1D, width 16, depth 2, kernel 5) and ``kolmogorov`` (2D, width 16, depth 2,
kernel 3). Measured costs per call are in ``docs/models/conv_corrector.md``.

References
----------
Y. Bar-Sinai, S. Hoyer, J. Hickey, M. P. Brenner, "Learning data-driven discretizations for
partial differential equations", PNAS 116 (2019). D. Kochkov, J. A. Smith, A. Alieva, Q. Wang,
M. P. Brenner, S. Hoyer, "Machine learning–accelerated computational fluid dynamics", PNAS 118
(2021). K. He, X. Zhang, S. Ren, J. Sun, "Deep residual learning", CVPR 2016.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ssmpde.data import BOUNDARY_CONDITIONS, ROLE, parse_boundary_conditions
from ssmpde.solvers.spectral import (VorticityWavenumbers, advection, velocity_spectra,
                                     vorticity_wavenumbers)

from .base import ModelConfig, Surrogate, check_positive_ints, check_sizes, register_model

__all__ = ["ConvCorrector", "ConvCorrectorConfig", "vorticity_features"]

KERNELS = (3, 5)


@dataclass(frozen=True)
class ConvCorrectorConfig(ModelConfig):
    """Configuration of :class:`ConvCorrector`; validated on construction.

    Attributes
    ----------
    in_channels, out_channels : int
        Input channels (frames, the coarse prediction and conditioning folded in) and output
        channels.
    grid : tuple of int
        ``(length,)`` or ``(height, width)``; checked against the inputs.
    width : int
        Hidden channels.
    depth : int
        Residual blocks (two convolutions each).
    kernel : {3, 5}
        Points per axis of every convolution.
    velocity : bool
        2D only: also feed the velocity (u, v) and the advection u·∇ω of input channel 0,
        read as the vorticity on a periodic square (the frame of the Navier–Stokes data),
        computed spectrally (:func:`vorticity_features`). The map from vorticity to
        velocity is global (Biot–Savart), which no stencil of a few points can learn; the
        closure of an under-resolved flow depends on the velocity that advects it (Kochkov
        et al.'s learned interpolation corrects the advecting velocities). Three FFTs of the
        grid per call.
    """

    in_channels: int = 1
    out_channels: int = 1
    grid: tuple[int, ...] = (64, 64)
    width: int = 16
    depth: int = 2
    kernel: int = 3
    velocity: bool = False

    label: ClassVar[str] = "convolutional corrector"

    def __post_init__(self):
        check_positive_ints("convolutional corrector", self,
                            ("in_channels", "out_channels", "width", "depth"))
        check_sizes("convolutional corrector", self, ("grid",), (1, 2))
        if isinstance(self.kernel, bool) or self.kernel not in KERNELS:
            raise ValueError(f"convolutional corrector kernel must be one of {KERNELS}, got "
                             f"{self.kernel!r}")
        if not isinstance(self.velocity, bool):
            raise ValueError(f"convolutional corrector velocity must be True or False, got "
                             f"{self.velocity!r}")
        if self.velocity and (len(self.grid) != 2 or self.grid[0] != self.grid[1]):
            raise ValueError(f"convolutional corrector velocity features need a square 2D "
                             f"grid (channel 0 a periodic vorticity), got grid {self.grid}")
        if min(self.grid) < self.kernel:
            raise ValueError(f"convolutional corrector kernel {self.kernel} is wider than the "
                             f"grid {self.grid}")

    def check_data(self, task, variables):
        """Velocity features read input channel 0 as a 2D periodic vorticity: the task's first
        field must be one, declared so by the data (named ``vorticity``, role ``state``,
        periodic in both directions); anything else (an Euler density) is refused."""
        if not self.velocity:
            return
        name = task.fields[0]
        attrs = variables.get(name, {})
        text = attrs.get(BOUNDARY_CONDITIONS)
        periodic = parse_boundary_conditions(text) if text is not None else {}
        kinds = {kind for pair in periodic.values() for kind in pair}
        if (name != "vorticity" or attrs.get(ROLE) != "state" or len(periodic) != 2
                or kinds != {"periodic"}):
            found = ", ".join(f"{dim}: {' '.join(pair)}" for dim, pair in periodic.items())
            raise ValueError(
                f"convolutional corrector velocity features need input channel 0 to be a 2D "
                f"periodic vorticity (a state variable named 'vorticity', periodic in y and "
                f"x); this data's first field is {name!r} (role {attrs.get(ROLE)!r}, boundary "
                f"conditions {found or 'none recorded'}): drop velocity=true")


def vorticity_features(vorticity: torch.Tensor,
                       wavenumbers: VorticityWavenumbers | None = None) -> torch.Tensor:
    r"""``[batch, n, n]`` vorticity on a periodic square → ``[batch, 3, n, n]``: the
    velocity (u, v) = (∂ψ/∂y, −∂ψ/∂x) with −Δψ = ω (zero-mean ψ) and the advection
    u ∂ω/∂x + v ∂ω/∂y, spectrally (the Nyquist modes' derivatives set to zero, as in the
    solver), in the units of the square [0, 2π)² (Kochkov's frame: integer wavenumbers,
    so a vorticity of order one at wavenumber k gives a velocity of order 1/k and an
    advection of order one; the unit torus's are these scaled by 1/2π and 1). The
    solver's own Biot–Savart step (:func:`ssmpde.solvers.spectral.velocity_spectra`);
    differentiable. ``wavenumbers``: those of
    :func:`~ssmpde.solvers.spectral.vorticity_wavenumbers` for ``n`` and length 2π, as
    tensors (the model keeps them as buffers, so that it compiles in one graph); computed
    here if not given.
    """
    n = vorticity.shape[-1]
    if wavenumbers is None:
        wavenumbers = vorticity_wavenumbers(n, length=2 * math.pi)
    k = VorticityWavenumbers(*(torch.as_tensor(v).to(dtype=vorticity.dtype,
                                                     device=vorticity.device)
                               for v in wavenumbers))
    u, v, w_x, w_y = torch.fft.irfft2(torch.stack(velocity_spectra(torch.fft.rfft2(vorticity), k),
                                                  dim=1), s=(n, n)).unbind(1)
    return torch.stack([u, v, advection(u, v, w_x, w_y)], dim=1)


@register_model("conv-corrector")
class ConvCorrector(Surrogate):
    """A periodic convolutional ResNet corrector; see the module docstring.

    ``[batch, in_channels, *grid] -> [batch, out_channels, *grid]``.

    Examples
    --------
    >>> from ssmpde.surrogates import build_model
    >>> model = build_model("conv-corrector", preset="ks", grid=(64,))
    >>> model(torch.randn(2, 3, 64)).shape
    torch.Size([2, 1, 64])
    """

    Config = ConvCorrectorConfig
    PRESETS = {
        "default": dict(),
        # KS: the frame, the coarse prediction (or the frame again, in-step), the viscosity.
        "ks": dict(in_channels=3, out_channels=1, grid=(128,), width=16, depth=2, kernel=5),
        "kolmogorov": dict(in_channels=2, out_channels=1, grid=(64, 64), width=16, depth=2,
                           kernel=3),
    }

    def __init__(self, config: ConvCorrectorConfig):
        super().__init__(config)
        conv = nn.Conv1d if len(config.grid) == 1 else nn.Conv2d
        options = dict(kernel_size=config.kernel, padding=config.kernel // 2,
                       padding_mode="circular")
        extra = 3 if config.velocity else 0
        self.lift = conv(config.in_channels + extra, config.width, **options)
        self.blocks = nn.ModuleList(
            nn.ModuleList([conv(config.width, config.width, **options),
                           conv(config.width, config.width, **options)])
            for _ in range(config.depth))
        self.project = conv(config.width, config.out_channels, kernel_size=1)
        if config.velocity:  # float64 constants of the grid, cast to the input's dtype per call
            k = vorticity_wavenumbers(config.grid[-1], length=2 * math.pi)
            for name, values in zip(VorticityWavenumbers._fields, k):
                self.register_buffer(f"velocity_{name}", torch.as_tensor(values),
                                     persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.check_input(x)
        if self.config.velocity:
            k = VorticityWavenumbers(*(getattr(self, f"velocity_{name}")
                                       for name in VorticityWavenumbers._fields))
            x = torch.cat([x, vorticity_features(x[:, 0], k)], dim=1)
        v = F.gelu(self.lift(x))
        for first, second in self.blocks:
            v = v + second(F.gelu(first(v)))
        return self.project(v)

    def extra_repr(self) -> str:
        c = self.config
        return (f"grid={c.grid}, width={c.width}, depth={c.depth}, kernel={c.kernel}, "
                f"parameters={sum(p.numel() for p in self.parameters()):,}")
