/**
 * Where a training step's time goes on native TensorFlow: the decoder stack's forward and backward graph runs
 * (src/model/net/trainGraph.ts), the rest of the loss (embedding, final norm, LM head + cross-entropy, run eagerly), and
 * the AdamW update; then the same step with the graphs off (CM2_TF_GRAPH=0: layer by layer, eagerly).
 *
 *   npx tsx bench/train-phases.ts [--sizes tiny,small,demo] [--steps 4]
 *
 * Sizes are model-throughput.ts's (random-init Qwen3, tied embeddings, the same B × T). Times are ms per step, the mean
 * of the timed steps after two untimed ones (the first builds the graphs).
 */
import { parseArgs } from 'node:util';
import * as tf from '@tensorflow/tfjs';
import { selectBackend } from '../src/model/net/backend';
import type { QwenConfig } from '../src/model/net/qwenConfig';
import { QwenModel } from '../src/model/net/qwen';
import { StackGraph } from '../src/model/net/trainGraph';
import { AdamW } from '../src/model/optim/adamw';

const SIZES: Record<string, { hidden: number; layers: number; vocab: number; seq: number; batch: number }> = {
  tiny: { hidden: 128, layers: 4, vocab: 512, seq: 256, batch: 8 },
  small: { hidden: 256, layers: 6, vocab: 2048, seq: 512, batch: 4 },
  demo: { hidden: 192, layers: 4, vocab: 1024, seq: 512, batch: 4 },
};

type Phase = 'forward graph' | 'backward graph' | 'rest of the loss' | 'AdamW' | 'step';

const spent: Record<Phase, number> = { 'forward graph': 0, 'backward graph': 0, 'rest of the loss': 0, AdamW: 0, step: 0 };

/** Counts the time spent in StackGraph's two runs. */
function instrument(): void {
  for (const [method, phase] of [['runForward', 'forward graph'], ['runBackward', 'backward graph']] as const) {
    const original = StackGraph.prototype[method] as (...args: unknown[]) => tf.Tensor[];
    (StackGraph.prototype as unknown as Record<string, unknown>)[method] = function (this: StackGraph, ...args: unknown[]): tf.Tensor[] {
      const t0 = performance.now();
      try {
        return original.apply(this, args);
      } finally {
        spent[phase] += performance.now() - t0;
      }
    };
  }
}

function measure(name: string, graphs: boolean, steps: number): Record<Phase, number> {
  const s = SIZES[name]!;
  if (graphs) delete process.env.CM2_TF_GRAPH;
  else process.env.CM2_TF_GRAPH = '0';
  const config: QwenConfig = {
    model_type: 'qwen3', vocab_size: s.vocab, hidden_size: s.hidden, intermediate_size: 3 * s.hidden, num_hidden_layers: s.layers,
    num_attention_heads: 4, num_key_value_heads: 2, head_dim: s.hidden / 4, tie_word_embeddings: true, rope_theta: 1e6,
    rms_norm_eps: 1e-6, max_position_embeddings: 4096, hidden_act: 'silu', initializer_range: 0.02,
  };
  const model = QwenModel.init(config, 0);
  const vars = model.namedVariables();
  const opt = new AdamW(vars, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 });
  const ids = Array.from({ length: s.batch }, (_, b) => Array.from({ length: s.seq }, (_, i) => (i * 7 + b * 13) % s.vocab));
  const targets = ids.map((r) => r.map((x) => (x * 3 + 1) % s.vocab));
  const mask = ids.map((r) => r.map(() => 1));
  const last = [...vars.values()].at(-1)!;
  for (let i = 0; i < steps + 2; i++) {
    if (i === 2) for (const k of Object.keys(spent) as Phase[]) spent[k] = 0;
    const graphBefore = spent['forward graph'] + spent['backward graph'];
    const t0 = performance.now();
    const { value, grads } = tf.variableGrads(() => model.loss(ids, targets, mask), [...vars.values()]);
    value.dataSync();
    const t1 = performance.now();
    opt.apply(new Map([...vars].map(([n, v]) => [n, grads[v.name]!])), 1e-4, 1.0);
    tf.dispose([value, ...Object.values(grads)]);
    last.dataSync();
    const t2 = performance.now();
    spent['rest of the loss'] += t1 - t0 - (spent['forward graph'] + spent['backward graph'] - graphBefore);
    spent.AdamW += t2 - t1;
    spent.step += t2 - t0;
  }
  model.dispose();
  return Object.fromEntries((Object.keys(spent) as Phase[]).map((k) => [k, spent[k] / steps])) as Record<Phase, number>;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { sizes: { type: 'string', default: 'tiny,small,demo' }, steps: { type: 'string', default: '4' } } });
  const backend = await selectBackend('auto', (l) => console.error(l));
  if (!backend.startsWith('tfjs-node')) throw new Error(`the training graphs need the native backend (active: ${backend})`);
  instrument();
  const steps = Number(values.steps);
  const rows = [
    '| size (B × T) | forward graph | backward graph | rest of the loss | AdamW | step | tok/s | eager step | eager tok/s |',
    '|---|---|---|---|---|---|---|---|---|',
  ];
  for (const name of values.sizes.split(',').map((x) => x.trim()).filter(Boolean)) {
    if (!SIZES[name]) throw new Error(`unknown size ${name} (${Object.keys(SIZES).join(', ')})`);
    const { batch, seq } = SIZES[name]!;
    const g = measure(name, true, steps);
    const e = measure(name, false, steps);
    const f = (x: number): string => x.toFixed(1);
    const rate = (ms: number): string => Math.round((batch * seq) / (ms / 1000)).toLocaleString('en-US');
    rows.push(`| ${name} (${batch} × ${seq}) | ${f(g['forward graph'])} | ${f(g['backward graph'])} | ${f(g['rest of the loss'])} | ${f(g.AdamW)} | ${f(g.step)} | ${rate(g.step)} | ${f(e.step)} | ${rate(e.step)} |`);
  }
  delete process.env.CM2_TF_GRAPH;
  console.log(`ms per training step (mean of ${steps} after 2 untimed), backend ${backend}`);
  console.log(rows.join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
