/**
 * One KV-cached decoding step (one new token per sequence) of the Qwen decoder as a single TensorFlow graph, run by
 * QwenModel on native TensorFlow in place of ~40 eager ops per layer. The math is forwardNative's (qwen.ts) for T = 1:
 * fused q|k|v with the input norm's weight folded in, QK-norm and RoPE on all heads at once (value heads pass
 * through), the new keys and values written into the cache buffer in place (InplaceUpdate; attention reads the
 * updated buffer through its output, which also orders the two), attention over the cache's capacity with a bias
 * that masks unused and padded slots, SwiGLU MLP, LM head, and the greedy token with its log-probability.
 */
import type { QwenDims } from './qwenConfig';
import { availableParallelism } from 'node:os';
import { activeBackend } from './backend';
import { forcedThreads, GraphBuilder, GraphSession } from './graph';

/**
 * The intra-op threads of a decoding step of B sequences (0: the process's default pool, one thread per core).
 * A step of a small model is ~40 tiny kernels per layer, and handing one to the pool costs more than it computes:
 * a BatchMatMulV2 or Softmax of a few thousand elements takes 12–34 µs through a pool of two threads and 2–15 µs on
 * the calling thread (bench/op-overhead.ts). So a step whose matmuls are small (2·B·weights below 128 MFLOP: the demo
 * and bench models up to B 32 or so) runs on one thread; a big model's step is ~all matmul and memory bandwidth and
 * uses every core (0 here; decodePlan cuts its matmuls into one slice per core instead). CM2_DECODE_THREADS=N forces
 * N (0: the default pool).
 */
export function decodeThreads(d: QwenDims, B: number, env: NodeJS.ProcessEnv = process.env): number {
  const forced = forcedThreads(env, 'CM2_DECODE_THREADS');
  if (forced !== undefined) return forced;
  const attention = d.hidden * (d.heads + 2 * d.kvHeads) * d.headDim + d.heads * d.headDim * d.hidden;
  const weights = d.layers * (attention + 3 * d.hidden * d.intermediate) + d.vocab * d.hidden;
  return 2 * B * weights <= 128e6 ? 1 : 0;
}

/**
 * How a decoding step of B sequences runs: its session's intra-op threads (0: the default pool) and how many row
 * slices each weight matmul x·Wᵀ is cut into, which TensorFlow's inter-op pool runs side by side.
 */
export interface DecodePlan {
  threads: number;
  parts: number;
}

/**
 * A step whose matmuls are small runs on one thread, whole (decodeThreads). A big one on the CPU is cut into one slice
 * per core, each matmul slice on one thread: a weight-bound step reads its weights on every core at once, where one
 * matmul through the pool does not (measured on 2 cores, bench/README.md: a Qwen2.5-0.5B-shaped step at B = 2 −7%,
 * SmolLM2-135M's at B = 4–32 −10–26%; (W·xᵀ)ᵀ in place of x·Wᵀ was slower). On a GPU a matmul stays whole.
 * CM2_DECODE_THREADS forces the threads (and then no slices), CM2_DECODE_PARTS the slices.
 */
export function decodePlan(d: QwenDims, B: number, env: NodeJS.ProcessEnv = process.env, cores = availableParallelism(), gpu = activeBackend()?.name === 'tfjs-node-gpu'): DecodePlan {
  const forcedParts = forcedThreads(env, 'CM2_DECODE_PARTS');
  const forced = forcedThreads(env, 'CM2_DECODE_THREADS') !== undefined;
  const threads = decodeThreads(d, B, env);
  if (threads !== 0 || forced || gpu || cores < 2) return { threads, parts: forcedParts ?? 1 };
  return { threads: 1, parts: forcedParts ?? cores };
}

/**
 * How inference matmuls read a weight matrix: 'in-out' computes x·W from W [in, out], the variables as stored (o, gate,
 * up and down need no copy); 'out-in' computes x·Wᵀ from a transposed copy [out, in]. For the few rows of a decoding
 * step the two differ by machine: on an AMD EPYC (AVX2, 2 cores) TensorFlow's oneDNN matmul took 2.3–13× longer for
 * x·Wᵀ at 4 and 16 rows (SmolLM2's down projection at 4 rows 95 µs against 1,255 µs, its tied head at 16 rows 28 ms
 * against 100 ms: bench/op-overhead.ts's layout table), where an earlier Xeon (AVX-512) measured x·Wᵀ ~30% faster or
 * no different. At hundreds of rows (prefill, training) the two are within ~15%. So 'in-out' by default, which also
 * keeps no copy of most weights; CM2_WEIGHT_LAYOUT=out-in|in-out forces one.
 */
export type WeightLayout = 'in-out' | 'out-in';

export interface WeightPlan {
  layout: WeightLayout;
  /**
   * A tied LM head read as a [hidden, V] matrix (a transposed copy of the embedding) rather than as x·embedᵀ: 'in-out'
   * on the CPU. On a GPU the head stays x·embedᵀ (cuBLAS reads either layout at full speed, and the copy would cost
   * vocab × hidden floats of device memory).
   */
  headCopy: boolean;
}

export function weightPlan(env: NodeJS.ProcessEnv = process.env, gpu = activeBackend()?.name === 'tfjs-node-gpu'): WeightPlan {
  const v = env.CM2_WEIGHT_LAYOUT;
  if (v !== undefined && v !== '' && v !== 'in-out' && v !== 'out-in') throw new Error(`CM2_WEIGHT_LAYOUT: '${v}' is neither in-out nor out-in`);
  const layout: WeightLayout = v === 'out-in' ? 'out-in' : 'in-out';
  return { layout, headCopy: layout === 'in-out' && !gpu };
}

/** Per-step inputs besides the weights, in feed order. */
export const STEP_INPUTS = ['ids', 'cos', 'sin', 'bias', 'slots', 'cacheShape'] as const;

export interface DecodeGraph {
  /** the session for a step of B sequences (built on first use per thread count; see decodeThreads) */
  session(B: number): GraphSession;
  dispose(): void;
  /** per layer, which optional weights it feeds */
  layer: { bqkv: boolean; headNorm: boolean; ob: boolean };
  /** whether it feeds the LM head as a [hidden, V] matrix after the final norm (else the head is x·embedᵀ) */
  headMatrix: boolean;
}

/**
 * Builds the graph for a model's dimensions. Feeds: STEP_INPUTS, then embed, final norm weight, (head matrix
 * [hidden, V]), then per layer wqkv, (bqkv), (headNorm), o, (o bias), post-attention norm weight, gate, up, down
 * (matrices in `weights.layout`), cache rows. Fetches 'logits' [B, V], 'ids' [B] (int32 argmax) and 'nll' [B]
 * (−log p(ids)).
 */
export function buildDecodeGraph(d: QwenDims, rotate: Float32Array, weights: WeightPlan = weightPlan()): DecodeGraph {
  const sessions = new Map<string, GraphSession>();
  const headMatrix = !d.tied || weights.headCopy;
  return {
    session(B: number): GraphSession {
      const plan = decodePlan(d, B);
      const key = `${plan.parts}/${plan.threads}`;
      let s = sessions.get(key);
      if (!s) sessions.set(key, (s = new GraphSession(decodeGraphDef(d, rotate, plan, weights.layout, headMatrix), ['logits', 'ids_out', 'nll'], { intraOpThreads: plan.threads })));
      return s;
    },
    dispose(): void {
      for (const s of sessions.values()) s.dispose();
      sessions.clear();
    },
    layer: { bqkv: d.qkvBias, headNorm: d.qkNorm, ob: d.oBias },
    headMatrix,
  };
}

/** The decoding graph of one plan (see buildDecodeGraph for its feeds and fetches). */
function decodeGraphDef(d: QwenDims, rotate: Float32Array, plan: DecodePlan, layout: WeightLayout, headMatrix: boolean): GraphBuilder {
  const g = new GraphBuilder();
  const F = { T: { type: 'float32' } } as const;
  const H = d.heads;
  const K = d.kvHeads;
  const hd = d.headDim;
  const G = H / K;
  const nh = H + 2 * K;
  const scale = 1 / Math.sqrt(hd);
  const layer = { bqkv: d.qkvBias, headNorm: d.qkNorm, ob: d.oBias };

  const ids = g.placeholder('ids', 'int32', [-1]);
  const cos = g.placeholder('cos', 'float32', [-1, 1, hd]);
  const sin = g.placeholder('sin', 'float32', [-1, 1, hd]);
  const bias = g.placeholder('bias', 'float32', [-1, 1, 1, -1]);
  const slots = g.placeholder('slots', 'int32', [-1]);
  const cacheShape = g.placeholder('cacheShape', 'int32', [5]);
  const embed = g.placeholder('embed', 'float32', [d.vocab, d.hidden]);
  const finalNorm = g.placeholder('final_norm', 'float32', [d.hidden]);
  const head = headMatrix ? g.placeholder('head', 'float32', [d.hidden, d.vocab]) : undefined;

  const ints = (v: number[], name: string): string => g.constant(v, [v.length], 'int32', name);
  const scalarInt = (v: number, name: string): string => g.constant([v], [], 'int32', name);
  const perHead = (f: (kind: 'q' | 'k' | 'v') => number, name: string): string =>
    g.constant(Array.from({ length: nh }, (_, h) => f(h < H ? 'q' : h < H + K ? 'k' : 'v')), [1, nh, 1], 'float32', name);
  const eps = g.constant([d.eps], [], 'float32', 'eps');
  const lastAxis = scalarInt(-1, 'last_axis');
  const axis0 = scalarInt(0, 'axis0');
  const axis1 = scalarInt(1, 'axis1');
  const shapeHeads = ints([-1, nh, hd], 'shape_heads');
  const shapeRows = ints([-1, hd], 'shape_rows');
  const shapeQ = ints([-1, K, G, hd], 'shape_q');
  const shapeAttn = ints([-1, H * hd], 'shape_attn');
  const splitSizes = ints([H, 2 * K], 'split_q_kv');
  const R = g.constant(rotate, [hd, hd], 'float32', 'rotate');
  const a = perHead((k) => (k === 'q' ? scale : k === 'k' ? 1 : 0), 'rope_a');
  const c = perHead((k) => (k === 'v' ? 1 : 0), 'rope_c');
  const m = perHead((k) => (k === 'v' ? 0 : 1), 'norm_m');
  const e = perHead((k) => (k === 'v' ? 1 : d.eps), 'norm_e');

  const op = (name: string, inputs: string[], attrs: Record<string, import('./graph').AttrSpec> = F): string => g.node(name, inputs, attrs);
  const mul = (x: string, y: string): string => op('Mul', [x, y]);
  const add = (x: string, y: string): string => op('AddV2', [x, y]);
  const matMul = (x: string, y: string, tb = false): string => op('MatMul', [x, y], { ...F, transpose_a: { b: false }, transpose_b: { b: tb } });
  const bmm = (x: string, y: string, ty = false): string => op('BatchMatMulV2', [x, y], { ...F, adj_x: { b: false }, adj_y: { b: ty } });
  const reshape = (x: string, shape: string): string => op('Reshape', [x, shape], { ...F, Tshape: { type: 'int32' } });
  const meanLast = (x: string): string => op('Mean', [x, lastAxis], { ...F, Tidx: { type: 'int32' }, keep_dims: { b: true } });
  const norm = (x: string): string => mul(x, op('Rsqrt', [add(meanLast(op('Square', [x])), eps)]));
  // x·W for a weight W [in, out] ('in-out') or x·Wᵀ for W [out, in] ('out-in'), in the plan's parts, each reading a
  // slice of W's rows (a slice along the first axis aliases W's buffer when its offset is 64-byte aligned, which a
  // multiple of 16 rows always is): 'out-in' slices the outputs and concatenates them, 'in-out' slices the inputs
  // (x's columns with them) and adds the partial products.
  const rowSlice = (W: string, a: number, b: number): string =>
    op('Slice', [W, ints([a, 0], `begin_${a}_0`), ints([b - a, -1], `size_${b - a}_all`)], { ...F, Index: { type: 'int32' } });
  const proj = (x: string, W: string, rows: number, tb: boolean): string => {
    if (plan.parts <= 1) return matMul(x, W, tb);
    const cuts = Array.from({ length: plan.parts + 1 }, (_, k) => Math.min(rows, Math.round((rows * k) / plan.parts / 16) * 16));
    cuts[plan.parts] = rows;
    const spans = cuts.slice(1).map((end, k) => [cuts[k]!, end] as const).filter(([a, b]) => b > a);
    if (spans.length === 1) return matMul(x, W, tb);
    if (tb) {
      const pieces = spans.map(([a, b]) => matMul(x, rowSlice(W, a, b), true));
      return op('ConcatV2', [...pieces, axis1], { ...F, N: { i: pieces.length }, Tidx: { type: 'int32' } });
    }
    const pieces = spans.map(([a, b]) => matMul(op('Slice', [x, ints([0, a], `begin_0_${a}`), ints([-1, b - a], `size_all_${b - a}`)], { ...F, Index: { type: 'int32' } }), rowSlice(W, a, b)));
    return op('AddN', pieces, { ...F, N: { i: pieces.length } });
  };
  const outIn = layout === 'out-in';
  // a layer weight of `inputs` × `outputs` in the layout's orientation
  const lin = (x: string, W: string, inputs: number, outputs: number): string => proj(x, W, outIn ? outputs : inputs, outIn);

  const C = add(mul(cos, a), c);
  const S = mul(sin, a);
  let x = op('GatherV2', [embed, ids, axis0], { Tparams: { type: 'float32' }, Tindices: { type: 'int32' }, Taxis: { type: 'int32' }, batch_dims: { i: 0 } });
  for (let i = 0; i < d.layers; i++) {
    const w = (n: string, shape: number[]): string => g.placeholder(`l${i}_${n}`, 'float32', shape);
    // Matrices come transposed, [out, in] (see FusedLayer in qwen.ts): x·Wᵀ.
    const shaped = (inputs: number, outputs: number): number[] => (outIn ? [outputs, inputs] : [inputs, outputs]);
    const wqkv = w('wqkv', shaped(d.hidden, nh * hd));
    const bqkv = layer.bqkv ? w('bqkv', [nh * hd]) : undefined;
    const headNorm = layer.headNorm ? w('head_norm', [nh, hd]) : undefined;
    const wo = w('o', shaped(H * hd, d.hidden));
    const bo = layer.ob ? w('o_bias', [d.hidden]) : undefined;
    const postNorm = w('post_norm', [d.hidden]);
    const gate = w('gate', shaped(d.hidden, d.intermediate));
    const up = w('up', shaped(d.hidden, d.intermediate));
    const down = w('down', shaped(d.intermediate, d.hidden));
    const rows = w('cache_rows', [-1, hd]);

    let qkv = lin(norm(x), wqkv, d.hidden, nh * hd);
    if (bqkv) qkv = add(qkv, bqkv);
    let heads = reshape(qkv, shapeHeads);
    if (headNorm) heads = mul(mul(heads, op('Rsqrt', [add(mul(meanLast(op('Square', [heads])), m), e)])), headNorm);
    // rotate_half as one 2-D MatMul over all heads' rows: a small BatchMatMulV2 goes through the thread pool (~30 µs
    // on 2 cores), a small MatMul stays on the calling thread (~5 µs)
    heads = add(mul(heads, C), mul(reshape(matMul(reshape(heads, shapeRows), R), shapeHeads), S));
    const split = op('SplitV', [heads, splitSizes, axis1], { ...F, Tlen: { type: 'int32' }, num_split: { i: 2 } });
    const updated = op('InplaceUpdate', [rows, slots, reshape(`${split}:1`, shapeRows)]);
    const kv = op('Unpack', [reshape(updated, cacheShape)], { ...F, num: { i: 2 }, axis: { i: 0 } });
    const scores = bmm(reshape(split, shapeQ), kv, true);
    const probs = op('Softmax', [add(scores, bias)]);
    const attn = reshape(bmm(probs, `${kv}:1`), shapeAttn);
    let o = lin(attn, wo, H * hd, d.hidden);
    if (bo) o = add(o, bo);
    x = add(x, o);
    const h2 = mul(norm(x), postNorm);
    const gt = lin(h2, gate, d.hidden, d.intermediate);
    x = add(x, lin(mul(mul(gt, op('Sigmoid', [gt])), lin(h2, up, d.hidden, d.intermediate)), down, d.intermediate, d.hidden));
  }
  const xf = mul(norm(x), finalNorm);
  const logits = g.node('Identity', [head ? proj(xf, head, d.hidden, false) : proj(xf, embed, d.vocab, true)], F, 'logits');
  g.node('ArgMax', [logits, lastAxis], { ...F, Tidx: { type: 'int32' }, output_type: { type: 'int32' } }, 'ids_out');
  // −log p(argmax) = −log max softmax (TensorFlow's Softmax is ~3× faster than its sparse cross-entropy at 151,936)
  const pmax = g.node('Max', [g.node('Softmax', [logits], F), lastAxis], { ...F, Tidx: { type: 'int32' }, keep_dims: { b: false } });
  g.node('Neg', [g.node('Log', [pmax], F)], F, 'nll');
  return g;
}
