"""Batches of a task dataset: each process's share of a global batch, stacked into tensors."""

from __future__ import annotations

import numpy as np
import torch

from .datasets import TaskDataset


def _batches(order: np.ndarray, batch_size: int, rank: int, world: int):
    """Global batches of ``batch_size`` from ``order``; each rank takes its share."""
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        yield batch[rank::world]


def _collate(dataset: TaskDataset, indices) -> dict[str, torch.Tensor]:
    items = [dataset[int(i)] for i in indices]
    return {key: torch.stack([item[key] for item in items]) for key in items[0]}
