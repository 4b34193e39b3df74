"""The `rlTrain` activity's body in PyTorch (src/stages/rl/trainActivity.ts is the TypeScript one; the protocol is the
same): a recorded result or manifest is returned as it is (`reused`); otherwise step n-1 (its weights and AdamW
moments, or its LoRA adapter through PEFT) is loaded, one GRPO update is applied to the joined batch, and step n is
written, manifest last (created only if absent: see checkpoint.py).
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from .checkpoint import (BadPolicy, Loaded, load_policy, lora_config, new_attempt_tag, policy_key, restore_adamw, rl_checkpoints, save_checkpoint,
                         save_lora_checkpoint, step_folder)
from .fsdp import broadcast_object, distributed, shard
from .contracts import validate
from .grpo import GrpoSequence, GrpoStepConfig, Span, adamw, grpo_step
from .store import NotFound, Store


class BadInput(ValueError):
    """Input that no retry can fix (failure type `BadInput`, not retried by the workflows)."""


def join_advantages(rollouts: list, rows: list, where: str) -> list[list[dict]]:
    """Each rollout's segments with its advantage (src/stages/rl/algo/advantages.ts `joinAdvantages`, same messages)."""
    by_id: dict = {}
    for row in rows:
        if row["id"] in by_id:
            raise BadInput(f"{where}: two advantage rows for rollout {row['id']}")
        by_id[row["id"]] = row["advantages"]
    out = []
    for r in rollouts:
        adv = by_id.pop(r["id"], None)
        if adv is None:
            raise BadInput(f"{where}: no advantages for rollout {r['id']}")
        if len(adv) != len(r["segments"]):
            raise BadInput(f"{where}: rollout {r['id']} has {len(r['segments'])} segments but {len(adv)} advantages")
        segs = []
        for k, (s, a) in enumerate(zip(r["segments"], adv)):
            if not isinstance(a, (int, float)) or not math.isfinite(a):
                raise BadInput(f"{where}: rollout {r['id']}, segment {k}: advantage {a} is not a finite number")
            segs.append({**s, "advantage": float(a)})
        out.append(segs)
    if by_id:
        raise BadInput(f"{where}: advantages for {len(by_id)} rollout(s) not in the batch ({', '.join(list(by_id)[:3])})")
    return out


def read_batch(store: Store, inp: dict) -> list[GrpoSequence]:
    rollouts = store.get_json(inp["rolloutsKey"])["rollouts"]
    adv_file = store.get_json(inp["advantagesKey"])
    rows = adv_file.get("rows")
    if rows is None:
        rows = [{"id": rollouts[i]["id"] if i < len(rollouts) else f"#{i} (positional)", "advantages": a} for i, a in enumerate(adv_file.get("advantages") or [])]
    spans = join_advantages(rollouts, rows, f"{inp['advantagesKey']} × {inp['rolloutsKey']}")
    return [GrpoSequence(tokens=list(r["tokens"]), spans=[Span(s["start"], s["end"], s["advantage"]) for s in sp], sampled=r.get("logprobs"))
            for r, sp in zip(rollouts, spans)]


def step_config(inp: dict, pad_id: int = 0, autocast: Optional[torch.dtype] = None) -> GrpoStepConfig:
    rl, hp = inp["rl"], inp["hp"]
    return GrpoStepConfig(lr=hp["lr"], kl_coef=hp["klCoef"], clip_low=rl["clipLow"], clip_high=rl["clipHigh"], clip_ratio_c=rl.get("clipRatioC"),
                          max_grad_norm=rl["maxGradNorm"], micro_batch=rl["microBatch"], micro_batch_tokens=rl.get("microBatchTokens") or None,
                          pad_id=pad_id, temperature=rl["rollout"]["temperature"], autocast=autocast)


class PolicyCache:
    """Read-only policies (reference, behaviour) by policy key, the `capacity` most recently used kept."""

    def __init__(self, capacity: int = 2):
        self.capacity = capacity
        self.items: "OrderedDict[str, torch.nn.Module]" = OrderedDict()

    def get(self, store: Store, p: dict, device: torch.device) -> torch.nn.Module:
        k = policy_key(p)
        if k in self.items:
            self.items.move_to_end(k)
            return self.items[k]
        model = load_policy(store, p, device).model.eval()
        for q in model.parameters():
            q.requires_grad_(False)
        self.items[k] = model
        while len(self.items) > self.capacity:
            self.items.popitem(last=False)
        return model


@dataclass
class TrainContext:
    store: Store
    device: torch.device
    cache: PolicyCache = field(default_factory=PolicyCache)
    autocast: Optional[torch.dtype] = None
    attempt: int = 1
    on_micro: Optional[Callable[[int, int], None]] = None
    on_step: Optional[Callable[[int, int, float], None]] = None  # (step, of, loss) after each SFT step
    log: Callable[[str], None] = print
    broadcast: bool = False


def rl_train(ctx: TrainContext, raw: dict) -> dict:
    """Rank 0's activity body: a recorded result or manifest is returned as it is; otherwise the task goes to every
    rank (under torchrun) and the update runs on all of them."""
    inp = validate("rlTrain", "input", raw)
    store = ctx.store
    folder = step_folder(rl_checkpoints(inp["runId"]), inp["step"])
    try:
        return {**store.get_json(f"{folder}/train-result.json")}
    except NotFound:
        pass
    try:
        saved = (store.get_json(f"{folder}/manifest.json").get("state") or {}).get("train")
        if saved:
            return {**saved, "reused": True}
    except NotFound:
        pass
    batch = read_batch(store, inp)  # a misaligned batch is refused here, before any rank starts
    tag = new_attempt_tag(ctx.attempt)
    if distributed():
        ctx.broadcast = True  # from here on every rank is in the update: a failure leaves the group unusable
        broadcast_object(("rlTrain", raw, tag))
    return update(ctx, inp, tag, batch)


def follow(ctx: TrainContext) -> None:
    """A rank > 0: runs each task rank 0 sends (an RL update, an SFT run), until it sends None."""
    while True:
        task = broadcast_object(None)
        if task is None:
            return
        if task == "ping":
            continue
        if task[0] == "sftTrain":
            from .sft import run as sft_run

            _, raw, tag, latest = task
            sft_run(ctx, validate("sftTrain", "input", raw), tag, latest)
            continue
        _, raw, tag = task
        update(ctx, validate("rlTrain", "input", raw), tag)


def update(ctx: TrainContext, inp: dict, tag: str, batch: Optional[list[GrpoSequence]] = None) -> dict:
    """The update on this rank (every rank of a torchrun launch runs it; rank 0 writes the checkpoint)."""
    store = ctx.store
    prefix = rl_checkpoints(inp["runId"])
    manifest_key = f"{step_folder(prefix, inp['step'])}/manifest.json"
    t0 = time.time()
    batch = batch if batch is not None else read_batch(store, inp)
    hp = inp["hp"]
    try:
        reference = ctx.cache.get(store, inp["reference"], ctx.device) if hp["klCoef"] > 0 else None
        behaviour = None
        if inp.get("behaviour") and policy_key(inp["behaviour"]) != policy_key(inp["policy"]):
            behaviour = ctx.cache.get(store, inp["behaviour"], ctx.device)
        loaded: Loaded = load_policy(store, inp["policy"], ctx.device, with_optimizer=inp["policy"]["kind"] == "ckpt")
    except BadPolicy as e:
        raise BadInput(str(e)) from e
    lora = inp["rl"].get("lora")
    where = inp["policy"].get("manifestKey") or inp["policy"].get("prefix")
    if inp["policy"]["kind"] == "ckpt" and bool(loaded.lora_base) != bool(lora):
        raise BadInput(f"{where}: the checkpoint holds {'a LoRA adapter' if loaded.lora_base else 'full weights'}, but rl.lora is "
                       f"{'set' if lora else 'null'}: a run cannot switch between LoRA and full fine-tuning")
    base = loaded.lora_base
    if lora and inp["policy"]["kind"] == "hf":
        # a fresh adapter on the SFT policy: PEFT's initialisation (A uniform in ±1/sqrt(in), B zero: the distribution
        # the tfjs adapter draws from, not its draws) seeded with the run's seed
        from peft import get_peft_model

        torch.manual_seed(inp["rl"]["seed"])
        loaded.model = get_peft_model(loaded.model, lora_config(lora))
        base = inp["policy"]
    model = loaded.model.train()
    if distributed():
        shard(model.base_model.model if lora else model)
    opt = adamw([p for p in model.parameters() if p.requires_grad], inp["rl"]["weightDecay"])
    if loaded.optimizer is not None:
        try:
            restore_adamw(opt, model, loaded.optimizer, inp["policy"]["manifestKey"])
        except BadPolicy as e:
            raise BadInput(str(e)) from e
    metrics = grpo_step(model, reference, opt, batch, step_config(inp, 0, ctx.autocast), behaviour=behaviour, on_micro=ctx.on_micro)
    train_seconds = time.time() - t0
    t1 = time.time()
    policy = {"kind": "ckpt", "manifestKey": manifest_key, "step": inp["step"]}
    done = {"policy": policy, "step": inp["step"], "reused": False, "loss": metrics.loss, "pgLoss": metrics.pg_loss, "kl": metrics.kl,
            "clipFrac": metrics.clip_frac, "gradNorm": metrics.grad_norm, "policyTokens": metrics.policy_tokens,
            **({"logprobGap": metrics.logprob_gap} if metrics.logprob_gap else {}), "trainSeconds": train_seconds}

    def state_of(wsha: str) -> dict:
        return {**inp["state"], "hp": hp, "train": {**done, "checkpointSeconds": 0, "weightsSha256": wsha}}

    saved = (save_lora_checkpoint(store, prefix, inp["step"], model, opt, loaded.config_json, base, state_of, tag) if lora
             else save_checkpoint(store, prefix, inp["step"], model, opt, loaded.config_json, state_of, tag))
    if saved is None:  # a rank > 0: its shards went to rank 0
        return {}
    _, manifest, wsha, won = saved
    if not won:
        ctx.log(f"rlTrain step {inp['step']}: another attempt committed this step first; its checkpoint stands")
        return {**manifest["state"]["train"], "reused": True}
    result = {**done, "checkpointSeconds": time.time() - t1, "weightsSha256": wsha}
    validate("rlTrain", "result", result)
    store.put_json(f"{step_folder(prefix, inp['step'])}/train-result.json", result)
    return result
