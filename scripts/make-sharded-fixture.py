#!/usr/bin/env python3
"""Sharded, half-precision checkpoint fixtures written by HF transformers (issue 12, item 4).

Real checkpoints come as BF16 (or F16) safetensors split into shards listed in model.safetensors.index.json. This
script writes such checkpoints with transformers' own `save_pretrained(..., max_shard_size=...)` from tiny random
models, so the tfjs loader (src/model/formats/checkpoint.ts) is tested on what transformers really writes:

- test/fixtures/hf-tiny-qwen2-bf16-sharded/  Qwen2 (tied head, q/k/v bias), BF16, 4 shards + index;
- test/fixtures/hf-tiny-qwen3-f16-sharded/   Qwen3 (untied head, QK-norm), F16, 3 shards + index;
  each with logits.json: transformers' logits of the saved checkpoint loaded with dtype=float32 (weights upcast,
  as the tfjs loader does), on the same inputs as scripts/make-hf-fixture.py;
- test/fixtures/hf-tiny-qwen3-f32-resharded/ the F16 checkpoint above loaded as float32 and saved again (F32, 4 shards):
  the bytes the tfjs writer must reproduce (shard files and index) when it saves that model with the same
  max_shard_size.

Needs torch + transformers (CPU wheels from PyPI are enough). Run from the repo root:
    python3 scripts/make-sharded-fixture.py
"""
import json
import os
import sys

import torch
import transformers
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "test", "fixtures")

# The same inputs as scripts/make-hf-fixture.py.
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

# Shard limits (bytes) chosen so that each checkpoint has several shards.
BF16_SHARD = 12_000
F16_SHARD = 16_000
F32_SHARD = 30_000


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


def clean(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(out):
        os.remove(os.path.join(out, f))


def save(model, out: str, shard: int) -> None:
    clean(out)
    model.save_pretrained(out, safe_serialization=True, max_shard_size=shard)
    gen = os.path.join(out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    shards = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
    assert len(shards) > 1 and os.path.exists(os.path.join(out, "model.safetensors.index.json")), f"{out}: not sharded"
    print(f"wrote {os.path.relpath(out, ROOT)}: {', '.join(shards)}")


def make(name: str, cls, cfg, seed: int, dtype: torch.dtype, shard: int) -> str:
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    randomise(model, seed)
    model = model.to(dtype)
    out = os.path.join(FIX, name)
    save(model, out, shard)
    # Reload from disk, upcast to float32, so the recorded logits are those of the saved half-precision weights.
    reloaded = cls.from_pretrained(out, attn_implementation="eager", dtype=torch.float32).eval()
    record(reloaded, os.path.join(out, "logits.json"), f"random init by scripts/make-sharded-fixture.py, saved as {dtype}, loaded as float32")
    return out


def main() -> int:
    torch.set_num_threads(1)
    make("hf-tiny-qwen2-bf16-sharded", Qwen2ForCausalLM, Qwen2Config(**COMMON, tie_word_embeddings=True),
         seed=2, dtype=torch.bfloat16, shard=BF16_SHARD)
    f16 = make("hf-tiny-qwen3-f16-sharded", Qwen3ForCausalLM,
               Qwen3Config(**COMMON, head_dim=8, tie_word_embeddings=False, attention_bias=False),
               seed=3, dtype=torch.float16, shard=F16_SHARD)
    # What transformers writes for the upcast model: the reference for the tfjs writer.
    upcast = Qwen3ForCausalLM.from_pretrained(f16, dtype=torch.float32).eval()
    save(upcast, os.path.join(FIX, "hf-tiny-qwen3-f32-resharded"), F32_SHARD)
    os.remove(os.path.join(FIX, "hf-tiny-qwen3-f32-resharded", "config.json"))
    with open(os.path.join(FIX, "hf-tiny-qwen3-f32-resharded", "README.md"), "w") as f:
        f.write(f"hf-tiny-qwen3-f16-sharded loaded as float32 and saved by transformers {transformers.__version__} with "
                f"max_shard_size={F32_SHARD} (scripts/make-sharded-fixture.py). No config.json: the weights only.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
