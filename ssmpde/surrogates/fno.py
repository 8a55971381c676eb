"""The FNO baseline: ``neuraloperator``'s Fourier Neural Operator behind ssmpde's registry.

Readers trust the baseline they know, so this wraps ``neuralop.models.FNO`` (Li et al., 2021;
Kossaifi et al., neuraloperator 2.x) rather than re-implementing it. ``neuraloperator`` is an
optional dependency (``pip install "ssmpde[fno]"``; the ``dev`` extra includes it).

Presets follow the FNO paper's settings: ``darcy`` (width 32, 4 layers, 1 → 1) and
``navier-stokes`` (width 20, 4 layers, 10 frames → the next one), both with the paper's 12
modes per corner, which neuraloperator counts across both signs: ``modes=(24, 24)``; and the
1D ``burgers`` (width 64, 4 layers, 16 modes). Any preset fits a task of either dimension
through :meth:`ssmpde.surrogates.ModelConfig.for_task`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import ModelConfig, Surrogate, check_positive_ints, check_sizes, register_model

__all__ = ["FNO", "FNOConfig"]


def _neuralop_fno():
    try:
        from neuralop.models import FNO as NeuralopFNO
    except ImportError as error:
        raise ImportError(
            "the FNO baseline needs the optional 'neuraloperator' package: "
            "pip install 'ssmpde[fno]' (or pip install neuraloperator==2.0.0)") from error
    return NeuralopFNO


@dataclass(frozen=True)
class FNOConfig(ModelConfig):
    """Configuration of :class:`FNO`.

    Attributes
    ----------
    in_channels, out_channels : int
    grid : tuple of int
        The data grid; the FNO itself works at any resolution, the grid fixes the number of
        dimensions and is checked against the inputs.
    modes : tuple of int
        Fourier modes kept per dimension (at most grid // 2 + 1 along the last axis).
    width : int
        Hidden channels.
    depth : int
        Number of Fourier layers.
    positional_encoding : bool
        Append the grid coordinates to the input (neuraloperator's "grid" embedding).
    """

    in_channels: int = 1
    out_channels: int = 1
    grid: tuple[int, ...] = (85, 85)
    modes: tuple[int, ...] = (12, 12)
    width: int = 32
    depth: int = 4
    positional_encoding: bool = True

    spatial_fields: ClassVar[tuple[str, ...]] = ("modes",)
    label: ClassVar[str] = "FNO"

    def __post_init__(self):
        check_positive_ints("FNO", self, ("in_channels", "out_channels", "width", "depth"))
        check_sizes("FNO", self, ("grid", "modes"), (1, 2, 3))
        if len(self.modes) != len(self.grid):
            raise ValueError(f"modes {self.modes} must have one entry per grid dimension "
                             f"{self.grid}")
        if any(m > n for m, n in zip(self.modes, self.grid)):
            raise ValueError(f"modes {self.modes} exceed the grid {self.grid}: an n-point axis "
                             "has at most n Fourier modes")


@register_model("fno")
class FNO(Surrogate):
    """neuraloperator's FNO with an ssmpde config.

    ``[batch, in_channels, *grid] -> [batch, out_channels, *grid]``.
    """

    Config = FNOConfig
    PRESETS = {
        "darcy": dict(in_channels=1, out_channels=1, grid=(85, 85), modes=(24, 24), width=32,
                      depth=4),
        "navier-stokes": dict(in_channels=10, out_channels=1, grid=(64, 64), modes=(24, 24),
                              width=20, depth=4),
        # FNO paper, 1D Burgers: 16 modes, width 64, 4 layers (u0 -> u(T) on 8192 -> 1024).
        "burgers": dict(in_channels=1, out_channels=1, grid=(1024,), modes=(16,), width=64,
                        depth=4),
    }

    def __init__(self, config: FNOConfig):
        super().__init__(config)
        self.fno = _neuralop_fno()(
            n_modes=config.modes, in_channels=config.in_channels,
            out_channels=config.out_channels, hidden_channels=config.width,
            n_layers=config.depth,
            positional_embedding="grid" if config.positional_encoding else None)

    def state_dict(self, *args, **kwargs):
        """Tensors only: neuraloperator adds its init kwargs as a ``_metadata`` dict (for
        pickling); our JSON config already holds them, and safetensors takes only tensors."""
        state = super().state_dict(*args, **kwargs)
        state.pop("_metadata", None)
        return state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.check_input(x)
        return self.fno(x)
