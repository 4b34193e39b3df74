"""Policies and training checkpoints in S3, in the formats the TypeScript side reads and writes
(src/storage/checkpoints.ts, policyStore.ts, src/model/optim/adamw.ts):

- an HF policy: `<prefix>/config.json` and `model.safetensors` (or its index and shards), HF names and layout;
- a checkpoint: `manifest.json` (format cm2-checkpoint/1) listing each file as {key, sha256, bytes} with the trainer's
  small state; `config.json`, `model.safetensors` (float32, HF names and layout; a tied head has no lm_head entry) and
  `optimizer.safetensors`: AdamW moments `m.<name>`, `v.<name>`, metadata `step` and `layout`. `layout: hf` means the
  parameter's own shape (a Linear weight [out, in]); files without `layout` (written by tfjs before it) hold a Linear
  weight's moments transposed ([in, out]), the tfjs model's internal layout.

Written files go under attempt-unique keys and the manifest is created only if absent (fencing: an attempt that
outlived its heartbeat timeout cannot overwrite the files a manifest names; the loser adopts the winner's manifest).
"""
from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Optional

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from .fsdp import full, sharded_like
from .store import Store, sha256_file

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


class BadPolicy(ValueError):
    """A policy or checkpoint that no retry can load (non-retryable `BadInput`)."""


def step_folder(prefix: str, step: int) -> str:
    return f"{prefix}/step-{step:08d}"


def rl_checkpoints(run_id: str) -> str:
    return f"runs/{run_id}/rl/checkpoints"


def policy_key(p: dict) -> str:
    return f"hf:{p['prefix']}" if p["kind"] == "hf" else f"ckpt:{p['manifestKey']}"


@dataclass
class Loaded:
    model: torch.nn.Module  # a PeftModel for a LoRA checkpoint opened for training
    config_json: bytes
    optimizer: Optional[dict] = None  # {"step": int, "layout": str, "m": {name: tensor}, "v": {name: tensor}}
    manifest: Optional[dict] = None
    lora_base: Optional[dict] = None  # the HF policy a LoRA adapter applies to ({"kind": "hf", "prefix": ...})


def peft_name(param_name: str) -> str:
    """A PeftModel parameter's name as PEFT saves it (and the TypeScript adapter names it): without the adapter's name."""
    return param_name.replace(".default.", ".").removesuffix(".default")


def lora_config(settings: dict):
    """PEFT's LoraConfig of `rl.lora` (src/kernel/loraSettings.ts): rank, alpha, targets matched as PEFT does, rsLoRA,
    no dropout, trainable token rows."""
    from peft import LoraConfig

    kw = {"trainable_token_indices": list(settings["trainTokens"])} if settings.get("trainTokens") else {}
    return LoraConfig(r=settings["rank"], lora_alpha=settings["alpha"], target_modules=list(settings.get("targets") or []), use_rslora=bool(settings.get("rslora")),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", **kw)


def _from_folder(d: str, device: torch.device) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="sdpa")
    return model.to(device)


def _download_hf(store: Store, prefix: str, d: str) -> None:
    store.get_file(f"{prefix}/config.json", os.path.join(d, "config.json"))
    if store.exists(f"{prefix}/model.safetensors"):
        store.get_file(f"{prefix}/model.safetensors", os.path.join(d, "model.safetensors"))
        return
    index = os.path.join(d, "model.safetensors.index.json")
    store.get_file(f"{prefix}/model.safetensors.index.json", index)
    with open(index) as f:
        shards = sorted(set((json.load(f).get("weight_map") or {}).values()))
    for s in shards:
        if "/" in s or s.startswith("."):
            raise BadPolicy(f"s3 {prefix}/model.safetensors.index.json: shard {s} is not a plain file name")
        store.get_file(f"{prefix}/{s}", os.path.join(d, s))


def _read_optimizer(path: str) -> dict:
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        m, v = {}, {}
        for k in f.keys():
            (m if k.startswith("m.") else v)[k[2:]] = f.get_tensor(k)
    step = meta.get("step")
    if step is None or not str(step).isdigit():
        raise BadPolicy(f"{path}: no optimizer step in the safetensors metadata (expected {{\"step\": \"<n>\"}})")
    if "layout" in meta and meta["layout"] != "hf":
        raise BadPolicy(f"{path}: optimizer layout {meta['layout']!r} is neither 'hf' nor absent (tfjs's internal layout)")
    layout = meta.get("layout", "internal")
    return {"step": int(step), "layout": layout, "m": m, "v": v}


def load_policy(store: Store, p: dict, device: torch.device, with_optimizer: bool = False, lora_base: Optional[dict] = None) -> Loaded:
    """An HF policy or a checkpoint's weights (and, asked for, its optimizer state). `lora_base`: the base of a LoRA
    checkpoint whose state names none (the tfjs SFT trainer's, which rebuilds its base from the config)."""
    with tempfile.TemporaryDirectory(prefix="cm2-torch-") as d:
        if p["kind"] == "hf":
            _download_hf(store, p["prefix"], d)
            with open(os.path.join(d, "config.json"), "rb") as f:
                cfg = f.read()
            return Loaded(_from_folder(d, device), cfg)
        manifest = store.get_json(p["manifestKey"])
        files = manifest.get("files") or {}
        if ADAPTER_WEIGHTS in files:
            return _load_lora(store, p["manifestKey"], manifest, d, device, with_optimizer, lora_base)
        for name in ("config.json", "model.safetensors"):
            if name not in files:
                raise BadPolicy(f"{p['manifestKey']}: the checkpoint has no {name}")
        wanted = ["config.json", "model.safetensors"] + (["optimizer.safetensors"] if with_optimizer else [])
        for name in wanted:
            if name not in files:
                raise BadPolicy(f"{p['manifestKey']}: the checkpoint has no {name}")
            if "/" in name or name.startswith("."):
                raise BadPolicy(f"{p['manifestKey']}: file name {name} is not a plain file name")
            store.get_verified_file(files[name], os.path.join(d, name))
        with open(os.path.join(d, "config.json"), "rb") as f:
            cfg = f.read()
        opt = _read_optimizer(os.path.join(d, "optimizer.safetensors")) if with_optimizer else None
        return Loaded(_from_folder(d, device), cfg, opt, manifest)


def _load_lora(store: Store, manifest_key: str, manifest: dict, d: str, device: torch.device, with_optimizer: bool, default_base: Optional[dict] = None) -> Loaded:
    """A LoRA checkpoint: its base (state.lora.base, an HF policy) with the adapter; trainable (a PeftModel) when the
    optimizer is asked for, else merged into the base (a read-only policy)."""
    from peft import PeftModel

    base = ((manifest.get("state") or {}).get("lora") or {}).get("base") or default_base
    if not base or base.get("kind") != "hf" or not base.get("prefix"):
        raise BadPolicy(f"{manifest_key}: a LoRA checkpoint whose state does not name its base (state.lora.base)")
    files = manifest["files"]
    base_loaded = load_policy(store, base, device)
    ad = os.path.join(d, "adapter")
    os.makedirs(ad)
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        if name not in files:
            raise BadPolicy(f"{manifest_key}: the LoRA checkpoint has no {name}")
        store.get_verified_file(files[name], os.path.join(ad, name))
    if with_optimizer and "optimizer.safetensors" not in files:
        raise BadPolicy(f"{manifest_key}: the checkpoint has no optimizer.safetensors")
    if with_optimizer:
        store.get_verified_file(files["optimizer.safetensors"], os.path.join(d, "optimizer.safetensors"))
    model = PeftModel.from_pretrained(base_loaded.model, ad, is_trainable=with_optimizer).to(device)
    if not with_optimizer:
        model = model.merge_and_unload()
    opt = _read_optimizer(os.path.join(d, "optimizer.safetensors")) if with_optimizer else None
    return Loaded(model, base_loaded.config_json, opt, manifest, base)


def linear_weight_names(model: torch.nn.Module) -> set[str]:
    names = set()
    for mod_name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            names.add(f"{mod_name}.weight" if mod_name else "weight")
    return names


def restore_adamw(optimizer: torch.optim.Optimizer, model: torch.nn.Module, state: dict, where: str) -> None:
    """Puts a checkpoint's moments into a torch AdamW over `model`'s named parameters (internal layout transposed)."""
    linear = linear_weight_names(model)
    for pname, p in model.named_parameters():
        if not p.requires_grad:
            continue
        name = peft_name(pname)
        m, v = state["m"].get(name), state["v"].get(name)
        if m is None or v is None:
            raise BadPolicy(f"{where}: the optimizer state has no moments for {name}")
        if state["layout"] == "internal" and name in linear:
            m, v = m.t(), v.t()
        if tuple(m.shape) != tuple(p.shape) or tuple(v.shape) != tuple(p.shape):
            raise BadPolicy(f"{where}: moments of {name} have shape {tuple(m.shape)}, the parameter {tuple(p.shape)}")
        optimizer.state[p] = {"step": torch.tensor(float(state["step"])), "exp_avg": sharded_like(m.contiguous().clone(), p),
                              "exp_avg_sq": sharded_like(v.contiguous().clone(), p)}


def adamw_step(optimizer: torch.optim.Optimizer) -> int:
    steps = [int(s["step"]) for s in optimizer.state.values() if "step" in s]
    return max(steps) if steps else 0


def _rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def _cpu(t: torch.Tensor) -> torch.Tensor:
    """A float32 CPU copy of a tensor (of the whole, gathered from the ranks, when FSDP2 holds a shard)."""
    return full(t.detach()).to("cpu", torch.float32).contiguous()


def _moments(named: list, optimizer: torch.optim.Optimizer) -> dict:
    """`m.<name>`, `v.<name>` of each (name, parameter) the optimizer has state for (a collective under FSDP2)."""
    out = {}
    for n, p in named:
        s = optimizer.state.get(p)
        if s:
            out[f"m.{n}"] = _cpu(s["exp_avg"])
            out[f"v.{n}"] = _cpu(s["exp_avg_sq"])
    return out


def save_checkpoint(store: Store, prefix: str, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, config_json: bytes,
                    state_of, attempt: str) -> Optional[tuple[str, dict, str, bool]]:
    """Writes step `step`'s files under attempt-unique keys, then creates the manifest if none exists. Returns
    (manifest key, manifest, weights sha256, won): `won` is False when another attempt's manifest was there first (then
    that manifest is returned and this attempt's files are removed). Under FSDP2 every rank calls it (the shards are
    gathered to rank 0, which writes); ranks > 0 get None."""
    folder = step_folder(prefix, step)
    manifest_key = f"{folder}/manifest.json"
    named = [(n, p) for n, p in model.named_parameters()]
    weights = {n: _cpu(p) for n, p in named}
    moments = _moments(named, optimizer)
    if _rank() != 0:
        return None
    with tempfile.TemporaryDirectory(prefix="cm2-torch-ckpt-") as d:
        wpath = os.path.join(d, "model.safetensors")
        save_file(weights, wpath, metadata={"format": "pt"})
        del weights
        opath = os.path.join(d, "optimizer.safetensors")
        save_file(moments, opath, metadata={"step": str(adamw_step(optimizer)), "layout": "hf"})
        del moments
        wsha = sha256_file(wpath)
        tag = f"a{attempt}"
        refs = {
            "config.json": store.put_bytes(f"{folder}/{tag}.config.json", config_json, "application/json"),
            "model.safetensors": store.put_file(f"{folder}/{tag}.model.safetensors", wpath, wsha),
            "optimizer.safetensors": store.put_file(f"{folder}/{tag}.optimizer.safetensors", opath),
        }
    return _commit(store, manifest_key, step, refs, state_of(wsha), wsha)


def save_lora_checkpoint(store: Store, prefix: str, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, config_json: bytes,
                         base: dict, state_of, attempt: str) -> Optional[tuple[str, dict, str, bool]]:
    """A LoRA step's checkpoint as the TypeScript side writes it (src/storage/loraCheckpoint.ts): config.json (the
    base's), adapter_config.json and adapter_model.safetensors (PEFT's own files), optimizer.safetensors (the adapter's
    moments under PEFT's tensor names), the manifest with state.lora.base; the weights hash is the adapter file's."""
    from peft import get_peft_model_state_dict

    folder = step_folder(prefix, step)
    manifest_key = f"{folder}/manifest.json"
    moments = _moments([(peft_name(n), p) for n, p in model.named_parameters() if p.requires_grad], optimizer)
    adapter = {k: _cpu(v) for k, v in get_peft_model_state_dict(model).items()}
    if _rank() != 0:
        return None
    with tempfile.TemporaryDirectory(prefix="cm2-torch-ckpt-") as d:
        model.peft_config["default"].save_pretrained(d)
        with open(os.path.join(d, ADAPTER_CONFIG), "rb") as f:
            adapter_config = f.read()
        apath = os.path.join(d, ADAPTER_WEIGHTS)
        save_file(adapter, apath, metadata={"format": "pt"})
        opath = os.path.join(d, "optimizer.safetensors")
        save_file(moments, opath, metadata={"step": str(adamw_step(optimizer)), "layout": "hf"})
        wsha = sha256_file(apath)
        tag = f"a{attempt}"
        refs = {
            "config.json": store.put_bytes(f"{folder}/{tag}.config.json", config_json, "application/json"),
            ADAPTER_CONFIG: store.put_bytes(f"{folder}/{tag}.{ADAPTER_CONFIG}", adapter_config, "application/json"),
            ADAPTER_WEIGHTS: store.put_file(f"{folder}/{tag}.{ADAPTER_WEIGHTS}", apath, wsha),
            "optimizer.safetensors": store.put_file(f"{folder}/{tag}.optimizer.safetensors", opath),
        }
    state = {**state_of(wsha), "lora": {"base": base}}
    return _commit(store, manifest_key, step, refs, state, wsha)


def _commit(store: Store, manifest_key: str, step: int, refs: dict, state: dict, wsha: str) -> tuple[str, dict, str, bool]:
    """Creates the manifest if none exists; the loser removes its files and adopts the winner's."""
    manifest = {"format": "cm2-checkpoint/1", "step": step, "files": refs, "state": state,
                "createdAt": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z"}
    delay = float(os.environ.get("CM2_TORCH_TEST_SAVE_DELAY_S", "0") or 0)
    if delay > 0:
        # tests only: a window between the files and the manifest, to kill the worker in (test/integration/torchTrain.test.ts)
        print(f"step {step}: files written; waiting {delay} s before the manifest (CM2_TORCH_TEST_SAVE_DELAY_S)", flush=True)
        time.sleep(delay)
    if store.put_json(manifest_key, manifest, if_absent=True) is not None:
        return manifest_key, manifest, wsha, True
    # Another attempt committed this step first: its manifest stands; this attempt's files are nobody's.
    for ref in refs.values():
        try:
            store.client.remove_object(store.bucket, ref["key"])
        except Exception:
            pass
    winner = store.get_json(manifest_key)
    return manifest_key, winner, ((winner.get("state") or {}).get("train") or {}).get("weightsSha256", ""), False


def new_attempt_tag(attempt: int) -> str:
    return f"{attempt}-{uuid.uuid4().hex[:8]}"
