#!/usr/bin/env python3
"""PyTorch reference for bench/model-throughput.ts: the same Qwen2/Qwen3 models, batches and steps, on every CPU core.

Reads one JSON job from stdin (or from argv[1]):
  {"name": "tiny", "config": {<HF config.json fields>}, "batch": 8, "seq": 256, "steps": 5, "warmup": 1,
   "gen": {"batch": 8, "prompt": 32, "newTokens": 128, "noCacheTokens": 128}, "seed": 0, "lr": 1e-3, "maxGradNorm": 1.0}
and prints one JSON line on stdout:
  {"available": true, "params": ..., "trainTokPerS": ..., "trainStepMs": [...], "genCacheTokPerS": ...,
   "genNoCacheTokPerS": ..., "peakRssBytes": ..., "threads": ..., "versions": {...}}
or {"available": false, "error": "..."} when torch / transformers cannot be imported (exit status 0).

Training step = forward + cross-entropy over all positions (mean) + backward + clip_grad_norm_(1.0) + AdamW (weight
decay 0), exactly what the tfjs side does. Generation = model.generate, greedy, min_new_tokens = max_new_tokens, with
use_cache True and False. Peak RSS = getrusage(RUSAGE_SELF).ru_maxrss of this process (one process per model size).
"""
import json
import os
import resource
import statistics
import sys
import time

# Every core: torch.set_num_threads(os.cpu_count()) below, and no thread limits inherited from the environment, unless
# the bench asks for N threads (CM2_BENCH_THREADS, its --threads option).
THREADS = int(os.environ["CM2_BENCH_THREADS"]) if os.environ.get("CM2_BENCH_THREADS") else None
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    if THREADS is None:
        os.environ.pop(var, None)
    else:
        os.environ[var] = str(THREADS)


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    job = json.loads(sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read())
    try:
        import torch
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM
    except Exception as e:  # ImportError, or a broken install
        emit({"available": False, "error": f"{type(e).__name__}: {e}"})
        return

    torch.set_num_threads(THREADS or os.cpu_count() or 1)
    torch.manual_seed(job.get("seed", 0))
    transformers.logging.set_verbosity_error()

    cfg = dict(job["config"])
    family = cfg.pop("model_type", "qwen3")
    cfg.pop("architectures", None)
    config_class, model_class = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }[family]
    config = config_class(**cfg)
    config._attn_implementation = "eager"
    model = model_class(config).float()
    model.config._attn_implementation = "eager"
    params = sum(p.numel() for p in model.parameters())  # tied weights are counted once

    V = config.vocab_size
    B, T = job["batch"], job["seq"]
    g = torch.Generator().manual_seed(job.get("seed", 0) + 1)
    data = torch.randint(0, V, (B, T + 1), generator=g)
    ids, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    opt = torch.optim.AdamW(model.parameters(), lr=job.get("lr", 1e-3), betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    max_norm = job.get("maxGradNorm", 1.0)

    def train_step():
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=ids, use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
        return loss.item()

    model.train()
    losses = []
    for _ in range(job.get("warmup", 1)):
        losses.append(train_step())
    step_ms = []
    step_cpu_ms = []
    for _ in range(job["steps"]):
        t0 = time.perf_counter()
        c0 = time.process_time()
        losses.append(train_step())
        step_ms.append((time.perf_counter() - t0) * 1000)
        step_cpu_ms.append((time.process_time() - c0) * 1000)
    train_tps = B * T / (statistics.median(step_ms) / 1000)

    # Generation: random prompts, greedy, exactly newTokens per sequence (no EOS).
    gen = job["gen"]
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.generation_config.bos_token_id = None
    prompts = torch.randint(0, V, (gen["batch"], gen["prompt"]), generator=g)
    mask = torch.ones_like(prompts)

    def run_gen(use_cache, new_tokens):
        with torch.inference_mode():
            out = model.generate(input_ids=prompts, attention_mask=mask, do_sample=False, use_cache=use_cache,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=0, eos_token_id=None)
        return out[:, prompts.shape[1]:]

    gen_result = {}
    cpu_rates = {"trainTokPerS": B * T / (statistics.median(step_cpu_ms) / 1000)}
    outputs = {}
    for use_cache in (True, False):
        run_gen(use_cache, 4)  # warm-up
        t0 = time.perf_counter()
        c0 = time.process_time()
        out = run_gen(use_cache, gen["newTokens"] if use_cache else gen.get("noCacheTokens", gen["newTokens"]))
        sec = time.perf_counter() - t0
        cpu_sec = time.process_time() - c0
        cpu_rates["genCacheTokPerS" if use_cache else "genNoCacheTokPerS"] = out.numel() / cpu_sec
        outputs[use_cache] = out
        gen_result["genCacheTokPerS" if use_cache else "genNoCacheTokPerS"] = out.numel() / sec
        gen_result["genCacheNewTokens" if use_cache else "genNoCacheNewTokens"] = out.numel()

    emit({
        "available": True,
        "name": job.get("name"),
        "params": params,
        "trainTokPerS": train_tps,
        "trainStepMs": step_ms,
        "cpu": cpu_rates,
        "losses": losses,
        **gen_result,
        "cachedEqualsUncached": bool(torch.equal(outputs[True][:, :outputs[False].shape[1]], outputs[False])),
        "peakRssBytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "threads": {"torch": torch.get_num_threads(), "interop": torch.get_num_interop_threads(), "cpus": os.cpu_count()},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    })


if __name__ == "__main__":
    main()
