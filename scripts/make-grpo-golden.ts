/**
 * The GRPO update's golden fixture (issue 32 item 3): what one update of the tfjs trainer (src/stages/rl/grpo.ts) does
 * to a tiny model written by transformers (test/fixtures/hf-tiny-qwen3: untied head, QK-norm; hf-tiny-llama-tied), so
 * that every trainer — both tfjs backends, the PyTorch worker (python/cm2_torch) — is checked against the same numbers.
 *
 * The batch is made for the clips to fire: a behaviour policy (one-step-off) that differs from the policy being updated,
 * sampling temperature 0.7, advantages of both signs and one of zero, a span that starts at token 0 (not trained: token
 * 0 has no prediction), several micro-batches, a KL term to a third policy, weight decay; the update is made twice, with
 * the gradient clip off and on (a max norm of 1 against a gradient norm of ~5; a much smaller one makes Adam's first step
 * g/(|g| + eps) ill-conditioned for the smallest gradients, which float rounding then decides).
 *
 *   npx tsx scripts/make-grpo-golden.ts      (→ test/fixtures/grpo-golden/<model>/)
 *
 * Files per model (HF names; Linear weights, their gradients and their moments in HF layout [out, in]):
 *   policy.safetensors, behaviour.safetensors, reference.safetensors   the three policies' weights
 *   case.json      the batch (tokens, spans with advantages), the update's settings, per case the metrics
 *   expected.safetensors   logp.{policy,behaviour,reference} [B, T] at the temperature over the collated batch; per case
 *                  (`noclip`, `clip`): `<case>.grad.<name>` (the pre-clip gradient, from AdamW's first moment:
 *                  m = (1 − β1)·g after one step, exact with the clip off), `<case>.weight.<name>`, `<case>.m.<name>`,
 *                  `<case>.v.<name>` after the update.
 *   sft-case.json, sft-expected.safetensors   the same for one cold-start SFT step (src/stages/sft/trainer.ts) from
 *                  policy.safetensors: the examples (ids and loss mask, one longer than maxSeqLen), the step's plan (its
 *                  micro-batches as example indices, its learning rate), per case the loss, gradient norm and trained
 *                  tokens, and `<case>.{grad,weight,m,v}.<name>` as above.
 *   lora/          the GRPO update (the same batch, policies and settings) training LoRA adapters on the policy
 *                  (GOLDEN_LORA: every linear module of the layers, rsLoRA off, two token rows), from an adapter whose
 *                  B is not zero (so that A has a gradient too), in PEFT's format (adapter_config.json,
 *                  adapter_model.safetensors); lora-case.json (settings, metrics) and lora-expected.safetensors
 *                  (`<case>.{grad,weight,m,v}.<PEFT tensor name>`).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { loadHfCheckpoint } from '../src/model/formats/checkpoint';
import { serializeSafetensors } from '../src/model/formats/safetensorsWrite';
import { selectBackend } from '../src/model/net/backend';
import type { QwenModel } from '../src/model/net/qwen';
import { collateGrpo, GrpoTrainer, type GrpoSequence, type GrpoStepConfig } from '../src/stages/rl/grpo';
import { projectRoot } from '../src/infra/binaries';
import { planStep, SftTrainer, type SftConfig, type TokenizedExample } from '../src/stages/sft/trainer';
import { LoraAdapter } from '../src/model/net/lora';
import { loraTrainable } from '../src/model/net/trainable';
import { LoraSettings } from '../src/kernel/loraSettings';
import { rmSync } from 'node:fs';

const OUT = path.join(projectRoot, 'test', 'fixtures', 'grpo-golden');
export const GOLDEN_MODELS = ['hf-tiny-qwen3', 'hf-tiny-llama-tied'] as const;

/** A deterministic uniform generator (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The batch: six sequences over ids 3..63, spans of policy tokens with advantages of both signs, one of zero. */
export function goldenBatch(): GrpoSequence[] {
  const r = rng(7);
  const seq = (n: number) => Array.from({ length: n }, () => 3 + Math.floor(r() * 61));
  return [
    { tokens: seq(14), spans: [{ start: 0, end: 3, advantage: 0.8 }, { start: 8, end: 14, advantage: 0.8 }] },
    { tokens: seq(11), spans: [{ start: 5, end: 11, advantage: -1.1 }] },
    { tokens: seq(17), spans: [{ start: 6, end: 10, advantage: 1.5 }, { start: 12, end: 17, advantage: 1.5 }] },
    { tokens: seq(9), spans: [{ start: 4, end: 9, advantage: 0 }] },
    { tokens: seq(16), spans: [{ start: 7, end: 16, advantage: -0.4 }] },
    { tokens: seq(12), spans: [{ start: 3, end: 12, advantage: 2.0 }] },
  ];
}

/** The update's settings (both cases; `maxGradNorm` is set per case). */
export const GOLDEN_STEP: Omit<GrpoStepConfig, 'maxGradNorm'> & { weightDecay: number } = {
  lr: 1e-2, klCoef: 0.05, clipLow: 0.2, clipHigh: 0.28, clipRatioC: 3, temperature: 0.7, microBatch: 2, padId: 0, pack: false, weightDecay: 0.1,
};
export const GOLDEN_CASES = { noclip: 1e9, clip: 1 } as const;

type Expected = Map<string, { shape: number[]; data: Float32Array }>;

/**
 * A case's weights and AdamW moments after its update, in HF layout, and (clip off) the pre-clip gradient: AdamW's
 * first moment after one step is (1 − β1)·g.
 */
function recordUpdate(expected: Expected, caseName: string, policy: QwenModel, optimizer: { state(): { m: { get(n: string): Float32Array | undefined }; v: { get(n: string): Float32Array | undefined } } }): void {
  const state = optimizer.state();
  for (const [n, t] of policy.namedWeights()) {
    expected.set(`${caseName}.weight.${n}`, t);
    const m = policy.toHfLayout(n, state.m.get(n)!);
    expected.set(`${caseName}.m.${n}`, { shape: t.shape, data: m });
    expected.set(`${caseName}.v.${n}`, { shape: t.shape, data: policy.toHfLayout(n, state.v.get(n)!) });
    if (caseName === 'noclip') expected.set(`${caseName}.grad.${n}`, { shape: t.shape, data: m.map((x) => x / 0.1) });
  }
}

/** The SFT examples: six dialogues over ids 3..63, trained (assistant) runs of tokens, one longer than maxSeqLen. */
export function goldenSftData(): TokenizedExample[] {
  const r = rng(9);
  const ex = (n: number, runs: [number, number][]) => {
    const ids = Array.from({ length: n }, () => 3 + Math.floor(r() * 61));
    const lossMask = ids.map((_, i) => (runs.some(([a, b]) => i >= a && i < b) ? 1 : 0));
    return { ids, lossMask };
  };
  return [ex(12, [[4, 8], [10, 12]]), ex(9, [[3, 9]]), ex(20, [[5, 9], [13, 20]]), ex(10, [[0, 2], [6, 10]]), ex(15, [[7, 15]]), ex(11, [[2, 5], [8, 11]])];
}

/**
 * One step of three micro-batches of two; maxSeqLen cuts the 20-token example. The clip case bounds the norm (~4.5) at
 * 2.5: a tighter bound brings the smallest embedding gradients (~1e-6 before it) near AdamW's eps, where the first
 * step g/(|g| + eps) turns float rounding of g into visible differences of the update.
 */
export const GOLDEN_SFT_CASES = { noclip: 1e9, clip: 2.5 } as const;

export const GOLDEN_SFT: SftConfig = {
  epochs: 1, microBatch: 2, gradAccum: 3, peakLr: 1e-2, warmupRatio: 0, minLrRatio: 0.1, maxGradNorm: 1e9, weightDecay: 0.1, maxSeqLen: 14, seed: 5, padId: 0,
};

async function goldenSft(dir: string, out: string, name: string): Promise<void> {
  const data = goldenSftData();
  const plan = planStep(GOLDEN_SFT, data.length, 0, { epoch: 0, index: 0 });
  const expected = new Map<string, { shape: number[]; data: Float32Array }>();
  const metrics: Record<string, unknown> = {};
  for (const [caseName, maxGradNorm] of Object.entries(GOLDEN_SFT_CASES)) {
    const policy = loadHfCheckpoint(dir);
    const trainer = new SftTrainer(policy, data, { ...GOLDEN_SFT, maxGradNorm });
    const r = await trainer.step();
    metrics[caseName] = { loss: r.loss, gradNorm: r.gradNorm, tokens: r.tokens, lr: r.lr };
    recordUpdate(expected, caseName, policy, trainer.optimizer);
    trainer.optimizer.dispose();
    policy.dispose();
  }
  writeFileSync(path.join(out, 'sft-expected.safetensors'), serializeSafetensors(expected));
  writeFileSync(path.join(out, 'sft-case.json'), `${JSON.stringify({ model: name, data, settings: GOLDEN_SFT, plan: { lr: plan.lr, micro: plan.micro }, cases: GOLDEN_SFT_CASES, metrics }, null, 2)}\n`);
  console.log(`${out} (sft): ${JSON.stringify(metrics)}`);
}

/** The LoRA case's adapter layout. */
export const GOLDEN_LORA = LoraSettings.parse({ rank: 4, alpha: 8, trainTokens: [5, 9] });

async function goldenLora(dir: string, out: string, name: string, reference: QwenModel, behaviour: QwenModel): Promise<void> {
  // The starting adapter: PEFT's initialisation, then B drawn small and non-zero, written in PEFT's format.
  const adapterDir = path.join(out, 'lora');
  rmSync(adapterDir, { recursive: true, force: true });
  {
    const base = loadHfCheckpoint(dir);
    const fresh = LoraAdapter.create(base, GOLDEN_LORA, 3);
    const r = rng(13);
    const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
    for (const e of fresh.entries()) {
      const data = Float32Array.from(e.data());
      if (e.name.endsWith('lora_B.weight')) for (let i = 0; i < data.length; i++) data[i] = 0.05 * (2 * r() - 1);
      tensors.set(e.name, { shape: [...e.shape], data });
    }
    mkdirSync(adapterDir, { recursive: true });
    writeFileSync(path.join(adapterDir, 'adapter_config.json'), `${JSON.stringify(fresh.configJson(null), null, 2)}\n`);
    writeFileSync(path.join(adapterDir, 'adapter_model.safetensors'), serializeSafetensors(tensors, { format: 'pt' }));
    fresh.dispose();
    base.dispose();
  }
  const expected = new Map<string, { shape: number[]; data: Float32Array }>();
  const metrics: Record<string, unknown> = {};
  const { weightDecay, ...step } = GOLDEN_STEP;
  for (const [caseName, maxGradNorm] of Object.entries(GOLDEN_CASES)) {
    const policy = loadHfCheckpoint(dir);
    const adapter = LoraAdapter.load(policy, adapterDir);
    const trainer = new GrpoTrainer(policy, reference, weightDecay, loraTrainable(adapter));
    const r = await trainer.step(goldenBatch(), { ...step, maxGradNorm }, undefined, behaviour);
    metrics[caseName] = { loss: r.loss, pgLoss: r.pgLoss, kl: r.kl, clipFrac: r.clipFrac, gradNorm: r.gradNorm, policyTokens: r.policyTokens, sequences: r.sequences, activeSequences: r.activeSequences };
    const state = trainer.optimizer.state();
    for (const e of adapter.entries()) {
      const shape = [...e.shape];
      expected.set(`${caseName}.weight.${e.name}`, { shape, data: Float32Array.from(e.data()) });
      const m = Float32Array.from(state.m.get(e.name)!); // the adapter's own layout is HF's (hfTransposed: false)
      expected.set(`${caseName}.m.${e.name}`, { shape, data: m });
      expected.set(`${caseName}.v.${e.name}`, { shape, data: Float32Array.from(state.v.get(e.name)!) });
      if (caseName === 'noclip') expected.set(`${caseName}.grad.${e.name}`, { shape, data: m.map((x) => x / 0.1) });
    }
    trainer.optimizer.dispose();
    adapter.dispose();
    policy.dispose();
  }
  writeFileSync(path.join(out, 'lora-expected.safetensors'), serializeSafetensors(expected));
  writeFileSync(path.join(out, 'lora-case.json'), `${JSON.stringify({ model: name, lora: GOLDEN_LORA, cases: GOLDEN_CASES, metrics }, null, 2)}\n`);
  console.log(`${out} (lora): ${JSON.stringify(metrics)}`);
}

function perturbed(dir: string, scale: number, seed: number): QwenModel {
  const m = loadHfCheckpoint(dir);
  const r = rng(seed);
  const gauss = () => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
  const w = new Map<string, Float32Array>();
  for (const [name, t] of m.namedWeights()) w.set(name, t.data.map((x) => x + scale * gauss()));
  m.assignWeights(w);
  return m;
}

async function main(): Promise<void> {
  await selectBackend('cpu');
  for (const name of GOLDEN_MODELS) {
    const dir = path.join(projectRoot, 'test', 'fixtures', name);
    const out = path.join(OUT, name.replace(/^hf-/, ''));
    mkdirSync(out, { recursive: true });
    const batch = goldenBatch();
    const expected = new Map<string, { shape: number[]; data: Float32Array }>();
    const policy0 = loadHfCheckpoint(dir);
    const behaviour = perturbed(dir, 0.02, 11);
    const reference = perturbed(dir, 0.02, 12);
    for (const [label, m] of [['policy', policy0], ['behaviour', behaviour], ['reference', reference]] as const) {
      writeFileSync(path.join(out, `${label}.safetensors`), serializeSafetensors(m.namedWeights()));
      const c = collateGrpo(batch, GOLDEN_STEP.padId);
      const lp = m.tokenLogprobs(c.ids, c.targets, undefined, GOLDEN_STEP.temperature);
      expected.set(`logp.${label}`, { shape: [...lp.shape], data: lp.dataSync() as Float32Array });
      lp.dispose();
    }
    const metrics: Record<string, unknown> = {};
    for (const [caseName, maxGradNorm] of Object.entries(GOLDEN_CASES)) {
      const policy = loadHfCheckpoint(dir);
      const trainer = new GrpoTrainer(policy, reference, GOLDEN_STEP.weightDecay);
      const { weightDecay: _wd, ...step } = GOLDEN_STEP;
      const r = await trainer.step(batch, { ...step, maxGradNorm }, undefined, behaviour);
      metrics[caseName] = { loss: r.loss, pgLoss: r.pgLoss, kl: r.kl, clipFrac: r.clipFrac, gradNorm: r.gradNorm, policyTokens: r.policyTokens, sequences: r.sequences, activeSequences: r.activeSequences };
      recordUpdate(expected, caseName, policy, trainer.optimizer);
      trainer.optimizer.dispose();
      policy.dispose();
    }
    writeFileSync(path.join(out, 'expected.safetensors'), serializeSafetensors(expected));
    writeFileSync(path.join(out, 'case.json'), `${JSON.stringify({ model: name, batch, step: GOLDEN_STEP, cases: GOLDEN_CASES, beta1: 0.9, beta2: 0.999, eps: 1e-8, metrics }, null, 2)}\n`);
    console.log(`${out}: ${JSON.stringify(metrics)}`);
    await goldenLora(dir, out, name, reference, behaviour);
    for (const m of [policy0, behaviour, reference]) m.dispose();
    await goldenSft(dir, out, name);
  }
}

if (require.main === module) void main();
