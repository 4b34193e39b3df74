/**
 * The decoder stack's training pass on native TensorFlow as two graph runs, forward and backward, in place of one
 * eager tf.customGrad per layer (~150 ops per layer and pass, each a separate call into TensorFlow). The math is
 * layer.ts's, written once over TensorOps: here each op adds a node to a GraphDef (GraphBuilder), so the graph and
 * the eager path cannot drift apart. In one session run TensorFlow schedules independent ops side by side on its
 * inter-op pool, applies its graph optimizations and pays no per-op call from JavaScript; bench/model-throughput.ts
 * measures what it buys.
 *
 * A graph is built for one (B, T) and the layers' optional weights, and cached by the model (StackGraphCache). It is
 * what loss and tokenLogprobs train through: the layers, then the final norm, the LM head and the log-probability of
 * each row's target.
 * - forward: feeds x [B·T, hidden], the RoPE tables, rotate_half, the attention bias chunks, every layer's weights
 *   (PARAM_NAMES order, present ones only), the final norm's weight, the head's weight (tied: the embedding
 *   [V, hidden], else [hidden, V]) and the (row, target) index [N, 2]; fetches 'logp' [N] and, when a gradient
 *   follows, every layer's saved tensors (layerForward's list) and the head's (the normed rows, their 1/rms, the
 *   softmax).
 * - backward: feeds dlogp [N], the final norm's and the head's weights, the index and the head's saved tensors, the
 *   RoPE tables, rotate_half, then per layer its weights and its saved tensors; fetches dx, every layer's weight
 *   gradients and those of the final norm and the head's weight.
 * In one run the head's matmuls overlap the layers' work on TensorFlow's inter-op pool, and its ~25 eager ops per step
 * become graph nodes (bench/README.md). (A graph ending at the stack's output, without the head, served only a forward
 * pass under a gradient tape, which no training path takes; it is gone: that pass runs layer by layer.)
 */
import { availableParallelism } from 'node:os';
import type * as tf from '@tensorflow/tfjs';
import { type AttrSpec, forcedThreads, GraphBuilder, GraphSession } from './graph';
import { causalChunks, invRms, layerBackward, layerForward, type LayerContext, type LinearName, type LoraFactors, PARAM_NAMES, type ParamName, type TensorOps, unitNormBackward } from './layer';

/** A node's output in a graph under construction, with its static shape. */
export interface GraphTensor {
  name: string;
  shape: number[];
}

const F = { T: { type: 'float32' } } as const;
const I32 = { type: 'int32' } as const;

function broadcast(a: number[], b: number[]): number[] {
  const n = Math.max(a.length, b.length);
  return Array.from({ length: n }, (_, i) => {
    const x = a[a.length - n + i] ?? 1;
    const y = b[b.length - n + i] ?? 1;
    if (x !== y && x !== 1 && y !== 1) throw new Error(`graph: shapes [${a}] and [${b}] do not broadcast`);
    return x === 1 ? y : x;
  });
}

const axisOf = (axis: number, rank: number): number => (axis < 0 ? axis + rank : axis);

/** TensorOps that add nodes to `g`, tracking static shapes. */
export function graphOps(g: GraphBuilder): TensorOps<GraphTensor> {
  const ints = new Map<string, string>();
  const intConst = (v: number[], scalar = false): string => {
    const key = `${scalar ? 's' : 'v'}${v.join(',')}`;
    let name = ints.get(key);
    if (!name) {
      name = g.constant(v, scalar ? [] : [v.length], 'int32', 'shape');
      ints.set(key, name);
    }
    return name;
  };
  const node = (op: string, inputs: string[], shape: number[], attrs: Record<string, AttrSpec> = F): GraphTensor => ({ name: g.node(op, inputs, attrs), shape });
  const binary = (op: string) => (a: GraphTensor, b: GraphTensor): GraphTensor => node(op, [a.name, b.name], broadcast(a.shape, b.shape));
  const unary = (op: string) => (x: GraphTensor): GraphTensor => node(op, [x.name], x.shape);
  const reduce = (op: string) => (x: GraphTensor, axis: number, keepDims = false): GraphTensor => {
    const ax = axisOf(axis, x.shape.length);
    const shape = keepDims ? x.shape.map((d, i) => (i === ax ? 1 : d)) : x.shape.filter((_, i) => i !== ax);
    return node(op, [x.name, intConst([ax], true)], shape, { ...F, Tidx: I32, keep_dims: { b: keepDims } });
  };
  const ops: TensorOps<GraphTensor> = {
    matMul: (a, b, ta = false, tb = false) => {
      const [m, k] = ta ? [a.shape.at(-1)!, a.shape.at(-2)!] : [a.shape.at(-2)!, a.shape.at(-1)!];
      const [k2, n] = tb ? [b.shape.at(-1)!, b.shape.at(-2)!] : [b.shape.at(-2)!, b.shape.at(-1)!];
      if (k !== k2) throw new Error(`graph: matMul inner sizes ${k} and ${k2} differ`);
      if (a.shape.length === 2 && b.shape.length === 2) return node('MatMul', [a.name, b.name], [m, n], { ...F, transpose_a: { b: ta }, transpose_b: { b: tb } });
      const batch = broadcast(a.shape.slice(0, -2), b.shape.slice(0, -2));
      return node('BatchMatMulV2', [a.name, b.name], [...batch, m, n], { ...F, adj_x: { b: ta }, adj_y: { b: tb } });
    },
    add: binary('AddV2'),
    sub: binary('Sub'),
    mul: binary('Mul'),
    neg: unary('Neg'),
    reshape: (x, shape) => {
      const size = x.shape.reduce((p, d) => p * d, 1);
      const known = shape.reduce((p, d) => (d === -1 ? p : p * d), 1);
      const out = shape.map((d) => (d === -1 ? size / known : d));
      if (out.reduce((p, d) => p * d, 1) !== size) throw new Error(`graph: cannot reshape [${x.shape}] to [${shape}]`);
      return node('Reshape', [x.name, intConst(out)], out, { ...F, Tshape: I32 });
    },
    transpose: (x, perm) => node('Transpose', [x.name, intConst(perm)], perm.map((p) => x.shape[p]!), { ...F, Tperm: I32 }),
    slice: (x, begin, size) => node('Slice', [x.name, intConst(begin), intConst(size)], size.map((s, i) => (s === -1 ? x.shape[i]! - begin[i]! : s)), { ...F, Index: I32 }),
    concat: (xs, axis) => {
      const ax = axisOf(axis, xs[0]!.shape.length);
      const shape = xs[0]!.shape.map((d, i) => (i === ax ? xs.reduce((p, t) => p + t.shape[i]!, 0) : d));
      return node('ConcatV2', [...xs.map((t) => t.name), intConst([ax], true)], shape, { ...F, N: { i: xs.length }, Tidx: I32 });
    },
    split: (x, sizes, axis) => {
      const ax = axisOf(axis, x.shape.length);
      const name = g.node('SplitV', [x.name, intConst(sizes), intConst([ax], true)], { ...F, Tlen: I32, num_split: { i: sizes.length } });
      return sizes.map((s, k) => ({ name: k === 0 ? name : `${name}:${k}`, shape: x.shape.map((d, i) => (i === ax ? s : d)) }));
    },
    sum: reduce('Sum'),
    mean: reduce('Mean'),
    rsqrt: unary('Rsqrt'),
    square: unary('Square'),
    softmax: unary('Softmax'),
    sigmoid: unary('Sigmoid'),
    sigmoidGrad: (y, dy) => node('SigmoidGrad', [y.name, dy.name], y.shape),
    pad: (x, paddings) => {
      const p = g.constant(paddings.flat(), [paddings.length, 2], 'int32', 'paddings');
      return node('Pad', [x.name, p], x.shape.map((d, i) => d + paddings[i]![0] + paddings[i]![1]), { ...F, Tpaddings: I32 });
    },
    addN: (xs) => node('AddN', xs.map((t) => t.name), xs[0]!.shape, { ...F, N: { i: xs.length } }),
    ones: (shape) => node('Fill', [intConst(shape), g.constant([1], [], 'float32', 'one')], shape, { ...F, index_type: I32 }),
    scalar: (v) => ({ name: g.constant([v], [], 'float32', 'scalar'), shape: [] }),
  };
  return ops;
}

/** The model dimensions a stack graph depends on. */
export interface StackDims {
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  intermediate: number;
  eps: number;
  /** the optional weights every layer has */
  present: ParamName[];
}

function paramShape(n: ParamName, d: StackDims): number[] {
  const { hidden: h, heads: H, kvHeads: K, headDim: hd, intermediate: I } = d;
  const shapes: Record<ParamName, number[]> = {
    inNorm: [h], q: [h, H * hd], k: [h, K * hd], v: [h, K * hd], qb: [H * hd], kb: [K * hd], vb: [K * hd],
    qNorm: [hd], kNorm: [hd], o: [H * hd, h], ob: [h], postNorm: [h], gate: [h, I], up: [h, I], down: [I, h],
  };
  return shapes[n];
}

/**
 * Intra-op threads of the backward graph: half the cores (one on 2 cores). Each step of the backward pass has
 * independent kernels (a layer's dX and dW matmuls, the attention's dQ, dK and dV), which TensorFlow's inter-op pool
 * runs side by side; giving each of them every core as well oversubscribes the machine. Measured on 2 cores
 * (bench/README.md): training +3–10% at every bench size, 0.5B included. The forward graph keeps every core (one
 * thread there was slower). LoRA's backward (`lora`) has no weight gradients to run beside the chain of dX matmuls, so
 * it takes every core (SmolLM2's shape, one 1,024-token row: 10.1 → 8.0 s). CM2_TRAIN_BWD_THREADS=N forces N (0: the
 * default pool).
 */
export function backwardThreads(env: NodeJS.ProcessEnv = process.env, cores = availableParallelism(), lora = false): number {
  return forcedThreads(env, 'CM2_TRAIN_BWD_THREADS') ?? (lora ? cores : Math.max(1, Math.floor(cores / 2)));
}

/** What the head adds to a stack graph: the vocabulary size and whether the head is the embedding (tied). */
export interface HeadDims {
  vocab: number;
  tied: boolean;
}

/**
 * LoRA training on frozen weights (lora.ts): the adapted layers of each layer (its sites, in LINEAR_NAMES order), with
 * their ranks and scales. The backward graph then computes dx and the factors' gradients only, no weight gradient.
 */
export interface StackLora {
  /** identifies the layout (the graph cache's key) */
  key: string;
  /** per layer */
  sites: { name: LinearName; rank: number; scale: number }[][];
}

/** Names of the head's saved tensors in the forward graph (fetched after the layers' ones). */
const HEAD_SAVED = ['h_xr', 'h_r', 'h_p'] as const;

/**
 * The head on top of the stack's output x in the forward graph: the final norm, the LM head, the log-probability of each
 * row's target. Returns the 'logp' node and the head's saved tensors (HEAD_SAVED).
 */
function headForward(gf: GraphBuilder, of: TensorOps<GraphTensor>, x: GraphTensor, head: HeadDims, N: number, hidden: number, eps: number): { logp: string; saved: string[] } {
  // log p(target) = z_t − max z + log max softmax(z) (exact; max softmax ≥ 1/V), as native.ts softmaxTargetLogprobs
  const { vocab: V, tied } = head;
  const wNorm = gf.placeholder('final_norm', 'float32', [hidden]);
  const wHead = gf.placeholder('head_w', 'float32', tied ? [V, hidden] : [hidden, V]);
  const at = gf.placeholder('target_at', 'int32', [N, 2]);
  const r = invRms(of, x, eps);
  const xr = of.mul(x, r);
  const xf = of.mul(xr, { name: wNorm, shape: [hidden] });
  const logits = gf.node('MatMul', [xf.name, wHead], { ...F, transpose_a: { b: false }, transpose_b: { b: tied } });
  const probs = gf.node('Softmax', [logits], F);
  const axis1 = gf.constant([1], [], 'int32', 'axis');
  const rowMax = (t: string): string => gf.node('Max', [t, axis1], { ...F, Tidx: I32, keep_dims: { b: false } });
  const zt = gf.node('GatherNd', [logits, at], { Tparams: { type: 'float32' }, Tindices: I32 });
  const logp = gf.node('AddV2', [gf.node('Sub', [zt, rowMax(logits)], F), gf.node('Log', [rowMax(probs)], F)], F);
  return { logp: gf.node('Identity', [logp], F, 'logp'), saved: [xr.name, r.name, probs].map((t, k) => gf.node('Identity', [t], F, HEAD_SAVED[k])) };
}

/**
 * The head's backward in the backward graph, from dlogp to the stack output's gradient dy, with the gradients of the
 * final norm and the head's weight (none with LoRA: they are frozen).
 */
function headBackward(gb: GraphBuilder, ob: TensorOps<GraphTensor>, head: HeadDims, N: number, hidden: number, lora: boolean): { dy: GraphTensor; grads: string[] } {
  // dlogits = dlogp·(onehot(target) − softmax), then back through the head's matmul and the final norm
  const { vocab: V, tied } = head;
  const dlogp = gb.placeholder('dlogp', 'float32', [N]);
  const wNorm: GraphTensor = { name: gb.placeholder('final_norm', 'float32', [hidden]), shape: [hidden] };
  const wHead = gb.placeholder('head_w', 'float32', tied ? [V, hidden] : [hidden, V]);
  const at = gb.placeholder('target_at', 'int32', [N, 2]);
  const xr: GraphTensor = { name: gb.placeholder(HEAD_SAVED[0], 'float32', [N, hidden]), shape: [N, hidden] };
  const r: GraphTensor = { name: gb.placeholder(HEAD_SAVED[1], 'float32', [N, 1]), shape: [N, 1] };
  const probs = gb.placeholder(HEAD_SAVED[2], 'float32', [N, V]);
  const scaled = gb.node('Mul', [probs, ob.reshape(ob.neg({ name: dlogp, shape: [N] }), [N, 1]).name], F);
  const dLogits = gb.node('TensorScatterAdd', [scaled, at, dlogp], { ...F, Tindices: I32 });
  const xf = ob.mul(xr, wNorm);
  const mm = (a: string, b: string, ta: boolean, tb: boolean): string => gb.node('MatMul', [a, b], { ...F, transpose_a: { b: ta }, transpose_b: { b: tb } });
  const dxf: GraphTensor = { name: tied ? mm(dLogits, wHead, false, false) : mm(dLogits, wHead, false, true), shape: [N, hidden] };
  const dW = tied ? mm(dLogits, xf.name, true, false) : mm(xf.name, dLogits, true, false);
  const grads = lora ? [] : [gb.node('Identity', [ob.sum(ob.mul(dxf, xr), 0).name], F, 'd_final_norm'), gb.node('Identity', [dW], F, 'd_head_w')];
  return { dy: unitNormBackward(ob, ob.mul(dxf, wNorm), xr, r), grads };
}

/** Forward and backward graphs of the whole decoder stack and the head for one batch shape. */
export class StackGraph {
  readonly forward: GraphSession;
  readonly backward: GraphSession;
  /** fetch names of the forward graph's saved tensors: every layer's, then the head's */
  private readonly savedNames: string[];
  private readonly backwardOutputs: string[];

  /** the forward graph's first output: 'logp' */
  readonly output: string;

  constructor(
    readonly dims: StackDims,
    readonly B: number,
    readonly T: number,
    readonly head: HeadDims,
    readonly lora?: StackLora,
  ) {
    const N = B * T;
    const { hidden, headDim: hd, layers } = dims;
    const names = PARAM_NAMES.filter((n) => dims.present.includes(n));
    const ctxOf = (g: GraphBuilder, withBias: boolean): LayerContext<GraphTensor> => {
      const ph = (name: string, shape: number[]): GraphTensor => ({ name: g.placeholder(name, 'float32', shape), shape });
      const table = [N, 1, hd];
      return {
        B, T, heads: dims.heads, kvHeads: dims.kvHeads, headDim: hd, eps: dims.eps,
        cosQ: ph('cos_q', table), sinQ: ph('sin_q', table), cosK: ph('cos_k', table), sinK: ph('sin_k', table),
        rotate: ph('rotate', [hd, hd]),
        biasChunks: withBias ? causalChunks(T).map(([a, b], c) => ph(`bias_${c}`, [B, 1, b - a, 1, b])) : [],
      };
    };
    const weightsOf = (g: GraphBuilder, i: number): Partial<Record<ParamName, GraphTensor>> =>
      Object.fromEntries(names.map((n) => [n, { name: g.placeholder(`l${i}_${n}`, 'float32', paramShape(n, dims)), shape: paramShape(n, dims) }]));

    // Forward: x through every layer; each layer's saved tensors are fetched by name.
    const gf = new GraphBuilder();
    const of = graphOps(gf);
    let x: GraphTensor = { name: gf.placeholder('x', 'float32', [N, hidden]), shape: [N, hidden] };
    const ctxF = ctxOf(gf, true);
    const savedShapes: number[][][] = [];
    this.savedNames = [];
    for (let i = 0; i < layers; i++) {
      const { value, saved } = layerForward(of, x, weightsOf(gf, i), ctxF);
      savedShapes.push(saved.map((t) => t.shape));
      // Fetched through Identity nodes: oneDNN's graph rewrite fuses patterns (MatMul + Sigmoid + Mul) without
      // regard to the fetch list, and a fetched intermediate of a fused pattern would no longer exist.
      this.savedNames.push(...saved.map((t, k) => gf.node('Identity', [t.name], F, `s${i}_${k}`)));
      x = value;
    }
    const top = headForward(gf, of, x, head, N, hidden, dims.eps);
    this.output = top.logp;
    this.savedNames.push(...top.saved);
    this.forward = new GraphSession(gf, [this.output, ...this.savedNames]);

    // Backward: from dlogp through the head, then the layers in reverse; saved tensors come back as placeholders.
    const gb = new GraphBuilder();
    const ob = graphOps(gb);
    const fromHead = headBackward(gb, ob, head, N, hidden, lora !== undefined);
    let dy = fromHead.dy;
    const ctxB = ctxOf(gb, false);
    const perLayer = Array.from({ length: layers }, (_, i) => ({
      w: weightsOf(gb, i),
      saved: savedShapes[i]!.map((shape, k) => ({ name: gb.placeholder(`s${i}_${k}`, 'float32', shape), shape })),
      // LoRA: A [r, in] and B [out, r] of each adapted layer, fed after the saved tensors
      factors: (lora?.sites[i] ?? []).map(({ name, rank, scale }) => {
        const [inDim, outDim] = paramShape(name, dims) as [number, number];
        const a = { name: gb.placeholder(`l${i}_${name}_A`, 'float32', [rank, inDim]), shape: [rank, inDim] };
        const b = { name: gb.placeholder(`l${i}_${name}_B`, 'float32', [outDim, rank]), shape: [outDim, rank] };
        return { name, f: { a, b, scale } as LoraFactors<GraphTensor> };
      }),
    }));
    const grads: string[][] = [];
    for (let i = layers - 1; i >= 0; i--) {
      const { factors } = perLayer[i]!;
      const { dx, dw, dlora } = layerBackward(ob, dy, perLayer[i]!.saved, perLayer[i]!.w, ctxB, lora ? Object.fromEntries(factors.map(({ name, f }) => [name, f])) : undefined);
      grads[i] = lora
        ? factors.flatMap(({ name }) => [gb.node('Identity', [dlora[name]!.a.name], F, `d${i}_${name}_A`), gb.node('Identity', [dlora[name]!.b.name], F, `d${i}_${name}_B`)])
        : names.map((n) => gb.node('Identity', [dw[n]!.name], F, `d${i}_${n}`));
      dy = dx;
    }
    const dx = gb.node('Identity', [dy.name], F, 'dx');
    this.backwardOutputs = [dx, ...grads.flat(), ...fromHead.grads];
    this.backward = new GraphSession(gb, this.backwardOutputs, { intraOpThreads: backwardThreads(process.env, availableParallelism(), lora !== undefined) });
  }

  /**
   * The forward graph's outputs: logp, then, when `withSaved`, every layer's saved tensors and the head's three. Feeds:
   * x, the tables, rotate_half, the bias chunks, every layer's weights, the final norm's weight, the head's weight, the
   * target index.
   */
  runForward(feeds: tf.Tensor[], withSaved: boolean): tf.Tensor[] {
    return this.forward.run(feeds, withSaved ? [this.output, ...this.savedNames] : [this.output]);
  }

  /**
   * dx, then each layer's weight gradients (layer order, PARAM_NAMES order), then the final norm's and the head
   * weight's. Feeds: dlogp, the final norm's weight, the head's weight, the target index and the head's saved tensors;
   * then the tables, rotate_half, and per layer its weights and saved tensors.
   * With `lora`: dx, then per layer each site's dA and dB (no weight gradient, none of the head's); per layer its
   * weights, saved tensors, then each site's A and B.
   */
  runBackward(feeds: tf.Tensor[]): tf.Tensor[] {
    return this.backward.run(feeds, this.backwardOutputs);
  }

  /** How many saved tensors each layer has (the forward outputs after the first, layer by layer, before the head's). */
  get savedPerLayer(): number {
    return (this.savedNames.length - HEAD_SAVED.length) / this.dims.layers;
  }

  dispose(): void {
    this.forward.dispose();
    this.backward.dispose();
  }
}

/**
 * The sequence length a graph is built for: T rounded up to a multiple of 16 (T ≤ 64), 32 (≤ 256), 64 (≤ 1,024) or
 * 128, so that a run's varying batch lengths share a few graphs (~30 up to 2,048 tokens; each costs ~0.5 s to build
 * for 6 layers, a few seconds for 30). The padding costs a few percent on average (half a step per sequence), up to a
 * third for lengths just past a multiple (65 → 96).
 */
export function graphLength(T: number): number {
  const step = T <= 64 ? 16 : T <= 256 ? 32 : T <= 1024 ? 64 : 128;
  return Math.ceil(T / step) * step;
}

/** Stack graphs by batch shape, the most recently used kept (each holds two loaded sessions). */
export class StackGraphCache {
  private readonly graphs = new Map<string, StackGraph>();

  constructor(
    private readonly dims: StackDims,
    private readonly capacity = 32,
  ) {}

  /** The graph for (B, T) (the head's dimensions are the model's: the same for every graph of the cache). */
  get(B: number, T: number, head: HeadDims, lora?: StackLora): StackGraph {
    const key = `${B}x${T}${lora ? `/lora:${lora.key}` : ''}`;
    let graph = this.graphs.get(key);
    if (graph) this.graphs.delete(key);
    else graph = new StackGraph(this.dims, B, T, head, lora);
    this.graphs.set(key, graph);
    for (const [k, old] of this.graphs) {
      if (this.graphs.size <= this.capacity) break;
      old.dispose();
      this.graphs.delete(k);
    }
    return graph;
  }

  dispose(): void {
    for (const g of this.graphs.values()) g.dispose();
    this.graphs.clear();
  }
}
