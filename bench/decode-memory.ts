/**
 * Memory of the embedded decoder over the rounds of multi-turn episodes (issue 30: the study's gpu worker was
 * OOM-killed at 21.6 GB three times in the step-8 evaluation of 64 held-out prompts, 2026-12-02). Loads a checkpoint,
 * decodes N distinct contexts of ~L random tokens (NEW new tokens, greedy) in a `DecodePool` with the rollouts'
 * default KV budget, then a second round where every context grows by its answer and 100 tokens (a tool result), and
 * prints the process's RSS beside the bytes tfjs holds in live tensors, every 10 s and after each round.
 *
 *   MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072 npx tsx bench/decode-memory.ts [N 32] [L 1400] [NEW 40] [--checkpoint models/smollm2]
 *
 * First reading (2026-12-02, SmolLM2-135M, 2 cores, tfjs-node): N 32, L 1400, NEW 40 → live tensors 6.40 GB during the
 * first block's decoding (the KV cache of 32 × ~1,560 positions is ~2.3 GB: 46 KB a position), RSS 9.5 GB after the
 * first round and 11.7 GB after the second (tensors 7.9 GB). bench/README.md has the reading and what it points at.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import * as tf from '@tensorflow/tfjs';
import { selectBackend } from '../src/model/net/backend';
import { loadHfCheckpoint } from '../src/model/formats/checkpoint';
import { DecodePool } from '../src/model/net/decodePool';

const { values, positionals } = parseArgs({ options: { checkpoint: { type: 'string', default: 'models/smollm2' } }, allowPositionals: true });
const [N, L, NEW] = [Number(positionals[0] ?? 32), Number(positionals[1] ?? 1400), Number(positionals[2] ?? 40)];
const peak = () => Number(/VmHWM:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0) / 2 ** 20;
const rss = () => `${(process.memoryUsage().rss / 2 ** 30).toFixed(2)} GB rss (peak ${peak().toFixed(2)}), tensors ${(tf.memory().numBytes / 2 ** 30).toFixed(2)} GB in ${tf.memory().numTensors}`;

async function main(): Promise<void> {
  await selectBackend('auto', console.log);
  const model = loadHfCheckpoint(values.checkpoint!);
  console.log(`loaded ${values.checkpoint}: ${rss()}`);
  const pool = new DecodePool(model, 2048 * 2 ** 20); // rl.rollout.kvCacheMiB's default
  let seed = 1;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) % 40000) + 100;
  const reqs = Array.from({ length: N }, (_, i) => ({ key: `e${i}`, tokens: Array.from({ length: L + (i % 7) * 20 }, rnd), maxNewTokens: NEW }));
  let steps = 0;
  const t0 = Date.now();
  const timer = setInterval(() => console.log(`${((Date.now() - t0) / 1000).toFixed(0)} s, ${steps} steps: ${rss()}`), 10_000);
  const out = await pool.decode(reqs, { temperature: 0, stopTokens: [], padId: 0, onStep: () => void steps++ });
  console.log(`round 1: ${out.tokens.reduce((n, t) => n + t.length, 0)} tokens; ${rss()}`);
  const reqs2 = reqs.map((r, i) => ({ ...r, tokens: [...r.tokens, ...out.tokens[i]!, ...Array.from({ length: 100 }, rnd)] }));
  const out2 = await pool.decode(reqs2, { temperature: 0, stopTokens: [], padId: 0, onStep: () => void steps++ });
  clearInterval(timer);
  console.log(`round 2: ${out2.tokens.reduce((n, t) => n + t.length, 0)} tokens; ${rss()}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
