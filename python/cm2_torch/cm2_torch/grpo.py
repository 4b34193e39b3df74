"""The GRPO update (spec §6.8) in PyTorch: the same update as the TypeScript trainer (src/stages/rl/grpo.ts and its loss,
src/stages/rl/algo/loss.ts), checked against the same golden fixture (test/fixtures/grpo-golden).

Per policy token with log-probabilities logp (current), old (sampling policy), ref (reference) and advantage A:
  ratio = exp(clamp(logp - old, -20, 20))
  pg    = max(-A*ratio, -A*clip(ratio, 1-eps_low, 1+eps_high))           (PPO clip)
  pg    = min(pg, -A*c)  where A < 0                                      (dual clip, c = clip_ratio_c > 1)
  kl    = clamp(exp(ref - logp) - (ref - logp) - 1, -10, 10)             (VeRL's low_var_kl)
  loss  = sum over policy tokens of (pg + beta*kl) / N                   (N: policy tokens of the whole update batch)

As in the TypeScript trainer: token k >= 1 of a span is predicted at position k - 1 (token 0 has no prediction); `old`
is the behaviour policy's log-probabilities when one sampled the batch (one-step-off), else the stop-gradient of the
same forward pass (ratio 1); log-probabilities are of softmax(logits / T) at the rollouts' temperature; a sequence
whose advantage is 0 everywhere is skipped when there is no KL term (it adds nothing), its tokens still count in N;
gradients are clipped to a global norm only when it exceeds the bound (factor max / (norm + 1e-6)); AdamW decays every
parameter. Micro-batches only bound memory: the loss and gradients do not depend on how the batch is cut.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch


@dataclass
class Span:
    start: int
    end: int
    advantage: float


@dataclass
class GrpoSequence:
    tokens: list[int]
    spans: list[Span]
    sampled: Optional[list[float]] = None

    @staticmethod
    def from_json(d: dict) -> "GrpoSequence":
        return GrpoSequence(tokens=list(d["tokens"]), spans=[Span(s["start"], s["end"], float(s["advantage"])) for s in d["spans"]], sampled=d.get("sampled"))


@dataclass
class GrpoStepConfig:
    lr: float
    max_grad_norm: float
    micro_batch: int
    pad_id: int
    clip_low: float = 0.2
    clip_high: float = 0.2
    clip_ratio_c: Optional[float] = 3.0
    kl_coef: float = 1e-4
    temperature: float = 1.0
    micro_batch_tokens: Optional[int] = None
    autocast: Optional[torch.dtype] = None  # e.g. torch.bfloat16 on a GPU: matmuls in that type, log-probabilities in float32


@dataclass
class Rows:
    ids: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    adv: torch.Tensor
    tokens: int
    sampled: Optional[torch.Tensor] = None  # the sampler's log-probability where known, NaN elsewhere


def collate(batch: Sequence[GrpoSequence], pad_id: int) -> Rows:
    """Inputs of position t predict token t+1: ids = tokens[0..n-2], targets = tokens[1..n-1]; the mask from the spans."""
    T = max([1] + [len(s.tokens) - 1 for s in batch])
    ids = torch.full((len(batch), T), pad_id, dtype=torch.long)
    targets = torch.full((len(batch), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), T), dtype=torch.float32)
    adv = torch.zeros((len(batch), T), dtype=torch.float32)
    sampled = torch.full((len(batch), T), float("nan"), dtype=torch.float32)
    tokens = 0
    for b, seq in enumerate(batch):
        n = len(seq.tokens)
        if n > 1:
            ids[b, : n - 1] = torch.tensor(seq.tokens[:-1])
            targets[b, : n - 1] = torch.tensor(seq.tokens[1:])
        # the sampler's log-probabilities: one per span token (spans in order), used only when the count matches
        own = seq.sampled if seq.sampled is not None and len(seq.sampled) == sum(max(0, sp.end - sp.start) for sp in seq.spans) else None
        j = 0
        for span in seq.spans:
            for k in range(span.start, span.end):
                j += 1
                if k < 1 or k >= n:
                    continue
                mask[b, k - 1] = 1.0
                adv[b, k - 1] = span.advantage
                if own is not None:
                    sampled[b, k - 1] = float(own[j - 1])
                tokens += 1
    return Rows(ids, targets, mask, adv, tokens, sampled)


def policy_tokens(seq: GrpoSequence) -> int:
    n = len(seq.tokens)
    return sum(1 for sp in seq.spans for k in range(sp.start, sp.end) if 1 <= k < n)


def loss_terms(logp: torch.Tensor, old: torch.Tensor, ref: Optional[torch.Tensor], adv: torch.Tensor, mask: torch.Tensor, cfg: GrpoStepConfig):
    """Sums over masked tokens of the policy-gradient term and the KL term, and the number of clipped tokens."""
    ratio = torch.exp(torch.clamp(logp - old, -20.0, 20.0))
    neg_a = -adv
    pg1 = neg_a * ratio
    pg2 = neg_a * torch.clamp(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
    pg = torch.maximum(pg1, pg2)
    clipped = (pg2 > pg1).float()
    if cfg.clip_ratio_c is not None:
        pg3 = neg_a * cfg.clip_ratio_c
        pg = torch.where(adv < 0, torch.minimum(pg, pg3), pg)
    pg_sum = (pg * mask).sum()
    kl_sum = torch.zeros((), dtype=logp.dtype, device=logp.device)
    if ref is not None:
        d = ref - logp
        kl = torch.clamp(torch.exp(d) - d - 1.0, -10.0, 10.0)
        kl_sum = (kl * mask).sum()
    return pg_sum, kl_sum, (clipped * mask).sum()


def token_logprobs(model: torch.nn.Module, ids: torch.Tensor, targets: torch.Tensor, temperature: float, autocast: Optional[torch.dtype] = None) -> torch.Tensor:
    """log softmax(logits / T)[target] per position, [B, T], float32 (as target logit - logsumexp: one float32 copy of
    the logits is kept for the backward pass, not two)."""
    device = next(model.parameters()).device
    with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
        logits = model(input_ids=ids.to(device)).logits
    z = logits.float() / temperature
    return z.gather(-1, targets.to(device).unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)


def global_grad_norm(params: Sequence[torch.Tensor]) -> float:
    """The 2-norm of all gradients together. A gradient FSDP2 holds as a DTensor shard counts its local part, and the
    squares are summed over the ranks, so every rank gets the norm of the whole model."""
    sq = torch.zeros((), dtype=torch.float64, device=params[0].grad.device)
    sharded = False
    for p in params:
        g = p.grad.detach()
        if hasattr(g, "to_local"):
            g, sharded = g.to_local(), True
        sq = sq + g.double().pow(2).sum()
    if sharded and torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(sq)
    return float(sq.sqrt())


def micro_batches(seqs: Sequence[GrpoSequence], micro_batch: int, max_positions: Optional[int], pad_id: int) -> list[Rows]:
    """Sequences in order, at most `micro_batch` per part and (when given) at most `max_positions` rows x length."""
    out: list[Rows] = []
    cur: list[GrpoSequence] = []
    for s in seqs:
        if cur and len(cur) < micro_batch:
            nxt = cur + [s]
            T = max(len(x.tokens) - 1 for x in nxt)
            if max_positions is None or len(nxt) * T <= max_positions:
                cur = nxt
                continue
        if cur:
            out.append(collate(cur, pad_id))
        cur = [s]
    if cur:
        out.append(collate(cur, pad_id))
    return out


@dataclass
class StepMetrics:
    loss: float
    pg_loss: float
    kl: float
    clip_frac: float
    grad_norm: float
    policy_tokens: int
    sequences: int
    active_sequences: int
    # |sampler - trainer| log-probability over the tokens whose sampler value is known (trainer: the policy that
    # sampled, i.e. the behaviour policy one step off, else the policy before the update): mean, max, count
    logprob_gap: Optional[dict] = None
    extra: dict = field(default_factory=dict)


def _world() -> tuple[int, int]:
    d = torch.distributed
    if d.is_available() and d.is_initialized():
        return d.get_rank(), d.get_world_size()
    return 0, 1


def grpo_step(policy: torch.nn.Module, reference: Optional[torch.nn.Module], optimizer: torch.optim.Optimizer, batch: Sequence[GrpoSequence],
              cfg: GrpoStepConfig, behaviour: Optional[torch.nn.Module] = None, on_micro=None) -> StepMetrics:
    """One optimizer step of `policy` on `batch` (`optimizer` holds exactly the trained parameters).

    Under torch.distributed with several ranks (the policy sharded by FSDP2), micro-batch i goes to rank i mod world;
    each rank divides its loss by the policy tokens of the whole batch and the gradients are summed over the ranks
    (FSDP2 averages: the loss is scaled by the world size), so the update is the single-process one. A rank short of a
    micro-batch runs a forward and backward of zero loss: FSDP2's collectives need every rank in every pass."""
    rank, world = _world()
    with_tokens = [s for s in batch if any(sp.end > sp.start for sp in s.spans)]
    total = sum(policy_tokens(s) for s in with_tokens)
    use_ref = cfg.kl_coef > 0 and reference is not None
    seqs = with_tokens if use_ref else [s for s in with_tokens if any(sp.advantage != 0 for sp in s.spans)]
    n = max(total, 1)
    pg_total = kl_total = clipped_total = 0.0
    gap_sum, gap_max, gap_tokens = 0.0, 0.0, 0
    optimizer.zero_grad(set_to_none=True)
    parts = micro_batches(seqs, cfg.micro_batch, cfg.micro_batch_tokens, cfg.pad_id)
    mine = parts[rank::world]
    rounds = -(-len(parts) // world) if world > 1 else len(parts)
    device = next(policy.parameters()).device
    for i in range(rounds):
        if on_micro is not None:
            on_micro(i * world + rank, len(parts))
        rows = mine[i] if i < len(mine) else None
        if rows is None or rows.tokens == 0:
            if world > 1:
                pad = torch.full((1, 2), cfg.pad_id, dtype=torch.long)
                (token_logprobs(policy, pad, pad, cfg.temperature, cfg.autocast).sum() * 0.0).backward()
            continue
        mask, adv = rows.mask.to(device), rows.adv.to(device)
        with torch.no_grad():
            ref = token_logprobs(reference, rows.ids, rows.targets, cfg.temperature, cfg.autocast) if use_ref else None
            beh = token_logprobs(behaviour, rows.ids, rows.targets, cfg.temperature, cfg.autocast) if behaviour is not None else None
        logp = token_logprobs(policy, rows.ids, rows.targets, cfg.temperature, cfg.autocast)
        old = beh if beh is not None else logp.detach()
        if rows.sampled is not None:
            known = ~torch.isnan(rows.sampled)
            if bool(known.any()):
                d = (old.detach().cpu()[known] - rows.sampled[known]).abs().double()
                gap_sum += float(d.sum())
                gap_max = max(gap_max, float(d.max()))
                gap_tokens += int(known.sum())
        pg_sum, kl_sum, clipped = loss_terms(logp, old, ref, adv, mask, cfg)
        ((pg_sum + cfg.kl_coef * kl_sum) * (world / n)).backward()
        pg_total += pg_sum.item()
        kl_total += kl_sum.item()
        clipped_total += clipped.item()
    if world > 1:
        d = torch.distributed
        sums = torch.tensor([pg_total, kl_total, clipped_total, gap_sum, float(gap_tokens)], dtype=torch.float64, device=device)
        d.all_reduce(sums)
        mx = torch.tensor([gap_max], dtype=torch.float64, device=device)
        d.all_reduce(mx, op=d.ReduceOp.MAX)
        pg_total, kl_total, clipped_total, gap_sum, gap_tokens = float(sums[0]), float(sums[1]), float(sums[2]), float(sums[3]), int(sums[4])
        gap_max = float(mx[0])
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    grad_norm = 0.0
    if params:
        grad_norm = global_grad_norm(params)
        if cfg.max_grad_norm > 0 and grad_norm > cfg.max_grad_norm:
            scale = cfg.max_grad_norm / (grad_norm + 1e-6)
            for p in params:
                p.grad.mul_(scale)
        for g in optimizer.param_groups:
            g["lr"] = cfg.lr
        optimizer.step()
    return StepMetrics(
        loss=(pg_total + cfg.kl_coef * kl_total) / n, pg_loss=pg_total / n, kl=kl_total / n, clip_frac=clipped_total / n, grad_norm=grad_norm,
        policy_tokens=total, sequences=len(with_tokens), active_sequences=sum(1 for s in with_tokens if any(sp.advantage != 0 for sp in s.spans)),
        logprob_gap={"mean": gap_sum / gap_tokens, "max": gap_max, "tokens": gap_tokens} if gap_tokens else None,
    )


def adamw(params, weight_decay: float, lr: float = 1e-6) -> torch.optim.AdamW:
    """The optimizer of the TypeScript trainer: betas (0.9, 0.999), eps 1e-8, decoupled weight decay on every parameter."""
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=weight_decay, foreach=False)
