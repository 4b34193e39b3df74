"""The torch side of bench/train-engines.ts: one JSON job file (an HF folder, a GRPO batch, the step's settings);
prints {"seconds": median s per update after one warm-up, "peakRssBytes": ...}."""
import json
import os
import resource
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM

from .grpo import GrpoSequence, GrpoStepConfig, adamw, grpo_step


def main() -> None:
    with open(sys.argv[1]) as f:
        job = json.load(f)
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    else:
        torch.set_num_threads(os.cpu_count() or 1)
    load = lambda: AutoModelForCausalLM.from_pretrained(job["dir"], dtype=torch.float32, attn_implementation="sdpa")
    policy, reference = load().train(), load().eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    opt = adamw(list(policy.parameters()), 0.01)
    st = job["step"]
    cfg = GrpoStepConfig(lr=st["lr"], max_grad_norm=st["maxGradNorm"], micro_batch=job["micro"], pad_id=st["padId"], clip_low=st["clipLow"],
                         clip_high=st["clipHigh"], clip_ratio_c=st["clipRatioC"], kl_coef=st["klCoef"], temperature=st["temperature"])
    batch = [GrpoSequence.from_json(s) for s in job["batch"]]
    times = []
    for i in range(job["steps"] + 1):
        t0 = time.perf_counter()
        grpo_step(policy, reference, opt, batch, cfg)
        if i > 0:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"seconds": statistics.median(times), "peakRssBytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
