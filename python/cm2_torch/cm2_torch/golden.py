"""The golden fixture of the GRPO update (test/fixtures/grpo-golden, made by scripts/make-grpo-golden.ts from
transformers' own tiny Qwen3 and Llama) checked on any device: per-token log-probabilities of the three policies at the
temperature, the update's metrics, the pre-clip gradients, the weights and AdamW moments after the update with the
clip off and on. `tests/test_golden.py` runs it on the CPU; `gpu_check.py` on CUDA (plain and under FSDP2).

Each comparison yields the worst ratio |actual - expected| / (atol + rtol |expected|) over its values: at most 1 passes.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from .fsdp import full
from .grpo import GrpoSequence, GrpoStepConfig, adamw, collate, grpo_step, token_logprobs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
GOLDEN = os.path.join(ROOT, "test", "fixtures", "grpo-golden")
CASES = ("tiny-qwen3", "tiny-llama-tied")

# (atol, rtol) per kind of value
TOLERANCES = {"logp": (2e-5, 2e-5), "metric": (1e-5, 1e-4), "weight": (1e-5, 1e-4), "m": (1e-6, 1e-3), "v": (1e-8, 2e-3), "grad": (1e-6, 1e-3)}


def load_model(config_dir: str, weights: str, device: torch.device | str = "cpu") -> torch.nn.Module:
    """A transformers model from the config transformers wrote and weights in HF layout (a tied head may be absent)."""
    config = AutoConfig.from_pretrained(config_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    state = load_file(weights)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    if unexpected or not set(missing) <= ({"lm_head.weight"} if tied else set()):
        raise ValueError(f"{weights}: missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    if tied:
        model.tie_weights()
    return model.to(device)


@dataclass
class Deviation:
    what: str
    ratio: float  # worst |a - e| / (atol + rtol |e|); <= 1 passes
    index: int
    actual: float
    expected: float


def deviation(actual: torch.Tensor, expected: torch.Tensor, kind: str, what: str) -> Deviation:
    atol, rtol = TOLERANCES[kind]
    a, e = actual.detach().double().cpu().flatten(), expected.double().cpu().flatten()
    if a.numel() != e.numel():
        return Deviation(f"{what} (size {a.numel()} != {e.numel()})", float("inf"), -1, float("nan"), float("nan"))
    r = (a - e).abs() / (atol + rtol * e.abs())
    i = int(torch.argmax(r)) if r.numel() else 0
    return Deviation(what, float(r[i]) if r.numel() else 0.0, i, float(a[i]) if a.numel() else 0.0, float(e[i]) if e.numel() else 0.0)


def open_case(name: str, case_file: str, expected_file: Optional[str]) -> tuple[str, dict, str, Optional[dict]]:
    """A case's folder, its JSON, the folder of the model config it names, its expected tensors (seeds torch first)."""
    torch.manual_seed(0)
    d = os.path.join(GOLDEN, name)
    with open(os.path.join(d, case_file)) as f:
        case = json.load(f)
    config_dir = os.path.join(ROOT, "test", "fixtures", case["model"])
    return d, case, config_dir, load_file(os.path.join(d, expected_file)) if expected_file else None


def step_config(st: dict, max_norm: float) -> GrpoStepConfig:
    """The GRPO settings of case.json's `step` with the case's gradient bound."""
    return GrpoStepConfig(lr=st["lr"], max_grad_norm=max_norm, micro_batch=st["microBatch"], pad_id=st["padId"], clip_low=st["clipLow"],
                          clip_high=st["clipHigh"], clip_ratio_c=st["clipRatioC"], kl_coef=st["klCoef"], temperature=st["temperature"])


def fresh_policy(config_dir: str, d: str, device, wrap, weight_decay: float):
    """The case's policy to train (wrapped, e.g. sharded, when asked), its parameters by name and its AdamW."""
    policy = load_model(config_dir, os.path.join(d, "policy.safetensors"), device).train()
    if wrap is not None:
        policy = wrap(policy)
    named = dict(policy.named_parameters())
    return policy, named, adamw(list(named.values()), weight_decay)


def compare_update(named: dict, opt: torch.optim.Optimizer, expected: dict, case_name: str, label: str) -> list[Deviation]:
    """Each parameter's weight and AdamW moments after the update against the fixture's (and, clip off, its gradient)."""
    out = []
    for n, p in named.items():
        key = n.replace("_fsdp_wrapped_module.", "")
        out.append(deviation(full(p), expected[f"{case_name}.weight.{key}"], "weight", f"{label}{case_name}.weight.{key}"))
        s = opt.state[p]
        out.append(deviation(full(s["exp_avg"]), expected[f"{case_name}.m.{key}"], "m", f"{label}{case_name}.m.{key}"))
        out.append(deviation(full(s["exp_avg_sq"]), expected[f"{case_name}.v.{key}"], "v", f"{label}{case_name}.v.{key}"))
        if case_name == "noclip":
            out.append(deviation(full(p.grad), expected[f"{case_name}.grad.{key}"], "grad", f"{label}{case_name}.grad.{key}"))
    return out


def check_case(name: str, device: torch.device | str = "cpu", wrap: Optional[Callable[[torch.nn.Module], torch.nn.Module]] = None) -> list[Deviation]:
    """Every comparison of one golden case; `wrap` (e.g. FSDP2's fully_shard) is applied to the trained policy."""
    d, case, config_dir, expected = open_case(name, "case.json", "expected.safetensors")
    batch = [GrpoSequence.from_json(s) for s in case["batch"]]
    st = case["step"]

    def cfg(max_norm: float) -> GrpoStepConfig:
        return step_config(st, max_norm)

    out: list[Deviation] = []
    behaviour = load_model(config_dir, os.path.join(d, "behaviour.safetensors"), device).eval()
    reference = load_model(config_dir, os.path.join(d, "reference.safetensors"), device).eval()
    rows = collate(batch, st["padId"])
    for label, weights in [("policy", "policy.safetensors"), ("behaviour", "behaviour.safetensors"), ("reference", "reference.safetensors")]:
        m = load_model(config_dir, os.path.join(d, weights), device).eval()
        with torch.no_grad():
            lp = token_logprobs(m, rows.ids, rows.targets, st["temperature"])
        out.append(deviation(lp, expected[f"logp.{label}"], "logp", f"logp.{label}"))
    for case_name, max_norm in case["cases"].items():
        policy, named, opt = fresh_policy(config_dir, d, device, wrap, st["weightDecay"])
        r = grpo_step(policy, reference, opt, batch, cfg(max_norm), behaviour=behaviour)
        want = case["metrics"][case_name]
        got = {"loss": r.loss, "pgLoss": r.pg_loss, "kl": r.kl, "clipFrac": r.clip_frac, "gradNorm": r.grad_norm}
        for k, v in got.items():
            out.append(deviation(torch.tensor([v]), torch.tensor([want[k]]), "metric", f"{case_name}.{k}"))
        counts = [r.policy_tokens, r.sequences, r.active_sequences]
        want_counts = [want["policyTokens"], want["sequences"], want["activeSequences"]]
        out.append(Deviation(f"{case_name}.counts", 0.0 if counts == want_counts else float("inf"), 0, float(sum(counts)), float(sum(want_counts))))
        out += compare_update(named, opt, expected, case_name, "")
    return out


def check_sft_case(name: str, device: torch.device | str = "cpu", wrap: Optional[Callable[[torch.nn.Module], torch.nn.Module]] = None) -> list[Deviation]:
    """Every comparison of one SFT golden case (sft-case.json, sft-expected.safetensors): one step of the SFT loss over
    several micro-batches (one example cut at maxSeqLen), with the clip off and on."""
    from .sft import Example, collate as sft_collate, sft_step

    d, case, config_dir, expected = open_case(name, "sft-case.json", "sft-expected.safetensors")
    data = [Example(list(e["ids"]), list(e["lossMask"])) for e in case["data"]]
    st = case["settings"]
    parts = [sft_collate([data[i] for i in micro], st["maxSeqLen"], st["padId"]) for micro in case["plan"]["micro"]]
    out: list[Deviation] = []
    for case_name, max_norm in case["cases"].items():
        policy, named, opt = fresh_policy(config_dir, d, device, wrap, st["weightDecay"])
        r = sft_step(policy, opt, parts, case["plan"]["lr"], max_norm)
        want = case["metrics"][case_name]
        for k, v in {"loss": r.loss, "gradNorm": r.grad_norm}.items():
            out.append(deviation(torch.tensor([v]), torch.tensor([want[k]]), "metric", f"sft.{case_name}.{k}"))
        out.append(Deviation(f"sft.{case_name}.tokens", 0.0 if r.tokens == want["tokens"] else float("inf"), 0, float(r.tokens), float(want["tokens"])))
        out += compare_update(named, opt, expected, case_name, "sft.")
    return out


def check_lora_case(name: str, device: torch.device | str = "cpu", wrap: Optional[Callable[[torch.nn.Module], torch.nn.Module]] = None) -> list[Deviation]:
    """Every comparison of one LoRA golden case (lora-case.json, lora/, lora-expected.safetensors): the GRPO update of
    the golden batch training, through PEFT, the adapter (and token rows) the tfjs trainer trained, clip off and on.
    Tensors by PEFT's names (as adapter_model.safetensors holds them)."""
    from peft import PeftModel

    from .checkpoint import peft_name

    d, case, config_dir, _ = open_case(name, "case.json", None)
    _, lcase, _, expected = open_case(name, "lora-case.json", "lora-expected.safetensors")
    batch = [GrpoSequence.from_json(s) for s in case["batch"]]
    st = case["step"]
    behaviour = load_model(config_dir, os.path.join(d, "behaviour.safetensors"), device).eval()
    reference = load_model(config_dir, os.path.join(d, "reference.safetensors"), device).eval()
    out: list[Deviation] = []
    for case_name, max_norm in lcase["cases"].items():
        base = load_model(config_dir, os.path.join(d, "policy.safetensors"), device)
        policy = PeftModel.from_pretrained(base, os.path.join(d, "lora"), is_trainable=True).to(device).train()
        if wrap is not None:
            wrap(policy.base_model.model)
        named = {peft_name(n): p for n, p in policy.named_parameters() if p.requires_grad}
        opt = adamw(list(named.values()), st["weightDecay"])
        r = grpo_step(policy, reference, opt, batch, step_config(st, max_norm), behaviour=behaviour)
        want = lcase["metrics"][case_name]
        got = {"loss": r.loss, "pgLoss": r.pg_loss, "kl": r.kl, "clipFrac": r.clip_frac, "gradNorm": r.grad_norm}
        for k, v in got.items():
            out.append(deviation(torch.tensor([v]), torch.tensor([want[k]]), "metric", f"lora.{case_name}.{k}"))
        names = sorted(k[len(f"{case_name}.weight."):] for k in expected if k.startswith(f"{case_name}.weight."))
        out.append(Deviation(f"lora.{case_name}.names", 0.0 if sorted(named) == names else float("inf"), 0, float(len(named)), float(len(names))))
        out += compare_update({k: p for k, p in named.items() if f"{case_name}.weight.{k}" in expected}, opt, expected, case_name, "lora.")
    return out
