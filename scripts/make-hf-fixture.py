#!/usr/bin/env python3
"""Parity fixtures between HF transformers and the tfjs Qwen decoder (src/model/net/qwen.ts).

Direction 1: builds tiny randomly initialised Qwen3 (untied head), Qwen2 (tied head, q/k/v bias) and Llama (tied head as in
SmolLM2, no bias, no q/k norm, rope_theta 100000) models with a fixed
seed, saves them as HF checkpoints (config.json + F32 model.safetensors) under test/fixtures/hf-tiny-*/ and records their
logits on fixed inputs in logits.json.
Direction 2: loads the checkpoint(s) that the tfjs side saved (scripts/make-tfjs-fixture.ts → test/fixtures/tfjs-tiny-*/)
with transformers and records their logits in transformers-logits.json.

Needs torch + transformers (CPU wheels from PyPI are enough). Run from the repo root:
    python3 scripts/make-hf-fixture.py            # both directions (direction 2 only where the tfjs fixture exists)
Order for a full refresh: this script, then `npx tsx scripts/make-tfjs-fixture.ts`, then this script again.
"""
import json
import os
import sys

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "test", "fixtures")

# Fixed inputs: a batch of two equal-length sequences, and a left-padded batch with explicit positions.
INPUTS = [[1, 5, 9, 2, 33, 60, 7, 12], [3, 3, 40, 41, 0, 63, 22, 8]]
PADDED = {
    "input_ids": [[0, 0, 0, 4, 8, 15, 16, 23], [10, 20, 30, 40, 50, 60, 1, 2]],
    "attention_mask": [[0, 0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1]],
    "position_ids": [[0, 0, 0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5, 6, 7]],
}

COMMON = dict(
    vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=10000.0, max_position_embeddings=128,
    bos_token_id=1, eos_token_id=2, initializer_range=0.2,
)


def randomise(model: torch.nn.Module, seed: int) -> None:
    """Every parameter random: matrices and biases N(0, 0.2), norm weights 1 + N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.1 * noise if "norm" in name else 0.2 * noise)


def logits_of(model, **inputs) -> list:
    with torch.no_grad():
        out = model(**{k: torch.tensor(v) for k, v in inputs.items()})
    return out.logits.float().tolist()


def record(model, path: str, source: str) -> None:
    data = {
        "transformers": transformers.__version__, "torch": torch.__version__, "source": source,
        "input_ids": INPUTS, "logits": logits_of(model, input_ids=INPUTS),
        "padded": {**PADDED, "logits": logits_of(model, **PADDED)},
    }
    with open(path, "w") as f:
        json.dump(data, f)
    print(f"wrote {os.path.relpath(path, ROOT)}")


def make_hf(name: str, cls, cfg, seed: int) -> None:
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    randomise(model, seed)
    out = os.path.join(FIX, name)
    model.save_pretrained(out, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))
    # Reload from disk, so the recorded logits are those of the saved checkpoint.
    reloaded = cls.from_pretrained(out, attn_implementation="eager", dtype=torch.float32).eval()
    record(reloaded, os.path.join(out, "logits.json"), "random init by scripts/make-hf-fixture.py")


def check_tfjs(name: str, cls) -> None:
    d = os.path.join(FIX, name)
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        print(f"skip {name}: not there yet (npx tsx scripts/make-tfjs-fixture.ts)")
        return
    model = cls.from_pretrained(d, attn_implementation="eager", dtype=torch.float32).eval()
    record(model, os.path.join(d, "transformers-logits.json"), "checkpoint saved by the tfjs model, loaded in transformers")


def main() -> int:
    torch.set_num_threads(1)
    make_hf("hf-tiny-qwen3", Qwen3ForCausalLM,
            Qwen3Config(**COMMON, head_dim=8, tie_word_embeddings=False, attention_bias=False), seed=0)
    make_hf("hf-tiny-qwen2-tied", Qwen2ForCausalLM, Qwen2Config(**COMMON, tie_word_embeddings=True), seed=1)
    make_hf("hf-tiny-llama-tied", LlamaForCausalLM, LlamaConfig(**{**COMMON, "rope_theta": 100000.0}, tie_word_embeddings=True), seed=2)
    check_tfjs("tfjs-tiny-qwen3", Qwen3ForCausalLM)
    check_tfjs("tfjs-tiny-llama-tied", LlamaForCausalLM)
    check_tfjs("tfjs-tiny-qwen2-tied", Qwen2ForCausalLM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
