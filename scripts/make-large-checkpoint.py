#!/usr/bin/env python3
"""A random-init checkpoint with Qwen2.5-0.5B's shape, written by HF transformers as a real checkpoint is (issue 12, item 6).

Qwen2 architecture, hidden 896, 24 layers, 14 query / 2 KV heads (head_dim 64), intermediate 4864, vocab 151,936, tied
embeddings, q/k/v bias, RoPE theta 1e6 — 494M parameters. Initialised by transformers' own _init_weights (seeded),
saved in BF16 with save_pretrained(max_shard_size=...) so it comes as shards + model.safetensors.index.json (the real
Qwen2.5-0.5B is one 988 MB BF16 file; shards exercise the index path too). Also records transformers' logits of the
saved checkpoint (loaded as float32, the weights upcast) at the last position of two fixed prompts, in
reference-logits.json, for bench/large-model.ts to check parity.

The output is NOT committed (about 1 GB): it goes to .tmp/ (git-ignored) by default.
    python3 scripts/make-large-checkpoint.py [--out .tmp/qwen2.5-0.5b-random] [--max-shard-size 400MB] [--seed 0]
Needs torch + transformers (CPU wheels are enough), ~5 GB of RAM for a minute.
"""
import argparse
import gc
import json
import os
import sys
import time

import torch
import transformers
from transformers import Qwen2Config, Qwen2ForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# Two fixed prompts (ids < vocab) for the reference logits; bench/large-model.ts reads them from the JSON.
PROMPTS = [[151644, 872, 198, 9707, 11, 1246, 525, 498, 30, 151645, 198, 151644, 77091, 198],
           [40, 1079, 264, 3460, 1614, 13, 576, 6722, 315, 9625, 374, 12095, 13, 1084]]

QWEN25_05B = dict(
    vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
    num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645, hidden_act="silu", initializer_range=0.02,
    use_sliding_window=False, sliding_window=32768, max_window_layers=24, attention_dropout=0.0,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, ".tmp", "qwen2.5-0.5b-random"))
    ap.add_argument("--max-shard-size", default="400MB", help="transformers' max_shard_size (default 400MB: 3 BF16 shards)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    t0 = time.time()
    model = Qwen2ForCausalLM(Qwen2Config(**QWEN25_05B)).eval()
    n = sum(p.numel() for p in model.parameters())
    model = model.to(getattr(torch, args.dtype))
    os.makedirs(args.out, exist_ok=True)
    for f in os.listdir(args.out):
        if f.endswith(".safetensors") or f.endswith(".json"):
            os.remove(os.path.join(args.out, f))
    model.save_pretrained(args.out, safe_serialization=True, max_shard_size=args.max_shard_size)
    gen = os.path.join(args.out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    del model
    gc.collect()
    files = sorted(f for f in os.listdir(args.out) if f.endswith(".safetensors"))
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in files)
    print(f"wrote {args.out}: {n:,} parameters, {len(files)} file(s), {size / 1e9:.2f} GB {args.dtype} in {time.time() - t0:.0f} s")

    # Reference logits of the saved checkpoint, weights upcast to float32 (what the tfjs loader does).
    reloaded = Qwen2ForCausalLM.from_pretrained(args.out, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        logits = [reloaded(input_ids=torch.tensor([p])).logits[0, -1].tolist() for p in PROMPTS]
    with open(os.path.join(args.out, "reference-logits.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "dtype": args.dtype,
                   "prompts": PROMPTS, "last_logits": logits}, f)
    print(f"wrote {os.path.join(args.out, 'reference-logits.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
