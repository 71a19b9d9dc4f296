"""torchrun integration: process group set-up, rank queries and metric reduction."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str | None = None) -> DistInfo:
    """Join the torchrun process group when WORLD_SIZE > 1 (NCCL on GPU, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(**process_group_options(dev))
    return DistInfo(rank, world, local, dev)


def process_group_options(device: torch.device) -> dict:
    """`init_process_group`'s arguments for a process on `device`: NCCL bound to its GPU (with
    `device_id` the communicator is created here, eagerly, not lazily at the first collective --
    which must never be one inside a CUDA-graph capture -- and barriers know their device), gloo
    on the CPU."""
    if device.type == "cuda":
        return dict(backend="nccl", device_id=device)
    return dict(backend="gloo")


def all_reduce_mean(value: float, info: DistInfo) -> float:
    if info.world_size == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=info.device if info.device.type == "cuda" else "cpu")
    dist.all_reduce(t)
    return float(t.item()) / info.world_size


def all_reduce_loss_and_stop(loss: float, stops: tuple[bool, ...], info: DistInfo) -> tuple[float, tuple[bool, ...]]:
    """(the mean of `loss` over the ranks, for each of `stops` whether any rank said it) in one
    all-reduce: the step's loss is reduced anyway, so a stop decision taken on one rank (rank 0's
    deadline, an interrupt) reaches every rank at the same step at no extra collective."""
    if info.world_size == 1:
        return loss, tuple(stops)
    t = torch.tensor([loss, *map(float, stops)], dtype=torch.float64,
                     device=info.device if info.device.type == "cuda" else "cpu")
    dist.all_reduce(t)
    mean, *flags = t.tolist()
    return mean / info.world_size, tuple(flag > 0 for flag in flags)


def barrier(info: DistInfo) -> None:
    if info.world_size > 1:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()
