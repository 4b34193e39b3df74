/**
 * One Qwen decoder layer for training on native TensorFlow, forward and hand-written backward pass, written once over
 * TensorOps so that it runs either op by op (eager tfjs tensors: one tf.customGrad per layer, decoderLayer) or as
 * nodes of a TensorFlow graph (trainGraph.ts: the whole stack of layers as one graph run forward and one backward).
 * Against composing the layer from taped ops it
 * - keeps only what the backward pass needs (inputs of the norms and their 1/rms, q/k/v in head layout, attention
 *   probabilities, attention output, gate, up and sigmoid(gate)) and frees it as soon as the layer's backward ran
 *   (tfjs would keep every saved tensor and every intermediate gradient until the whole backward pass ends);
 * - uses one q|k|v matmul, BatchMatMulV2's transpose flags, the attention scale folded into q's RoPE tables, and
 *   softmax's backward as P·(dP − D) with D = rowsum(dO·O) computed on [.., d] rows instead of [.., S] rows.
 * The math is HF's Qwen2/Qwen3 decoder layer; test/unit/model/native.test.ts compares its gradients with tf's own.
 */
import * as tf from '@tensorflow/tfjs';
import { attr, nativeOp } from './native';

/** The ops the layer is written in: eager tfjs tensors (eagerOps) or graph nodes (trainGraph.ts). */
export interface TensorOps<T> {
  matMul(a: T, b: T, transposeA?: boolean, transposeB?: boolean): T;
  add(a: T, b: T): T;
  sub(a: T, b: T): T;
  mul(a: T, b: T): T;
  neg(x: T): T;
  reshape(x: T, shape: number[]): T;
  transpose(x: T, perm: number[]): T;
  slice(x: T, begin: number[], size: number[]): T;
  concat(xs: T[], axis: number): T;
  split(x: T, sizes: number[], axis: number): T[];
  sum(x: T, axis: number, keepDims?: boolean): T;
  mean(x: T, axis: number, keepDims?: boolean): T;
  rsqrt(x: T): T;
  square(x: T): T;
  /** over the last axis */
  softmax(x: T): T;
  sigmoid(x: T): T;
  /** dy·y·(1 − y) in one op (TensorFlow's SigmoidGrad) */
  sigmoidGrad(y: T, dy: T): T;
  pad(x: T, paddings: [number, number][]): T;
  addN(xs: T[]): T;
  ones(shape: number[]): T;
  scalar(v: number): T;
}

/** TensorOps on eager tfjs tensors (the native backend: sigmoidGrad is TensorFlow's op). */
export const eagerOps: TensorOps<tf.Tensor> = {
  matMul: (a, b, ta = false, tb = false) => tf.matMul(a, b, ta, tb),
  add: (a, b) => tf.add(a, b),
  sub: (a, b) => tf.sub(a, b),
  mul: (a, b) => tf.mul(a, b),
  neg: (x) => tf.neg(x),
  reshape: (x, shape) => tf.reshape(x, shape),
  transpose: (x, perm) => tf.transpose(x, perm),
  slice: (x, begin, size) => tf.slice(x, begin, size),
  concat: (xs, axis) => tf.concat(xs, axis),
  split: (x, sizes, axis) => tf.split(x, sizes, axis),
  sum: (x, axis, keepDims = false) => tf.sum(x, axis, keepDims),
  mean: (x, axis, keepDims = false) => tf.mean(x, axis, keepDims),
  rsqrt: (x) => tf.rsqrt(x),
  square: (x) => tf.square(x),
  softmax: (x) => tf.softmax(x),
  sigmoid: (x) => tf.sigmoid(x),
  sigmoidGrad: (y, dy) => nativeOp('SigmoidGrad', [y, dy], [attr.type('T', 'float32')]),
  pad: (x, paddings) => tf.pad(x, paddings),
  addN: (xs) => tf.addN(xs),
  ones: (shape) => tf.ones(shape),
  scalar: (v) => tf.scalar(v),
};

/** A layer's parameters in the model's internal layout (Linear weights [in, out]). */
export interface LayerParams<T = tf.Tensor> {
  inNorm: T;
  q: T;
  k: T;
  v: T;
  qb?: T;
  kb?: T;
  vb?: T;
  qNorm?: T;
  kNorm?: T;
  o: T;
  ob?: T;
  postNorm: T;
  gate: T;
  up: T;
  down: T;
}

export const PARAM_NAMES = ['inNorm', 'q', 'k', 'v', 'qb', 'kb', 'vb', 'qNorm', 'kNorm', 'o', 'ob', 'postNorm', 'gate', 'up', 'down'] as const;
export type ParamName = (typeof PARAM_NAMES)[number];

/** What every layer of one forward pass shares. */
export interface LayerContext<T = tf.Tensor> {
  B: number;
  T: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  eps: number;
  /** RoPE tables [B·T, 1, d]: query tables carry the attention scale 1/√d */
  cosQ: T;
  sinQ: T;
  cosK: T;
  sinK: T;
  /** rotate_half as a [d, d] matrix */
  rotate: T;
  /** additive attention bias (causal and padding) per query chunk (causalChunks(T)): [B, 1, b − a, 1, b] */
  biasChunks: T[];
}

/** x [B·T, hidden] → the layer's output [B·T, hidden], eager, as one tf.customGrad. */
export function decoderLayer(x: tf.Tensor2D, p: LayerParams, ctx: LayerContext): tf.Tensor2D {
  const names = PARAM_NAMES.filter((n) => p[n] !== undefined);
  const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const save = args.pop() as tf.GradSaveFunc;
    const [xi, ...ws] = args as tf.Tensor[];
    const w = Object.fromEntries(names.map((n, i) => [n, ws[i]!])) as Partial<Record<ParamName, tf.Tensor>>;
    const { value, saved } = layerForward(eagerOps, xi!, w, ctx);
    // The RoPE tables are saved too: the tidy around the forward pass disposes what is not saved.
    save([...saved, ctx.cosQ, ctx.sinQ, ctx.cosK, ctx.sinK]);
    return {
      value,
      gradFunc: (dy: tf.Tensor, s: tf.Tensor[]) => {
        const grads = tf.tidy(() => {
          const [cosQ, sinQ, cosK, sinK] = s.slice(-4) as [tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor];
          const g = layerBackward(eagerOps, dy, s.slice(0, -4), w, { ...ctx, cosQ, sinQ, cosK, sinK });
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
interface Saved<T> {
  /** x·r1: the input norm before its weight */
  xr1: T;
  r1: T;
  q3: T;
  rq: T;
  k3: T;
  rk: T;
  q4: T;
  k4: T;
  v4: T;
  attn: T;
  /** x2·r2: the post-attention norm before its weight */
  xr2: T;
  r2: T;
  gate: T;
  up: T;
  sg: T;
  silu: T;
  /** silu·up, the down projection's input */
  act: T;
}
const SAVED_KEYS: (keyof Saved<unknown>)[] = ['xr1', 'r1', 'q3', 'rq', 'k3', 'rk', 'q4', 'k4', 'v4', 'attn', 'xr2', 'r2', 'gate', 'up', 'sg', 'silu', 'act'];
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
export function invRms<T>(o: TensorOps<T>, x: T, eps: number): T {
  return o.rsqrt(o.add(o.mean(o.square(x), -1, true), o.scalar(eps)));
}

/** Backward of y = x·r with r = invRms(x), given dy, xr = x·r and r. */
export function unitNormBackward<T>(o: TensorOps<T>, dy: T, xr: T, r: T): T {
  return o.mul(r, o.sub(dy, o.mul(xr, o.mean(o.mul(dy, xr), -1, true))));
}

/**
 * Backward of Y = (xr·w)·W for Y's gradient dY (a norm's output times its weight w, then a projection W): dxr and
 * the gradients of w and W. (Folding w into W instead would trade these [N, hidden] passes for passes over W, which
 * for a 0.5B model's MLP is ~10× more data.)
 */
function normProjBackward<T>(o: TensorOps<T>, dY: T, xr: T, w: T, W: T, weights = true): { dxr: T; dw: T; dW?: T } {
  const dh = o.matMul(dY, W, false, true);
  return {
    ...(weights ? { dW: o.matMul(o.mul(xr, w), dY, true, false) } : {}),
    dw: o.sum(o.mul(dh, xr), 0),
    dxr: o.mul(dh, w),
  };
}

/** RMSNorm backward for y = x·r·w over the last axis (size n): (dx, dw) given dy, x, r = invRms(x), w; dw [n] summed over all leading axes. */
function normBackward<T>(o: TensorOps<T>, dy: T, x: T, r: T, w: T, n: number): { dx: T; dw: T } {
  const xr = o.mul(x, r);
  const g = o.mul(dy, w);
  const dx = o.mul(r, o.sub(g, o.mul(xr, o.mean(o.mul(g, xr), -1, true))));
  const dw = o.sum(o.reshape(o.mul(dy, xr), [-1, n]), 0);
  return { dx, dw };
}

/** The layer's output for x [B·T, hidden], and what its backward pass needs (SAVED_KEYS, then each chunk's attention probabilities). */
export function layerForward<T>(o: TensorOps<T>, x: T, w: Partial<Record<ParamName, T>>, ctx: LayerContext<T>): { value: T; saved: T[] } {
  const { B, T, heads: H, kvHeads: K, headDim: hd, eps } = ctx;
  const N = B * T;
  const G = H / K;
  const r1 = invRms(o, x, ctx.eps);
  const xr1 = o.mul(x, r1);
  let qkv = o.matMul(o.mul(xr1, w.inNorm!), o.concat([w.q!, w.k!, w.v!], 1));
  if (w.qb) qkv = o.add(qkv, o.concat([w.qb, w.kb!, w.vb!], 0));
  const [q, k, v] = o.split(qkv, [H * hd, K * hd, K * hd], 1) as [T, T, T];
  const q3 = o.reshape(q, [N, H, hd]);
  const k3 = o.reshape(k, [N, K, hd]);
  let rq = o.scalar(1);
  let rk = o.scalar(1);
  let qn = q3;
  let kn = k3;
  if (w.qNorm && w.kNorm) {
    rq = invRms(o, q3, eps);
    rk = invRms(o, k3, eps);
    qn = o.mul(o.mul(q3, rq), w.qNorm);
    kn = o.mul(o.mul(k3, rk), w.kNorm);
  }
  const rope = (t: T, c: T, s: T): T => o.add(o.mul(t, c), o.mul(o.matMul(t, ctx.rotate), s));
  const qr = rope(qn, ctx.cosQ, ctx.sinQ);
  const kr = rope(kn, ctx.cosK, ctx.sinK);
  // Head layout: queries [B, K, T·G, d] (row t·G + g is query head kv·G + g at position t), keys and values
  // [B, K, T, d]. Per query chunk [a, b): scores against keys [0, b), bias, softmax, ·v.
  const q4 = o.reshape(o.transpose(o.reshape(qr, [B, T, K, G, hd]), [0, 2, 1, 3, 4]), [B, K, T * G, hd]);
  const k4 = o.transpose(o.reshape(kr, [B, T, K, hd]), [0, 2, 1, 3]);
  const v4 = o.transpose(o.reshape(v, [B, T, K, hd]), [0, 2, 1, 3]);
  const chunks = causalChunks(T);
  const probs: T[] = [];
  const outs = chunks.map(([a, b], c) => {
    const n = b - a;
    const qc = chunks.length === 1 ? q4 : o.slice(q4, [0, 0, a * G, 0], [B, K, n * G, hd]);
    const kc = b === T ? k4 : o.slice(k4, [0, 0, 0, 0], [B, K, b, hd]);
    const vc = b === T ? v4 : o.slice(v4, [0, 0, 0, 0], [B, K, b, hd]);
    const scores = o.reshape(o.matMul(qc, kc, false, true), [B, K, n, G, b]);
    const p = o.reshape(o.softmax(o.add(scores, ctx.biasChunks[c]!)), [B, K, n * G, b]);
    probs.push(p);
    return o.matMul(p, vc);
  });
  const out = outs.length === 1 ? outs[0]! : o.concat(outs, 2);
  const attn = o.reshape(o.transpose(o.reshape(out, [B, K, T, G, hd]), [0, 2, 1, 3, 4]), [N, H * hd]);
  let y1 = o.matMul(attn, w.o!);
  if (w.ob) y1 = o.add(y1, w.ob);
  const x2 = o.add(x, y1);
  const r2 = invRms(o, x2, eps);
  const xr2 = o.mul(x2, r2);
  const h2 = o.mul(xr2, w.postNorm!);
  const gate = o.matMul(h2, w.gate!);
  const up = o.matMul(h2, w.up!);
  const sg = o.sigmoid(gate);
  const silu = o.mul(gate, sg);
  const act = o.mul(silu, up);
  const value = o.add(x2, o.matMul(act, w.down!));
  const saved: Saved<T> = { xr1, r1, q3, rq, k3, rk, q4, k4, v4, attn, xr2, r2, gate, up, sg, silu, act };
  return { value, saved: [...SAVED_KEYS.map((key) => saved[key]), ...probs] };
}

/** Gradients of the layer's input and weights for the gradient dy of its output, from layerForward's saved tensors. */
/** The linear layers LoRA adapts (internal names), as in lora.ts. */
export const LINEAR_NAMES = ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] as const;
export type LinearName = (typeof LINEAR_NAMES)[number];

/**
 * A LoRA adapter's factors on one linear layer, in PEFT's layout: A [r, in], B [out, r]; the layer's weight is
 * W + scale·(B·A)ᵀ in the internal [in, out] layout.
 */
export interface LoraFactors<T> {
  a: T;
  b: T;
  scale: number;
}

/**
 * dL/dA and dL/dB of an adapted layer y = x·W' (x [N, in], dy [N, out]) without the dense dL/dW' = xᵀ·dy:
 * dA = s·(dy·B)ᵀ·x [r, in] and dB = s·dyᵀ·(x·Aᵀ) [out, r], 2·N·r·(in + out) multiply-adds in place of N·in·out.
 */
function loraGrads<T>(o: TensorOps<T>, x: T, dY: T, f: LoraFactors<T>): { a: T; b: T } {
  const u = o.matMul(dY, f.b); // [N, r]
  const v = o.matMul(x, f.a, false, true); // [N, r]
  const scale = o.scalar(f.scale);
  return { a: o.mul(o.matMul(u, x, true, false), scale), b: o.mul(o.matMul(dY, v, true, false), scale) };
}

/**
 * The layer's backward pass: dx and every weight's gradient; or, with `lora` (frozen weights, LoRA training), dx and
 * the factors' gradients of the adapted layers only (no weight gradient is computed).
 */
export function layerBackward<T>(o: TensorOps<T>, dy: T, list: T[], w: Partial<Record<ParamName, T>>, ctx: LayerContext<T>, lora?: Partial<Record<LinearName, LoraFactors<T>>>): { dx: T; dw: Partial<Record<ParamName, T>>; dlora: Partial<Record<LinearName, { a: T; b: T }>> } {
  const s = Object.fromEntries(SAVED_KEYS.map((key, i) => [key, list[i]!])) as unknown as Saved<T>;
  const probs = list.slice(SAVED_KEYS.length);
  const { B, T, heads: H, kvHeads: K, headDim: hd } = ctx;
  const N = B * T;
  const G = H / K;
  const dw: Partial<Record<ParamName, T>> = {};
  const dlora: Partial<Record<LinearName, { a: T; b: T }>> = {};
  const frozen = lora !== undefined;
  // A weight's gradient (x·W = y): the dense one when trained, the factors' when adapted, nothing when frozen.
  const weightGrad = (name: LinearName, x: T, dY: T): void => {
    const f = lora?.[name];
    if (f) dlora[name] = loraGrads(o, x, dY, f);
    else if (!frozen) dw[name] = o.matMul(x, dY, true, false);
  };
  const sumRows = (t: T): T => o.sum(t, 0);

  // MLP: out = x2 + (silu(gate)·up) @ Wd, gate = (x2·r2) @ diag(w2)·Wg, up = (x2·r2) @ diag(w2)·Wu
  weightGrad('down', s.act, dy);
  const dAct = o.matMul(dy, w.down!, false, true);
  const dUp = o.mul(dAct, s.silu);
  // d silu / d gate = sg + gate·sg·(1 − sg), the last term TensorFlow's SigmoidGrad(sg, gate)
  const dGate = o.mul(o.mul(dAct, s.up), o.add(s.sg, o.sigmoidGrad(s.sg, s.gate)));
  const h2 = o.mul(s.xr2, w.postNorm!);
  weightGrad('gate', h2, dGate);
  weightGrad('up', h2, dUp);
  const dh2 = o.add(o.matMul(dGate, w.gate!, false, true), o.matMul(dUp, w.up!, false, true));
  if (!frozen) dw.postNorm = o.sum(o.mul(dh2, s.xr2), 0);
  const dx2 = o.add(dy, unitNormBackward(o, o.mul(dh2, w.postNorm!), s.xr2, s.r2));

  // Attention: x2 = x + attn @ Wo (+ bo)
  weightGrad('o', s.attn, dx2);
  if (w.ob && !frozen) dw.ob = sumRows(dx2);
  const dAttn = o.matMul(dx2, w.o!, false, true);
  // D = rowsum(dO·O) per (b, t, h), from rows [N, H, d] into the queries' head layout [B, K, T·G, 1]
  const dRows = o.sum(o.mul(o.reshape(dAttn, [N, H, hd]), o.reshape(s.attn, [N, H, hd])), -1);
  const D = o.reshape(o.transpose(o.reshape(dRows, [B, T, K, G]), [0, 2, 1, 3]), [B, K, T * G, 1]);
  const dO = o.reshape(o.transpose(o.reshape(dAttn, [B, T, K, G, hd]), [0, 2, 1, 3, 4]), [B, K, T * G, hd]);
  // dP − D in one matmul: [dO | −D] · [v | 1]ᵀ
  const dOaug = o.concat([dO, o.neg(D)], 3);
  const vAug = o.concat([s.v4, o.ones([B, K, T, 1])], 3);
  const chunks = causalChunks(T);
  const dQs: T[] = [];
  const dKs: T[] = [];
  const dVs: T[] = [];
  chunks.forEach(([a, b], c) => {
    const n = b - a;
    const rows = (t: T, width: number): T => (chunks.length === 1 ? t : o.slice(t, [0, 0, a * G, 0], [B, K, n * G, width]));
    const keys = (t: T, width = hd): T => (b === T ? t : o.slice(t, [0, 0, 0, 0], [B, K, b, width]));
    const p = probs[c]!;
    const dS = o.mul(p, o.matMul(rows(dOaug, hd + 1), keys(vAug, hd + 1), false, true));
    dQs.push(o.matMul(dS, keys(s.k4)));
    const pad = (t: T): T => (b === T ? t : o.pad(t, [[0, 0], [0, 0], [0, T - b], [0, 0]]));
    dKs.push(pad(o.matMul(dS, rows(s.q4, hd), true, false)));
    dVs.push(pad(o.matMul(p, rows(dO, hd), true, false)));
  });
  const dQ4 = dQs.length === 1 ? dQs[0]! : o.concat(dQs, 2);
  const dK4 = dKs.length === 1 ? dKs[0]! : o.addN(dKs);
  const dV4 = dVs.length === 1 ? dVs[0]! : o.addN(dVs);
  const dqr = o.reshape(o.transpose(o.reshape(dQ4, [B, K, T, G, hd]), [0, 2, 1, 3, 4]), [N, H, hd]);
  const dkr = o.reshape(o.transpose(dK4, [0, 2, 1, 3]), [N, K, hd]);
  const dv = o.reshape(o.transpose(dV4, [0, 2, 1, 3]), [N, K * hd]);
  // RoPE: y = x·C + (x·R)·S  ⇒  dx = dy·C − (dy·S)·R
  const unrope = (d: T, c: T, sn: T): T => o.sub(o.mul(d, c), o.matMul(o.mul(d, sn), ctx.rotate));
  let dq = unrope(dqr, ctx.cosQ, ctx.sinQ);
  let dk = unrope(dkr, ctx.cosK, ctx.sinK);
  if (w.qNorm && w.kNorm) {
    const nq = normBackward(o, dq, s.q3, s.rq, w.qNorm, hd);
    const nk = normBackward(o, dk, s.k3, s.rk, w.kNorm, hd);
    if (!frozen) {
      dw.qNorm = nq.dw;
      dw.kNorm = nk.dw;
    }
    dq = nq.dx;
    dk = nk.dx;
  }
  const dq2 = o.reshape(dq, [N, H * hd]);
  const dk2 = o.reshape(dk, [N, K * hd]);
  const dqkv = o.concat([dq2, dk2, dv], 1);
  const f1 = normProjBackward(o, dqkv, s.xr1, w.inNorm!, o.concat([w.q!, w.k!, w.v!], 1), !frozen);
  if (frozen) {
    const h1 = o.mul(s.xr1, w.inNorm!);
    weightGrad('q', h1, dq2);
    weightGrad('k', h1, dk2);
    weightGrad('v', h1, dv);
  } else {
    [dw.q, dw.k, dw.v] = o.split(f1.dW!, [H * hd, K * hd, K * hd], 1) as [T, T, T];
    if (w.qb) [dw.qb, dw.kb, dw.vb] = o.split(sumRows(dqkv), [H * hd, K * hd, K * hd], 0) as [T, T, T];
    dw.inNorm = f1.dw;
  }
  return { dx: o.add(dx2, unitNormBackward(o, f1.dxr, s.xr1, s.r1)), dw, dlora };
}
