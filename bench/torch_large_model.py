#!/usr/bin/env python3
"""PyTorch + transformers side of bench/large-model.ts: the same phases on the same token ids.

Reads the job JSON (written by bench/large-model.ts) on stdin, prints one line `@@RESULT {json}` on stdout, progress on
stderr. float32, eager attention, torch.set_num_threads(all cores). Two parts, each its own process, as on our side:
part "sft" runs load, generate, SFT, save; part "rl" runs load ckpt and RL.

Phases (each timed as a whole):
  load      Qwen2ForCausalLM.from_pretrained(dir, dtype=float32)   (the BF16 shards, upcast)
  generate  model.generate(prompts, greedy, new_tokens new tokens with no stop token, use_cache=True), after a 2-token warm-up
  SFT       per step: mean cross-entropy over masked target tokens (targets = ids shifted by one, mask from lossMask[t+1]),
            backward, clip_grad_norm_(max_grad_norm), torch.optim.AdamW(lr, (0.9, 0.999), 1e-8, weight_decay)
  save      save_pretrained (F32 safetensors) + torch.save(optimizer.state_dict())   (what HF Trainer saves)
  load ckpt from_pretrained(saved) + optimizer.load_state_dict(torch.load(...)) (+ the reference model when kl_coef > 0)
  RL        per step: GRPO token-mean loss as src/stages/rl/grpo.ts (ratio = 1, PPO clip, dual clip c=3, low-variance KL to the
            reference), micro-batched with gradients accumulated, clip, AdamW
"""
import json
import os
import resource
import sys
import time


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main() -> int:
    job = json.load(sys.stdin)
    out = {"side": "torch", "available": False, "phases": [], "sftStepSeconds": [], "rlStepSeconds": [], "sftLosses": [], "rlLosses": []}
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
    except Exception as e:  # noqa: BLE001
        out["error"] = f"import failed: {e}"
        print("@@RESULT " + json.dumps(out), flush=True)
        return 0
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    out["available"] = True
    out["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__, "threads": str(threads)}

    def phase(name, t0, **extra):
        p = {"name": name, "seconds": time.perf_counter() - t0, "rssBytes": rss(), "peakRssBytes": peak(), **extra}
        out["phases"].append(p)
        print(f"[torch] {name}: {p['seconds']:.1f} s, RSS {p['rssBytes'] / 2**20:.0f} MiB, peak {p['peakRssBytes'] / 2**20:.0f} MiB", file=sys.stderr, flush=True)

    def load(d):
        return AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")

    def token_logp(m, ids, targets):
        logits = m(input_ids=ids).logits
        return torch.log_softmax(logits.float(), -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)

    def adamw(params):
        return torch.optim.AdamW(params, lr=job["lr"], betas=(0.9, 0.999), eps=1e-8, weight_decay=job["weightDecay"])

    ckpt = os.path.join(job["tmp"], "torch-ckpt")
    seq, micro = job["seq"], job["microBatch"]

    if job["part"] == "sft":
        t0 = time.perf_counter()
        model = load(job["dir"])
        out["params"] = sum(p.numel() for p in model.parameters())
        phase("load HF checkpoint (BF16 shards)", t0)

        model.eval()
        prompts = torch.tensor(job["prompts"])
        n = job["newTokens"]
        # No padding: every position is attended (an explicit mask, so that token 0 is not taken for padding). No stop
        # token, as on our side: exactly n new tokens, plain argmax (min_new_tokens would instead forbid the EOS id).
        model.generation_config.eos_token_id = None
        kw = dict(attention_mask=torch.ones_like(prompts), do_sample=False, use_cache=True, pad_token_id=0)
        with torch.no_grad():
            model.generate(prompts, max_new_tokens=2, **kw)
            t0 = time.perf_counter()
            gen = model.generate(prompts, max_new_tokens=n, **kw)
        sec = time.perf_counter() - t0
        out["generated"] = gen[:, prompts.shape[1]:].tolist()
        out["genTokPerS"] = prompts.shape[0] * n / sec
        phase("generate", t0)

        model.train()
        params = [p for p in model.parameters()]
        opt = adamw(params)
        t0 = time.perf_counter()
        for i in range(job["sftSteps"]):
            s0 = time.perf_counter()
            batch = job["sft"][i * micro:(i + 1) * micro]
            ids = torch.tensor([ex["ids"][:seq] for ex in batch])
            tgt = torch.tensor([ex["ids"][1:seq + 1] for ex in batch])
            mask = torch.tensor([ex["lossMask"][1:seq + 1] for ex in batch], dtype=torch.float32)
            logp = token_logp(model, ids, tgt)
            loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, job["maxGradNorm"])
            opt.step()
            opt.zero_grad(set_to_none=True)
            out["sftStepSeconds"].append(time.perf_counter() - s0)
            out["sftLosses"].append(loss.item())
            print(f"[torch] SFT step {i + 1}: {out['sftStepSeconds'][-1]:.1f} s, loss {loss.item():.4f}", file=sys.stderr, flush=True)
        phase("SFT", t0)

        t0 = time.perf_counter()
        model.save_pretrained(ckpt, safe_serialization=True)
        torch.save(opt.state_dict(), os.path.join(ckpt, "optimizer.pt"))
        phase("save checkpoint", t0)
        print("@@RESULT " + json.dumps(out), flush=True)
        return 0

    t0 = time.perf_counter()
    model = load(ckpt)
    out["params"] = sum(p.numel() for p in model.parameters())
    model.train()
    params = [p for p in model.parameters()]
    opt = adamw(params)
    opt.load_state_dict(torch.load(os.path.join(ckpt, "optimizer.pt")))
    reference = load(job["dir"]).eval() if job["klCoef"] > 0 else None
    phase("load checkpoint into the RL trainer", t0)

    seqs = [s for s in job["rl"] if any(sp["end"] > sp["start"] for sp in s["spans"])]

    def collate(part):
        T = max(1, max(len(s["tokens"]) - 1 for s in part))
        ids, tgt, mask, adv = [], [], [], []
        for s in part:
            toks, nn = s["tokens"], len(s["tokens"])
            row, tg, m, a = [0] * T, [0] * T, [0.0] * T, [0.0] * T
            for t in range(nn - 1):
                row[t], tg[t] = toks[t], toks[t + 1]
            for sp in s["spans"]:
                for k in range(max(sp["start"], 1), min(sp["end"], nn)):
                    m[k - 1], a[k - 1] = 1.0, sp["advantage"]
            ids.append(row), tgt.append(tg), mask.append(m), adv.append(a)
        return torch.tensor(ids), torch.tensor(tgt), torch.tensor(mask), torch.tensor(adv)

    total = sum(int(collate([s])[2].sum().item()) for s in seqs)
    beta, c = job["klCoef"], 3.0
    t0 = time.perf_counter()
    for i in range(job["rlSteps"]):
        s0 = time.perf_counter()
        loss_sum = 0.0
        for k in range(0, len(seqs), micro):
            ids, tgt, mask, adv = collate(seqs[k:k + micro])
            ref = None
            if reference is not None:
                with torch.no_grad():
                    ref = token_logp(reference, ids, tgt)
            logp = token_logp(model, ids, tgt)
            ratio = torch.exp(torch.clamp(logp - logp.detach(), -20, 20))
            pg1, pg2 = -adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.2)
            pg = torch.maximum(pg1, pg2)
            pg = torch.where(adv < 0, torch.minimum(pg, -adv * c), pg)
            loss = (pg * mask).sum()
            if ref is not None:
                d = ref - logp
                loss = loss + beta * (torch.clamp(torch.exp(d) - d - 1, -10, 10) * mask).sum()
            loss = loss / max(total, 1)
            loss.backward()
            loss_sum += loss.item()
        torch.nn.utils.clip_grad_norm_(params, job["maxGradNorm"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        out["rlStepSeconds"].append(time.perf_counter() - s0)
        out["rlLosses"].append(loss_sum)
        print(f"[torch] RL step {i + 1}: {out['rlStepSeconds'][-1]:.1f} s, loss {loss_sum:.3e}", file=sys.stderr, flush=True)
    phase("RL", t0)
    print("@@RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
