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
import { attr, nativeOp } from './native';

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
  /** additive attention bias (causal and padding) per query chunk (causalChunks(T)): [B, 1, b − a, 1, b] */
  biasChunks: tf.Tensor[];
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
  /** x·r1: the input norm before its weight */
  xr1: tf.Tensor;
  r1: tf.Tensor;
  q3: tf.Tensor;
  rq: tf.Tensor;
  k3: tf.Tensor;
  rk: tf.Tensor;
  q4: tf.Tensor;
  k4: tf.Tensor;
  v4: tf.Tensor;
  attn: tf.Tensor;
  /** x2·r2: the post-attention norm before its weight */
  xr2: tf.Tensor;
  r2: tf.Tensor;
  gate: tf.Tensor;
  up: tf.Tensor;
  sg: tf.Tensor;
  silu: tf.Tensor;
  /** silu·up, the down projection's input */
  act: tf.Tensor;
  cosQ: tf.Tensor;
  sinQ: tf.Tensor;
  cosK: tf.Tensor;
  sinK: tf.Tensor;
}
const SAVED_KEYS: (keyof Saved)[] = ['xr1', 'r1', 'q3', 'rq', 'k3', 'rk', 'q4', 'k4', 'v4', 'attn', 'xr2', 'r2', 'gate', 'up', 'sg', 'silu', 'act', 'cosQ', 'sinQ', 'cosK', 'sinK'];
// ...followed by the attention probabilities of each query chunk.

/** Queries per attention chunk: causal attention skips the keys after a chunk's last query. */
const CHUNK = 128;

/**
 * Query chunks [a, b) of a causal sequence of length T: chunk c attends keys [0, b) only, which skips the masked
 * upper triangle blockwise (3/8 of the attention work at T = 512).
 */
export function causalChunks(T: number, size = CHUNK): [number, number][] {
  const n = Math.max(1, Math.round(T / size));
  return Array.from({ length: n }, (_, c) => [Math.round((c * T) / n), Math.round(((c + 1) * T) / n)] as [number, number]);
}

/** 1 / sqrt(mean(x²) + eps) over the last axis (kept as size 1). */
function invRms(x: tf.Tensor, eps: number): tf.Tensor {
  return tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), eps));
}

/** dy·y·(1 − y) in one op (TensorFlow's SigmoidGrad). */
function sigmoidGrad(y: tf.Tensor, dy: tf.Tensor): tf.Tensor {
  return nativeOp('SigmoidGrad', [y, dy], [attr.type('T', 'float32')]);
}

/** Backward of y = x·r with r = invRms(x), given dy, xr = x·r and r. */
function unitNormBackward(dy: tf.Tensor, xr: tf.Tensor, r: tf.Tensor): tf.Tensor {
  return tf.mul(r, tf.sub(dy, tf.mul(xr, tf.mean(tf.mul(dy, xr), -1, true))));
}

/**
 * Backward of Y = (xr·w)·W for Y's gradient dY (a norm's output times its weight w, then a projection W): dxr and
 * the gradients of w and W. (Folding w into W instead would trade these [N, hidden] passes for passes over W, which
 * for a 0.5B model's MLP is ~10× more data.)
 */
function normProjBackward(dY: tf.Tensor, xr: tf.Tensor, w: tf.Tensor, W: tf.Tensor): { dxr: tf.Tensor; dw: tf.Tensor; dW: tf.Tensor } {
  const dh = tf.matMul(dY, W, false, true);
  return {
    dW: tf.matMul(tf.mul(xr, w), dY, true, false),
    dw: tf.sum(tf.mul(dh, xr), 0),
    dxr: tf.mul(dh, w),
  };
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
  const xr1 = tf.mul(x, r1);
  let qkv = tf.matMul(tf.mul(xr1, w.inNorm!), tf.concat([w.q!, w.k!, w.v!], 1) as tf.Tensor2D);
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
  // Head layout: queries [B, K, T·G, d] (row t·G + g is query head kv·G + g at position t), keys and values
  // [B, K, T, d]. Per query chunk [a, b): scores against keys [0, b), bias, softmax, ·v.
  const q4 = tf.reshape(tf.transpose(tf.reshape(qr, [B, T, K, G, hd]), [0, 2, 1, 3, 4]), [B, K, T * G, hd]);
  const k4 = tf.transpose(tf.reshape(kr, [B, T, K, hd]), [0, 2, 1, 3]);
  const v4 = tf.transpose(tf.reshape(v, [B, T, K, hd]), [0, 2, 1, 3]);
  const chunks = causalChunks(T);
  const probs: tf.Tensor[] = [];
  const outs = chunks.map(([a, b], c) => {
    const n = b - a;
    const qc = chunks.length === 1 ? q4 : tf.slice(q4, [0, 0, a * G, 0], [B, K, n * G, hd]);
    const kc = b === T ? k4 : tf.slice(k4, [0, 0, 0, 0], [B, K, b, hd]);
    const vc = b === T ? v4 : tf.slice(v4, [0, 0, 0, 0], [B, K, b, hd]);
    const bias = ctx.biasChunks[c]!;
    const scores = tf.reshape(tf.matMul(qc, kc, false, true), [B, K, n, G, b]);
    const p = tf.reshape(tf.softmax(tf.add(scores, bias)), [B, K, n * G, b]);
    probs.push(p);
    return tf.matMul(p, vc);
  });
  const o = outs.length === 1 ? outs[0]! : tf.concat(outs, 2);
  const attn = tf.reshape(tf.transpose(tf.reshape(o, [B, K, T, G, hd]), [0, 2, 1, 3, 4]), [N, H * hd]);
  let y1 = tf.matMul(attn, w.o! as tf.Tensor2D);
  if (w.ob) y1 = tf.add(y1, w.ob);
  const x2 = tf.add(x, y1);
  const r2 = invRms(x2, eps);
  const xr2 = tf.mul(x2, r2);
  const h2 = tf.mul(xr2, w.postNorm!) as tf.Tensor2D;
  const gate = tf.matMul(h2, w.gate! as tf.Tensor2D);
  const up = tf.matMul(h2, w.up! as tf.Tensor2D);
  const sg = tf.sigmoid(gate);
  const silu = tf.mul(gate, sg);
  const act = tf.mul(silu, up);
  const value = tf.add(x2, tf.matMul(act, w.down! as tf.Tensor2D)) as tf.Tensor2D;
  const saved: Saved = {
    xr1, r1, q3, rq, k3, rk, q4, k4, v4, attn, xr2, r2, gate, up, sg, silu, act,
    cosQ: ctx.cosQ, sinQ: ctx.sinQ, cosK: ctx.cosK, sinK: ctx.sinK,
  };
  return { value, saved: [...SAVED_KEYS.map((key) => saved[key]), ...probs] };
}

function backward(dy: tf.Tensor2D, list: tf.Tensor[], w: Partial<Record<ParamName, tf.Tensor>>, ctx: LayerContext): { dx: tf.Tensor; dw: Partial<Record<ParamName, tf.Tensor>> } {
  const s = Object.fromEntries(SAVED_KEYS.map((key, i) => [key, list[i]!])) as unknown as Saved;
  const probs = list.slice(SAVED_KEYS.length);
  const { B, T, heads: H, kvHeads: K, headDim: hd } = ctx;
  const N = B * T;
  const G = H / K;
  const dw: Partial<Record<ParamName, tf.Tensor>> = {};
  const sumRows = (t: tf.Tensor): tf.Tensor => tf.sum(t, 0);

  // MLP: out = x2 + (silu(gate)·up) @ Wd, gate = (x2·r2) @ diag(w2)·Wg, up = (x2·r2) @ diag(w2)·Wu
  dw.down = tf.matMul(s.act, dy, true, false);
  const dAct = tf.matMul(dy, w.down!, false, true);
  const dUp = tf.mul(dAct, s.silu);
  // d silu / d gate = sg + gate·sg·(1 − sg), the last term TensorFlow's SigmoidGrad(sg, gate)
  const dGate = tf.mul(tf.mul(dAct, s.up), tf.add(s.sg, sigmoidGrad(s.sg, s.gate)));
  const h2 = tf.mul(s.xr2, w.postNorm!);
  dw.gate = tf.matMul(h2, dGate, true, false);
  dw.up = tf.matMul(h2, dUp, true, false);
  const dh2 = tf.add(tf.matMul(dGate, w.gate!, false, true), tf.matMul(dUp, w.up!, false, true));
  dw.postNorm = tf.sum(tf.mul(dh2, s.xr2), 0);
  const dx2 = tf.add(dy, unitNormBackward(tf.mul(dh2, w.postNorm!), s.xr2, s.r2));

  // Attention: x2 = x + attn @ Wo (+ bo)
  dw.o = tf.matMul(s.attn, dx2, true, false);
  if (w.ob) dw.ob = sumRows(dx2);
  const dAttn = tf.matMul(dx2, w.o!, false, true);
  // D = rowsum(dO·O) per (b, t, h), from rows [N, H, d] into the queries' head layout [B, K, T·G, 1]
  const dRows = tf.sum(tf.mul(tf.reshape(dAttn, [N, H, hd]), tf.reshape(s.attn, [N, H, hd])), -1);
  const D = tf.reshape(tf.transpose(tf.reshape(dRows, [B, T, K, G]), [0, 2, 1, 3]), [B, K, T * G, 1]);
  const dO = tf.reshape(tf.transpose(tf.reshape(dAttn, [B, T, K, G, hd]), [0, 2, 1, 3, 4]), [B, K, T * G, hd]);
  // dP − D in one matmul: [dO | −D] · [v | 1]ᵀ
  const dOaug = tf.concat([dO, tf.neg(D)], 3);
  const vAug = tf.concat([s.v4, tf.ones([B, K, T, 1])], 3);
  const chunks = causalChunks(T);
  const dQs: tf.Tensor[] = [];
  const dKs: tf.Tensor[] = [];
  const dVs: tf.Tensor[] = [];
  chunks.forEach(([a, b], c) => {
    const n = b - a;
    const rows = (t: tf.Tensor, width: number): tf.Tensor => (chunks.length === 1 ? t : tf.slice(t, [0, 0, a * G, 0], [B, K, n * G, width]));
    const keys = (t: tf.Tensor, width = hd): tf.Tensor => (b === T ? t : tf.slice(t, [0, 0, 0, 0], [B, K, b, width]));
    const p = probs[c]!;
    const dS = tf.mul(p, tf.matMul(rows(dOaug, hd + 1), keys(vAug, hd + 1), false, true));
    dQs.push(tf.matMul(dS, keys(s.k4)));
    const pad = (t: tf.Tensor): tf.Tensor => (b === T ? t : tf.pad(t, [[0, 0], [0, 0], [0, T - b], [0, 0]]));
    dKs.push(pad(tf.matMul(dS, rows(s.q4, hd), true, false)));
    dVs.push(pad(tf.matMul(p, rows(dO, hd), true, false)));
  });
  const dQ4 = dQs.length === 1 ? dQs[0]! : tf.concat(dQs, 2);
  const dK4 = dKs.length === 1 ? dKs[0]! : tf.addN(dKs);
  const dV4 = dVs.length === 1 ? dVs[0]! : tf.addN(dVs);
  const dqr = tf.reshape(tf.transpose(tf.reshape(dQ4, [B, K, T, G, hd]), [0, 2, 1, 3, 4]), [N, H, hd]);
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
  const f1 = normProjBackward(dqkv, s.xr1, w.inNorm!, tf.concat([w.q!, w.k!, w.v!], 1));
  [dw.q, dw.k, dw.v] = tf.split(f1.dW, [H * hd, K * hd, K * hd], 1);
  if (w.qb) [dw.qb, dw.kb, dw.vb] = tf.split(sumRows(dqkv), [H * hd, K * hd, K * hd]);
  dw.inNorm = f1.dw;
  return { dx: tf.add(dx2, unitNormBackward(f1.dxr, s.xr1, s.r1)), dw };
}
