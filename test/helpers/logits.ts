/** Logits fixtures recorded by transformers / peft (logits.json) and the check of a model against them. */
import assert from 'node:assert/strict';
import type * as tf from '@tensorflow/tfjs';
import type { QwenModel } from '../../src/model/net/qwen';

export interface LogitsFixture {
  input_ids: number[][];
  logits: number[][][];
  padded: { input_ids: number[][]; attention_mask: number[][]; position_ids: number[][]; logits: number[][][] };
}

/** Max |a - b| over the positions with mask 1 (all when no mask). */
export function maxDiff(a: number[][][], b: number[][][], mask?: number[][]): number {
  let m = 0;
  a.forEach((seq, i) => seq.forEach((row, t) => {
    if (mask && mask[i]![t] === 0) return;
    row.forEach((x, v) => { m = Math.max(m, Math.abs(x - b[i]![t]![v]!)); });
  }));
  return m;
}

/** The model's logits on the fixture's inputs (plain, and left-padded with positions) within 1e-4 of its logits. */
export function checkLogits(model: QwenModel, ref: LogitsFixture, what?: string): void {
  const label = what ? `${what}: ` : '';
  const plain = model.forward(ref.input_ids);
  const d1 = maxDiff(plain.arraySync(), ref.logits);
  assert.ok(d1 < 1e-4, `${label}logits differ by ${d1}`);
  const p = ref.padded;
  const padded = model.forward(p.input_ids, { positions: p.position_ids, keyMask: p.attention_mask });
  const d2 = maxDiff(padded.arraySync(), p.logits, p.attention_mask);
  assert.ok(d2 < 1e-4, `${label}left-padded logits differ by ${d2}`);
  (plain as tf.Tensor).dispose();
  (padded as tf.Tensor).dispose();
}
