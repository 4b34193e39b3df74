#!/usr/bin/env python3
"""LoRA fixtures written and read by PEFT itself, for src/model/net/lora.ts.

Direction 1: PEFT LoRA adapters on the tiny HF fixtures (test/fixtures/hf-tiny-*, made by scripts/make-hf-fixture.py),
every adapter tensor random (B too, so the adapter changes the logits), saved with `save_pretrained` under
test/fixtures/peft-*/ with the adapted model's logits on the HF fixtures' inputs (logits.json):
  peft-llama-all     all seven projections, r 4, alpha 8, plus trainable_token_indices [5, 60] (tied embedding)
  peft-qwen3-rs      q/v/down of layer 1 only, r 2, alpha 3, rsLoRA, a rank_pattern and an alpha_pattern
Direction 2: the adapter the tfjs side saved (`npx tsx scripts/make-lora-fixture.ts` → test/fixtures/tfjs-lora-llama/),
loaded with `PeftModel.from_pretrained` onto its base, logits recorded in peft-logits.json.

Needs torch + transformers + peft (CPU is enough). Run from the repo root:
    python3 scripts/make-peft-fixture.py
Order for a full refresh: this script, then `npx tsx scripts/make-lora-fixture.ts`, then this script again.
"""
import json
import os
import sys

import peft
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIX = os.path.join(ROOT, "test", "fixtures")


def base(name: str):
    return AutoModelForCausalLM.from_pretrained(os.path.join(FIX, name), attn_implementation="eager", dtype=torch.float32).eval()


def logits_of(model, inputs: dict) -> list:
    with torch.no_grad():
        out = model(**{k: torch.tensor(v) for k, v in inputs.items()})
    return out.logits.float().tolist()


def record(model, base_name: str, path: str, source: str) -> None:
    hf = json.load(open(os.path.join(FIX, base_name, "logits.json")))
    padded = {k: hf["padded"][k] for k in ("input_ids", "attention_mask", "position_ids")}
    data = {
        "peft": peft.__version__, "transformers": transformers.__version__, "torch": torch.__version__, "source": source,
        "base": base_name, "input_ids": hf["input_ids"], "logits": logits_of(model, {"input_ids": hf["input_ids"]}),
        "padded": {**padded, "logits": logits_of(model, padded)},
    }
    with open(path, "w") as f:
        json.dump(data, f)
    print(f"wrote {os.path.relpath(path, ROOT)}")


def make(name: str, base_name: str, cfg: LoraConfig, seed: int) -> None:
    model = get_peft_model(base(base_name), cfg).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "lora_" in pname or "trainable_tokens" in pname:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    out = os.path.join(FIX, name)
    model.save_pretrained(out, safe_serialization=True)
    readme = os.path.join(out, "README.md")
    if os.path.exists(readme):
        os.remove(readme)
    # The base's folder name, not this machine's path.
    cfg_path = os.path.join(out, "adapter_config.json")
    saved = json.load(open(cfg_path))
    saved["base_model_name_or_path"] = base_name
    with open(cfg_path, "w") as f:
        json.dump(saved, f, indent=2, sort_keys=True)
    # Reload from disk, so the logits are those of the saved adapter.
    reloaded = PeftModel.from_pretrained(base(base_name), out).eval()
    record(reloaded, base_name, os.path.join(out, "logits.json"), "random adapter by scripts/make-peft-fixture.py")


def check_tfjs(name: str, base_name: str) -> None:
    d = os.path.join(FIX, name)
    if not os.path.exists(os.path.join(d, "adapter_model.safetensors")):
        print(f"skip {name}: not there yet (npx tsx scripts/make-lora-fixture.ts)")
        return
    model = PeftModel.from_pretrained(base(base_name), d).eval()
    record(model, base_name, os.path.join(d, "peft-logits.json"), "adapter saved by the tfjs side, loaded with PeftModel.from_pretrained")


def main() -> int:
    torch.set_num_threads(1)
    make("peft-llama-all", "hf-tiny-llama-tied",
         LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
                    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                    trainable_token_indices=[5, 60]), seed=11)
    make("peft-qwen3-rs", "hf-tiny-qwen3",
         LoraConfig(r=2, lora_alpha=3, lora_dropout=0.0, task_type="CAUSAL_LM", use_rslora=True,
                    target_modules=["q_proj", "v_proj", "down_proj"], layers_to_transform=[1],
                    rank_pattern={"v_proj": 3}, alpha_pattern={"down_proj": 5}), seed=12)
    check_tfjs("tfjs-lora-llama", "hf-tiny-llama-tied")
    return 0


if __name__ == "__main__":
    sys.exit(main())
