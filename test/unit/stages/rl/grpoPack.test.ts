/**
 * Shared-prefix training (issue 29, item 4): a micro-batch whose sequences share a prompt is packed into one row, the
 * prompt computed once (src/stages/rl/grpo.ts packGrpo, segments in the attention bias). The loss, the gradient norm
 * and the updated weights equal one row per sequence, on wasm/cpu's path and on native TensorFlow (stack graph and
 * layer by layer); zero-advantage sequences are skipped without changing the token mean.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs';
import type { QwenConfig } from '../../../../src/model/net/qwenConfig';
import { QwenModel } from '../../../../src/model/net/qwen';
import { Rng } from '../../../../src/model/net/random';
import { GrpoTrainer, microBatches, packGrpo, rowPositions, type GrpoSequence, type GrpoStepConfig } from '../../../../src/stages/rl/grpo';
import { activateBackend, skipBackend } from '../../../helpers/testBackend';

const config: QwenConfig = {
  model_type: 'qwen3', vocab_size: 64, hidden_size: 16, intermediate_size: 24, num_hidden_layers: 2, num_attention_heads: 4,
  num_key_value_heads: 2, head_dim: 4, rms_norm_eps: 1e-6, rope_theta: 10000, tie_word_embeddings: false,
  max_position_embeddings: 512, hidden_act: 'silu', initializer_range: 0.3,
};
const rng = new Rng(9);
const ids = (n: number) => Array.from({ length: n }, () => 1 + Math.floor(rng.next() * 60));

/** Group A: 3 samples of a 13-token prompt (two turns with a tool result between; different lengths); group B: 2 of a 7-token prompt; a lone sequence. */
function makeBatch(): GrpoSequence[] {
  const out: GrpoSequence[] = [];
  const pa = ids(13);
  for (const [k, lens] of [[7, 4], [3, 9], [5, 2]].entries()) {
    const [g1, tool, g2] = [ids(lens[0]!), ids(3), ids(lens[1]!)];
    const tokens = [...pa, ...g1, ...tool, ...g2];
    out.push({ tokens, spans: [{ start: 13, end: 13 + g1.length, advantage: [0.5, -1, 0.25][k]! }, { start: 16 + g1.length, end: tokens.length, advantage: [0.5, -1, 0.7][k]! }] });
  }
  const pb = ids(7);
  out.push({ tokens: [...pb, ...ids(6)], spans: [{ start: 7, end: 13, advantage: 1 }] });
  out.push({ tokens: [...pb, ...ids(4)], spans: [{ start: 7, end: 11, advantage: -1 }] });
  out.push({ tokens: ids(10), spans: [{ start: 4, end: 10, advantage: 0.3 }] });
  out.push({ tokens: [...pb, ...ids(5)], spans: [{ start: 7, end: 12, advantage: 0 }] });
  return out;
}
const BATCH = makeBatch();
const batch = () => BATCH;

const cfg: GrpoStepConfig = { lr: 1e-3, klCoef: 0, clipLow: 0.2, clipHigh: 0.2, clipRatioC: 3, maxGradNorm: 100, microBatch: 4, padId: 0, temperature: 0.8 };

async function update(pack: boolean, klCoef: number) {
  const model = QwenModel.init(config, 4);
  const reference = klCoef > 0 ? QwenModel.init(config, 5) : undefined;
  const trainer = new GrpoTrainer(model, reference, 0.01);
  const m = await trainer.step(batch(), { ...cfg, klCoef, pack });
  trainer.optimizer.dispose();
  const weights = new Map([...model.namedWeights()].map(([k, v]) => [k, Float32Array.from(v.data)]));
  model.dispose();
  reference?.dispose();
  return { m, weights };
}

test('packGrpo: shared prompts once, each sequence from its prompt\'s last token, positions and segments', () => {
  const b = batch().slice(0, 4);
  const rows = packGrpo(b, 0);
  assert.equal(rows.ids.length, 2, 'group A in one row, group B\'s first sequence in another');
  const seg = rows.pack!.segments[0]!;
  assert.equal(seg.filter((s) => s === 0).length >= 12, true);
  assert.deepEqual([...new Set(seg)].sort(), [0, 1, 2, 3]);
  // Sequence 2 of group A starts at position 12 (the prompt's last token), after the 12 shared tokens and sequence 1.
  const start2 = seg.indexOf(2);
  assert.equal(rows.pack!.positions[0]![start2], 12);
  assert.equal(rows.ids[0]![start2], b[1]!.tokens[12]);
  assert.equal(rows.tokens, b.reduce((n, s) => n + s.spans.reduce((m, sp) => m + sp.end - sp.start, 0), 0));
  assert.equal(rows.mask.flat().filter(Boolean).length, rows.tokens);
});

test('microBatches: in order, at most microBatch sequences and, with a budget, at most that many positions once packed; an oversize sequence alone', () => {
  const b = batch();
  const pack = (part: readonly GrpoSequence[]) => packGrpo(part, 0);
  const rowsOf = (parts: ReturnType<typeof microBatches>) => parts.map((r) => r.ids.length);
  // without a budget: microBatch alone (4 + 3)
  const free = microBatches(b, 4, undefined, pack);
  assert.equal(free.length, 2);
  assert.equal(free.reduce((n, r) => n + r.tokens, 0), b.reduce((n, s) => n + s.spans.reduce((m, sp) => m + sp.end - sp.start, 0), 0), 'every policy token once');
  // group A packed (3 sequences of a 13-token prompt) is 12 + (8+4+3+...) positions; a budget below it splits the group
  const whole = rowPositions(packGrpo(b.slice(0, 3), 0));
  const two = rowPositions(packGrpo(b.slice(0, 2), 0));
  const split = microBatches(b.slice(0, 3), 8, two, pack);
  assert.ok(whole > two);
  assert.equal(split.length, 2, `a budget of ${two} positions holds two of group A, not three (${whole})`);
  assert.ok(split.every((r) => rowPositions(r) <= two));
  // every micro-batch within the budget, except a sequence that alone exceeds it
  const tiny = microBatches(b, 8, 5, pack);
  assert.equal(tiny.length, b.length, 'each sequence alone');
  assert.deepEqual(rowsOf(tiny), b.map(() => 1));
  const budget = 40;
  for (const r of microBatches(b, 8, budget, pack)) assert.ok(rowPositions(r) <= budget || r.ids.length === 1, `${rowPositions(r)} positions`);
});

test('a position budget splits the update, not what it computes: the same loss, gradient norm and weights', async () => {
  const run = async (microBatchTokens?: number) => {
    const model = QwenModel.init(config, 4);
    const trainer = new GrpoTrainer(model, undefined, 0.01);
    const m = await trainer.step(batch(), { ...cfg, microBatch: 8, ...(microBatchTokens ? { microBatchTokens } : {}) });
    trainer.optimizer.dispose();
    const weights = new Map([...model.namedWeights()].map(([k, v]) => [k, Float32Array.from(v.data)]));
    model.dispose();
    return { m, weights };
  };
  assert.equal(microBatches(batch(), 8, undefined, (p) => packGrpo(p, 0)).length, 1);
  assert.ok(microBatches(batch(), 8, 30, (p) => packGrpo(p, 0)).length >= 4, 'the budget splits the update');
  const a = await run();
  const c = await run(30);
  const rel = (x: number, y: number) => Math.abs(x - y) / Math.max(1e-12, Math.abs(x));
  assert.ok(rel(a.m.loss, c.m.loss) < 1e-4 && rel(a.m.gradNorm, c.m.gradNorm) < 1e-4, `${a.m.loss}/${c.m.loss}, ${a.m.gradNorm}/${c.m.gradNorm}`);
  let worst = 0;
  for (const [k, w] of a.weights) w.forEach((x, i) => (worst = Math.max(worst, Math.abs(x - c.weights.get(k)![i]!))));
  assert.ok(worst < 0.2 * cfg.lr, `weights differ by up to ${worst}`);
});

const modes: Array<[string, 'cpu' | 'native', boolean]> = [['cpu', 'cpu', false], ['native, stack graph', 'native', true], ['native, layer by layer', 'native', false]];
for (const [label, backend, graphs] of modes) {
  describe(`packed GRPO update (${label})`, { skip: skipBackend(backend) }, () => {
    let previous = 'cpu';
    let savedGraph: string | undefined;
    before(async () => {
      savedGraph = process.env.CM2_TF_GRAPH;
      if (graphs) delete process.env.CM2_TF_GRAPH;
      else process.env.CM2_TF_GRAPH = '0';
      previous = await activateBackend(backend);
    });
    after(async () => {
      if (savedGraph === undefined) delete process.env.CM2_TF_GRAPH;
      else process.env.CM2_TF_GRAPH = savedGraph;
      await tf.setBackend(previous);
    });
    for (const kl of [0, 0.05]) {
      test(`packed = one row per sequence: loss, gradient norm, updated weights (KL ${kl})`, async () => {
        const a = await update(false, kl);
        const b = await update(true, kl);
        const rel = (x: number, y: number) => Math.abs(x - y) / Math.max(1e-12, Math.abs(x));
        assert.ok(rel(a.m.loss, b.m.loss) < 1e-4, `loss ${a.m.loss} vs ${b.m.loss}`);
        assert.ok(rel(a.m.gradNorm, b.m.gradNorm) < 1e-4, `grad norm ${a.m.gradNorm} vs ${b.m.gradNorm}`);
        assert.equal(a.m.policyTokens, b.m.policyTokens);
        let worst = 0;
        for (const [k, w] of a.weights) w.forEach((x, i) => (worst = Math.max(worst, Math.abs(x - b.weights.get(k)![i]!))));
        assert.ok(worst < 0.2 * cfg.lr, `weights differ by up to ${worst}`);
      });
    }
  });
}
