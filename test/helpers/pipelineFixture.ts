/** A whole CM2 run sized for tests: a few dozen demo dialogues, a tiny policy, two RL steps. */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { track, untrack } from './leftovers';
import { tinyRl } from './rlFixture';

const root = path.resolve(__dirname, '..', '..');

export const tinySft = {
  backend: 'auto',
  base: { kind: 'init', seed: 5, config: { model_type: 'qwen3', hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8, tie_word_embeddings: true, rope_theta: 10000, max_position_embeddings: 2048 } },
  epochs: 1, microBatch: 2, gradAccum: 2, maxSeqLen: 640, checkpointEvery: 2, peakLr: 5e-3,
  eval: { prompts: 2, maxNewTokens: 12 },
};

/** Config overrides of a tiny offline pipeline (deep-merged by testConfig). */
export const tinyPipeline = (over: { rlSteps?: number } = {}) => ({
  data: {
    source: { kind: 'demo', count: 40, seed: 7, brokenRate: 0.1 },
    shardSize: 16,
    shardConcurrency: 2,
    llmFilter: { enabled: true, cascade: { passes: [{ effort: 'low' }] } },
    split: { seed: 42, coldStart: 0.4 },
  },
  checklist: { variants: 1, shardSize: 8, shardConcurrency: 2 },
  sft: tinySft,
  rl: tinyRl({ steps: over.rlSteps ?? 2, eval: { prompts: 2, every: 2 }, continueAsNewEvery: 2 }),
  eval: { bfcl: { categories: ['simple_python', 'irrelevance'], limit: 2, maxNewTokens: 16, batchSize: 4 } },
  temporal: { activity: { heartbeatTimeout: '10s', maxRetryInterval: '1s' } },
});

/** Runs the `cm2` CLI to completion; resolves with its exit code and output. */
export function cm2(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const proc = spawn(process.execPath, [path.join(root, 'bin', 'cm2.js'), ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    track(proc.pid);
    proc.once('exit', () => untrack(proc.pid));
    let out = '';
    proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
    proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
    proc.once('exit', (code) => resolve({ code, out }));
  });
}
