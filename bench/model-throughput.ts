/**
 * Throughput of the tfjs Qwen decoder (src/model) against PyTorch + transformers on the same CPU, in the same run:
 * training tokens/s, generation tokens/s with and without the KV cache, and peak memory, for the sizes tiny, small,
 * demo and qwen05b (Qwen2.5-0.5B's shape). The default run (all four, both sides) takes ~5 minutes on 2 cores and ends
 * with a markdown table.
 *
 *   npx tsx bench/model-throughput.ts [--backend auto|tfjs-node|wasm|cpu] [--sizes tiny,small,demo,qwen05b,smollm2]
 *                                     [--steps N] [--warmup N] [--new-tokens N] [--threads N] [--no-torch] [--no-ours]
 *                                     [--json FILE]
 *
 * Each size runs in a fresh child process (ours: this script with --child; PyTorch: bench/torch_throughput.py), one
 * after the other, so a process's peak RSS belongs to that size alone and the two never share the CPU.
 *
 * Threads: by default both sides use every core (TensorFlow's own intra-op pool; torch.set_num_threads(cpu_count)
 * with no OMP/MKL limits). `--threads N` limits both to N (TF_NUM_INTRAOP_THREADS / torch.set_num_threads), which
 * gives steadier per-core numbers on a machine that other work keeps busy.
 *
 * Training step = forward + cross-entropy over all B·T positions + backward (tf.variableGrads over model.loss) +
 * global-norm clipping to 1.0 + AdamW (src/model/optim/adamw.ts), weight decay 0; `--warmup` steps are not timed, then the
 * median of the timed steps (`--steps`, else per size) gives tokens/s = B·T / median step time. Generation = B random
 * 32-token prompts, greedy, exactly the size's number of new tokens each (no stop token), after a 4-token warm-up run;
 * tokens/s = B·new / wall time, prefill included. PyTorch runs the same architecture (Qwen3ForCausalLM, or
 * Qwen2ForCausalLM for qwen05b; random init, float32, eager attention, tied embeddings), batch, sequence length and
 * step counts. Besides wall-clock rates, both sides report rates per CPU-second of their process (user + system).
 *
 * Memory: "peak RSS" is the process's getrusage maxRSS (Node: process.resourceUsage().maxRSS; Python: ru_maxrss),
 * runtime and imports included; "tf peak" is tf.profile's peakBytes over the first (untimed) training step, i.e. the
 * most bytes of live tfjs tensors at any kernel (weights, optimizer moments, activations, gradients; on native
 * TensorFlow views that share a buffer, e.g. reshapes, are counted again).
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import * as tf from '@tensorflow/tfjs';
import { backendPrefs, selectBackend, type BackendPref } from '../src/model/net/backend';
import type { QwenConfig } from '../src/model/net/qwenConfig';
import { generate } from '../src/model/net/generate';
import { QwenModel } from '../src/model/net/qwen';
import { Rng } from '../src/model/net/random';
import { AdamW } from '../src/model/optim/adamw';

interface SizeSpec {
  model: 'qwen2' | 'qwen3' | 'llama';
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  intermediate: number;
  vocab: number;
  ropeTheta: number;
  /** training batch and sequence length */
  batch: number;
  seq: number;
  /** generation: sequences, prompt tokens, new tokens (with and without the KV cache) */
  gen: { batch: number; prompt: number; newTokens: number; noCacheTokens: number };
  /** timed training steps (after --warmup) unless --steps is given */
  steps: number;
}

/**
 * tiny and small are the sizes of the training probe in shared/notes/tfjs-wasm.md; demo is the demo model's size;
 * qwen05b is Qwen2.5-0.5B's shape (random init, float32): B=1, T=512 for training, 2 sequences of 32 + 32 tokens for
 * generation (16 without the cache, which re-runs the whole sequence every step).
 */
const qwen3Size = (hidden: number, layers: number, vocab: number, seq: number, batch: number): SizeSpec => ({
  model: 'qwen3', hidden, layers, heads: 4, kvHeads: 2, headDim: hidden / 4, intermediate: 3 * hidden, vocab, ropeTheta: 10000,
  batch, seq, gen: { batch, prompt: 32, newTokens: 128, noCacheTokens: 128 }, steps: 3,
});
const SIZES: Record<string, SizeSpec> = {
  tiny: qwen3Size(128, 4, 512, 256, 8),
  small: qwen3Size(256, 6, 2048, 512, 4),
  demo: qwen3Size(192, 4, 1024, 512, 4),
  qwen05b: {
    model: 'qwen2', hidden: 896, layers: 24, heads: 14, kvHeads: 2, headDim: 64, intermediate: 4864, vocab: 151936, ropeTheta: 1e6,
    batch: 1, seq: 512, gen: { batch: 2, prompt: 32, newTokens: 32, noCacheTokens: 16 }, steps: 2,
  },
  // SmolLM2-135M's shape (Llama: no biases, no QK-norm, tied; 9/3 heads of 64), at the batch shapes of
  // config/smollm2.yaml's SFT and rollouts. Not in the default set: `--sizes smollm2`.
  smollm2: {
    model: 'llama', hidden: 576, layers: 30, heads: 9, kvHeads: 3, headDim: 64, intermediate: 1536, vocab: 49152, ropeTheta: 1e5,
    batch: 2, seq: 1024, gen: { batch: 16, prompt: 32, newTokens: 32, noCacheTokens: 8 }, steps: 2,
  },
};

function sizeConfig(s: SizeSpec): QwenConfig {
  return {
    model_type: s.model,
    architectures: [s.model === 'qwen2' ? 'Qwen2ForCausalLM' : s.model === 'llama' ? 'LlamaForCausalLM' : 'Qwen3ForCausalLM'],
    vocab_size: s.vocab,
    hidden_size: s.hidden,
    intermediate_size: s.intermediate,
    num_hidden_layers: s.layers,
    num_attention_heads: s.heads,
    num_key_value_heads: s.kvHeads,
    ...(s.model === 'qwen3' ? { head_dim: s.headDim, attention_bias: false } : {}),
    ...(s.model === 'llama' ? { head_dim: s.headDim, attention_bias: false, mlp_bias: false } : {}),
    rms_norm_eps: s.model === 'llama' ? 1e-5 : 1e-6,
    rope_theta: s.ropeTheta,
    max_position_embeddings: 32768,
    tie_word_embeddings: true,
    hidden_act: 'silu',
    initializer_range: 0.02,
  };
}

interface Job {
  name: string;
  config: QwenConfig;
  batch: number;
  seq: number;
  steps: number;
  warmup: number;
  gen: { batch: number; prompt: number; newTokens: number; noCacheTokens: number };
  seed: number;
  lr: number;
  maxGradNorm: number;
}

/** Rates per CPU-second (user + system time of the process) instead of per wall-clock second. */
interface CpuRates {
  trainTokPerS: number;
  genCacheTokPerS: number;
  genNoCacheTokPerS: number;
}

interface OursResult {
  backend: string;
  cpu: CpuRates;
  params: number;
  trainTokPerS: number;
  trainStepMs: number[];
  losses: number[];
  genCacheTokPerS: number;
  genNoCacheTokPerS: number;
  cachedEqualsUncached: boolean;
  peakRssBytes: number;
  /** largest RSS seen by polling process.memoryUsage() (between steps; the event loop is blocked during one) */
  polledRssBytes: number;
  tfPeakBytes: number;
}

interface TorchResult {
  available: boolean;
  cpu?: CpuRates;
  error?: string;
  params?: number;
  trainTokPerS?: number;
  trainStepMs?: number[];
  losses?: number[];
  genCacheTokPerS?: number;
  genNoCacheTokPerS?: number;
  cachedEqualsUncached?: boolean;
  peakRssBytes?: number;
  threads?: Record<string, unknown>;
  versions?: Record<string, string>;
}

const RESULT_MARK = '@@RESULT ';
const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const randomIds = (rng: Rng, rows: number, cols: number, vocab: number): number[][] =>
  Array.from({ length: rows }, () => Array.from({ length: cols }, () => Math.floor(rng.next() * vocab)));

/** One size, in this (child) process: returns our numbers. */
async function runOurs(job: Job, backendPref: BackendPref): Promise<OursResult> {
  let polledRss = process.memoryUsage().rss;
  const poll = (): void => {
    polledRss = Math.max(polledRss, process.memoryUsage().rss);
  };
  const timer = setInterval(poll, 50);
  try {
    const backend = await selectBackend(backendPref, (l) => console.error(`[${job.name}] ${l}`));
    const model = QwenModel.init(job.config, job.seed);
    const vars = model.namedVariables();
    const opt = new AdamW(vars, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 });
    const rng = new Rng(job.seed + 1);
    const V = job.config.vocab_size;
    const data = randomIds(rng, job.batch, job.seq + 1, V);
    const ids = data.map((r) => r.slice(0, -1));
    const targets = data.map((r) => r.slice(1));
    const mask = ids.map((r) => r.map(() => 1));
    const last = [...vars.values()].at(-1)!;

    const step = (): number => {
      const { value, grads } = tf.variableGrads(() => model.loss(ids, targets, mask), [...vars.values()]);
      const loss = value.dataSync()[0]!;
      opt.apply(new Map([...vars].map(([name, v]) => [name, grads[v.name]!])), job.lr, job.maxGradNorm);
      tf.dispose([value, ...Object.values(grads)]);
      last.dataSync(); // the update is done (asynchronous backends)
      poll();
      return loss;
    };

    const losses: number[] = [];
    let tfPeakBytes = 0;
    for (let i = 0; i < job.warmup; i++) {
      if (i === 0) {
        const prof = await tf.profile(() => {
          losses.push(step());
        });
        tfPeakBytes = prof.peakBytes;
      } else losses.push(step());
      console.error(`[${job.name}] warm-up step ${i + 1}/${job.warmup}: loss ${losses.at(-1)!.toFixed(4)}`);
    }
    const stepMs: number[] = [];
    const stepCpuMs: number[] = [];
    const cpuMs = (): number => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1000;
    };
    for (let i = 0; i < job.steps; i++) {
      const t0 = performance.now();
      const c0 = cpuMs();
      losses.push(step());
      stepMs.push(performance.now() - t0);
      stepCpuMs.push(cpuMs() - c0);
      console.error(`[${job.name}] step ${i + 1}/${job.steps}: ${stepMs.at(-1)!.toFixed(0)} ms, loss ${losses.at(-1)!.toFixed(4)}`);
      await new Promise((r) => setImmediate(r));
    }
    const trainTokPerS = (job.batch * job.seq) / (median(stepMs) / 1000);

    const prompts = randomIds(rng, job.gen.batch, job.gen.prompt, V);
    const genRate: Record<string, number> = {};
    const genCpuRate: Record<string, number> = {};
    const outputs: Record<string, number[][]> = {};
    for (const useCache of [true, false]) {
      generate(model, prompts, { maxNewTokens: 4, temperature: 0, useCache });
      poll();
      const t0 = performance.now();
      const c0 = cpuMs();
      const out = generate(model, prompts, { maxNewTokens: useCache ? job.gen.newTokens : job.gen.noCacheTokens, temperature: 0, useCache });
      const sec = (performance.now() - t0) / 1000;
      const cpuSec = (cpuMs() - c0) / 1000;
      poll();
      const n = out.tokens.reduce((a, r) => a + r.length, 0);
      genRate[useCache ? 'cache' : 'noCache'] = n / sec;
      genCpuRate[useCache ? 'cache' : 'noCache'] = n / cpuSec;
      outputs[useCache ? 'cache' : 'noCache'] = out.tokens;
      console.error(`[${job.name}] generate ${useCache ? 'with' : 'without'} cache: ${n} tokens in ${sec.toFixed(1)} s`);
    }
    const params = model.numParams();
    opt.dispose();
    model.dispose();
    poll();
    return {
      backend,
      params,
      trainTokPerS,
      trainStepMs: stepMs,
      cpu: { trainTokPerS: (job.batch * job.seq) / (median(stepCpuMs) / 1000), genCacheTokPerS: genCpuRate.cache!, genNoCacheTokPerS: genCpuRate.noCache! },
      losses,
      genCacheTokPerS: genRate.cache!,
      genNoCacheTokPerS: genRate.noCache!,
      cachedEqualsUncached: JSON.stringify(outputs.cache!.map((r) => r.slice(0, job.gen.noCacheTokens))) === JSON.stringify(outputs.noCache),
      peakRssBytes: process.resourceUsage().maxRSS * 1024,
      polledRssBytes: polledRss,
      tfPeakBytes,
    };
  } finally {
    clearInterval(timer);
  }
}

/** Runs a child process to completion; stdout is captured, stderr passed through. */
function runChild(cmd: string, args: string[], input: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; error?: Error }> {
  return new Promise((resolve) => {
    let stdout = '';
    let child;
    try {
      child = spawn(cmd, args, { env, stdio: ['pipe', 'pipe', 'inherit'] });
    } catch (e) {
      resolve({ code: null, stdout, error: e as Error });
      return;
    }
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.on('error', (e) => resolve({ code: null, stdout, error: e }));
    child.on('close', (code) => resolve({ code, stdout }));
    child.stdin.on('error', () => {}); // child exited before reading
    child.stdin.end(input);
  });
}

/** `--threads N`: both sides limited to N threads (TensorFlow's intra-op pool, torch.set_num_threads); default every core. */
function threadEnv(threads?: number): NodeJS.ProcessEnv {
  if (threads === undefined) return process.env;
  return { ...process.env, TF_NUM_INTRAOP_THREADS: String(threads), TF_NUM_INTEROP_THREADS: '1', CM2_BENCH_THREADS: String(threads), OMP_NUM_THREADS: String(threads), MKL_NUM_THREADS: String(threads) };
}

async function oursInChild(job: Job, backend: string, threads?: number): Promise<OursResult> {
  const r = await runChild(process.execPath, [...process.execArgv, __filename, '--child', '--backend', backend], JSON.stringify(job), threadEnv(threads));
  const line = r.stdout.split('\n').find((l) => l.startsWith(RESULT_MARK));
  if (r.code !== 0 || !line) throw new Error(`tfjs run for '${job.name}' failed (exit ${r.code})${r.error ? `: ${r.error.message}` : ''}`);
  return JSON.parse(line.slice(RESULT_MARK.length)) as OursResult;
}

async function torchInChild(job: Job, threads?: number): Promise<TorchResult> {
  const python = process.env.PYTHON ?? 'python3';
  const r = await runChild(python, [path.join(__dirname, 'torch_throughput.py')], JSON.stringify(job), threadEnv(threads));
  if (r.error) return { available: false, error: `${python}: ${r.error.message}` };
  const line = r.stdout.trim().split('\n').at(-1) ?? '';
  try {
    const res = JSON.parse(line) as TorchResult;
    if (r.code !== 0 && res.available) return { available: false, error: `exit ${r.code}` };
    return res;
  } catch {
    return { available: false, error: `${python} bench/torch_throughput.py exited ${r.code} without a result` };
  }
}

const fmtRate = (x?: number): string => (x === undefined ? '–' : x >= 100 ? Math.round(x).toLocaleString('en-US') : x.toFixed(1));
const fmtRatio = (a?: number, b?: number): string => (a === undefined || b === undefined ? '–' : `${(a / b).toFixed(2)}×`);
const fmtMiB = (x?: number): string => (x === undefined ? '–' : `${Math.round(x / 2 ** 20).toLocaleString('en-US')} MiB`);
const fmtParams = (n: number): string => (n >= 1e6 ? `${(n / 1e6).toFixed(2)}M` : `${(n / 1e3).toFixed(0)}K`);

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      backend: { type: 'string', default: 'auto' },
      sizes: { type: 'string', default: 'tiny,small,demo,qwen05b' },
      steps: { type: 'string' },
      warmup: { type: 'string', default: '1' },
      'new-tokens': { type: 'string' },
      'no-torch': { type: 'boolean', default: false },
      'no-ours': { type: 'boolean', default: false },
      threads: { type: 'string' },
      json: { type: 'string' },
      child: { type: 'boolean', default: false },
    },
  });
  const backendPref = values.backend as BackendPref;
  if (!backendPrefs.includes(backendPref)) throw new Error(`--backend must be one of ${backendPrefs.join(', ')}`);

  if (values.child) {
    const job = JSON.parse(await new Promise<string>((resolve) => {
      let s = '';
      process.stdin.on('data', (d: Buffer) => (s += d.toString()));
      process.stdin.on('end', () => resolve(s));
    })) as Job;
    const res = await runOurs(job, backendPref);
    process.stdout.write(`${RESULT_MARK}${JSON.stringify(res)}\n`);
    return;
  }

  const names = values.sizes.split(',').map((s) => s.trim()).filter(Boolean);
  for (const n of names) if (!SIZES[n]) throw new Error(`unknown size '${n}' (known: ${Object.keys(SIZES).join(', ')})`);
  const warmup = Number(values.warmup);
  const threads = values.threads === undefined ? undefined : Number(values.threads);
  if (threads !== undefined && !(threads >= 1)) throw new Error('--threads must be ≥ 1');
  const stepsOpt = values.steps === undefined ? undefined : Number(values.steps);
  const newOpt = values['new-tokens'] === undefined ? undefined : Number(values['new-tokens']);
  if (!(warmup >= 1) || (stepsOpt !== undefined && !(stepsOpt >= 1)) || (newOpt !== undefined && !(newOpt >= 1))) throw new Error('--steps, --warmup and --new-tokens must be ≥ 1');

  const t0 = Date.now();
  const rows: { name: string; spec: SizeSpec; job: Job; ours?: OursResult; torch: TorchResult }[] = [];
  for (const name of names) {
    const spec = SIZES[name]!;
    const job: Job = {
      name, config: sizeConfig(spec), batch: spec.batch, seq: spec.seq, steps: stepsOpt ?? spec.steps, warmup,
      gen: { ...spec.gen, newTokens: newOpt ?? spec.gen.newTokens, noCacheTokens: newOpt ?? spec.gen.noCacheTokens }, seed: 0, lr: 1e-3, maxGradNorm: 1.0,
    };
    console.error(`== ${name}: d${spec.hidden}, ${spec.layers} layers, ${spec.heads}/${spec.kvHeads} heads, vocab ${spec.vocab}, seq ${spec.seq}, batch ${spec.batch}`);
    const ours = values['no-ours'] ? undefined : await oursInChild(job, backendPref, threads);
    const torch: TorchResult = values['no-torch'] ? { available: false, error: '--no-torch' } : await torchInChild(job, threads);
    if (torch.available) console.error(`[${name}] PyTorch: train ${fmtRate(torch.trainTokPerS)} tok/s, generate ${fmtRate(torch.genCacheTokPerS)} / ${fmtRate(torch.genNoCacheTokPerS)} tok/s`);
    if (ours && torch.available && torch.params !== ours.params) console.error(`[${name}] warning: parameter counts differ (ours ${ours.params}, PyTorch ${torch.params})`);
    if (ours && !ours.cachedEqualsUncached) console.error(`[${name}] warning: our cached and uncached greedy outputs differ`);
    rows.push({ name, spec, job, ours, torch });
  }

  const torchInfo = rows.find((r) => r.torch.available)?.torch;
  const backend = rows.find((r) => r.ours)?.ours?.backend ?? '–';
  const threadNote = backend === 'wasm' ? '1 thread, since tfjs turns wasm threads off in Node' : backend === 'cpu' ? 'plain JS, 1 thread'
    : threads !== undefined ? `libtensorflow, TF_NUM_INTRAOP_THREADS=${threads}` : 'libtensorflow, its own thread pool (every core)';
  const lines: string[] = [];
  lines.push(`ours: tfjs ${tf.version_core}, backend ${backend} (${threadNote}), Node ${process.version}`);
  if (torchInfo) {
    lines.push(`PyTorch: torch ${torchInfo.versions?.torch}, transformers ${torchInfo.versions?.transformers}, torch.set_num_threads(${String(torchInfo.threads?.torch)}) ` +
      `(${String(torchInfo.threads?.cpus)} CPUs), eager attention, float32`);
  } else {
    const err = rows[0]?.torch.error;
    lines.push(`PyTorch not available${err ? ` (${err})` : ''}: only our numbers are shown`);
  }
  lines.push(`CPU: ${os.cpus()[0]?.model ?? '?'} × ${os.cpus().length}; training: median of the timed steps after ${warmup} warm-up; generation: greedy, prompt 32, B and new tokens per row`);
  lines.push('');
  lines.push('| size | params | train tok/s ours \\| torch \\| ratio | gen tok/s, KV cache: ours \\| torch \\| ratio | gen tok/s, no cache: ours \\| torch \\| ratio | peak RSS ours \\| torch \\| ratio | tf peak |');
  lines.push('|---|---|---|---|---|---|---|');
  for (const { name, spec, job, ours, torch } of rows) {
    const t: Partial<TorchResult> = torch.available ? torch : {};
    const o: Partial<OursResult> = ours ?? {};
    const params = ours?.params ?? t.params ?? 0;
    lines.push(`| ${name} (d${spec.hidden}, L${spec.layers}, V${spec.vocab}; train B${spec.batch}×T${spec.seq}, ${job.steps} steps; gen B${job.gen.batch}, ${job.gen.newTokens} \\| ${job.gen.noCacheTokens} new) | ${fmtParams(params)} ` +
      `| ${fmtRate(o.trainTokPerS)} \\| ${fmtRate(t.trainTokPerS)} \\| ${fmtRatio(o.trainTokPerS, t.trainTokPerS)} ` +
      `| ${fmtRate(o.genCacheTokPerS)} \\| ${fmtRate(t.genCacheTokPerS)} \\| ${fmtRatio(o.genCacheTokPerS, t.genCacheTokPerS)} ` +
      `| ${fmtRate(o.genNoCacheTokPerS)} \\| ${fmtRate(t.genNoCacheTokPerS)} \\| ${fmtRatio(o.genNoCacheTokPerS, t.genNoCacheTokPerS)} ` +
      `| ${fmtMiB(o.peakRssBytes)} \\| ${fmtMiB(t.peakRssBytes)} \\| ${fmtRatio(o.peakRssBytes, t.peakRssBytes)} | ${fmtMiB(o.tfPeakBytes)} |`);
  }
  lines.push('');
  lines.push(`ratio = ours / PyTorch (speed: above 1 = ours faster; memory: below 1 = ours smaller). Total bench time ${((Date.now() - t0) / 1000).toFixed(0)} s.`);
  lines.push('');
  lines.push('The same rates per CPU-second of the process (user + system time), which other load on the machine disturbs less:');
  lines.push('');
  lines.push('| size | train ours \\| torch \\| ratio | gen, KV cache: ours \\| torch \\| ratio | gen, no cache: ours \\| torch \\| ratio |');
  lines.push('|---|---|---|---|');
  for (const { name, ours, torch } of rows) {
    const o: Partial<CpuRates> = ours?.cpu ?? {};
    const t: Partial<CpuRates> = (torch.available ? torch.cpu : undefined) ?? {};
    lines.push(`| ${name} | ${fmtRate(o.trainTokPerS)} \\| ${fmtRate(t.trainTokPerS)} \\| ${fmtRatio(o.trainTokPerS, t.trainTokPerS)} ` +
      `| ${fmtRate(o.genCacheTokPerS)} \\| ${fmtRate(t.genCacheTokPerS)} \\| ${fmtRatio(o.genCacheTokPerS, t.genCacheTokPerS)} ` +
      `| ${fmtRate(o.genNoCacheTokPerS)} \\| ${fmtRate(t.genNoCacheTokPerS)} \\| ${fmtRatio(o.genNoCacheTokPerS, t.genNoCacheTokPerS)} |`);
  }
  console.log(`\nmodel throughput\n${lines.join('\n')}`);
  if (values.json) writeFileSync(values.json, JSON.stringify({ backend, warmup, rows }, null, 2));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
