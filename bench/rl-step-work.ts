/**
 * The model work of one RL step on config/smollm2.yaml's shapes, done the way the code before issue 29 did and the
 * way it does now: rollouts (items 1–2: tokens prefilled, tokens decoded, seconds, peak RSS) and the GRPO update
 * (item 4: one row per sequence vs a group's prompt once; positions computed, seconds, peak RSS), full fine-tuning
 * and LoRA (item 5), and the bytes and seconds of the checkpoint files each writes.
 *
 * - before: each round, the live episodes in calls of at most `maxBatchTokens` prompt tokens, one after the other,
 *   each call prefilling every episode's whole context (`generateAsync`, as src/stages/rl/rollout.ts did);
 * - after: one decoding loop per round (src/model/net/decodePool.ts): a group's prompt prefilled once, the next round
 *   feeding only the new tokens.
 *
 * Two rounds, as an episode with one tool call: round 0 from the prompt, round 1 after a `--delta`-token tool result.
 * The policy is SmolLM2-135M's shape with random weights (`--model DIR` loads an HF folder instead), so no sequence
 * stops early: every episode generates `--new-tokens` per round (the worst case; a real policy stops sooner, which
 * shrinks decoding, not prefill). Prompts are random ids of `--prompt-tokens` (±10 %).
 *
 * The update trains the rollouts of the "after" pass (the two generations of each episode are its policy tokens,
 * advantages ±1 by member), with a KL term against a frozen copy (klCoef 1e-3, as config/smollm2.yaml), micro-batches
 * of `--micro-batch` sequences (smollm2.yaml: 2; packing shares a prompt within a micro-batch, so 8 packs a group).
 *
 *   npx tsx bench/rl-step-work.ts [--part rollout|train|both] [--prompts 4] [--group 8] [--prompt-tokens 850] [--new-tokens 160] [--delta 60] [--max-batch-tokens 16384] [--micro-batch 2,8] [--lora 0,8] [--pack both|on|off] [--variants 0:2:off,0:8:on,8:8:on] [--model DIR]
 *
 * `--lora 0,8` trains with full fine-tuning (0) and with rank-8 LoRA on the seven projections (alpha 16); each
 * variant also writes its checkpoint's files to a temp folder (weights + moments, or adapter + moments) and times it.
 */
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/model/net/backend';
import { loadHfCheckpoint } from '../src/model/formats/checkpoint';
import { SMOLLM2_SHAPE } from './smollm2Shape';
import { DecodePool } from '../src/model/net/decodePool';
import { generateAsync } from '../src/model/net/generate';
import { QwenModel } from '../src/model/net/qwen';
import { Rng } from '../src/model/net/random';
import { GrpoTrainer, type GrpoSequence } from '../src/stages/rl/grpo';
import { LoraAdapter, LoraSettings } from '../src/model/net/lora';
import { loraTrainable } from '../src/model/net/trainable';
import { writeCheckpointFiles } from '../src/storage/policyStore';
import { serializeTensors } from '../src/model/formats/safetensorsWrite';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';


async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      prompts: { type: 'string', default: '4' },
      group: { type: 'string', default: '8' },
      'prompt-tokens': { type: 'string', default: '850' },
      'new-tokens': { type: 'string', default: '160' },
      delta: { type: 'string', default: '60' },
      'max-batch-tokens': { type: 'string', default: '16384' },
      model: { type: 'string' },
      only: { type: 'string' },
      part: { type: 'string', default: 'both' },
      'micro-batch': { type: 'string', default: '2,8' },
      /** adapter ranks to train with; 0 = full fine-tuning */
      lora: { type: 'string', default: '0' },
      /** packing: both (one row per sequence, then packed), on, off */
      pack: { type: 'string', default: 'both' },
      /** exactly these variants instead: rank:micro:on|off, comma-separated (e.g. 0:2:off,0:8:on,8:8:on) */
      variants: { type: 'string' },
    },
  });
  const [P, G, L, N, D, M] = [values.prompts, values.group, values['prompt-tokens'], values['new-tokens'], values.delta, values['max-batch-tokens']].map(Number) as [number, number, number, number, number, number];
  const backend = await selectBackend();
  const model = values.model ? loadHfCheckpoint(values.model) : QwenModel.init(SMOLLM2_SHAPE, 1);
  const V = model.dims.vocab;
  const rng = new Rng(3);
  const ids = (n: number) => Array.from({ length: n }, () => 10 + Math.floor(rng.next() * (V - 10)));
  const prompts = Array.from({ length: P }, () => ids(Math.round(L * (0.9 + 0.2 * rng.next()))));
  const deltas = Array.from({ length: P * G }, () => ids(D));
  const rows = prompts.flatMap((p, i) => Array.from({ length: G }, (_, m) => ({ key: `${i}#${m}`, tokens: p, seed: 100 * i + m })));
  console.log(`rollout bench: ${P} prompts × ${G} samples, prompts ~${L} tokens, ${N} new tokens per round, tool result ${D} tokens; backend ${backend}; ${cpus().length} × ${cpus()[0]?.model.trim()}; load ${loadavg()[0]!.toFixed(1)}`);

  // RSS sampled between decoding steps and micro-batches (the work itself holds the event loop).
  let peak = 0;
  const sample = () => (peak = Math.max(peak, process.memoryUsage().rss));
  const sampler = setInterval(sample, 200);
  const results: Record<string, { prefilled: number[]; decoded: number[]; seconds: number[]; peakMiB: number }> = {};

  const before = async () => {
    const out = { prefilled: [] as number[], decoded: [] as number[], seconds: [] as number[], peakMiB: 0 };
    let contexts = rows.map((r) => [...r.tokens]);
    for (let round = 0; round < 2; round++) {
      const t0 = Date.now();
      // As rollout.ts did: calls of at most M prompt tokens, each a whole prefill.
      const chunks: number[][] = [];
      let used = Infinity;
      contexts.forEach((c, b) => {
        if (used + c.length > M || chunks.length === 0) {
          chunks.push([]);
          used = 0;
        }
        chunks[chunks.length - 1]!.push(b);
        used += c.length;
      });
      const gen: number[][] = [];
      for (const chunk of chunks) {
        const r = await generateAsync(model, chunk.map((b) => contexts[b]!), { maxNewTokens: N, temperature: 1, seeds: chunk.map((b) => rows[b]!.seed + round), padId: 0, onStep: sample, yieldEvery: 1 });
        chunk.forEach((b, k) => (gen[b] = r.tokens[k]!));
      }
      out.seconds.push((Date.now() - t0) / 1000);
      out.prefilled.push(contexts.reduce((n, c) => n + c.length, 0));
      out.decoded.push(gen.reduce((n, g) => n + g.length, 0));
      contexts = contexts.map((c, b) => [...c, ...gen[b]!, ...deltas[b]!]);
    }
    return out;
  };

  const after = async () => {
    const out = { prefilled: [] as number[], decoded: [] as number[], seconds: [] as number[], peakMiB: 0 };
    const pool = new DecodePool(model, 2048 * 2 ** 20);
    let contexts = rows.map((r) => [...r.tokens]);
    for (let round = 0; round < 2; round++) {
      const t0 = Date.now();
      const c0 = { ...pool.counts };
      const r = await pool.decode(rows.map((row, b) => ({ key: row.key, tokens: contexts[b]!, maxNewTokens: N, seed: row.seed + round })), { temperature: 1, padId: 0, prefillChunkTokens: 4096, onStep: sample, yieldEvery: 1 });
      samplerLogprobs[round] = r.logprobs;
      out.seconds.push((Date.now() - t0) / 1000);
      const c1 = pool.counts;
      // Prefilled: the prefill pieces plus the last context token each row feeds first.
      out.prefilled.push(c1.prefilled - c0.prefilled + rows.length);
      out.decoded.push(r.tokens.reduce((n, g) => n + g.length, 0));
      if (round === 1) {
        trainOn = contexts.map((c, b) => {
          const start1 = rows[b]!.tokens.length;
          const end1 = start1 + N;
          const tokens = [...c, ...r.tokens[b]!];
          return { tokens, spans: [{ start: start1, end: end1, advantage: b % 2 ? 1 : -1 }, { start: c.length, end: tokens.length, advantage: b % 2 ? 1 : -1 }], sampled: [...samplerLogprobs[0]![b]!, ...r.logprobs[b]!] };
        });
      }
      contexts = contexts.map((c, b) => [...c, ...r.tokens[b]!, ...deltas[b]!]);
    }
    pool.dispose();
    return out;
  };

  let trainOn: GrpoSequence[] = [];
  const samplerLogprobs: number[][][] = [];
  for (const [name, run] of [['before', before], ['after', after]] as const) {
    if (values.part === 'train' && name === 'before') continue;
    if (values.only && values.only !== name) continue;
    peak = 0;
    const r = await run();
    r.peakMiB = peak / 2 ** 20;
    results[name] = r;
    console.log(`${name}: prefilled ${r.prefilled.join(' + ')} tokens, decoded ${r.decoded.join(' + ')}, ${r.seconds.map((s) => s.toFixed(1)).join(' + ')} s, peak RSS ${r.peakMiB.toFixed(0)} MiB (load ${loadavg()[0]!.toFixed(1)})`);
  }
  const b = results['before'];
  const a = results['after'];
  const rolloutRow = a && b;
  if (values.part !== 'rollout' && trainOn.length) {
    const params = model.numParams();
    console.log(`\ntraining ${trainOn.length} sequences of ~${Math.round(trainOn.reduce((n, q) => n + q.tokens.length, 0) / trainOn.length)} tokens, ${trainOn.reduce((n, q) => n + q.spans.reduce((m, sp) => m + sp.end - sp.start, 0), 0)} policy tokens, ${params.toLocaleString('en-US')} parameters`);
    const reference = values.model ? loadHfCheckpoint(values.model) : QwenModel.init(SMOLLM2_SHAPE, 1);
    // Every (rank, micro-batch, packing) of the lists, or exactly those of --variants (rank:micro:on|off, …).
    const variants: [number, number, boolean][] = values.variants
      ? values.variants.split(',').map((v) => {
        const [r, mb, p] = v.split(':');
        return [Number(r), Number(mb), p === 'on'] as [number, number, boolean];
      })
      : values.lora!.split(',').map(Number).flatMap((r) => values['micro-batch']!.split(',').map(Number).flatMap((mb) =>
        (values.pack === 'both' ? [false, true] : [values.pack === 'on']).map((p) => [r, mb, p] as [number, number, boolean])));
    for (const [rank, micro, pack] of variants) {
      peak = 0;
      const adapter = rank > 0 ? LoraAdapter.create(model, LoraSettings.parse({ rank, alpha: 2 * rank }), 1) : undefined;
      const trainer = new GrpoTrainer(model, reference, 0, adapter ? loraTrainable(adapter) : undefined);
      const t0 = Date.now();
      // lr 0: every variant starts from the weights that sampled (the time of the update is the same).
      const m = await trainer.step(trainOn, { lr: 0, klCoef: 1e-3, clipLow: 0.2, clipHigh: 0.2, clipRatioC: 3, maxGradNorm: 1, microBatch: micro, padId: 0, temperature: 1, pack }, () => (peak = Math.max(peak, process.memoryUsage().rss)));
      peak = Math.max(peak, process.memoryUsage().rss);
      const seconds = (Date.now() - t0) / 1000;
      // The checkpoint's files, written to a temp folder as the activity writes them before the upload.
      const t1 = Date.now();
      const dir = mkdtempSync(join(tmpdir(), 'cm2-bench-ckpt-'));
      let bytes = 0;
      if (adapter) {
        const w = adapter.weightsBytes();
        const o = serializeTensors(trainer.optimizer.momentEntries(), { step: String(trainer.optimizer.steps) });
        writeFileSync(join(dir, 'adapter_model.safetensors'), w);
        writeFileSync(join(dir, 'optimizer.safetensors'), o);
        bytes = w.byteLength + o.byteLength;
      } else {
        const { weights, optimizer } = await writeCheckpointFiles(dir, model, trainer.optimizer);
        bytes = statSync(weights.path).size + statSync(optimizer.path).size;
      }
      const ckptSeconds = (Date.now() - t1) / 1000;
      rmSync(dir, { recursive: true, force: true });
      trainer.optimizer.dispose();
      if (adapter) {
        adapter.unmerge();
        adapter.dispose();
      }
      // Positions computed per forward (policy and reference alike): the rows' padded lengths.
      let positions = 0;
      for (let k = 0; k < trainOn.length; k += micro) {
        const part = trainOn.slice(k, k + micro);
        if (pack) {
          const shared = part[0]!.tokens.findIndex((t, i) => part.some((q) => q.tokens[i] !== t));
          const L = Math.min(shared < 0 ? Infinity : shared, ...part.map((q) => q.spans[0]!.start));
          positions += L - 1 + part.reduce((n, q) => n + q.tokens.length - L, 0);
        } else positions += part.length * (Math.max(...part.map((q) => q.tokens.length)) - 1);
      }
      const what = adapter ? `LoRA r${rank} (${trainer.trainable.params.size} tensors)` : 'full';
      console.log(`train ${what}, micro-batch ${micro}, ${pack ? 'packed' : 'one row per sequence'}: update ${seconds.toFixed(1)} s, checkpoint files ${(bytes / 1e6).toFixed(1)} MB in ${ckptSeconds.toFixed(1)} s, positions per forward ${positions}, peak RSS ${(peak / 2 ** 20).toFixed(0)} MiB, loss ${m.loss.toExponential(3)}, grad norm ${m.gradNorm.toExponential(3)}, log p gap ${m.logprobGap ? m.logprobGap.mean.toExponential(2) : 'n/a'} (load ${loadavg()[0]!.toFixed(1)})`);
    }
    reference.dispose();
  }
  clearInterval(sampler);
  if (rolloutRow) {
    const sum = (xs: number[]) => xs.reduce((x, y) => x + y, 0);
    console.log(`\n| ${new Date().toISOString().slice(0, 10)}, ${cpus()[0]?.model.trim()} ${cpus().length} cores | ${P}×${G}, prompt ~${L}, ${N} new/round, delta ${D} | before: ${sum(b.prefilled)} prefilled, ${sum(b.seconds).toFixed(0)} s, ${b.peakMiB.toFixed(0)} MiB | after: ${sum(a.prefilled)} prefilled (${(sum(a.prefilled) / sum(b.prefilled)).toFixed(3)}×), ${sum(a.seconds).toFixed(0)} s (${(sum(a.seconds) / sum(b.seconds)).toFixed(2)}×), ${a.peakMiB.toFixed(0)} MiB |`);
  }
  model.dispose();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
