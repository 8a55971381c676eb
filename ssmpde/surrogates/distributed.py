"""Data-parallel training under ``torchrun``: the process group, ranks and agreement.

``torchrun`` starts one process per device and sets ``WORLD_SIZE``, ``RANK`` and
``LOCAL_RANK``; :func:`~ssmpde.surrogates.train.train` joins the process group (gloo on CPU,
NCCL on GPU), wraps its model in DistributedDataParallel, gives each rank its share of every
global batch, and lets rank 0 alone write and print. Outside torchrun everything here is the
identity of one process.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

__all__ = ["process_rank"]


def _distributed() -> tuple[int, int, bool]:
    """(rank, world size, whether this call started the process group) under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    started = False
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        started = True
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), started
    return 0, 1, started


def process_rank() -> int:
    """This process's rank: the process group's while one is up, else the ``RANK`` that
    torchrun sets (0 outside torchrun). Rank 0 alone prints a run's results."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def _mean_across(value: float, world: int) -> float:
    if world == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor) / world


def _stop_everywhere(stop: bool, world: int) -> bool:
    """True on every rank if it is true on any (ranks must leave the loop together)."""
    if world == 1:
        return stop
    flag = torch.tensor([1.0 if stop else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _rank_device(device: torch.device, world: int) -> torch.device:
    """The device of this rank: under torchrun with CUDA, ``cuda:LOCAL_RANK``."""
    if device.type == "cuda" and world > 1:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def _leave(started_group: bool) -> None:
    """Shut down the process group that :func:`_distributed` started, once every rank is done."""
    if started_group:
        # Leave together and shut the group down before the interpreter does: a gloo group
        # torn down at exit while a peer still talks to it can abort the process.
        dist.barrier()
        dist.destroy_process_group()
