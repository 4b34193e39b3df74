"""The `sftTrain` activity's body in PyTorch (src/stages/sft/trainActivity.ts is the TypeScript one): cold-start SFT
from the files `sftPrepare` wrote (src/stages/sft/prepareActivity.ts: the tokenised data, the plan of every step, the initial
policy and adapter), so that the chat template, the data order, the schedule and the initialisation stay in
TypeScript and this trainer only executes the updates.

One step (src/stages/sft/trainer.ts): per micro-batch, the mean cross-entropy over its trained tokens (a target is
trained when it is an assistant token; sequences cut to maxSeqLen + 1 tokens, right-padded); the gradient is the mean
over the step's micro-batches (a micro-batch with no trained token is skipped and not counted); clipped to a global
norm only when above it (factor max / (norm + 1e-6)); AdamW (0.9, 0.999, 1e-8) with decay on every parameter at the
plan's learning rate. Under torchrun, micro-batch i goes to rank i mod world (as grpo.py).

Checkpoints every `checkpointEvery` steps and at the end, in the format the tfjs trainer writes and reads
(state.trainer: step, cursor, rngState, losses), so either engine resumes the other's; a new attempt resumes from the
newest. The final policy: `runs/<id>/sft/final` (config, weights, tokenizer files; with LoRA the adapter merged) and,
with LoRA, the adapter in PEFT's format under `runs/<id>/sft/adapter`. The result is recorded in
`runs/<id>/sft/train-result.json`; a retry that finds it returns it.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from safetensors.torch import save_file

from .checkpoint import (ADAPTER_CONFIG, ADAPTER_WEIGHTS, BadPolicy, Loaded, _cpu, load_policy, new_attempt_tag, restore_adamw, save_checkpoint,
                         save_lora_checkpoint)
from .contracts import validate, validate_file
from .fsdp import broadcast_object, distributed, shard
from .grpo import _world, adamw, global_grad_norm, token_logprobs
from .store import NotFound, Store, sha256_file
from .train import BadInput, TrainContext


def sft_keys(run_id: str) -> dict:
    base = f"runs/{run_id}/sft"
    return {"checkpoints": f"{base}/checkpoints", "final": f"{base}/final", "adapter": f"{base}/adapter", "result": f"{base}/train-result.json",
            "metrics": f"{base}/metrics"}


@dataclass
class Example:
    ids: list[int]
    mask: list[int]  # 1 on trained (assistant) tokens


@dataclass
class MicroRows:
    ids: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    tokens: int


def read_data(store: Store, key: str) -> list[Example]:
    """data.jsonl: a bad line is refused naming the key, the line and the field."""
    text = store.get_bytes(key).decode("utf-8")
    out: list[Example] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadInput(f"s3 {key}, line {n}: not JSON ({e.msg})") from e
        ids = row.get("ids") if isinstance(row, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) and i >= 0 for i in ids):
            raise BadInput(f"s3 {key}, line {n}, field ids: expected a list of non-negative integers")
        mask = [0] * len(ids)
        spans = row.get("trained")
        if not isinstance(spans, list):
            raise BadInput(f"s3 {key}, line {n}, field trained: expected a list of [start, end] spans")
        for j, sp in enumerate(spans):
            if not (isinstance(sp, list) and len(sp) == 2 and all(isinstance(x, int) for x in sp) and 0 <= sp[0] <= sp[1] <= len(ids)):
                raise BadInput(f"s3 {key}, line {n}, field trained[{j}]: {sp!r} is not a span [start, end] within the {len(ids)} ids")
            for k in range(sp[0], sp[1]):
                mask[k] = 1
        out.append(Example(ids, mask))
    return out


def collate(batch: Sequence[Example], max_seq_len: int, pad_id: int) -> MicroRows:
    """As trainer.ts `collate`: cut to max_seq_len + 1 tokens, position t predicts token t + 1, trained when token t + 1
    is; right-padded to the longest."""
    seqs = [(ex.ids[: max_seq_len + 1], ex.mask[: max_seq_len + 1]) for ex in batch]
    T = max([1] + [len(ids) - 1 for ids, _ in seqs])
    ids = torch.full((len(batch), T), pad_id, dtype=torch.long)
    targets = torch.full((len(batch), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), T), dtype=torch.float32)
    for b, (s, m) in enumerate(seqs):
        n = len(s) - 1
        if n > 0:
            ids[b, :n] = torch.tensor(s[:-1])
            targets[b, :n] = torch.tensor(s[1:])
            mask[b, :n] = torch.tensor(m[1:], dtype=torch.float32)
    return MicroRows(ids, targets, mask, int(mask.sum()))


@dataclass
class SftStepMetrics:
    loss: float
    grad_norm: float
    tokens: int
    micro: int


def sft_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, parts: Sequence[MicroRows], lr: float, max_grad_norm: float,
             autocast: Optional[torch.dtype] = None, on_micro=None) -> SftStepMetrics:
    """One optimizer step over the step's micro-batches (all of them, on every rank: each rank runs its share)."""
    rank, world = _world()
    parts = [p for p in parts if p.tokens > 0]
    count = len(parts)
    mine = parts[rank::world]
    rounds = -(-count // world) if world > 1 else count
    device = next(model.parameters()).device
    optimizer.zero_grad(set_to_none=True)
    loss_sum, tokens = 0.0, 0
    for i in range(rounds):
        if on_micro is not None:
            on_micro(i * world + rank, count)
        rows = mine[i] if i < len(mine) else None
        if rows is None:
            pad = torch.zeros((1, 2), dtype=torch.long)
            (token_logprobs(model, pad, pad, 1.0, autocast).sum() * 0.0).backward()
            continue
        lp = token_logprobs(model, rows.ids, rows.targets, 1.0, autocast)
        mask = rows.mask.to(device)
        loss = -(lp * mask).sum() / mask.sum()
        # the mean over micro-batches; FSDP2 averages the ranks' gradients, so each rank's share is scaled by world
        (loss * (world / count)).backward()
        loss_sum += loss.item()
        tokens += rows.tokens
    if world > 1:
        sums = torch.tensor([loss_sum, float(tokens)], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(sums)
        loss_sum, tokens = float(sums[0]), int(sums[1])
    grad_norm = 0.0
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    if count > 0 and params:
        grad_norm = global_grad_norm(params)
        if max_grad_norm > 0 and grad_norm > max_grad_norm:
            scale = max_grad_norm / (grad_norm + 1e-6)
            for p in params:
                p.grad.mul_(scale)
        for g in optimizer.param_groups:
            g["lr"] = lr
        optimizer.step()
    return SftStepMetrics(loss_sum / count if count else 0.0, grad_norm, tokens, count)


def latest_checkpoint(store: Store, prefix: str) -> Optional[str]:
    """The newest step's manifest key under `prefix` (the tfjs trainer's rule: the highest step with a manifest)."""
    keys = sorted((k for k in store.list(f"{prefix}/") if k.endswith("/manifest.json") and "/step-" in k), reverse=True)
    return keys[0] if keys else None


def sft_train(ctx: TrainContext, raw: dict) -> dict:
    """Rank 0's activity body: a recorded result is returned; otherwise the run goes to every rank (under torchrun)."""
    inp = validate("sftTrain", "input", raw)
    keys = sft_keys(inp["runId"])
    try:
        return ctx.store.get_json(keys["result"])
    except NotFound:
        pass
    if not inp.get("prepared"):
        raise BadInput("sftTrain: the input names no prepared files (`prepared`): the PyTorch trainer runs from what sftPrepare writes, "
                       "which the SFT workflow schedules when temporal.taskQueues.train names a queue of its own")
    latest = latest_checkpoint(ctx.store, keys["checkpoints"])
    tag = new_attempt_tag(ctx.attempt)
    if distributed():
        ctx.broadcast = True
        broadcast_object(("sftTrain", raw, tag, latest))
    return run(ctx, inp, tag, latest)


def run(ctx: TrainContext, inp: dict, tag: str, latest: Optional[str]) -> dict:
    """The run on this rank, from `latest` (a manifest key) or the prepared initial policy; rank 0 writes."""
    store, keys = ctx.store, sft_keys(inp["runId"])
    t0 = time.time()
    prepared = inp["prepared"]
    plan = read_plan(store, f"{prepared}/plan.json")
    data = read_data(store, f"{prepared}/data.jsonl")
    if len(data) != plan["dataRows"]:
        raise BadInput(f"s3 {prepared}/data.jsonl: {len(data)} rows, plan.json says {plan['dataRows']}")
    initial = {"kind": "hf", "prefix": f"{prepared}/initial"}
    lora = plan["lora"]
    try:
        if latest:
            loaded: Loaded = load_policy(store, {"kind": "ckpt", "manifestKey": latest}, ctx.device, with_optimizer=True, lora_base=initial)
            if bool(loaded.lora_base) != lora:
                raise BadInput(f"{latest}: the checkpoint holds {'a LoRA adapter' if loaded.lora_base else 'full weights'}, but sft.lora is "
                               f"{'set' if lora else 'null'}: a run cannot switch between LoRA and full fine-tuning")
            state = dict((loaded.manifest.get("state") or {}).get("trainer") or {})
            if not isinstance(state.get("step"), int):
                raise BadInput(f"{latest}: the manifest has no state.trainer.step")
        else:
            loaded = load_policy(store, initial, ctx.device)
            if lora:
                loaded.model = _with_adapter(store, loaded.model, f"{prepared}/adapter", ctx.device)
                loaded.lora_base = initial
            state = {"step": 0, "cursor": {"epoch": 0, "index": 0}, "rngState": plan["rngState"], "losses": []}
    except BadPolicy as e:
        raise BadInput(str(e)) from e
    model = loaded.model.train()
    base_params = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n and "trainable_tokens" not in n)
    if distributed():
        shard(model.base_model.model if lora else model)
    opt = adamw([p for p in model.parameters() if p.requires_grad], plan["weightDecay"])
    if loaded.optimizer is not None:
        try:
            restore_adamw(opt, model, loaded.optimizer, latest)
        except BadPolicy as e:
            raise BadInput(str(e)) from e
    resumed_from = state["step"]
    total = len(plan["steps"])
    trained_tokens = 0
    losses = list(state.get("losses") or [])
    for s in range(resumed_from, total):
        st = plan["steps"][s]
        parts = [collate([data[i] for i in micro], plan["maxSeqLen"], plan["padId"]) for micro in st["micro"]]
        t_step = time.time()
        m = sft_step(model, opt, parts, st["lr"], plan["maxGradNorm"], ctx.autocast, ctx.on_micro)
        trained_tokens += m.tokens
        if not distributed() or torch.distributed.get_rank() == 0:
            # the step's numbers for the experiment trackers (src/run/layout.ts sftKeys.stepRow); never stops training
            try:
                store.put_json(f"{keys['metrics']}/{s + 1:06d}.json", {"step": s + 1, "loss": m.loss, "lr": st["lr"], "gradNorm": m.grad_norm,
                                                                      "tokens": m.tokens, "ms": int((time.time() - t_step) * 1000)})
            except Exception as e:  # noqa: BLE001 - tracking must never fail a training step
                ctx.log(f"step {s + 1}: its metrics row was not written ({e})")
        losses.append(m.loss)
        state = {"step": s + 1, "cursor": st["cursor"], "rngState": plan["rngState"], "losses": losses}
        if ctx.on_step is not None:
            ctx.on_step(s + 1, total, m.loss)
        if (s + 1) % plan["checkpointEvery"] == 0 or s + 1 == total:
            trainer_state = dict(state)
            saved = (save_lora_checkpoint(store, keys["checkpoints"], s + 1, model, opt, loaded.config_json, loaded.lora_base, lambda _w: {"trainer": trainer_state}, tag)
                     if lora else save_checkpoint(store, keys["checkpoints"], s + 1, model, opt, loaded.config_json, lambda _w: {"trainer": trainer_state}, tag))
            if saved is not None and not saved[3]:
                ctx.log(f"sftTrain step {s + 1}: another attempt committed this checkpoint first; its checkpoint stands, this attempt goes on")
        if (s + 1) % 10 == 0 or s + 1 == total:
            ctx.log(f"step {s + 1}/{total} loss {m.loss:.4f} lr {st['lr']:.2e} |g| {m.grad_norm:.3f} {m.tokens} tok")
    ref = _write_final(store, inp, keys, prepared, model, loaded, lora)
    if ref is None:  # a rank > 0
        return {}
    result = {"backend": f"torch-{ctx.device.type}" + (f"x{torch.distributed.get_world_size()}" if distributed() else ""), "params": base_params,
              "examples": plan["examples"], "truncated": plan["truncated"], "untrainable": plan["untrainable"], "steps": total, "resumedFrom": resumed_from,
              "losses": losses, "trainedTokens": trained_tokens, "seconds": time.time() - t0, "finalPrefix": keys["final"], "model": ref}
    validate("sftTrain", "result", result)
    store.put_json(keys["result"], result)
    return result


def read_plan(store: Store, key: str) -> dict:
    """plan.json, checked against its contract (contracts.json `files.sftPlan`)."""
    try:
        plan = store.get_json(key)
    except NotFound as e:
        raise BadInput(f"s3 {key}: not found (sftPrepare writes it before sftTrain)") from e
    return validate_file("sftPlan", plan, f"s3 {key}:")


def _with_adapter(store: Store, model: torch.nn.Module, prefix: str, device: torch.device) -> torch.nn.Module:
    from peft import PeftModel

    with tempfile.TemporaryDirectory(prefix="cm2-torch-adapter-") as d:
        for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
            store.get_file(f"{prefix}/{name}", os.path.join(d, name))
        return PeftModel.from_pretrained(model, d, is_trainable=True).to(device)


def _write_final(store: Store, inp: dict, keys: dict, prepared: str, model: torch.nn.Module, loaded: Loaded, lora: bool) -> Optional[dict]:
    """The final HF folder (and the adapter): gathered to rank 0, which writes. Returns the weights' ref on rank 0."""
    if lora:
        from peft import get_peft_model_state_dict

        adapter = {k: _cpu(v) for k, v in get_peft_model_state_dict(model).items()}
    else:
        weights = {n: _cpu(p) for n, p in model.named_parameters()}
    if torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
        return None
    final = keys["final"]
    with tempfile.TemporaryDirectory(prefix="cm2-torch-final-") as d:
        if lora:
            from peft import PeftModel

            # merged on a fresh copy of the base (the trained model may be sharded): base + the adapter just trained
            ad = os.path.join(d, "adapter")
            model.peft_config["default"].save_pretrained(ad)
            cfg_path = os.path.join(ad, ADAPTER_CONFIG)
            with open(cfg_path) as f:
                acfg = json.load(f)
            sft = inp["sft"]
            acfg["base_model_name_or_path"] = sft["base"].get("dir") if sft["base"].get("kind") == "hf" else None
            with open(cfg_path, "w") as f:
                json.dump(acfg, f, indent=2)
            save_file(adapter, os.path.join(ad, ADAPTER_WEIGHTS), metadata={"format": "pt"})
            for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
                store.put_file(f"{keys['adapter']}/{name}", os.path.join(ad, name))
            base = load_policy(store, {"kind": "hf", "prefix": f"{prepared}/initial"}, torch.device("cpu")).model
            merged = PeftModel.from_pretrained(base, ad).merge_and_unload()
            weights = {n: _cpu(p) for n, p in merged.named_parameters()}
        wpath = os.path.join(d, "model.safetensors")
        save_file(weights, wpath, metadata={"format": "pt"})
        store.put_bytes(f"{final}/config.json", loaded.config_json, "application/json")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            store.put_bytes(f"{final}/{name}", store.get_bytes(f"{prepared}/initial/{name}"), "application/json")
        return store.put_file(f"{final}/model.safetensors", wpath, sha256_file(wpath))
