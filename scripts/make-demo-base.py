#!/usr/bin/env python3
"""The demo policy's pretrained base (assets/demo-base): a 0.9M-parameter Qwen3 pretrained on demo-world text.

CM2 starts from a pretrained LLM; a model trained from scratch on the demo's 300 cold-start dialogues never learns to
copy argument values out of the dialogue (docs/rl-results.md), so RL from it has no signal. This script is the demo's
stand-in for pretraining: a causal LM on whole rendered demo-world dialogues from a dataset seed the demo never uses
(scripts/demo-corpus.ts), half of them from the terse demonstrator (`--terse-rate`, the generator's `terseRate`), so
the base knows both the complete and the terse way of replying, as a pretrained LLM would. Copying emerges abruptly
(an induction phase change) after roughly 10 M tokens; the printed probe shows it: teacher-forced accuracy of the
assistant's argument digits, reply digits and argument words on held-out (complete) dialogues.

Needs torch + transformers. The committed base is the defaults, run on one H100 in 5.5 minutes (3,708 steps of 32
dialogues under --time-budget 390, 131 M tokens); on 2 CPU cores that many steps would take many hours — a quick look:
    python3 scripts/make-demo-base.py --steps 200 --batch 8 --dialogues 2000 --out /tmp/base
On a machine without Node (a GPU box), write the corpora here first and pass them as files (.jsonl or .jsonl.xz):
    node --import tsx scripts/demo-corpus.ts 1001 30000 train.jsonl 0.5 && xz train.jsonl
    node --import tsx scripts/demo-corpus.ts 555 48 probe.jsonl
    python3 scripts/make-demo-base.py --corpus-file train.jsonl.xz --probe-file probe.jsonl --time-budget 390
"""
import argparse
import json
import lzma
import math
import os
import random
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from transformers import Qwen3Config, Qwen3ForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def corpus(seed: int, count: int, path: str, terse: float = 0.0) -> list:
    subprocess.run(["node", "--import", "tsx", os.path.join(ROOT, "scripts", "demo-corpus.ts"), str(seed), str(count), path, str(terse)],
                   cwd=ROOT, check=True)
    return read_corpus(path)


def read_corpus(path: str, limit: int = 0) -> list:
    """Rows of a demo-corpus.ts file (.jsonl, or .jsonl.xz), each array as a tensor (a few bytes per token)."""
    rows = []
    with (lzma.open(path, "rt") if path.endswith(".xz") else open(path)) as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
                rows.append({"ids": torch.tensor(r["ids"], dtype=torch.int16), "assistant": torch.tensor(r["assistant"], dtype=torch.uint8),
                             "kind": torch.tensor(r["kind"], dtype=torch.uint8)})
            except (ValueError, KeyError) as e:
                raise SystemExit(f"{path}:{n}: not a demo-corpus.ts row ({e})")
            if limit and len(rows) >= limit:
                break
    return rows


def batch(rows, key, device="cpu"):
    T = max(len(r["ids"]) for r in rows)
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    mask = torch.zeros(len(rows), T)
    kind = torch.zeros(len(rows), T, dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r["ids"])
        ids[i, :n] = r["ids"]
        a = r["assistant"].float()
        mask[i, :n] = a if key == "assistant" else 1 - a
        kind[i, :n] = r["kind"]
    return ids.to(device), mask.to(device), kind.to(device)


def probe(model, rows, vocab, device="cpu"):
    """Teacher-forced accuracy on the assistant's tokens by kind, and the assistant-token loss."""
    model.eval()
    hit = {k: [0, 0] for k in range(4)}
    loss_sum, count = 0.0, 0.0
    with torch.no_grad():
        for i in range(0, len(rows), 8):
            ids, mask, kind = batch(rows[i:i + 8], "assistant", device)
            logits = model(ids).logits[:, :-1]
            tgt, m, k = ids[:, 1:], mask[:, 1:], kind[:, 1:]
            loss = F.cross_entropy(logits.reshape(-1, vocab), tgt.reshape(-1), reduction="none").view_as(m)
            loss_sum += (loss * m).sum().item()
            count += m.sum().item()
            right = logits.argmax(-1) == tgt
            for kk in hit:
                sel = (k == kk) & (m > 0)
                hit[kk][0] += (right & sel).sum().item()
                hit[kk][1] += sel.sum().item()
    model.train()
    acc = {name: round(hit[kk][0] / max(1, hit[kk][1]), 3) for kk, name in [(1, "argDigit"), (2, "replyDigit"), (3, "argWord"), (0, "other")]}
    return loss_sum / max(1.0, count), acc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "assets", "demo-base"))
    ap.add_argument("--steps", type=int, default=12000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--dialogues", type=int, default=30000)
    ap.add_argument("--terse-rate", type=float, default=0.5, help="share of terse-demonstrator dialogues in the corpus (with --corpus-file: the rate it was written with)")
    ap.add_argument("--corpus-seed", type=int, default=1001)
    ap.add_argument("--probe-seed", type=int, default=555)
    ap.add_argument("--probe-every", type=int, default=250)
    ap.add_argument("--loss-on", choices=["world", "assistant", "all"], default="all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus-file", help="a demo-corpus.ts file (.jsonl or .jsonl.xz) instead of running Node; its first --dialogues rows")
    ap.add_argument("--probe-file", help="the probe's demo-corpus.ts file (instead of running Node)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--time-budget", type=float, default=0,
                    help="seconds: after 50 steps, cut --steps to what fits (the schedule follows the new count)")
    args = ap.parse_args()
    if (args.corpus_file is None) != (args.probe_file is None):
        ap.error("--corpus-file and --probe-file go together")
    torch.backends.cuda.matmul.allow_tf32 = True  # float32 weights either way; TF32 products on a GPU

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    if args.corpus_file:
        train = read_corpus(args.corpus_file, args.dialogues)
        held = read_corpus(args.probe_file)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            train = corpus(args.corpus_seed, args.dialogues, os.path.join(tmp, "train.jsonl"), args.terse_rate)
            held = corpus(args.probe_seed, 48, os.path.join(tmp, "probe.jsonl"))
    vocab = 1024
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=32, tie_word_embeddings=True, rope_theta=10000.0,
                      max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=None, eos_token_id=1017, pad_token_id=1015)
    model = Qwen3ForCausalLM(cfg).to(args.device)
    params = sum(p.numel() for p in model.parameters())
    print(f"demo base: {params:,} parameters, {len(train)} dialogues, loss on {args.loss_on} tokens, {args.device}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0, betas=(0.9, 0.95))
    order: list = []
    curve = []
    t0 = time.time()
    tokens = 0
    step = 0
    while step < args.steps:
        step += 1
        if args.time_budget and step == 51:
            per_step = (time.time() - t0) / 50
            fit = int(args.time_budget / per_step)
            if fit < args.steps:
                print(f"{per_step:.3f} s per step: --steps {args.steps} → {fit} to fit --time-budget {args.time_budget:g} s", flush=True)
                args.steps = max(fit, 51)
        if len(order) < args.batch:
            order += rng.sample(range(len(train)), len(train))
        rows = [train[order.pop()] for _ in range(args.batch)]
        ids, mask, _ = batch(rows, "assistant", args.device)
        lengths = torch.tensor([len(r["ids"]) for r in rows], device=args.device)
        real = (torch.arange(ids.shape[1], device=args.device)[None, :] < lengths[:, None]).float()
        if args.loss_on == "world":
            mask = (1 - mask) * real
        elif args.loss_on == "all":
            mask = real
        tokens += sum(len(r["ids"]) for r in rows)
        lr = args.lr * min(1.0, step / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        logits = model(ids).logits[:, :-1]
        m = mask[:, 1:]
        loss = (F.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1), reduction="none").view_as(m) * m).sum() / m.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.probe_every == 0 or step == args.steps:
            assistant_loss, acc = probe(model, held, vocab, args.device)
            row = {"step": step, "tokens": tokens, "loss": round(loss.item(), 4), "assistantLoss": round(assistant_loss, 4), **acc, "seconds": round(time.time() - t0)}
            curve.append(row)
            print(json.dumps(row), flush=True)
    os.makedirs(args.out, exist_ok=True)
    model.to("cpu").save_pretrained(args.out, safe_serialization=True)
    gen = os.path.join(args.out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    with open(os.path.join(args.out, "training.json"), "w") as f:
        json.dump({"script": "scripts/make-demo-base.py", "args": vars(args) | {"out": os.path.relpath(args.out, ROOT)}, "parameters": params,
                   "torch": torch.__version__, "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu", "curve": curve}, f, indent=1)
    print(f"wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
