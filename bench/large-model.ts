/**
 * The Qwen2.5-0.5B-shaped model end to end (issue 12, item 6), ours (src/model on tfjs) and PyTorch + transformers
 * side by side: load the HF checkpoint (BF16 shards written by transformers: scripts/make-large-checkpoint.py), greedy
 * generation with the KV cache, SFT train steps (src/stages/sft/trainer.ts: cross-entropy, AdamW), a training checkpoint saved
 * (config.json, F32 weights and AdamW moments written one tensor at a time with their sha256, as the activities write
 * them before the S3 upload) and loaded back into the RL trainer (weights and
 * moments), and RL train steps (src/stages/rl/grpo.ts: GRPO loss with a KL term against a reference model, AdamW). Seconds per
 * phase and per step, memory after each phase.
 *
 *   python3 scripts/make-large-checkpoint.py                     # once: .tmp/qwen2.5-0.5b-random (~1 GB, not committed)
 *   npx tsx bench/large-model.ts [--dir DIR] [--backend auto] [--seq 512] [--sft-steps 2] [--rl-batch 4] [--rl-seq 256]
 *                                [--rl-steps 2] [--micro-batch 1] [--kl-coef 1e-4] [--gen-batch 2] [--prompt 32]
 *                                [--new-tokens 32] [--no-torch] [--json FILE] [--tmp DIR]
 *
 * Each side runs as two child processes, like two stages: "sft" (load, generate, SFT steps, save the checkpoint) and
 * "rl" (load the checkpoint into the RL trainer, RL steps); sides and parts run one after the other (the CPU is not
 * shared; peak RSS is per part). Ours is this script with --child; PyTorch is bench/torch_large_model.py (float32,
 * eager attention, all cores, the same token ids, the same loss definitions, torch.optim.AdamW, save_pretrained +
 * torch.save of the optimizer state).
 *
 * Memory columns: "RSS" is the process's resident set after the phase, "peak RSS" getrusage's maxRSS so far (runtime
 * and imports included); "tf bytes" tf.memory().numBytes after the phase (live tensors: weights, moments, cache),
 * "tf peak" tf.profile's peakBytes over the first SFT and the first RL step (the most bytes of live tensors at any
 * kernel). The phase times include everything the phase does (reading files, building tensors, writing files).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import * as tf from '@tensorflow/tfjs';
import { backendPrefs, selectBackend, type BackendPref } from '../src/model/net/backend';
import { writeCheckpointFiles } from '../src/storage/policyStore';
import { hfConfigJson, loadHfCheckpoint, writeModelWeights } from '../src/model/formats/checkpoint';
import { generate } from '../src/model/net/generate';
import type { QwenModel } from '../src/model/net/qwen';
import { Rng } from '../src/model/net/random';
import { GrpoTrainer, type GrpoSequence } from '../src/stages/rl/grpo';
import { openAdamWState, writeAdamWState } from '../src/model/optim/adamw';
import { SftTrainer, type TokenizedExample } from '../src/stages/sft/trainer';

const root = path.resolve(__dirname, '..');
const RESULT_MARK = '@@RESULT ';

/** What both sides run (the token ids are generated here, so both see the same data). */
interface Job {
  /** sft: load, generate, SFT steps, save the checkpoint; rl: load it into the RL trainer, RL steps. */
  part: 'sft' | 'rl';
  dir: string;
  tmp: string;
  seq: number;
  microBatch: number;
  sftSteps: number;
  rlSteps: number;
  klCoef: number;
  lr: number;
  weightDecay: number;
  maxGradNorm: number;
  newTokens: number;
  prompts: number[][];
  sft: TokenizedExample[];
  rl: GrpoSequence[];
  reference?: { prompts: number[][]; last_logits: number[][] };
  /** rl part: the sha256 of the checkpoint's weights and moments as the sft part wrote them. */
  saved?: { weights: string; optimizer: string };
}

interface Phase {
  name: string;
  seconds: number;
  rssBytes: number;
  peakRssBytes: number;
  tfBytes?: number;
  tfPeakBytes?: number;
  note?: string;
}

interface SideResult {
  side: 'ours' | 'torch';
  available: boolean;
  error?: string;
  backend?: string;
  params?: number;
  phases: Phase[];
  sftStepSeconds: number[];
  rlStepSeconds: number[];
  sftLosses: number[];
  rlLosses: number[];
  generated?: number[][];
  genTokPerS?: number;
  parityMaxAbs?: number;
  roundTripExact?: boolean;
  saved?: { weights: string; optimizer: string };
  versions?: Record<string, string>;
}

const mib = (b: number | undefined) => (b === undefined ? '–' : `${Math.round(b / 2 ** 20).toLocaleString('en-US')} MiB`);
const randomIds = (rng: Rng, n: number, vocab: number) => Array.from({ length: n }, () => Math.floor(rng.next() * vocab));

// ---------------------------------------------------------------------------------------------------------------
// Ours, in the child process

async function runOurs(job: Job, pref: BackendPref): Promise<SideResult> {
  const out: SideResult = { side: 'ours', available: true, phases: [], sftStepSeconds: [], rlStepSeconds: [], sftLosses: [], rlLosses: [] };
  const phase = (name: string, t0: number, extra: Partial<Phase> = {}): Phase => {
    const p: Phase = { name, seconds: (performance.now() - t0) / 1000, rssBytes: process.memoryUsage().rss, peakRssBytes: process.resourceUsage().maxRSS * 1024, tfBytes: tf.memory().numBytes, ...extra };
    out.phases.push(p);
    console.error(`[ours] ${name}: ${p.seconds.toFixed(1)} s, RSS ${mib(p.rssBytes)}, peak ${mib(p.peakRssBytes)}, tf ${mib(p.tfBytes)}${p.tfPeakBytes ? `, tf peak ${mib(p.tfPeakBytes)}` : ''}${p.note ? ` (${p.note})` : ''}`);
    return p;
  };
  out.backend = await selectBackend(pref, (l) => console.error(`[ours] ${l}`));
  const ckpt = path.join(job.tmp, 'ours-ckpt');
  let t0 = performance.now();

  if (job.part === 'sft') {
    // 1. Load the BF16 shards written by transformers, one tensor at a time.
    const model: QwenModel = loadHfCheckpoint(job.dir);
    out.params = model.numParams();
    let note: string | undefined;
    if (job.reference) {
      let d = 0;
      for (const [i, p] of job.reference.prompts.entries()) {
        const logits = model.forward([p], { lastOnly: true });
        const row = logits.dataSync();
        logits.dispose();
        for (let v = 0; v < row.length; v++) d = Math.max(d, Math.abs(row[v]! - job.reference.last_logits[i]![v]!));
      }
      out.parityMaxAbs = d;
      note = `max |logits − transformers| ${d.toExponential(2)}`;
    }
    phase('load HF checkpoint (BF16 shards)', t0, note ? { note } : {});

    // 2. Greedy generation with the KV cache (after a 2-token warm-up).
    generate(model, job.prompts, { maxNewTokens: 2, temperature: 0, useCache: true });
    t0 = performance.now();
    const gen = generate(model, job.prompts, { maxNewTokens: job.newTokens, temperature: 0, useCache: true });
    const genSec = (performance.now() - t0) / 1000;
    out.generated = gen.tokens;
    out.genTokPerS = gen.tokens.reduce((n, r) => n + r.length, 0) / genSec;
    phase(`generate ${job.prompts.length}×${job.newTokens} tokens, KV cache`, t0, { note: `${out.genTokPerS.toFixed(1)} tok/s` });

    // 3. SFT steps.
    t0 = performance.now();
    const sft = new SftTrainer(model, job.sft, {
      epochs: 1, microBatch: job.microBatch, gradAccum: 1, peakLr: job.lr, warmupRatio: 0, minLrRatio: 1, maxGradNorm: job.maxGradNorm,
      weightDecay: job.weightDecay, maxSeqLen: job.seq, seed: 1, padId: 0,
    });
    let sftPeak = 0;
    for (let i = 0; i < job.sftSteps; i++) {
      const s0 = performance.now();
      if (i === 0) {
        const prof = await tf.profile(async () => {
          out.sftLosses.push((await sft.step()).loss);
        });
        sftPeak = prof.peakBytes;
      } else out.sftLosses.push((await sft.step()).loss);
      out.sftStepSeconds.push((performance.now() - s0) / 1000);
      console.error(`[ours] SFT step ${i + 1}: ${out.sftStepSeconds.at(-1)!.toFixed(1)} s, loss ${out.sftLosses.at(-1)!.toFixed(4)}`);
    }
    phase(`SFT ${job.sftSteps} steps (B=${job.microBatch}, T=${job.seq})`, t0, { tfPeakBytes: sftPeak });

    // 4. Save a training checkpoint as the activities write it before the upload (src/storage/policyStore.ts):
    //    config.json, model.safetensors (F32) and optimizer.safetensors, one tensor at a time, with their sha256.
    t0 = performance.now();
    mkdirSync(ckpt, { recursive: true });
    writeFileSync(path.join(ckpt, 'config.json'), JSON.stringify(hfConfigJson(model)));
    const files = await writeCheckpointFiles(ckpt, model, sft.optimizer);
    phase('save checkpoint (weights + AdamW moments, sha256)', t0, { note: `${((files.weights.bytes + files.optimizer.bytes) / 1e9).toFixed(2)} GB written` });
    out.saved = { weights: files.weights.sha256, optimizer: files.optimizer.sha256 };
    sft.optimizer.dispose();
    model.dispose();
    return out;
  }

  // 5. Load the checkpoint into the RL trainer (a fresh model + the moments), as rlTrain does; the reference policy too.
  const model = loadHfCheckpoint(ckpt);
  out.params = model.numParams();
  const reference = job.klCoef > 0 ? loadHfCheckpoint(job.dir) : undefined;
  const rl = new GrpoTrainer(model, reference, job.weightDecay);
  const opened = openAdamWState(path.join(ckpt, 'optimizer.safetensors'));
  rl.restore(opened.state);
  opened.close();
  phase(`load checkpoint into the RL trainer${reference ? ' (+ reference model)' : ''}`, t0);
  // Exact round trip: the reloaded weights and moments write the same bytes.
  const again = writeModelWeights(path.join(job.tmp, 'again.safetensors'), model);
  const againOpt = writeAdamWState(path.join(job.tmp, 'again-opt.safetensors'), rl.optimizer);
  out.roundTripExact = again.sha256 === job.saved?.weights && againOpt.sha256 === job.saved.optimizer;
  rmSync(path.join(job.tmp, 'again.safetensors'));
  rmSync(path.join(job.tmp, 'again-opt.safetensors'));
  console.error(`[ours] round trip bit-exact: ${out.roundTripExact}`);

  // 6. RL (GRPO) steps.
  t0 = performance.now();
  let rlPeak = 0;
  const cfg = { lr: job.lr, klCoef: job.klCoef, clipLow: 0.2, clipHigh: 0.2, clipRatioC: 3, maxGradNorm: job.maxGradNorm, microBatch: job.microBatch, padId: 0 };
  for (let i = 0; i < job.rlSteps; i++) {
    const s0 = performance.now();
    if (i === 0) {
      let loss = 0;
      const prof = await tf.profile(async () => {
        loss = (await rl.step(job.rl, cfg)).loss;
      });
      rlPeak = prof.peakBytes;
      out.rlLosses.push(loss);
    } else out.rlLosses.push((await rl.step(job.rl, cfg)).loss);
    out.rlStepSeconds.push((performance.now() - s0) / 1000);
    console.error(`[ours] RL step ${i + 1}: ${out.rlStepSeconds.at(-1)!.toFixed(1)} s, loss ${out.rlLosses.at(-1)!.toExponential(3)}`);
  }
  const rlTokens = job.rl.reduce((n, s) => n + s.tokens.length, 0);
  phase(`RL ${job.rlSteps} steps (${job.rl.length} seq, ${rlTokens} tokens)`, t0, { tfPeakBytes: rlPeak });
  rl.optimizer.dispose();
  reference?.dispose();
  model.dispose();
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// The parent: data, children, table

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
    child.stdin.on('error', () => {});
    child.stdin.end(input);
  });
}

/** The two parts of one side as one result (phases in order, peak RSS per part). */
function merge(a: SideResult, b: SideResult): SideResult {
  if (!b.available) return { ...a, available: false, error: b.error ?? 'the rl part failed' };
  return {
    ...a, ...b,
    phases: [...a.phases, ...b.phases],
    sftStepSeconds: a.sftStepSeconds, sftLosses: a.sftLosses, rlStepSeconds: b.rlStepSeconds, rlLosses: b.rlLosses,
    ...(a.generated ? { generated: a.generated } : {}), ...(a.genTokPerS !== undefined ? { genTokPerS: a.genTokPerS } : {}),
    ...(a.parityMaxAbs !== undefined ? { parityMaxAbs: a.parityMaxAbs } : {}),
  };
}

const resultOf = (stdout: string): SideResult | undefined => {
  const line = stdout.split('\n').find((l) => l.startsWith(RESULT_MARK));
  return line ? (JSON.parse(line.slice(RESULT_MARK.length)) as SideResult) : undefined;
};

function table(ours: SideResult, torch: SideResult): string {
  const rows: string[] = [];
  const t = (i: number) => torch.phases[i];
  rows.push('| phase | seconds: ours \\| torch \\| speed ratio | RSS after: ours \\| torch | peak RSS: ours \\| torch | tf bytes after \\| tf peak |');
  rows.push('|---|---|---|---|---|');
  ours.phases.forEach((p, i) => {
    const q = torch.available ? t(i) : undefined;
    const ratio = q ? `${(q.seconds / p.seconds).toFixed(2)}×` : '–';
    rows.push(`| ${p.name}${p.note ? ` — ${p.note}` : ''} | ${p.seconds.toFixed(1)} \\| ${q ? q.seconds.toFixed(1) : '–'} \\| ${ratio} | ${mib(p.rssBytes)} \\| ${mib(q?.rssBytes)} | ${mib(p.peakRssBytes)} \\| ${mib(q?.peakRssBytes)} | ${mib(p.tfBytes)} \\| ${p.tfPeakBytes ? mib(p.tfPeakBytes) : '–'} |`);
  });
  const steps = (xs: number[]) => (xs.length ? xs.map((x) => x.toFixed(1)).join(', ') : '–');
  rows.push('');
  rows.push(`SFT step seconds: ours ${steps(ours.sftStepSeconds)} | torch ${steps(torch.sftStepSeconds)}; RL step seconds: ours ${steps(ours.rlStepSeconds)} | torch ${steps(torch.rlStepSeconds)}`);
  rows.push(`SFT losses: ours ${ours.sftLosses.map((x) => x.toFixed(4)).join(', ')} | torch ${torch.sftLosses.map((x) => x.toFixed(4)).join(', ') || '–'}`);
  if (ours.genTokPerS !== undefined) rows.push(`generation: ours ${ours.genTokPerS.toFixed(1)} tok/s | torch ${torch.genTokPerS?.toFixed(1) ?? '–'} tok/s; same greedy tokens: ${torch.generated ? `${ours.generated!.flat().filter((x, i) => x === torch.generated!.flat()[i]).length}/${ours.generated!.flat().length}` : '–'}`);
  if (ours.parityMaxAbs !== undefined) rows.push(`logits parity with transformers (last position, 2 prompts): max |Δ| ${ours.parityMaxAbs.toExponential(2)}`);
  rows.push(`checkpoint round trip bit-exact (weights and AdamW moments re-written after reload give the same sha256): ${ours.roundTripExact}`);
  if (!torch.available) rows.push(`PyTorch not available (${torch.error ?? 'skipped'})`);
  return rows.join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      child: { type: 'boolean', default: false },
      backend: { type: 'string', default: 'auto' },
      dir: { type: 'string', default: path.join(root, '.tmp', 'qwen2.5-0.5b-random') },
      tmp: { type: 'string' },
      seq: { type: 'string', default: '512' },
      'micro-batch': { type: 'string', default: '1' },
      'sft-steps': { type: 'string', default: '2' },
      'rl-steps': { type: 'string', default: '2' },
      'rl-batch': { type: 'string', default: '4' },
      'rl-seq': { type: 'string', default: '256' },
      'kl-coef': { type: 'string', default: '1e-4' },
      'gen-batch': { type: 'string', default: '2' },
      prompt: { type: 'string', default: '32' },
      'new-tokens': { type: 'string', default: '32' },
      'no-torch': { type: 'boolean', default: false },
      json: { type: 'string' },
    },
  });
  const backend = values.backend as BackendPref;
  if (!backendPrefs.includes(backend)) throw new Error(`--backend: one of ${backendPrefs.join(', ')}`);

  if (values.child) {
    const job = JSON.parse(readFileSync(0, 'utf8')) as Job;
    const r = await runOurs(job, backend);
    process.stdout.write(`${RESULT_MARK}${JSON.stringify(r)}\n`);
    return;
  }

  const dir = path.resolve(values.dir);
  if (!existsSync(path.join(dir, 'config.json'))) throw new Error(`${dir}: no checkpoint; write it first with: python3 scripts/make-large-checkpoint.py --out ${dir}`);
  const config = JSON.parse(readFileSync(path.join(dir, 'config.json'), 'utf8')) as { vocab_size: number };
  const vocab = config.vocab_size;
  const num = (k: keyof typeof values) => Number(values[k]);
  const seq = num('seq');
  const microBatch = num('micro-batch');
  const sftSteps = num('sft-steps');
  const rlSeq = num('rl-seq');
  const rng = new Rng(7);
  const sft: TokenizedExample[] = Array.from({ length: sftSteps * microBatch }, () => {
    const ids = randomIds(rng, seq + 1, vocab);
    // A prompt quarter without loss, then the "assistant" tokens.
    return { ids, lossMask: ids.map((_, t) => (t >= Math.floor((seq + 1) / 4) ? 1 : 0)) };
  });
  const rl: GrpoSequence[] = Array.from({ length: num('rl-batch') }, (_, i) => ({
    tokens: randomIds(rng, rlSeq, vocab),
    spans: [{ start: Math.floor(rlSeq / 4), end: rlSeq, advantage: i % 2 === 0 ? 1 : -1 }],
  }));
  const refFile = path.join(dir, 'reference-logits.json');
  const tmp = values.tmp ? path.resolve(values.tmp) : mkdtempSync(path.join(os.tmpdir(), 'cm2-large-'));
  const job: Job = {
    part: 'sft', dir, tmp, seq, microBatch, sftSteps, rlSteps: num('rl-steps'), klCoef: num('kl-coef'), lr: 1e-5, weightDecay: 0.01, maxGradNorm: 1,
    newTokens: num('new-tokens'), prompts: Array.from({ length: num('gen-batch') }, () => randomIds(rng, num('prompt'), vocab)), sft, rl,
    ...(existsSync(refFile) ? { reference: JSON.parse(readFileSync(refFile, 'utf8')) as Job['reference'] } : {}),
  };
  const t0 = Date.now();
  try {
    console.error(`ours: ${dir} on ${backend} (${os.cpus().length} cores), scratch ${tmp}`);
    const oursPart = async (part: Job['part'], saved?: Job['saved']): Promise<SideResult> => {
      const r = await runChild(process.execPath, [...process.execArgv, __filename, '--child', '--backend', backend], JSON.stringify({ ...job, part, ...(saved ? { saved } : {}) }), process.env);
      const res = resultOf(r.stdout);
      if (!res) throw new Error(`our ${part} run failed (exit ${r.code})${r.error ? `: ${r.error.message}` : ''}`);
      return res;
    };
    const oursSft = await oursPart('sft');
    const oursRl = await oursPart('rl', oursSft.saved);
    rmSync(path.join(tmp, 'ours-ckpt'), { recursive: true, force: true });
    const ours = merge(oursSft, oursRl);
    let torch: SideResult = { side: 'torch', available: false, error: 'skipped (--no-torch)', phases: [], sftStepSeconds: [], rlStepSeconds: [], sftLosses: [], rlLosses: [] };
    if (!values['no-torch']) {
      console.error('torch: bench/torch_large_model.py');
      const torchPart = async (part: Job['part']): Promise<SideResult> => {
        const r = await runChild(process.env['PYTHON'] ?? 'python3', [path.join(__dirname, 'torch_large_model.py')], JSON.stringify({ ...job, part }), process.env);
        return resultOf(r.stdout) ?? { ...torch, error: `${part} part: exit ${r.code}${r.error ? `: ${r.error.message}` : ''}` };
      };
      const a = await torchPart('sft');
      torch = a.available ? merge(a, await torchPart('rl')) : a;
      rmSync(path.join(tmp, 'torch-ckpt'), { recursive: true, force: true });
    }
    const seconds = (Date.now() - t0) / 1000;
    console.log(`\n${path.relative(root, dir) || dir} (${ours.params?.toLocaleString('en-US')} parameters), ours on ${ours.backend}${torch.versions ? `, torch ${torch.versions['torch']} / transformers ${torch.versions['transformers']} (${torch.versions['threads']} threads)` : ''}; ${seconds.toFixed(0)} s in all\n`);
    console.log(table(ours, torch));
    if (values.json) writeFileSync(values.json, JSON.stringify({ job: { ...job, sft: undefined, rl: undefined, prompts: undefined, reference: undefined }, ours, torch }, null, 1));
  } finally {
    if (!values.tmp) rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((e: Error) => {
  console.error(e.stack ?? e.message);
  process.exit(1);
});
