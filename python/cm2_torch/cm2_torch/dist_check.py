"""Rank invariance: the golden GRPO update (and SFT step, and LoRA update) with the policy sharded by FSDP2 over the ranks of a torchrun launch
(gloo on the CPU), micro-batches split between the ranks, checked against the same fixture as one process.

    torchrun --nproc_per_node 2 -m cm2_torch.dist_check
Rank 0 prints one JSON line per case and the process exits 1 when a comparison is beyond its tolerance.
"""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

from .fsdp import init_distributed, shard
from .golden import CASES, check_case, check_lora_case, check_sft_case


def main() -> int:
    torch.set_num_threads(1)
    rank, world = init_distributed(torch.device("cpu"))
    failed = 0
    for name, check in [(n, check_case) for n in CASES] + [(f"sft:{n}", check_sft_case) for n in CASES] + [(f"lora:{n}", check_lora_case) for n in CASES]:
        devs = check(name.split(":")[-1], "cpu", wrap=shard)
        worst = max(devs, key=lambda d: d.ratio)
        bad = [d for d in devs if d.ratio > 1.0]
        failed += len(bad)
        if rank == 0:
            print(json.dumps({"case": name, "world": world, "comparisons": len(devs), "failed": len(bad), "worst": worst.what, "worstRatio": worst.ratio,
                              "beyond": [f"{d.what}: {d.actual} vs {d.expected}" for d in bad[:5]]}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
