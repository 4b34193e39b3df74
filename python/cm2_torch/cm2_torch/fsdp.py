"""torch.distributed and FSDP2 for the trainer: the process group of a `torchrun` launch (or one rank alone), and the
policy sharded with `fully_shard` per decoder layer and at the root (the tied embedding and head in the root group)."""
from __future__ import annotations

import datetime
import os
from typing import Optional

import torch
import torch.distributed as dist


def rank_device(requested: str) -> torch.device:
    """cuda:LOCAL_RANK under torchrun on a GPU machine, else what was asked for."""
    if requested.startswith("cuda") and ":" not in requested:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device(requested)


def init_distributed(device: torch.device, timeout_hours: float = 24.0) -> tuple[int, int]:
    """Joins the torchrun process group (RANK, WORLD_SIZE, MASTER_ADDR/PORT from the environment): NCCL on CUDA,
    gloo on the CPU. Collectives wait up to `timeout_hours` (the followers wait for tasks in one). Returns (rank, world)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or dist.is_initialized():
        return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    backend = "nccl" if device.type == "cuda" else "gloo"
    kw = {"device_id": device} if device.type == "cuda" else {}
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, timeout=datetime.timedelta(hours=timeout_hours), **kw)
    return dist.get_rank(), dist.get_world_size()


def init_single_rank(device: torch.device) -> None:
    """A process group of one (FSDP2 needs one), for checks outside torchrun."""
    if dist.is_initialized():
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    port = 29500 + os.getpid() % 1000
    kw = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, **kw)


def shard(model: torch.nn.Module, mp=None) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    kw = {"mp_policy": mp} if mp is not None else {}
    inner = getattr(model, "model", model)
    for layer in inner.layers:
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    return model


def distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def full(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor of a parameter, gradient or moment that FSDP2 may hold as a DTensor shard (a collective: every
    rank must ask for the same tensors in the same order)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def sharded_like(full_tensor: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """`full_tensor` laid out as `param` is (its DTensor shard under FSDP2, else as it is, on its device)."""
    if hasattr(param, "device_mesh"):
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(full_tensor.to(param.device), param.device_mesh, param.placements)
    return full_tensor.to(param.device)


def broadcast_object(obj: Optional[object], src: int = 0) -> object:
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]
