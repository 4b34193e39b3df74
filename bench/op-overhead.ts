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
 * - matmuls at the shapes of a forward pass, as GFLOP/s.
 */
import { parseArgs } from 'node:util';
import * as tf from '@tensorflow/tfjs';
import { backendPrefs, selectBackend, type BackendPref } from '../src/model/backend';

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
  console.log(`backend ${backend}, tfjs ${tf.version_core}, TF_NUM_INTRAOP_THREADS=${process.env.TF_NUM_INTRAOP_THREADS ?? '(unset)'}, TF_ENABLE_ONEDNN_OPTS=${process.env.TF_ENABLE_ONEDNN_OPTS ?? '(unset)'}`);
  console.log(rows.join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
