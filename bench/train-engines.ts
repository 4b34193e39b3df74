/**
 * The GRPO update on the two engines, the same batch on this machine's CPU (issue 32 item 8): the tfjs trainer
 * (`GrpoTrainer`, src/stages/rl/grpo.ts, on the backend `auto` picks) and the PyTorch one (python/cm2_torch grpo.py,
 * float32, eager, the venv of scripts/ensure-torch.mjs), each in a fresh process, one after the other.
 *
 *   npx tsx bench/train-engines.ts [--sizes small,smollm2] [--steps 2] [--threads N]
 *
 * The batch: G = 4 sampled completions of each prompt (prompts of `prompt` tokens, completions of `completion`), one
 * policy span per completion with a nonzero advantage, KL to a reference, T 0.7, micro-batches of `micro`. Rates are
 * positions (sequence tokens) per second of a whole update (reference and policy forward, backward, clip, AdamW),
 * median of `--steps` after one warm-up. tfjs packs each group's shared prompt into one row (its forward and backward
 * run once, not G times: packGrpo); the torch trainer does not yet, so it computes more for the same update: the
 * table gives the positions each engine actually ran too.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { selectBackend } from '../src/model/net/backend';
import { hfConfigJson, loadHfCheckpoint, writeModelWeights } from '../src/model/formats/checkpoint';
import { QwenModel } from '../src/model/net/qwen';
import { parseQwenConfig } from '../src/model/net/qwenConfig';
import { Rng } from '../src/model/net/random';
import { GrpoTrainer, type GrpoSequence } from '../src/stages/rl/grpo';
import { torchPython } from '../scripts/ensure-torch.mjs';

interface Size { config: Record<string, unknown>; prompts: number; prompt: number; completion: number; micro: number }
const SIZES: Record<string, Size> = {
  small: {
    config: { model_type: 'qwen3', hidden_size: 256, intermediate_size: 768, num_hidden_layers: 6, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 64, vocab_size: 2048, tie_word_embeddings: true, rope_theta: 10000, max_position_embeddings: 4096 },
    prompts: 4, prompt: 192, completion: 64, micro: 4,
  },
  smollm2: {
    config: { model_type: 'llama', hidden_size: 576, intermediate_size: 1536, num_hidden_layers: 30, num_attention_heads: 9, num_key_value_heads: 3, head_dim: 64, vocab_size: 49152, tie_word_embeddings: true, rope_theta: 100000, rms_norm_eps: 1e-5, max_position_embeddings: 8192 },
    prompts: 2, prompt: 192, completion: 64, micro: 4,
  },
};
const G = 4;

function batchOf(size: Size, vocab: number): GrpoSequence[] {
  const rng = new Rng(7);
  const out: GrpoSequence[] = [];
  for (let p = 0; p < size.prompts; p++) {
    const prompt = Array.from({ length: size.prompt }, () => Math.floor(rng.next() * vocab));
    for (let g = 0; g < G; g++) {
      const completion = Array.from({ length: size.completion }, () => Math.floor(rng.next() * vocab));
      out.push({ tokens: [...prompt, ...completion], spans: [{ start: size.prompt, end: size.prompt + size.completion, advantage: g % 2 ? 0.8 : -0.8 }] });
    }
  }
  return out;
}

const STEP = { lr: 1e-5, klCoef: 1e-3, clipLow: 0.2, clipHigh: 0.2, clipRatioC: 3, maxGradNorm: 1, padId: 0, temperature: 0.7 };

async function child(job: { dir: string; batch: GrpoSequence[]; micro: number; steps: number }): Promise<void> {
  selectBackend('auto');
  const model = loadHfCheckpoint(job.dir);
  const reference = loadHfCheckpoint(job.dir);
  const trainer = new GrpoTrainer(model, reference, 0.01);
  const times: number[] = [];
  for (let i = 0; i <= job.steps; i++) {
    const t0 = performance.now();
    await trainer.step(job.batch, { ...STEP, microBatch: job.micro });
    if (i > 0) times.push((performance.now() - t0) / 1000);
  }
  times.sort((a, b) => a - b);
  console.log(JSON.stringify({ seconds: times[Math.floor(times.length / 2)], peakRssBytes: process.resourceUsage().maxRSS * 1024 }));
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { sizes: { type: 'string', default: 'small,smollm2' }, steps: { type: 'string', default: '2' }, threads: { type: 'string' }, child: { type: 'string' } } });
  if (values.child) return child(JSON.parse(values.child) as Parameters<typeof child>[0]);
  const py = torchPython();
  const steps = Number(values.steps);
  const threads = values.threads ? { TF_NUM_INTRAOP_THREADS: values.threads, OMP_NUM_THREADS: values.threads } : {};
  const rows: string[] = [];
  for (const name of values.sizes!.split(',')) {
    const size = SIZES[name];
    if (!size) throw new Error(`unknown size ${name} (${Object.keys(SIZES).join(', ')})`);
    const tmp = mkdtempSync(path.join(os.tmpdir(), 'cm2-engines-'));
    try {
      selectBackend('auto');
      const model = QwenModel.init(parseQwenConfig(size.config), 3);
      const dir = path.join(tmp, 'model');
      mkdirSync(dir);
      writeFileSync(path.join(dir, 'config.json'), JSON.stringify(hfConfigJson(model)));
      writeModelWeights(path.join(dir, 'model.safetensors'), model);
      const params = model.numParams();
      model.dispose();
      const batch = batchOf(size, Number(size.config['vocab_size']));
      const positions = batch.reduce((n, s) => n + s.tokens.length - 1, 0);
      const packed = size.prompts * (size.prompt - 1 + G * (size.completion + 1)) - size.prompts; // what packGrpo runs
      const job = { dir, batch, micro: size.micro, steps };
      const ours = spawnSync(process.execPath, ['--import', 'tsx', __filename, '--child', JSON.stringify(job)], { encoding: 'utf8', env: { ...process.env, ...threads }, maxBuffer: 1 << 26 });
      const a = JSON.parse(ours.stdout.trim().split('\n').pop() ?? '{}') as { seconds?: number; peakRssBytes?: number };
      writeFileSync(path.join(tmp, 'job.json'), JSON.stringify({ ...job, step: STEP }));
      const torch = py
        ? spawnSync(py, ['-m', 'cm2_torch.bench_step', path.join(tmp, 'job.json')], { encoding: 'utf8', env: { ...process.env, ...threads, PYTHONPATH: path.join(__dirname, '..', 'python', 'cm2_torch') } })
        : undefined;
      const b = JSON.parse(torch?.stdout.trim().split('\n').pop() || '{}') as { seconds?: number; peakRssBytes?: number; threads?: number };
      if (!a.seconds) console.error(ours.stderr.slice(-3000));
      if (torch && !b.seconds) console.error(torch.stderr.slice(-3000));
      const rate = (s?: number) => (s ? Math.round(positions / s).toLocaleString('en-US') : 'n/a');
      const gib = (x?: number) => (x ? (x / 2 ** 30).toFixed(2) : 'n/a');
      rows.push(`| ${name} | ${(params / 1e6).toFixed(1)}M | ${batch.length} × ${size.prompt + size.completion}, micro ${size.micro} | ${a.seconds?.toFixed(2) ?? 'n/a'} \\| ${b.seconds?.toFixed(2) ?? 'n/a'} | ${rate(a.seconds)} \\| ${rate(b.seconds)} | ${a.seconds && b.seconds ? (b.seconds / a.seconds).toFixed(2) : 'n/a'}× | ${packed.toLocaleString('en-US')} \\| ${positions.toLocaleString('en-US')} | ${gib(a.peakRssBytes)} \\| ${gib(b.peakRssBytes)} |`);
      console.error(rows.at(-1));
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  }
  console.log(`\n| size | params | batch | s/update tfjs \\| torch | positions/s tfjs \\| torch | torch time / tfjs | positions run tfjs (packed) \\| torch | peak RSS GiB tfjs \\| torch |\n|---|---|---|---|---|---|---|---|\n${rows.join('\n')}`);
}

void main();
