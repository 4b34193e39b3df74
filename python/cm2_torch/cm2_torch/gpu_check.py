"""The trainer core on a GPU, without Temporal (issue 32, item 7; scripts/verify-torch-gpu.sh runs it):

1. the golden fixture's parity on the device (the same comparisons as tests/test_golden.py, float32: the GRPO update,
   the SFT step, the LoRA update);
2. the same under FSDP2 (`fully_shard` per decoder layer and at the root; one rank, NCCL on CUDA, gloo on a CPU);
3. GRPO steps of a SmolLM2-135M-shaped and a Qwen2.5-0.5B-shaped model (random weights: no model hub there) in bf16
   autocast over float32 weights, full fine-tuning and LoRA (PEFT, r 8 on every projection, the reference is the base
   with the adapter off): positions/s, peak memory, and achieved TFLOP/s beside the chip's dense bf16 peak.

Each section reports and goes on when another fails. `--small` shrinks section 3 so the whole check runs on a CPU.
Writes gpu-check.json into --out.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from typing import Any, Callable

import torch

from .golden import CASES, check_case, check_lora_case, check_sft_case
from .fsdp import init_single_rank, shard
from .grpo import GrpoSequence, GrpoStepConfig, Span, adamw, grpo_step

SHAPES = {
    # config.json of HuggingFaceTB/SmolLM2-135M-Instruct and Qwen/Qwen2.5-0.5B-Instruct (the sizes only)
    "smollm2-135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=8192,
                         rope_theta=100000.0),
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=32768,
                         rope_theta=1000000.0),
}
H200_BF16_DENSE_TFLOPS = 790.0  # measured here: 8192^3 bf16 matmul through PyTorch (device KINDS.md)


def log(*a: Any) -> None:
    print(*a, flush=True)


def section(name: str, results: dict, fn: Callable[[], Any]) -> None:
    t0 = time.time()
    log(f"\n== {name}")
    try:
        results[name] = {"ok": True, "result": fn(), "seconds": round(time.time() - t0, 1)}
    except Exception as e:  # a failed section is reported, the others still run
        traceback.print_exc()
        results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}", "seconds": round(time.time() - t0, 1)}
    log(f"-- {name}: {'ok' if results[name]['ok'] else 'FAILED'} in {results[name]['seconds']} s")


def golden(device: torch.device, wrap=None) -> dict:
    out = {}
    # the GRPO update, the SFT step and the LoRA update through PEFT (the last two added after the H200 run in bench/README.md)
    for name, check in [(n, check_case) for n in CASES] + [(f"sft:{n}", check_sft_case) for n in CASES] + [(f"lora:{n}", check_lora_case) for n in CASES]:
        devs = check(name.split(":")[-1], device, wrap)
        worst = max(devs, key=lambda d: d.ratio)
        bad = [d for d in devs if d.ratio > 1.0]
        out[name] = {"comparisons": len(devs), "failed": len(bad), "worst": worst.what, "worstRatio": worst.ratio}
        log(f"{name}: {len(devs)} comparisons, {len(bad)} beyond tolerance; worst {worst.what} at {worst.ratio:.3g} of its tolerance"
            f" ({worst.actual:.8g} vs {worst.expected:.8g})")
        for d in bad[:10]:
            log(f"  beyond: {d.what}: {d.actual:.8g} vs {d.expected:.8g} ({d.ratio:.3g})")
    if any(v["failed"] for v in out.values()):
        raise AssertionError(f"golden parity failed on {device}: {json.dumps(out)}")
    return out


def build(shape: str, device: torch.device, small: bool) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM
    spec = dict(SHAPES[shape])
    mt = spec.pop("model_type")
    if small:
        spec.update(num_hidden_layers=2)
    config = AutoConfig.for_model(mt, **spec)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    return model


class AdapterOff(torch.nn.Module):
    """A PEFT model with its adapter off: the reference policy of a LoRA run, with no second copy of the weights."""

    def __init__(self, peft_model: torch.nn.Module):
        super().__init__()
        self.inner = peft_model

    def forward(self, **kw):
        with self.inner.disable_adapter():
            return self.inner(**kw)


def matmul_params(model: torch.nn.Module) -> int:
    """Weights of the Linear layers (the lm_head too, tied or not): 2 FLOPs each per position forward."""
    seen, n = set(), 0
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and id(m.weight) not in seen:
            seen.add(id(m.weight))
            n += m.weight.numel()
    return n


def speed(shape: str, device: torch.device, small: bool, lora: bool, fsdp: bool = False, micro_batch: int | None = None, length: int | None = None) -> dict:
    torch.manual_seed(0)
    B, L, micro = (4, 64, 2) if small else (32, 1024, 8)
    micro, L = micro_batch or micro, length or L
    steps = 2 if small else 3
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    policy = build(shape, device, small)
    vocab = policy.config.vocab_size
    n_matmul = matmul_params(policy)
    if lora:
        from peft import LoraConfig, get_peft_model
        policy = get_peft_model(policy, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0,
                                                   target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
        reference = AdapterOff(policy)
    else:
        reference = build(shape, device, small).to(torch.bfloat16 if device.type == "cuda" else torch.float32).eval()
        reference.load_state_dict(policy.state_dict())
        for p in reference.parameters():
            p.requires_grad_(False)
    if fsdp:
        from torch.distributed.fsdp import MixedPrecisionPolicy
        init_single_rank(device)
        # bf16 parameters in the forward and backward on a GPU (a CPU's bf16 matmuls crawl: float32 there)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if device.type == "cuda" else None
        shard(policy.base_model.model if lora else policy, mp)
    trained = [p for p in policy.parameters() if p.requires_grad]
    opt = adamw(trained, weight_decay=0.01)
    g = torch.Generator().manual_seed(1)
    batch = []
    for i in range(B):
        toks = torch.randint(0, vocab, (L,), generator=g).tolist()
        batch.append(GrpoSequence(tokens=toks, spans=[Span(L // 2, L, float(torch.randn((), generator=g)))]))
    cfg = GrpoStepConfig(lr=1e-5, max_grad_norm=1.0, micro_batch=micro, pad_id=0, kl_coef=1e-3, temperature=0.7,
                         autocast=torch.bfloat16 if device.type == "cuda" else None)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    grpo_step(policy, reference, opt, batch, cfg)  # warm-up (kernels, allocator, optimizer state)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        r = grpo_step(policy, reference, opt, batch, cfg)
    sync()
    dt = (time.perf_counter() - t0) / steps
    positions = B * (L - 1)
    # forward 2N + backward 4N (full; LoRA skips the frozen weights' gradients: 2N) + reference forward 2N, per position
    flops = (2 + (2 if lora else 4) + 2) * n_matmul * positions
    out = {
        "shape": shape, "lora": lora, "fsdp": fsdp, "sequences": B, "length": L, "microBatch": micro, "secondsPerStep": round(dt, 4),
        "positionsPerSecond": round(positions / dt), "policyTokensPerSecond": round(r.policy_tokens / dt),
        "matmulParams": n_matmul, "trainedParams": sum(p.numel() for p in trained), "achievedTflops": round(flops / dt / 1e12, 2),
        "loss": r.loss, "gradNorm": r.grad_norm,
    }
    if device.type == "cuda":
        out["peakMemoryGiB"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        out["fractionOfPeak"] = round(out["achievedTflops"] / H200_BF16_DENSE_TFLOPS, 3)
    else:
        import resource
        out["peakRssGiB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    log(json.dumps(out))
    del policy, reference, opt
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/cm2-gpu-check"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--small", action="store_true", help="2-layer models, tiny batch: the check's code on a CPU")
    ap.add_argument("--skip", action="append", default=[], help="a section to skip: golden, fsdp, speed")
    ap.add_argument("--shape", action="append", default=[], help=f"speed: only these shapes ({', '.join(SHAPES)})")
    ap.add_argument("--variant", action="append", default=[], help="speed: only these variants (full, lora, fsdp2)")
    ap.add_argument("--micro-batch", type=int, help="speed: sequences per micro-batch (default 8)")
    ap.add_argument("--length", type=int, help="speed: tokens per sequence (default 1024; 32 sequences)")
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cuda":
        device = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device())
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 parity means IEEE float32 matmuls
        torch.backends.cudnn.allow_tf32 = False
    import transformers
    try:
        import peft
        peft_version = peft.__version__
    except Exception:
        peft_version = None
    env = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft_version,
           "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
           "cuda": torch.version.cuda, "small": a.small}
    log(json.dumps(env))
    results: dict[str, Any] = {"env": env}
    t0 = time.time()
    if "golden" not in a.skip:
        section("golden parity (float32)", results, lambda: golden(device))
    if "fsdp" not in a.skip:
        def fsdp_golden():
            init_single_rank(device)
            return golden(device, wrap=shard)
        section("golden parity under FSDP2 (1 rank)", results, fsdp_golden)
    if "speed" not in a.skip:
        kw = dict(micro_batch=a.micro_batch, length=a.length)
        tag = "".join([f" mb{a.micro_batch}" if a.micro_batch else "", f" L{a.length}" if a.length else ""])
        for shape in a.shape or SHAPES:
            for variant in a.variant or ("full", "lora", "fsdp2"):
                label = f"speed {shape} {'full fsdp2-bf16' if variant == 'fsdp2' else variant}{tag}"
                section(label, results, lambda s=shape, v=variant: speed(s, device, a.small, v == "lora", fsdp=v == "fsdp2", **kw))
    results["seconds"] = round(time.time() - t0, 1)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "gpu-check.json"), "w") as f:
        json.dump(results, f, indent=2)
    log("\n| section | ok | result |\n| --- | --- | --- |")
    for k, v in results.items():
        if isinstance(v, dict) and "ok" in v:
            r = v.get("result")
            brief = v.get("error") if not v["ok"] else (
                f"{r['positionsPerSecond']} positions/s, {r.get('peakMemoryGiB', r.get('peakRssGiB'))} GiB, {r['achievedTflops']} TFLOP/s"
                if isinstance(r, dict) and "positionsPerSecond" in r else "; ".join(f"{n}: worst {x['worstRatio']:.3g} of tolerance" for n, x in r.items()))
            log(f"| {k} | {'yes' if v['ok'] else 'NO'} | {brief} |")
    log(f"total {results['seconds']} s")
    try:
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass
    return 0 if all(v["ok"] for v in results.values() if isinstance(v, dict) and "ok" in v) else 1


if __name__ == "__main__":
    sys.exit(main())
