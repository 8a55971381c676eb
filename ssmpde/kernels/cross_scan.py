"""Multi-direction traversal of grids for the scans, with exact inverse merges.

1D mode (VMamba, GeoMaNO): four orders of the ``H × W`` grid as sequences of ``L = H·W``:
``k0`` row-major from the top-left, ``k1`` column-major from the top-left, ``k2 = reverse(k0)``,
``k3 = reverse(k1)``. 2D mode: the four corners, reached by flipping the grid (``c0`` none,
``c1`` flip x, ``c2`` flip y, ``c3`` both) so the 2D scan always runs from index (0, 0).

Layouts: grids ``[batch, channel, height, width]``; traversed sequences
``[batch, direction, channel, length]`` (fold ``direction`` into channels and pass B/C grouped
``[batch, direction, state, length]`` to :func:`ssmpde.kernels.selective_scan`); 2D stacks
``[batch, direction, channel, height, width]``.
"""

from __future__ import annotations

import torch

__all__ = ["ORDERS", "CORNERS", "cross_merge", "cross_merge_2d", "cross_scan",
           "cross_scan_2d", "traverse", "untraverse"]

ORDERS = ("row-major", "column-major", "row-major-reversed", "column-major-reversed")
CORNERS = ("top-left", "top-right", "bottom-left", "bottom-right")


def _check_grid(x: torch.Tensor) -> None:
    if x.dim() != 4:
        raise ValueError(f"grids must be [batch, channel, height, width], got {tuple(x.shape)}")


def traverse(x: torch.Tensor, order: int) -> torch.Tensor:
    """``[batch, channel, H, W] -> [batch, channel, H·W]`` in traversal order ``order`` (0–3)."""
    _check_grid(x)
    if order not in range(4):
        raise ValueError(f"order must be 0..3 ({', '.join(ORDERS)}), got {order!r}")
    seq = (x if order % 2 == 0 else x.transpose(-1, -2)).flatten(-2)
    return seq.flip(-1) if order >= 2 else seq


def untraverse(seq: torch.Tensor, order: int, height: int, width: int) -> torch.Tensor:
    """Inverse of :func:`traverse`: ``[batch, channel, H·W] -> [batch, channel, H, W]``."""
    if seq.dim() != 3 or seq.shape[-1] != height * width:
        raise ValueError(f"sequence must be [batch, channel, {height * width}] for a "
                         f"{height}x{width} grid, got {tuple(seq.shape)}")
    if order not in range(4):
        raise ValueError(f"order must be 0..3 ({', '.join(ORDERS)}), got {order!r}")
    if order >= 2:
        seq = seq.flip(-1)
    if order % 2 == 0:
        return seq.unflatten(-1, (height, width))
    return seq.unflatten(-1, (width, height)).transpose(-1, -2)


def cross_scan(x: torch.Tensor) -> torch.Tensor:
    """All four traversals: ``[batch, channel, H, W] -> [batch, 4, channel, H·W]``."""
    return torch.stack([traverse(x, k) for k in range(4)], dim=1)


def cross_merge(y: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Sum of the four directions mapped back to the grid: ``[batch, 4, channel, L] -> grid``."""
    if y.dim() != 4 or y.shape[1] != 4:
        raise ValueError(f"expected [batch, 4, channel, length], got {tuple(y.shape)}")
    return sum(untraverse(y[:, k], k, height, width) for k in range(4))


def _flip(x: torch.Tensor, corner: int) -> torch.Tensor:
    dims = {0: (), 1: (-1,), 2: (-2,), 3: (-2, -1)}[corner]
    return x.flip(dims) if dims else x


def cross_scan_2d(x: torch.Tensor) -> torch.Tensor:
    """The grid seen from each corner: ``[batch, channel, H, W] -> [batch, 4, channel, H, W]``."""
    _check_grid(x)
    return torch.stack([_flip(x, c) for c in range(4)], dim=1)


def cross_merge_2d(y: torch.Tensor) -> torch.Tensor:
    """Sum of the four corner scans flipped back: ``[batch, 4, channel, H, W] -> grid``."""
    if y.dim() != 5 or y.shape[1] != 4:
        raise ValueError(f"expected [batch, 4, channel, height, width], got {tuple(y.shape)}")
    return sum(_flip(y[:, c], c) for c in range(4))
