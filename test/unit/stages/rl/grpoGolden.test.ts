/**
 * The GRPO update against its golden fixture (test/fixtures/grpo-golden, scripts/make-grpo-golden.ts; issue 32 item 3),
 * on each tfjs backend: per-token log-probabilities of the three policies at the temperature, the update's metrics, the
 * pre-clip gradient (clip off), the weights and AdamW moments after the update with the clip off and on. The PyTorch
 * worker is checked against the same files (python/cm2_torch/tests). The same for one cold-start SFT step (sft-case.json)
 * and for the update training LoRA adapters (lora-case.json).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { selectBackend } from '../../../../src/model/net/backend';
import { QwenModel } from '../../../../src/model/net/qwen';
import { readHfConfig } from '../../../../src/model/formats/checkpoint';
import { parseSafetensors } from '../../../../src/model/formats/safetensors';
import { collateGrpo, GrpoTrainer, type GrpoSequence } from '../../../../src/stages/rl/grpo';
import { projectRoot } from '../../../../src/infra/binaries';
import { planStep, SftTrainer, type SftConfig } from '../../../../src/stages/sft/trainer';
import { LoraAdapter } from '../../../../src/model/net/lora';
import { loraTrainable } from '../../../../src/model/net/trainable';
import { exactnessBackends } from '../../../helpers/env';

const GOLDEN = path.join(projectRoot, 'test', 'fixtures', 'grpo-golden');
const Case = z.object({
  model: z.string(),
  batch: z.array(z.object({ tokens: z.array(z.number()), spans: z.array(z.object({ start: z.number(), end: z.number(), advantage: z.number() })) })),
  step: z.looseObject({ weightDecay: z.number(), lr: z.number(), klCoef: z.number(), clipLow: z.number(), clipHigh: z.number(), clipRatioC: z.number(), temperature: z.number(), microBatch: z.number(), padId: z.number(), pack: z.boolean() }),
  cases: z.record(z.string(), z.number()),
  metrics: z.record(z.string(), z.record(z.string(), z.number())),
});

const load = (dir: string, file: string, configDir: string): QwenModel => {
  const tensors = parseSafetensors(readFileSync(path.join(dir, file))).tensors;
  return QwenModel.fromLoader(readHfConfig(configDir), (name) => tensors.get(name)!.data);
};

/** Largest |a − b| / (atol + rtol·|b|) over the values: ≤ 1 passes. */
function assertClose(actual: ArrayLike<number>, expected: ArrayLike<number>, atol: number, rtol: number, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  let worst = 0;
  let at = 0;
  for (let i = 0; i < expected.length; i++) {
    const r = Math.abs(actual[i]! - expected[i]!) / (atol + rtol * Math.abs(expected[i]!));
    if (r > worst) [worst, at] = [r, i];
  }
  assert.ok(worst <= 1, `${what}: value ${at} is ${actual[at]}, expected ${expected[at]} (atol ${atol}, rtol ${rtol})`);
}

for (const backend of exactnessBackends()) for (const name of ['tiny-qwen3', 'tiny-llama-tied']) {
  test(`GRPO update equals its golden fixture [${name}, ${backend}]`, async () => {
    await selectBackend(backend);
    const dir = path.join(GOLDEN, name);
    const c = Case.parse(JSON.parse(readFileSync(path.join(dir, 'case.json'), 'utf8')));
    const configDir = path.join(projectRoot, 'test', 'fixtures', c.model);
    const expected = parseSafetensors(readFileSync(path.join(dir, 'expected.safetensors'))).tensors;
    const batch: GrpoSequence[] = c.batch;
    const behaviour = load(dir, 'behaviour.safetensors', configDir);
    const reference = load(dir, 'reference.safetensors', configDir);
    const { weightDecay, ...step } = c.step;
    const rows = collateGrpo(batch, step.padId);
    for (const [label, m] of [['policy', load(dir, 'policy.safetensors', configDir)], ['behaviour', behaviour], ['reference', reference]] as const) {
      const lp = m.tokenLogprobs(rows.ids, rows.targets, undefined, step.temperature);
      assertClose(lp.dataSync(), expected.get(`logp.${label}`)!.data, 2e-5, 2e-5, `logp.${label}`);
      lp.dispose();
      if (label === 'policy') m.dispose();
    }
    for (const [caseName, maxGradNorm] of Object.entries(c.cases)) {
      const policy = load(dir, 'policy.safetensors', configDir);
      const trainer = new GrpoTrainer(policy, reference, weightDecay);
      const r = await trainer.step(batch, { ...step, maxGradNorm }, undefined, behaviour);
      const want = c.metrics[caseName]!;
      for (const k of ['loss', 'pgLoss', 'kl', 'clipFrac', 'gradNorm']) assertClose([r[k as keyof typeof r] as number], [want[k]!], 1e-5, 1e-4, `${caseName}.${k}`);
      assert.deepEqual([r.policyTokens, r.sequences, r.activeSequences], [want['policyTokens'], want['sequences'], want['activeSequences']]);
      const state = trainer.optimizer.state();
      for (const [n, t] of policy.namedWeights()) {
        assertClose(t.data, expected.get(`${caseName}.weight.${n}`)!.data, 1e-5, 1e-4, `${caseName}.weight.${n}`);
        // The moments scale with the gradient (m ~ 0.1·g, v ~ 0.001·g²): relative tolerance with a small floor.
        assertClose(policy.toHfLayout(n, state.m.get(n)!), expected.get(`${caseName}.m.${n}`)!.data, 1e-6, 1e-3, `${caseName}.m.${n}`);
        assertClose(policy.toHfLayout(n, state.v.get(n)!), expected.get(`${caseName}.v.${n}`)!.data, 1e-8, 2e-3, `${caseName}.v.${n}`);
      }
      trainer.optimizer.dispose();
      policy.dispose();
    }
    behaviour.dispose();
    reference.dispose();
  });
}

const SftCase = z.object({
  model: z.string(),
  data: z.array(z.object({ ids: z.array(z.number()), lossMask: z.array(z.number()) })),
  settings: z.looseObject({ maxSeqLen: z.number(), padId: z.number(), microBatch: z.number(), gradAccum: z.number(), weightDecay: z.number() }),
  plan: z.object({ lr: z.number(), micro: z.array(z.array(z.number())) }),
  cases: z.record(z.string(), z.number()),
  metrics: z.record(z.string(), z.record(z.string(), z.number())),
});

for (const backend of exactnessBackends()) for (const name of ['tiny-qwen3', 'tiny-llama-tied']) {
  test(`SFT step equals its golden fixture [${name}, ${backend}]`, async () => {
    await selectBackend(backend);
    const dir = path.join(GOLDEN, name);
    const c = SftCase.parse(JSON.parse(readFileSync(path.join(dir, 'sft-case.json'), 'utf8')));
    const configDir = path.join(projectRoot, 'test', 'fixtures', c.model);
    const expected = parseSafetensors(readFileSync(path.join(dir, 'sft-expected.safetensors'))).tensors;
    const settings = c.settings as unknown as SftConfig;
    // the plan the fixture records is the one the trainer follows (what a PyTorch worker reads from plan.json)
    const plan = planStep(settings, c.data.length, 0, { epoch: 0, index: 0 });
    assert.deepEqual(plan.micro, c.plan.micro);
    assert.equal(plan.lr, c.plan.lr);
    for (const [caseName, maxGradNorm] of Object.entries(c.cases)) {
      const policy = load(dir, 'policy.safetensors', configDir);
      const trainer = new SftTrainer(policy, c.data, { ...settings, maxGradNorm });
      const r = await trainer.step();
      const want = c.metrics[caseName]!;
      for (const k of ['loss', 'gradNorm'] as const) assertClose([r[k]], [want[k]!], 1e-5, 1e-4, `sft.${caseName}.${k}`);
      assert.equal(r.tokens, want['tokens']);
      const state = trainer.optimizer.state();
      for (const [n, t] of policy.namedWeights()) {
        assertClose(t.data, expected.get(`${caseName}.weight.${n}`)!.data, 1e-5, 1e-4, `sft.${caseName}.weight.${n}`);
        assertClose(policy.toHfLayout(n, state.m.get(n)!), expected.get(`${caseName}.m.${n}`)!.data, 1e-6, 1e-3, `sft.${caseName}.m.${n}`);
        assertClose(policy.toHfLayout(n, state.v.get(n)!), expected.get(`${caseName}.v.${n}`)!.data, 1e-8, 2e-3, `sft.${caseName}.v.${n}`);
      }
      trainer.optimizer.dispose();
      policy.dispose();
    }
  });
}

const LoraCase = z.object({ model: z.string(), cases: z.record(z.string(), z.number()), metrics: z.record(z.string(), z.record(z.string(), z.number())) });

for (const backend of exactnessBackends()) for (const name of ['tiny-qwen3', 'tiny-llama-tied']) {
  test(`GRPO update of LoRA adapters equals its golden fixture [${name}, ${backend}]`, async () => {
    await selectBackend(backend);
    const dir = path.join(GOLDEN, name);
    const c = Case.parse(JSON.parse(readFileSync(path.join(dir, 'case.json'), 'utf8')));
    const lc = LoraCase.parse(JSON.parse(readFileSync(path.join(dir, 'lora-case.json'), 'utf8')));
    const configDir = path.join(projectRoot, 'test', 'fixtures', c.model);
    const expected = parseSafetensors(readFileSync(path.join(dir, 'lora-expected.safetensors'))).tensors;
    const behaviour = load(dir, 'behaviour.safetensors', configDir);
    const reference = load(dir, 'reference.safetensors', configDir);
    const { weightDecay, ...step } = c.step;
    for (const [caseName, maxGradNorm] of Object.entries(lc.cases)) {
      const policy = load(dir, 'policy.safetensors', configDir);
      const adapter = LoraAdapter.load(policy, path.join(dir, 'lora'));
      const trainer = new GrpoTrainer(policy, reference, weightDecay, loraTrainable(adapter));
      const r = await trainer.step(c.batch, { ...step, maxGradNorm }, undefined, behaviour);
      const want = lc.metrics[caseName]!;
      for (const k of ['loss', 'pgLoss', 'kl', 'clipFrac', 'gradNorm']) assertClose([r[k as keyof typeof r] as number], [want[k]!], 1e-5, 1e-4, `lora.${caseName}.${k}`);
      const state = trainer.optimizer.state();
      let n = 0;
      for (const e of adapter.entries()) {
        assertClose(e.data(), expected.get(`${caseName}.weight.${e.name}`)!.data, 1e-5, 1e-4, `lora.${caseName}.weight.${e.name}`);
        assertClose(state.m.get(e.name)!, expected.get(`${caseName}.m.${e.name}`)!.data, 1e-6, 1e-3, `lora.${caseName}.m.${e.name}`);
        assertClose(state.v.get(e.name)!, expected.get(`${caseName}.v.${e.name}`)!.data, 1e-8, 2e-3, `lora.${caseName}.v.${e.name}`);
        n++;
      }
      assert.equal(n, [...expected.keys()].filter((k) => k.startsWith(`${caseName}.weight.`)).length);
      trainer.optimizer.dispose();
      adapter.dispose();
      policy.dispose();
    }
    behaviour.dispose();
    reference.dispose();
  });
}
