/**
 * AdamW (decoupled weight decay, Loshchilov & Hutter; the PyTorch `torch.optim.AdamW` update) over named tfjs
 * variables, with global-norm gradient clipping. Its whole state (step and both moments) is plain Float32Arrays, so a
 * checkpoint stores it exactly and a resumed run continues bit for bit. Checkpoints stream it: `writeAdamWState` writes
 * one moment tensor at a time to a safetensors file of any size, and `openAdamWState` gives a state whose moments are
 * read from the file one at a time while `load` assigns them (a 0.5B model's moments are 4 GB).
 *
 * Files hold the moments in HF's layout (`layout: "hf"` in the metadata), whatever the optimizer's own: the moment of a
 * parameter the trainer holds transposed (QwenModel's Linear weights, [in, out]) is written [out, in], as the weight is
 * in model.safetensors, so the PyTorch trainer reads and writes the same files (docs/decisions.md, "Optimizer state in
 * HF layout"). The optimizer learns which parameters those are from `opts.layout` (a ParamLayout: the model, or a LoRA
 * adapter, whose tensors are PEFT's as they are); `load` turns such a file back. A file without `layout` (every one
 * written before) is in the optimizer's own layout and loads as it is; any other value is refused.
 *
 * The update is `adamWReference` below (the definition, in plain float64 arithmetic); its three implementations — op
 * by op (wasm, cpu), TensorFlow's fused ResourceApplyAdam per parameter (native), the whole update as one graph run
 * (native, small models: ./adamwGraph.ts) — are checked against it (test/unit/model/optim.test.ts, native.test.ts).
 */
import * as tf from '@tensorflow/tfjs';
import { adamScalars, adamWStep, isNative, ResourceVariable, sumOfSquares } from '../net/native';
import { ADAMW_SCALARS, buildAdamWGraph, GRAPH_MAX_PARAMS, type AdamWGraph } from './adamwGraph';
import { transposeData, type ParamLayout } from '../net/params';
import { parseSafetensors, SafetensorsReader, type TensorSource } from '../formats/safetensors';
import { serializeSafetensors, writeSafetensors, writeSafetensorsAsync, type WrittenFile } from '../formats/safetensorsWrite';

/**
 * AdamW as a definition: one update, in place, of parameters `params` (with moments `m`, `v` at step `state.step`,
 * which it advances) by gradients `grads`, clipped first to global norm `maxGradNorm` (scale maxGradNorm / (‖g‖ +
 * 1e-6) when ‖g‖ exceeds it). Per element, at step t (1-based):
 *   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
 *   p ← p − lr·wd·p − lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + ε)
 * (PyTorch's `torch.optim.AdamW`). Returns ‖g‖ before clipping. Float64, no tensors: the reference the fast paths are
 * tested against, not a path of its own.
 */
export function adamWReference(
  params: Float64Array[],
  grads: readonly ArrayLike<number>[],
  state: { m: Float64Array[]; v: Float64Array[]; step: number },
  lr: number,
  config: AdamWConfig,
  maxGradNorm?: number,
): number {
  let sq = 0;
  for (const g of grads) for (let i = 0; i < g.length; i++) sq += g[i]! * g[i]!;
  const norm = Math.sqrt(sq);
  const scale = maxGradNorm !== undefined && maxGradNorm > 0 && norm > maxGradNorm ? maxGradNorm / (norm + 1e-6) : 1;
  state.step++;
  const { beta1, beta2, eps, weightDecay } = config;
  const bc1 = 1 - beta1 ** state.step;
  const bc2 = 1 - beta2 ** state.step;
  params.forEach((p, k) => {
    const g = grads[k]!;
    const m = state.m[k]!;
    const v = state.v[k]!;
    for (let i = 0; i < p.length; i++) {
      const gi = g[i]! * scale;
      m[i] = beta1 * m[i]! + (1 - beta1) * gi;
      v[i] = beta2 * v[i]! + (1 - beta2) * gi * gi;
      p[i] = p[i]! - lr * weightDecay * p[i]! - (lr * (m[i]! / bc1)) / (Math.sqrt(v[i]! / bc2) + eps);
    }
  });
  return norm;
}

export interface AdamWConfig {
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
}

export const DEFAULT_ADAMW: AdamWConfig = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.0 };

/** Moments by parameter name: a Map, or a view that reads each from a file when asked. */
export interface MomentLookup {
  get(name: string): Float32Array | undefined;
}

/**
 * How a state's moments are laid out: 'internal', the optimizer's own variables' layout (in memory, and files without
 * a `layout` in their metadata: every one written before it existed), or 'hf', as in HF / PEFT files (a transposed
 * parameter's moment [out, in]; `AdamW.load` turns it back).
 */
export type StateLayout = 'internal' | 'hf';

export interface AdamWState {
  step: number;
  m: MomentLookup;
  v: MomentLookup;
  /** absent: 'internal' */
  layout?: StateLayout;
}

/** A state held in memory (what `AdamW.state()` returns). */
export interface AdamWSnapshot extends AdamWState {
  m: Map<string, Float32Array>;
  v: Map<string, Float32Array>;
}

/** What the optimizer needs of a moment tensor (a tf.Variable, or a TensorFlow resource variable on native). */
type Moment = Pick<tf.Variable, 'shape' | 'dispose'> & { dataSync(): ArrayLike<number>; assign(t: tf.Tensor): void };

/** A moment held as a plain (kept) tensor, replaced by each graph update (AdamW's graph mode). */
class TensorMoment {
  constructor(private t: tf.Tensor) {
    tf.keep(t);
  }

  get shape(): number[] {
    return this.t.shape;
  }

  get value(): tf.Tensor {
    return this.t;
  }

  dataSync(): ArrayLike<number> {
    return this.t.dataSync();
  }

  /** A copy of `t` (which may be freed by an enclosing tidy) becomes the value. */
  assign(t: tf.Tensor): void {
    this.replace(t.clone());
  }

  /** `t` itself becomes the value (kept). */
  replace(t: tf.Tensor): void {
    const old = this.t;
    this.t = tf.keep(t);
    old.dispose();
  }

  dispose(): void {
    this.t.dispose();
  }
}

/**
 * How AdamW updates on native TensorFlow. 'graph': the whole update as one graph run (adamwGraph.ts; models up to
 * GRAPH_MAX_PARAMS, because parameters and moments exist twice during the run); 'fused': ResourceApplyAdam per
 * parameter, in place. 'auto' picks by size; CM2_TF_GRAPH=0 means 'fused'. Other backends update op by op.
 */
export type AdamWMode = 'auto' | 'graph' | 'fused';

/** Global L2 norm of a set of gradients. */
export function globalNorm(grads: ReadonlyMap<string, tf.Tensor>): number {
  return tf.tidy(() => {
    // One tidy per gradient: its square is freed before the next one's is made (a 0.5B model's would be 2 GB at once).
    const squares = [...grads.values()].map((g) => (isNative() ? sumOfSquares(g) : tf.tidy(() => tf.sum(tf.square(g)))));
    return Math.sqrt(squares.length ? tf.addN(squares).dataSync()[0]! : 0);
  });
}

export class AdamW {
  private step = 0;
  /** tf.Variables, or on native TensorFlow resource variables that ResourceApplyAdam updates in place */
  private readonly m = new Map<string, Moment>();
  private readonly v = new Map<string, Moment>();
  /** native: per parameter, the resource variable the fused update runs on */
  private readonly work = new Map<string, ResourceVariable>();
  /** native, graph mode: the update graph for the parameters that have gradients (by their names, joined) */
  private graphs = new Map<string, AdamWGraph>();
  /** the update runs as one graph (native, small model) */
  readonly graphMode: boolean;
  /** which parameters are held transposed against HF's layout; without it, files are written in the variables' layout (no `layout` metadata) */
  readonly layout: ParamLayout | undefined;

  constructor(
    private readonly params: ReadonlyMap<string, tf.Variable>,
    readonly config: AdamWConfig = DEFAULT_ADAMW,
    opts: { mode?: AdamWMode; layout?: ParamLayout | undefined } = {},
  ) {
    this.layout = opts.layout;
    const mode = opts.mode ?? (process.env.CM2_TF_GRAPH === '0' ? 'fused' : 'auto');
    const size = [...params.values()].reduce((n, p) => n + p.size, 0);
    this.graphMode = isNative() && (mode === 'graph' || (mode === 'auto' && size <= GRAPH_MAX_PARAMS));
    for (const [name, p] of params) {
      // tidy releases the zeros once the variables hold them (else dispose() would free nothing).
      tf.tidy(() => {
        const moment = (): Moment => (this.graphMode ? new TensorMoment(tf.zerosLike(p)) : isNative() ? new ResourceVariable(tf.zerosLike(p)) : tf.variable(tf.zerosLike(p), false));
        this.m.set(name, moment());
        this.v.set(name, moment());
      });
    }
  }

  get steps(): number {
    return this.step;
  }

  /**
   * One update with learning rate `lr`. Gradients are clipped to `maxGradNorm` (global norm) first when given.
   * Returns the pre-clip gradient norm.
   */
  apply(grads: ReadonlyMap<string, tf.Tensor>, lr: number, maxGradNorm?: number): number {
    if (this.graphMode) return this.applyGraph(grads, lr, maxGradNorm);
    const norm = globalNorm(grads);
    const scale = maxGradNorm !== undefined && maxGradNorm > 0 && norm > maxGradNorm ? maxGradNorm / (norm + 1e-6) : 1;
    this.step++;
    const { beta1, beta2, eps, weightDecay } = this.config;
    const bc1 = 1 - beta1 ** this.step;
    const bc2 = 1 - beta2 ** this.step;
    const hp = { lr, beta1, beta2, eps, weightDecay, step: this.step };
    // Native: the update's scalars once for all parameters (each tensor made costs a call into TensorFlow).
    const scalars = isNative() ? adamScalars(hp) : [];
    const scaleT = isNative() && scale !== 1 ? tf.scalar(scale, 'float32') : undefined;
    try {
      for (const [name, p] of this.params) {
        const m0 = this.m.get(name);
        const g0 = grads.get(name);
        if (m0 instanceof ResourceVariable && g0) {
          // Native: two fused passes per parameter instead of a dozen element-wise ops (same update, see adamWStep).
          let work = this.work.get(name);
          if (!work) this.work.set(name, (work = new ResourceVariable(p)));
          tf.tidy(() => {
            adamWStep(p, work, m0, this.v.get(name) as ResourceVariable, scaleT ? tf.mul(g0, scaleT) : g0, hp, scalars);
          });
          continue;
        }
        this.applyPortable(name, p, grads, { lr, scale, bc1, bc2 });
      }
    } finally {
      tf.dispose(scaleT ? [...scalars, scaleT] : scalars);
    }
    return norm;
  }

  /** The whole update as one graph run (native, small models): see adamwGraph.ts. */
  private applyGraph(grads: ReadonlyMap<string, tf.Tensor>, lr: number, maxGradNorm?: number): number {
    const names = [...this.params.keys()].filter((n) => grads.has(n));
    if (names.length === 0) return 0;
    const key = names.join('\n');
    let graph = this.graphs.get(key);
    if (!graph) this.graphs.set(key, (graph = buildAdamWGraph(names.map((n) => this.params.get(n)!.shape))));
    this.step++;
    const { beta1, beta2, eps, weightDecay } = this.config;
    const bc2 = 1 - beta2 ** this.step;
    const clip = maxGradNorm !== undefined && maxGradNorm > 0 ? maxGradNorm : Infinity;
    const hp: Record<(typeof ADAMW_SCALARS)[number], number> = {
      one_minus_beta1: 1 - beta1, one_minus_beta2: 1 - beta2, alpha: (lr * Math.sqrt(bc2)) / (1 - beta1 ** this.step),
      eps_hat: eps * Math.sqrt(bc2), decay: 1 - lr * weightDecay, max_norm: clip,
    };
    const scalars = ADAMW_SCALARS.map((n) => tf.scalar(hp[n], 'float32'));
    const feeds: tf.Tensor[] = [...scalars];
    for (const n of names) feeds.push(this.params.get(n)!, grads.get(n)!, (this.m.get(n) as TensorMoment).value, (this.v.get(n) as TensorMoment).value);
    let out: tf.Tensor[];
    try {
      out = graph.session.run(feeds, graph.outputs);
    } finally {
      tf.dispose(scalars);
    }
    const norm = out[0]!.dataSync()[0]!;
    out[0]!.dispose();
    names.forEach((n, i) => {
      const [p, m, v] = out.slice(1 + 3 * i, 4 + 3 * i) as [tf.Tensor, tf.Tensor, tf.Tensor];
      this.params.get(n)!.assign(p);
      p.dispose(); // the variable holds the buffer now
      (this.m.get(n) as TensorMoment).replace(m);
      (this.v.get(n) as TensorMoment).replace(v);
    });
    return norm;
  }

  /** The op-by-op update of one parameter (wasm, cpu). */
  private applyPortable(name: string, p: tf.Variable, grads: ReadonlyMap<string, tf.Tensor>, hp: { lr: number; scale: number; bc1: number; bc2: number }): void {
    const { beta1, beta2, eps, weightDecay } = this.config;
    const { lr, scale, bc1, bc2 } = hp;
    // One tidy per parameter, and nested tidies inside it: at most ~4 temporaries of the parameter's size are alive
    // at once (not the dozen of the whole update: for a 0.5B model's 545 MB embedding that was 6.5 GB at the peak).
    // Same ops on the same operands in the same order, so the same numbers.
    tf.tidy(() => {
      const g0 = grads.get(name);
      if (!g0) return;
      const g = scale === 1 ? g0 : tf.mul(g0, scale);
      const m = this.m.get(name) as tf.Variable;
      const v = this.v.get(name) as tf.Variable;
      m.assign(tf.tidy(() => tf.add(tf.mul(m, beta1), tf.mul(g, 1 - beta1))));
      v.assign(tf.tidy(() => tf.add(tf.mul(v, beta2), tf.mul(tf.square(g), 1 - beta2))));
      if (g !== g0) g.dispose();
      const denom = tf.tidy(() => tf.add(tf.sqrt(tf.div(v, bc2)), eps));
      const step = tf.tidy(() => tf.mul(tf.div(tf.div(m, bc1), denom), lr));
      denom.dispose();
      const decayed = weightDecay > 0 ? tf.tidy(() => tf.sub(p, tf.mul(p, lr * weightDecay))) : p;
      p.assign(tf.sub(decayed, step));
    });
  }

  /** A copy of the state, in memory (small models; checkpoints stream it with writeAdamWState). */
  state(): AdamWSnapshot {
    const read = (vars: Map<string, Moment>) => new Map([...vars].map(([k, t]) => [k, new Float32Array(t.dataSync())]));
    return { step: this.step, m: read(this.m), v: read(this.v) };
  }

  /**
   * The moments as a file holds them: tensors `m.<name>` and `v.<name>`, in HF's layout when there is a `layout` (the
   * optimizer's, or one given for an optimizer made without: a transposed parameter's moment transposed to [out, in]),
   * else in the variables' shapes; each read from the backend (and transposed) only when its `data()` is called. The
   * array may be the backend's own memory (read it, don't keep it). Write them with `stateMetadata(layout)`, which says
   * which layout they are in.
   */
  *momentEntries(layout: ParamLayout | undefined = this.layout): Iterable<TensorSource> {
    for (const [kind, vars] of [['m', this.m], ['v', this.v]] as const) {
      for (const [name, t] of vars) {
        if (!layout?.hfTransposed(name)) {
          yield { name: `${kind}.${name}`, shape: [...t.shape], data: () => t.dataSync() as Float32Array };
          continue;
        }
        const [rows, cols] = matrixShape(name, t.shape);
        yield { name: `${kind}.${name}`, shape: [cols, rows], data: () => transposeData(t.dataSync() as Float32Array, rows, cols) };
      }
    }
  }

  /** The safetensors metadata of `momentEntries(layout)`: the step, and `layout: "hf"` when they are in HF's layout. */
  stateMetadata(layout: ParamLayout | undefined = this.layout): Record<string, string> {
    return { step: String(this.step), ...(layout ? { layout: HF_LAYOUT } : {}) };
  }

  /**
   * Restore a state saved by `state()` or opened by `openAdamWState` / `parseAdamWState` (same parameter names and
   * sizes), one moment at a time: an HF-layout file is turned into the variables' layout as each moment is read
   * (`optimizerStateToInternal`).
   */
  load(saved: AdamWState): void {
    const state = optimizerStateToInternal(saved, this.params, this.layout);
    for (const [name, p] of this.params) {
      const m = state.m.get(name);
      const v = m && state.v.get(name);
      if (!m || !v) throw new Error(`optimizer state has no moments for ${name}`);
      if (m.length !== p.size || v.length !== p.size) throw new Error(`optimizer state for ${name} has ${m.length} values, the parameter ${p.size}`);
      tf.tidy(() => {
        this.m.get(name)!.assign(tf.tensor(m, p.shape));
        this.v.get(name)!.assign(tf.tensor(v, p.shape));
      });
    }
    this.step = state.step;
  }

  dispose(): void {
    for (const t of [...this.m.values(), ...this.v.values(), ...this.work.values()]) t.dispose();
    for (const g of this.graphs.values()) g.session.dispose();
    this.graphs.clear();
  }
}

/** The metadata value of an optimizer file in HF's layout. */
export const HF_LAYOUT = 'hf';

/** [rows, cols] of a parameter held transposed (an error naming it when it is not a matrix). */
function matrixShape(name: string, shape: readonly number[]): [number, number] {
  if (shape.length !== 2) throw new Error(`parameter ${name} is said to be held transposed, but it has shape [${shape.join(', ')}], not a matrix's`);
  return [shape[0]!, shape[1]!];
}

/**
 * A state in the layout of the variables `params` (internal): an HF-layout one (a file with `layout: "hf"`) with the
 * moment of each parameter `layout` holds transposed turned back, one moment at a time as `get` asks for it (a large
 * file is still read one tensor at a time); an internal one as it is. An HF-layout state needs the layout.
 */
export function optimizerStateToInternal(state: AdamWState, params: ReadonlyMap<string, { shape: readonly number[] }>, layout: ParamLayout | undefined): AdamWState {
  if ((state.layout ?? 'internal') === 'internal') return state;
  if (!layout) throw new Error('the optimizer state is in HF layout, but the optimizer was made without its parameters\' layout (AdamW opts.layout)');
  const toInternal = (lookup: MomentLookup): MomentLookup => ({
    get: (name) => {
      const data = lookup.get(name);
      const p = params.get(name);
      if (!data || !p || !layout.hfTransposed(name)) return data;
      const [rows, cols] = matrixShape(name, p.shape);
      // A file's [cols, rows] back to [rows, cols]; a wrong size is left for AdamW.load to report.
      return data.length === rows * cols ? transposeData(data, cols, rows) : data;
    },
  });
  return { step: state.step, m: toInternal(state.m), v: toInternal(state.v), layout: 'internal' };
}

/** The layout a file's metadata gives: none is 'internal' (written before the field), "hf" is 'hf', anything else an error naming the file and the value. */
export function stateLayoutOf(metadata: Record<string, string> | undefined, where: string): StateLayout {
  const layout = metadata?.['layout'];
  if (layout === undefined) return 'internal';
  if (layout === HF_LAYOUT) return 'hf';
  throw new Error(`${where}: optimizer state layout ${JSON.stringify(layout)} is not known (expected "${HF_LAYOUT}", or none for the legacy internal layout)`);
}

/**
 * The optimizer state as safetensors bytes (`m.<name>`, `v.<name>`; the step, and the layout when given, in the
 * metadata): what `writeAdamWState` writes for an optimizer over `variables` with `layout` (the state in the
 * variables' layout, as `state()` gives it).
 */
export function serializeAdamWState(state: AdamWState, variables: ReadonlyMap<string, { shape: readonly number[] }>, layout?: ParamLayout): Uint8Array {
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const kind of ['m', 'v'] as const) {
    for (const [name, v] of variables) {
      const data = state[kind].get(name)!;
      if (!layout?.hfTransposed(name)) tensors.set(`${kind}.${name}`, { shape: [...v.shape], data });
      else {
        const [rows, cols] = matrixShape(name, v.shape);
        tensors.set(`${kind}.${name}`, { shape: [cols, rows], data: transposeData(data, rows, cols) });
      }
    }
  }
  return serializeSafetensors(tensors, { step: String(state.step), ...(layout ? { layout: HF_LAYOUT } : {}) });
}

/** An optimizer file's bytes (`where` names it in errors), for `AdamW.load`. */
export function parseAdamWState(bytes: Uint8Array, where = 'optimizer.safetensors'): AdamWState {
  const file = parseSafetensors(bytes);
  const layout = stateLayoutOf(file.metadata, where);
  const m = new Map<string, Float32Array>();
  const v = new Map<string, Float32Array>();
  for (const [key, t] of file.tensors) (key.startsWith('m.') ? m : v).set(key.slice(2), t.data);
  return { step: Number(file.metadata?.['step'] ?? 0), m, v, layout };
}

/**
 * The optimizer state as an F32 safetensors file written one moment tensor at a time (the same bytes as
 * `serializeAdamWState`): `m.<name>`, `v.<name>`, the step and layout in the metadata (`momentEntries`; `opts.layout`
 * for an optimizer made without one).
 */
export function writeAdamWState(path: string, optimizer: AdamW, opts: { chunkBytes?: number; layout?: ParamLayout } = {}): WrittenFile {
  const layout = opts.layout ?? optimizer.layout;
  return writeSafetensors(path, optimizer.momentEntries(layout), { metadata: optimizer.stateMetadata(layout), ...(opts.chunkBytes ? { chunkBytes: opts.chunkBytes } : {}) });
}

/** `writeAdamWState` with writes and hashing overlapped (for async callers; the same bytes). */
export function writeAdamWStateAsync(path: string, optimizer: AdamW, opts: { chunkBytes?: number; layout?: ParamLayout } = {}): Promise<WrittenFile> {
  const layout = opts.layout ?? optimizer.layout;
  return writeSafetensorsAsync(path, optimizer.momentEntries(layout), { metadata: optimizer.stateMetadata(layout), ...(opts.chunkBytes ? { chunkBytes: opts.chunkBytes } : {}) });
}

/**
 * A state file written by `writeAdamWState` (or `serializeAdamWState`, or PyTorch in HF layout), opened for
 * `AdamW.load`: each moment is read from the file when asked for. Close it after loading.
 */
export function openAdamWState(path: string, opts: { chunkBytes?: number } = {}): { state: AdamWState; close: () => void } {
  const reader = SafetensorsReader.open(path, opts);
  const step = Number(reader.metadata?.['step'] ?? NaN);
  let layout: StateLayout;
  try {
    if (!Number.isInteger(step) || step < 0) throw new Error(`${path}: no optimizer step in the safetensors metadata (expected {"step": "<n>"})`);
    layout = stateLayoutOf(reader.metadata, path);
  } catch (e) {
    reader.close();
    throw e;
  }
  const lookup = (kind: 'm' | 'v'): MomentLookup => ({ get: (name) => (reader.has(`${kind}.${name}`) ? reader.read(`${kind}.${name}`) : undefined) });
  return { state: { step, m: lookup('m'), v: lookup('v'), layout }, close: () => reader.close() };
}
