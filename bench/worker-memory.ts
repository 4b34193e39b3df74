/**
 * Does a gpu worker hand memory back after a training stage? Issue 30's SFT piece left its worker at ~13.5 GB resident
 * after the stage ended, and the next activity on that worker (loading a policy for the evaluation) was killed by the
 * kernel beside a CI run. This measures the process's resident memory (RSS) through a LoRA SFT-like load and after it,
 * in a child process per allocator setting, so the settings are compared on the same work:
 *
 *   npx tsx bench/worker-memory.ts [--checkpoint models/smollm2] [--tokens 2048] [--reps 3] [--variants default,mmap]
 *
 * Phases: after loading the model; at the peak of training (`--reps` micro-batches of one `--tokens` sequence, LoRA rank
 * 8 + six token rows, AdamW); after disposing the adapter, optimizer and model (tf.memory() then holds nothing); after
 * loading the model again (what the next activity does). Variants: `default` (glibc's malloc as it comes), `mmap`
 * (`MALLOC_MMAP_THRESHOLD_=131072`, `MALLOC_TRIM_THRESHOLD_=131072`: every block over 128 KiB is its own mapping,
 * returned to the kernel when freed, and the threshold no longer grows after large frees), `mmap:<bytes>` (another
 * fixed threshold), `arena1`, `arena2` (`MALLOC_ARENA_MAX`), `jemalloc`, `tcmalloc` (another allocator under the
 * whole process, by LD_PRELOAD). The time of a micro-batch (gradient + AdamW) is printed
 * beside them: the price of the mappings. Results: bench/README.md.
 */
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { selectBackend } from '../src/model/net/backend';
import { loadHfCheckpoint } from '../src/model/formats/checkpoint';
import { LoraAdapter } from '../src/model/net/lora';
import { LORA_MODULES } from '../src/kernel/loraSettings';
import { applyUpdate, loraTrainable } from '../src/model/net/trainable';
import { AdamW } from '../src/model/optim/adamw';
import { Rng } from '../src/model/net/random';
import { projectRoot } from '../src/infra/binaries';

const { values } = parseArgs({
  options: {
    checkpoint: { type: 'string', default: 'models/smollm2' },
    tokens: { type: 'string', default: '2048' },
    reps: { type: 'string', default: '3' },
    variants: { type: 'string', default: 'default,mmap' },
    child: { type: 'boolean', default: false },
  },
});

/** A shared library in the usual library folders (Debian's multiarch one first), or undefined. */
const findLibrary = (name: string): string | undefined =>
  ['/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib', '/usr/local/lib'].map((d) => path.join(d, name)).find((f) => existsSync(f));

const VARIANTS: Record<string, Record<string, string> | (() => Record<string, string>)> = {
  default: {},
  mmap: { MALLOC_MMAP_THRESHOLD_: '131072', MALLOC_TRIM_THRESHOLD_: '131072' },
  arena1: { MALLOC_ARENA_MAX: '1' },
  arena2: { MALLOC_ARENA_MAX: '2' },
  // Another allocator under the whole process (Debian: `apt-get install libjemalloc2` / `libtcmalloc-minimal4`).
  jemalloc: () => {
    const lib = findLibrary('libjemalloc.so.2');
    if (!lib) throw new Error('jemalloc: libjemalloc.so.2 not found (Debian: apt-get install libjemalloc2)');
    return { LD_PRELOAD: lib };
  },
  tcmalloc: () => {
    const lib = findLibrary('libtcmalloc_minimal.so.4');
    if (!lib) throw new Error('tcmalloc: libtcmalloc_minimal.so.4 not found (Debian: apt-get install libtcmalloc-minimal4)');
    return { LD_PRELOAD: lib };
  },
};
const gib = (bytes: number): string => (bytes / 2 ** 30).toFixed(2);

async function child(): Promise<void> {
  await selectBackend('auto', () => {});
  const dir = path.resolve(projectRoot, values.checkpoint);
  const T = Number(values.tokens);
  const phases: Record<string, number> = {};
  let peak = 0;
  const mark = (name: string) => {
    const rss = process.memoryUsage().rss;
    peak = Math.max(peak, rss);
    phases[name] = rss;
  };
  let model = loadHfCheckpoint(dir);
  mark('loaded');
  const V = model.dims.vocab;
  const rng = new Rng(1);
  const seq = Array.from({ length: T + 1 }, () => Math.floor(rng.next() * Math.min(V, 49152)));
  const trainTokens = Array.from({ length: Math.min(6, V - 49152) }, (_, i) => 49152 + i);
  const adapter = LoraAdapter.create(model, { rank: 8, alpha: 16, dropout: 0, targets: [...LORA_MODULES], rslora: false, trainTokens }, 0);
  const set = loraTrainable(adapter);
  const opt = new AdamW(set.params, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 });
  const times: number[] = [];
  for (let i = 0; i < Number(values.reps); i++) {
    const t0 = performance.now();
    const { value, grads } = tf.variableGrads(() => model.loss([seq.slice(0, -1)], [seq.slice(1)], [seq.slice(1).map(() => 1)]), [...set.tape.values()]);
    value.dispose();
    mark('training');
    const sums = new Map([...set.tape].map(([name, v]) => [name, grads[v.name]!] as const).filter(([, g]) => g !== undefined));
    applyUpdate(set, sums, (g) => opt.apply(g, 1e-4, 1));
    for (const g of Object.values(grads)) g.dispose();
    [...set.params.values()].at(-1)!.dataSync();
    times.push(performance.now() - t0);
  }
  phases.training = peak;
  opt.dispose();
  adapter.dispose();
  model.dispose();
  await new Promise((r) => setTimeout(r, 1000));
  const left = tf.memory().numBytes;
  mark('disposed');
  model = loadHfCheckpoint(dir);
  mark('reloaded');
  model.dispose();
  console.log(JSON.stringify({ phases, tensorBytesLeft: left, microBatchMs: times }));
}

function parent(): void {
  const rows: string[] = [];
  for (const v of values.variants.split(',').map((s) => s.trim())) {
    // `mmap:<bytes>`: the same with another fixed threshold
    const m = /^mmap:(\d+)$/.exec(v);
    const named = VARIANTS[v];
    const env = m ? { MALLOC_MMAP_THRESHOLD_: m[1]!, MALLOC_TRIM_THRESHOLD_: m[1]! } : typeof named === 'function' ? named() : named;
    if (!env) throw new Error(`--variants: no variant ${v} (${Object.keys(VARIANTS).join(', ')}, mmap:<bytes>)`);
    const r = spawnSync(process.execPath, [...process.execArgv, process.argv[1]!, '--child', '--checkpoint', values.checkpoint, '--tokens', values.tokens, '--reps', values.reps], {
      env: { ...process.env, ...env },
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    if (r.status !== 0) throw new Error(`variant ${v}: exit ${r.status}`);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { phases: Record<string, number>; tensorBytesLeft: number; microBatchMs: number[] };
    const ms = out.microBatchMs.slice(1).sort((a, b) => a - b);
    const p = out.phases;
    rows.push(`| ${v} | ${gib(p.loaded!)} | ${gib(p.training!)} | ${gib(p.disposed!)} | ${gib(p.reloaded!)} | ${(out.tensorBytesLeft / 2 ** 20).toFixed(1)} | ${ms.length ? (ms[ms.length >> 1]! / 1000).toFixed(1) : '–'} |`);
    console.error(`${v}: ${JSON.stringify(out)}`);
  }
  console.log(`${values.checkpoint}: LoRA rank 8 + 6 token rows, ${values.reps} micro-batches of one ${values.tokens}-token sequence; resident memory (GiB) of the process`);
  console.log('| allocator | model loaded | training (peak) | all disposed | model loaded again | tensor MiB left | micro-batch (s, median after the first) |');
  console.log('|---|---|---|---|---|---|---|');
  console.log(rows.join('\n'));
}

if (values.child) {
  child().catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else {
  parent();
}
