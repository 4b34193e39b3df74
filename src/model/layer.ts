/**
 * One Qwen decoder layer for training on native TensorFlow as a single tf.customGrad with a hand-written backward
 * pass. Against composing the layer from taped ops it
 * - keeps only what the backward pass needs (inputs of the norms and their 1/rms, q/k/v in head layout, attention
 *   probabilities, attention output, gate, up and sigmoid(gate)) and frees it as soon as the layer's backward ran
 *   (tfjs would keep every saved tensor and every intermediate gradient until the whole backward pass ends);
 * - uses one q|k|v matmul, BatchMatMulV2's transpose flags, the attention scale folded into q's RoPE tables, and
 *   softmax's backward as P·(dP − D) with D = rowsum(dO·O) computed on [.., d] rows instead of [.., S] rows.
 * The math is HF's Qwen2/Qwen3 decoder layer; test/unit/modelNative.test.ts compares its gradients with tf's own.
 */
import * as tf from '@tensorflow/tfjs';

/** A layer's parameters in the model's internal layout (Linear weights [in, out]). */
export interface LayerParams {
  inNorm: tf.Tensor1D;
  q: tf.Tensor2D;
  k: tf.Tensor2D;
  v: tf.Tensor2D;
  qb?: tf.Tensor1D;
  kb?: tf.Tensor1D;
  vb?: tf.Tensor1D;
  qNorm?: tf.Tensor1D;
  kNorm?: tf.Tensor1D;
  o: tf.Tensor2D;
  ob?: tf.Tensor1D;
  postNorm: tf.Tensor1D;
  gate: tf.Tensor2D;
  up: tf.Tensor2D;
  down: tf.Tensor2D;
}

const PARAM_NAMES = ['inNorm', 'q', 'k', 'v', 'qb', 'kb', 'vb', 'qNorm', 'kNorm', 'o', 'ob', 'postNorm', 'gate', 'up', 'down'] as const;
type ParamName = (typeof PARAM_NAMES)[number];

/** What every layer of one forward pass shares. */
export interface LayerContext {
  B: number;
  T: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  eps: number;
  /** RoPE tables [B·T, 1, d]: query tables carry the attention scale 1/√d */
  cosQ: tf.Tensor3D;
  sinQ: tf.Tensor3D;
  cosK: tf.Tensor3D;
  sinK: tf.Tensor3D;
  /** rotate_half as a [d, d] matrix */
  rotate: tf.Tensor2D;
  /** additive attention bias [B, 1, T, T] (causal and padding) */
  bias: tf.Tensor4D;
}

/** x [B·T, hidden] → the layer's output [B·T, hidden]. */
export function decoderLayer(x: tf.Tensor2D, p: LayerParams, ctx: LayerContext): tf.Tensor2D {
  const names = PARAM_NAMES.filter((n) => p[n] !== undefined);
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const save = args.pop() as tf.GradSaveFunc;
    const [xi, ...ws] = args as tf.Tensor[];
    const w = Object.fromEntries(names.map((n, i) => [n, ws[i]!])) as Partial<Record<ParamName, tf.Tensor>>;
    const { value, saved } = forward(xi as tf.Tensor2D, w, ctx);
    save(saved);
    return {
      value,
      gradFunc: (dy: tf.Tensor, s: tf.Tensor[]) => {
        const grads = tf.tidy(() => {
          const g = backward(dy as tf.Tensor2D, s, w, ctx);
          return [g.dx, ...names.map((n) => g.dw[n]!)];
        });
        tf.dispose(s); // this layer's activations are no longer needed (the engine's later dispose is a no-op)
        return grads;
      },
    };
  });
  return f(x, ...names.map((n) => p[n]!)) as tf.Tensor2D;
}

/** Saved tensors, in this order. */
interface Saved {
  x: tf.Tensor;
  r1: tf.Tensor;
  q3: tf.Tensor;
  rq: tf.Tensor;
  k3: tf.Tensor;
  rk: tf.Tensor;
  q4: tf.Tensor;
  k4: tf.Tensor;
  v4: tf.Tensor;
  probs: tf.Tensor;
  attn: tf.Tensor;
  x2: tf.Tensor;
  r2: tf.Tensor;
  gate: tf.Tensor;
  up: tf.Tensor;
  sg: tf.Tensor;
  cosQ: tf.Tensor;
  sinQ: tf.Tensor;
  cosK: tf.Tensor;
  sinK: tf.Tensor;
}
const SAVED_KEYS: (keyof Saved)[] = ['x', 'r1', 'q3', 'rq', 'k3', 'rk', 'q4', 'k4', 'v4', 'probs', 'attn', 'x2', 'r2', 'gate', 'up', 'sg', 'cosQ', 'sinQ', 'cosK', 'sinK'];

/** 1 / sqrt(mean(x²) + eps) over the last axis (kept as size 1). */
function invRms(x: tf.Tensor, eps: number): tf.Tensor {
  return tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), eps));
}

/** RMSNorm backward for y = x·r·w: (dx, dw) given dy, x, r = invRms(x), w; dw summed over all leading axes. */
function normBackward(dy: tf.Tensor, x: tf.Tensor, r: tf.Tensor, w: tf.Tensor): { dx: tf.Tensor; dw: tf.Tensor } {
  const xr = tf.mul(x, r);
  const g = tf.mul(dy, w);
  const dx = tf.mul(r, tf.sub(g, tf.mul(xr, tf.mean(tf.mul(g, xr), -1, true))));
  const dw = tf.reshape(tf.sum(tf.reshape(tf.mul(dy, xr), [-1, w.shape[0]!]), 0), w.shape);
  return { dx, dw };
}

function forward(x: tf.Tensor2D, w: Partial<Record<ParamName, tf.Tensor>>, ctx: LayerContext): { value: tf.Tensor2D; saved: tf.Tensor[] } {
  const { B, T, heads: H, kvHeads: K, headDim: hd, eps } = ctx;
  const N = B * T;
  const G = H / K;
  const r1 = invRms(x, ctx.eps);
  const h = tf.mul(tf.mul(x, r1), w.inNorm!);
  let qkv = tf.matMul(h, tf.concat([w.q!, w.k!, w.v!], 1) as tf.Tensor2D);
  if (w.qb) qkv = tf.add(qkv, tf.concat([w.qb, w.kb!, w.vb!]));
  const [q, k, v] = tf.split(qkv, [H * hd, K * hd, K * hd], 1) as [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D];
  const q3 = tf.reshape(q, [N, H, hd]);
  const k3 = tf.reshape(k, [N, K, hd]);
  let rq: tf.Tensor = tf.scalar(1);
  let rk: tf.Tensor = tf.scalar(1);
  let qn: tf.Tensor = q3;
  let kn: tf.Tensor = k3;
  if (w.qNorm && w.kNorm) {
    rq = invRms(q3, eps);
    rk = invRms(k3, eps);
    qn = tf.mul(tf.mul(q3, rq), w.qNorm);
    kn = tf.mul(tf.mul(k3, rk), w.kNorm);
  }
  const rope = (t: tf.Tensor, c: tf.Tensor, s: tf.Tensor): tf.Tensor => tf.add(tf.mul(t, c), tf.mul(tf.matMul(t, ctx.rotate), s));
  const qr = rope(qn, ctx.cosQ, ctx.sinQ);
  const kr = rope(kn, ctx.cosK, ctx.sinK);
  // Head layout: [B, K, G·T, d] for queries (head h = kv head · G + g), [B, K, T, d] for keys and values.
  const q4 = tf.reshape(tf.transpose(tf.reshape(qr, [B, T, H, hd]), [0, 2, 1, 3]), [B, K, G * T, hd]);
  const k4 = tf.transpose(tf.reshape(kr, [B, T, K, hd]), [0, 2, 1, 3]);
  const v4 = tf.transpose(tf.reshape(v, [B, T, K, hd]), [0, 2, 1, 3]);
  const scores = tf.reshape(tf.matMul(q4, k4, false, true), [B, H, T, T]);
  const probs = tf.reshape(tf.softmax(tf.add(scores, ctx.bias)), [B, K, G * T, T]);
  const o = tf.matMul(probs, v4);
  const attn = tf.reshape(tf.transpose(tf.reshape(o, [B, H, T, hd]), [0, 2, 1, 3]), [N, H * hd]);
  let y1 = tf.matMul(attn, w.o! as tf.Tensor2D);
  if (w.ob) y1 = tf.add(y1, w.ob);
  const x2 = tf.add(x, y1);
  const r2 = invRms(x2, eps);
  const h2 = tf.mul(tf.mul(x2, r2), w.postNorm!) as tf.Tensor2D;
  const gate = tf.matMul(h2, w.gate! as tf.Tensor2D);
  const up = tf.matMul(h2, w.up! as tf.Tensor2D);
  const sg = tf.sigmoid(gate);
  const act = tf.mul(tf.mul(gate, sg), up) as tf.Tensor2D;
  const value = tf.add(x2, tf.matMul(act, w.down! as tf.Tensor2D)) as tf.Tensor2D;
  const saved: Saved = {
    x, r1, q3, rq, k3, rk, q4, k4, v4, probs, attn, x2, r2, gate, up, sg,
    cosQ: ctx.cosQ, sinQ: ctx.sinQ, cosK: ctx.cosK, sinK: ctx.sinK,
  };
  return { value, saved: SAVED_KEYS.map((key) => saved[key]) };
}

function backward(dy: tf.Tensor2D, list: tf.Tensor[], w: Partial<Record<ParamName, tf.Tensor>>, ctx: LayerContext): { dx: tf.Tensor; dw: Partial<Record<ParamName, tf.Tensor>> } {
  const s = Object.fromEntries(SAVED_KEYS.map((key, i) => [key, list[i]!])) as unknown as Saved;
  const { B, T, heads: H, kvHeads: K, headDim: hd } = ctx;
  const N = B * T;
  const G = H / K;
  const dw: Partial<Record<ParamName, tf.Tensor>> = {};
  const sumRows = (t: tf.Tensor): tf.Tensor => tf.sum(t, 0);

  // MLP: out = x2 + (silu(gate)·up) @ Wd, gate = h2 @ Wg, up = h2 @ Wu, h2 = norm(x2)
  const silu = tf.mul(s.gate, s.sg);
  const act = tf.mul(silu, s.up);
  dw.down = tf.matMul(act, dy, true, false);
  const dAct = tf.matMul(dy, w.down!, false, true);
  const dUp = tf.mul(dAct, silu);
  // d silu / d gate = sg·(1 + gate·(1 − sg)) = sg·(1 + gate − silu)
  const dGate = tf.mul(tf.mul(dAct, s.up), tf.mul(s.sg, tf.add(tf.sub(s.gate, silu), 1)));
  const xr2 = tf.mul(s.x2, s.r2);
  const h2 = tf.mul(xr2, w.postNorm!);
  dw.gate = tf.matMul(h2, dGate, true, false);
  dw.up = tf.matMul(h2, dUp, true, false);
  const dh2 = tf.add(tf.matMul(dGate, w.gate!, false, true), tf.matMul(dUp, w.up!, false, true));
  const n2 = normBackward(dh2, s.x2, s.r2, w.postNorm!);
  dw.postNorm = n2.dw;
  const dx2 = tf.add(dy, n2.dx);

  // Attention: x2 = x + attn @ Wo (+ bo)
  dw.o = tf.matMul(s.attn, dx2, true, false);
  if (w.ob) dw.ob = sumRows(dx2);
  const dAttn = tf.matMul(dx2, w.o!, false, true);
  // D = rowsum(dO·O) per (b, h, t), from rows [N, H, d] into head layout [B, K, G·T, 1]
  const dRows = tf.sum(tf.mul(tf.reshape(dAttn, [N, H, hd]), tf.reshape(s.attn, [N, H, hd])), -1);
  const D = tf.reshape(tf.transpose(tf.reshape(dRows, [B, T, H]), [0, 2, 1]), [B, K, G * T, 1]);
  const dO = tf.reshape(tf.transpose(tf.reshape(dAttn, [B, T, H, hd]), [0, 2, 1, 3]), [B, K, G * T, hd]);
  const dV4 = tf.matMul(s.probs, dO, true, false);
  const dS = tf.mul(s.probs, tf.sub(tf.matMul(dO, s.v4, false, true), D));
  const dQ4 = tf.matMul(dS, s.k4);
  const dK4 = tf.matMul(dS, s.q4, true, false);
  const dqr = tf.reshape(tf.transpose(tf.reshape(dQ4, [B, H, T, hd]), [0, 2, 1, 3]), [N, H, hd]);
  const dkr = tf.reshape(tf.transpose(dK4, [0, 2, 1, 3]), [N, K, hd]);
  const dv = tf.reshape(tf.transpose(dV4, [0, 2, 1, 3]), [N, K * hd]);
  // RoPE: y = x·C + (x·R)·S  ⇒  dx = dy·C − (dy·S)·R
  const unrope = (d: tf.Tensor, c: tf.Tensor, sn: tf.Tensor): tf.Tensor => tf.sub(tf.mul(d, c), tf.matMul(tf.mul(d, sn), ctx.rotate));
  let dq: tf.Tensor = unrope(dqr, s.cosQ, s.sinQ);
  let dk: tf.Tensor = unrope(dkr, s.cosK, s.sinK);
  if (w.qNorm && w.kNorm) {
    const nq = normBackward(dq, s.q3, s.rq, w.qNorm);
    const nk = normBackward(dk, s.k3, s.rk, w.kNorm);
    dw.qNorm = nq.dw;
    dw.kNorm = nk.dw;
    dq = nq.dx;
    dk = nk.dx;
  }
  const dqkv = tf.concat([tf.reshape(dq, [N, H * hd]), tf.reshape(dk, [N, K * hd]), dv], 1);
  const xr1 = tf.mul(s.x, s.r1);
  const h = tf.mul(xr1, w.inNorm!);
  const dW = tf.matMul(h, dqkv, true, false);
  [dw.q, dw.k, dw.v] = tf.split(dW, [H * hd, K * hd, K * hd], 1);
  if (w.qb) [dw.qb, dw.kb, dw.vb] = tf.split(sumRows(dqkv), [H * hd, K * hd, K * hd]);
  const dh = tf.matMul(dqkv, tf.concat([w.q!, w.k!, w.v!], 1), false, true);
  const n1 = normBackward(dh, s.x, s.r1, w.inNorm!);
  dw.inNorm = n1.dw;
  return { dx: tf.add(dx2, n1.dx), dw };
}
