/**
 * What one tfjs op costs on the active backend, and how fast its matmuls are: the fixed per-op overhead that decides
 * how many kernels a decoding step may afford.
 *
 *   npx tsx bench/op-overhead.ts [--backend auto|wasm|cpu] [--ops N]
 *
 * Rows:
 * - `tf.add [1]`, `tf.add [1,1] in tidy`, `tf.add under a gradient tape`: a tiny element-wise op through the whole
 *   tfjs engine (kernel lookup, scope tracking, tape recording when a gradient is being taken);
 * - `executeOp AddV2` (native only): the same op through tfjs-node's binding alone (TFE_Execute over N-API), the floor
 *   that tfjs' engine adds to;
 * - `dataSync [V]`: reading a row of logits back to JS;
 * - matmuls at the shapes of a forward pass, as GFLOP/s;
 * - (native only) what one node costs inside a TensorFlow graph run (src/model/net/graph.ts), as a decoding step's graph
 *   pays it: a chain of 50 nodes of one kind, run 200 times; compare runs with TF_NUM_INTRAOP_THREADS=1;
 * - (native only) a decoding step's weight matmuls in both weight layouts (src/model/net/decodeGraph.ts weightPlan): x·W
 *   from W [in, out] against x·Wᵀ from W [out, in], at 4 and 16 rows, in a graph session of one intra-op thread (as a
 *   small model's decoding step runs), ten independent matmuls per run, each reading its own fed copy of the weight.
 */
import { parseArgs } from 'node:util';
import * as tf from '@tensorflow/tfjs';
import { backendPrefs, selectBackend, type BackendPref } from '../src/model/net/backend';
import { GraphBuilder, GraphSession } from '../src/model/net/graph';

interface NativeBackend {
  binding: { executeOp(name: string, attrs: unknown[], ids: number[], n: number): { id: number }[]; deleteTensor(id: number): void; TF_ATTR_TYPE: number; TF_FLOAT: number };
  getInputTensorIds(ts: tf.Tensor[]): number[];
}

function perOp(label: string, n: number, fn: () => void): string {
  for (let i = 0; i < Math.min(200, n); i++) fn();
  const t0 = performance.now();
  for (let i = 0; i < n; i++) fn();
  const us = ((performance.now() - t0) * 1000) / n;
  return `| ${label} | ${us.toFixed(1)} µs |`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { backend: { type: 'string', default: 'auto' }, ops: { type: 'string', default: '20000' } } });
  const pref = values.backend as BackendPref;
  if (!backendPrefs.includes(pref)) throw new Error(`--backend must be one of ${backendPrefs.join(', ')}`);
  const backend = await selectBackend(pref, (l) => console.error(l));
  const n = Number(values.ops);
  const rows: string[] = ['| what | per op |', '|---|---|'];
  const a = tf.tensor1d([1]);
  const b = tf.tensor1d([2]);
  rows.push(perOp('tf.add [1] (result disposed)', n, () => tf.add(a, b).dispose()));
  rows.push(perOp('tf.add [1] inside tf.tidy (100 per tidy)', n / 100, () => tf.tidy(() => {
    for (let i = 0; i < 100; i++) tf.add(a, b);
  })) .replace(/([\d.]+) µs/, (_, x: string) => `${(Number(x) / 100).toFixed(1)} µs`));
  const v = tf.variable(tf.tensor1d([1]));
  rows.push(perOp('tf.add [1] under a gradient tape (100 per tape)', n / 100, () => {
    const { value, grads } = tf.variableGrads(() => {
      let x: tf.Tensor = v;
      for (let i = 0; i < 100; i++) x = tf.add(x, b);
      return tf.sum(x) as tf.Scalar;
    }, [v]);
    tf.dispose([value, ...Object.values(grads)]);
  }).replace(/([\d.]+) µs/, (_, x: string) => `${(Number(x) / 100).toFixed(1)} µs (forward + backward)`));
  if (backend.startsWith('tfjs-node')) {
    const nb = tf.backend() as unknown as NativeBackend;
    const attrs = [{ name: 'T', type: nb.binding.TF_ATTR_TYPE, value: nb.binding.TF_FLOAT }];
    const ids = nb.getInputTensorIds([a, b]);
    rows.push(perOp('binding.executeOp AddV2 [1] (no tfjs engine)', n, () => {
      const out = nb.binding.executeOp('AddV2', attrs, ids, 1);
      nb.binding.deleteTensor(out[0]!.id);
    }));
  }
  for (const V of [2048, 151936]) {
    const logits = tf.add(tf.randomNormal([1, V]), 0); // made by TensorFlow, so a read copies out of it
    rows.push(perOp(`dataSync [1, ${V}]`, Math.max(200, n / 100), () => {
      const t = tf.reshape(logits, [-1]);
      t.dataSync();
      t.dispose();
    }));
    rows.push(perOp(`argMax [1, ${V}] + dataSync`, Math.max(200, n / 100), () => {
      const t = tf.argMax(logits, -1);
      t.dataSync();
      t.dispose();
    }));
    logits.dispose();
  }
  rows.push('');
  rows.push('| matmul [m,k]·[k,n] | ms | GFLOP/s |');
  rows.push('|---|---|---|');
  for (const [m, k, nn] of [[2048, 256, 768], [2048, 768, 256], [512, 896, 4864], [512, 4864, 896], [512, 896, 151936], [1, 896, 4864], [2, 896, 151936]] as const) {
    const x = tf.randomNormal([m, k]);
    const w = tf.randomNormal([k, nn]);
    const reps = Math.max(3, Math.min(200, Math.round(2e10 / (2 * m * k * nn))));
    tf.matMul(x, w).dispose();
    const t0 = performance.now();
    for (let i = 0; i < reps; i++) {
      const y = tf.matMul(x, w);
      y.dataSync();
      y.dispose();
    }
    const ms = (performance.now() - t0) / reps;
    rows.push(`| [${m},${k}]·[${k},${nn}] | ${ms.toFixed(2)} | ${((2 * m * k * nn) / ms / 1e6).toFixed(1)} |`);
    tf.dispose([x, w]);
  }
  if (backend.startsWith('tfjs-node')) rows.push('', ...graphNodeCosts(), '', ...layoutCosts());
  console.log(`backend ${backend}, tfjs ${tf.version_core}, TF_NUM_INTRAOP_THREADS=${process.env.TF_NUM_INTRAOP_THREADS ?? '(unset)'}, TF_ENABLE_ONEDNN_OPTS=${process.env.TF_ENABLE_ONEDNN_OPTS ?? '(unset)'}`);
  console.log(rows.join('\n'));
}

/** µs per node in a graph run: chains of 50 nodes of one op at decoding-step shapes. */
function graphNodeCosts(): string[] {
  const F = { T: { type: 'float32' } } as const;
  const chain = 50;
  const cases: [string, number[], (g: GraphBuilder, x: string, w: string) => string][] = [
    ['MatMul [4,256]·[256,256]', [4, 256], (g, x, w) => g.node('MatMul', [x, w], { ...F, transpose_a: { b: false }, transpose_b: { b: false } })],
    ['MatMul [4,256]·[256,256]ᵀ', [4, 256], (g, x, w) => g.node('MatMul', [x, w], { ...F, transpose_a: { b: false }, transpose_b: { b: true } })],
    ['BatchMatMulV2 [4,256]·[256,256]ᵀ', [4, 256], (g, x, w) => g.node('BatchMatMulV2', [x, w], { ...F, adj_x: { b: false }, adj_y: { b: true } })],
    ['Mul [4,256]', [4, 256], (g, x) => g.node('Mul', [x, x], F)],
    ['Rsqrt [4,256]', [4, 256], (g, x) => g.node('Rsqrt', [x], F)],
    ['Softmax [16,160]', [16, 160], (g, x) => g.node('Softmax', [x], F)],
    ['Roll [4,256]', [4, 256], (g, x) => g.node('Roll', [x, g.constant([32], [], 'int32', 'shift'), g.constant([1], [], 'int32', 'axis')], { ...F, Tshift: { type: 'int32' }, Taxis: { type: 'int32' } })],
  ];
  const rows = ['| graph node (chain of 50, one session run) | µs per node |', '|---|---|'];
  for (const [label, shape, make] of cases) {
    const g = new GraphBuilder();
    let x = g.placeholder('x', 'float32', shape);
    const w = g.placeholder('w', 'float32', [256, 256]);
    for (let i = 0; i < chain; i++) x = make(g, x, w);
    g.node('Identity', [x], F, 'out');
    const session = new GraphSession(g, ['out']);
    const feeds = [tf.randomUniform(shape, 0.5, 1), tf.randomNormal([256, 256], 0, 0.05)];
    const run = (): void => tf.dispose(session.run(feeds, ['out']));
    for (let i = 0; i < 20; i++) run();
    const t0 = performance.now();
    for (let i = 0; i < 200; i++) run();
    rows.push(`| ${label} | ${(((performance.now() - t0) * 1000) / 200 / chain).toFixed(1)} |`);
    session.dispose();
    tf.dispose(feeds);
  }
  return rows;
}

/** µs per weight matmul at decoding shapes, x·W against x·Wᵀ (weightPlan's two layouts). */
function layoutCosts(): string[] {
  const F = { T: { type: 'float32' } } as const;
  const rows = ['| weight matmul, one-thread session (rows · in → out) | x·W, W [in, out] | x·Wᵀ, W [out, in] | x·Wᵀ / x·W |', '|---|---|---|---|'];
  const shapes: [number, number, string][] = [[256, 768, 'small: gate/up'], [768, 256, 'small: down'], [576, 1536, 'SmolLM2: gate/up'], [1536, 576, 'SmolLM2: down'], [576, 49152, 'SmolLM2: tied head']];
  for (const [k, n, what] of shapes) for (const m of [4, 16]) {
    const us: number[] = [];
    for (const tb of [false, true]) {
      const g = new GraphBuilder();
      const x = g.placeholder('x', 'float32', [m, k]);
      // ten weight placeholders fed the same tensor: ten matmuls the graph optimizer cannot merge into one
      const outs = Array.from({ length: 10 }, (_, i) => g.node('MatMul', [x, g.placeholder(`w${i}`, 'float32', tb ? [n, k] : [k, n])], { ...F, transpose_a: { b: false }, transpose_b: { b: tb } }));
      g.node('AddN', outs, { ...F, N: { i: outs.length } }, 'out');
      const session = new GraphSession(g, ['out'], { intraOpThreads: 1 });
      const w = tf.randomNormal(tb ? [n, k] : [k, n], 0, 0.05);
      const feeds = [tf.randomUniform([m, k]), ...Array<tf.Tensor>(10).fill(w)];
      const run = (): void => tf.dispose(session.run(feeds, ['out']));
      for (let i = 0; i < 3; i++) run();
      const reps = Math.max(5, Math.round(5e8 / (2 * m * k * n * 10)));
      const t0 = performance.now();
      for (let i = 0; i < reps; i++) run();
      us.push(((performance.now() - t0) * 1000) / reps / 10);
      session.dispose();
      tf.dispose([feeds[0]!, w]);
    }
    rows.push(`| ${what}: ${m} · ${k} → ${n} | ${us[0]!.toFixed(1)} µs | ${us[1]!.toFixed(1)} µs | ${(us[1]! / us[0]!).toFixed(2)}× |`);
  }
  return rows;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
