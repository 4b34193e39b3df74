/**
 * Direct access to TensorFlow ops on the native backend (tfjs-node / tfjs-node-gpu, backend name 'tensorflow'), for
 * what tfjs has no op for — targets' log-probabilities and their gradient without a one-hot matrix (GatherNd,
 * TensorScatterAdd), rows of a tensor overwritten in place (the KV cache) — and for the inference hot path, where tfjs'
 * per-op overhead counts.
 *
 * Ops run through tfjs-node's own binding (`executeOp`, i.e. TFE_Execute); their outputs are ordinary tfjs tensors,
 * tracked by tf.tidy, but not recorded on a gradient tape: use them in inference code or inside tf.customGrad.
 */
import * as tf from '@tensorflow/tfjs';

interface Binding {
  TF_ATTR_STRING: number;
  TF_ATTR_INT: number;
  TF_ATTR_FLOAT: number;
  TF_ATTR_BOOL: number;
  TF_ATTR_TYPE: number;
  TF_ATTR_SHAPE: number;
  TF_FLOAT: number;
  TF_INT32: number;
}

export interface OpAttr {
  name: string;
  type: number;
  value: unknown;
}

interface NodeBackend {
  binding: Binding;
  executeSingleOutput(name: string, attrs: OpAttr[], inputs: tf.Tensor[]): tf.Tensor;
  executeMultipleOutputs(name: string, attrs: OpAttr[], inputs: tf.Tensor[], numOutputs: number): tf.Tensor[];
}

/** True when the active tfjs backend is native TensorFlow. */
export function isNative(): boolean {
  return tf.getBackend() === 'tensorflow';
}

function backend(): NodeBackend {
  if (!isNative()) throw new Error(`native TensorFlow op requested on the '${tf.getBackend()}' backend`);
  return tf.backend() as unknown as NodeBackend;
}

/** Op attributes (the binding's type codes). */
export const attr = {
  type: (name: string, dtype: 'float32' | 'int32'): OpAttr => {
    const b = backend().binding;
    return { name, type: b.TF_ATTR_TYPE, value: dtype === 'float32' ? b.TF_FLOAT : b.TF_INT32 };
  },
  bool: (name: string, value: boolean): OpAttr => ({ name, type: backend().binding.TF_ATTR_BOOL, value }),
  int: (name: string, value: number | number[]): OpAttr => ({ name, type: backend().binding.TF_ATTR_INT, value }),
  shape: (name: string, value: number[]): OpAttr => ({ name, type: backend().binding.TF_ATTR_SHAPE, value }),
  string: (name: string, value: string): OpAttr => ({ name, type: backend().binding.TF_ATTR_STRING, value }),
};

/**
 * Moves a tensor's data into TensorFlow now. tfjs-node keeps a tensor made from a JS array as that array until an op
 * first uses it, so a model built from JS data would hold a second copy of its weights until then.
 */
export function materialize(t: tf.Tensor): void {
  if (isNative()) (tf.backend() as unknown as { getInputTensorIds(ts: tf.Tensor[]): number[] }).getInputTensorIds([t]);
}

/** Runs a TensorFlow op with one output. */
export function nativeOp(name: string, inputs: tf.Tensor[], attrs: OpAttr[]): tf.Tensor {
  return backend().executeSingleOutput(name, attrs, inputs);
}

/** Runs a TensorFlow op with `n` outputs (0 for ops such as AssignVariableOp). */
export function nativeOps(name: string, inputs: tf.Tensor[], attrs: OpAttr[], n: number): tf.Tensor[] {
  return backend().executeMultipleOutputs(name, attrs, inputs, n);
}

/**
 * Per row of logits z [N, V] and its target (at: [N, 2] int32 rows (n, target[n])): log softmax(z)[n, target] ([N]) and
 * softmax(z) ([N, V], what the gradient needs), exact and without a one-hot matrix: log p_t = z_t − max z + log max p,
 * where max p ≥ 1/V cannot underflow however unlikely the target. TensorFlow's Softmax kernel is 2–4× faster than its
 * SparseSoftmaxCrossEntropyWithLogits (docs/decisions.md: 3.8 → 1.2 ms at 2,048 × 512, 354 → 96 ms at 512 × 151,936),
 * and the reductions cost less than the difference.
 */
export function softmaxTargetLogprobs(logits: tf.Tensor2D, at: tf.Tensor2D): { logp: tf.Tensor1D; probs: tf.Tensor2D } {
  const tF = attr.type('T', 'float32');
  const keep = [attr.bool('keep_dims', false), tF, attr.type('Tidx', 'int32')];
  return tf.tidy(() => {
    const probs = nativeOp('Softmax', [logits], [tF]);
    const one = tf.scalar(1, 'int32');
    const zt = nativeOp('GatherNd', [logits, at], [attr.type('Tparams', 'float32'), attr.type('Tindices', 'int32')]);
    const zmax = nativeOp('Max', [logits, one], keep);
    const pmax = nativeOp('Max', [probs, one], keep);
    const logp = nativeOp('AddV2', [nativeOp('Sub', [zt, zmax], [tF]), nativeOp('Log', [pmax], [tF])], [tF]);
    return { logp: logp as tf.Tensor1D, probs: probs as tf.Tensor2D };
  });
}

/** The gradient of softmaxTargetLogprobs' logp for dy [N]: dy·(onehot(target) − probs), [N, V]; frees nothing. */
export function targetLogprobsGrad(probs: tf.Tensor2D, at: tf.Tensor2D, dy: tf.Tensor): tf.Tensor2D {
  const tF = attr.type('T', 'float32');
  return tf.tidy(() => {
    const scaled = nativeOp('Mul', [probs, tf.reshape(tf.neg(dy), [-1, 1])], [tF]);
    return nativeOp('TensorScatterAdd', [scaled, at, dy], [tF, attr.type('Tindices', 'int32')]) as tf.Tensor2D;
  });
}

/** (n, targets[n]) rows [N, 2], int32: where softmaxTargetLogprobs reads and targetLogprobsGrad writes. */
export function targetIndex(targets: number[]): tf.Tensor2D {
  const data = new Int32Array(targets.length * 2);
  targets.forEach((t, n) => {
    data[2 * n] = n;
    data[2 * n + 1] = t;
  });
  return tf.tensor2d(data, [targets.length, 2], 'int32');
}

/** −log softmax(logits)[n, argmax] per row [B, V] (the greedy token's negative log-probability): −log max softmax. */
export function greedyNll(logits: tf.Tensor2D): tf.Tensor1D {
  const tF = attr.type('T', 'float32');
  return tf.tidy(() => nativeOp('Neg', [nativeOp('Log', [nativeOp('Max', [nativeOp('Softmax', [logits], [tF]), tf.scalar(1, 'int32')],
    [attr.bool('keep_dims', false), tF, attr.type('Tidx', 'int32')])], [tF])], [tF]) as tf.Tensor1D);
}

/**
 * TensorFlow ops called straight through the binding, for the inference hot path (a decoding step is a few hundred
 * small ops, so the per-op cost decides its speed): attributes built once, shape / axis / constant tensors created once
 * and kept, no tfjs kernel wrapper in between (tfjs' own wrappers create an axis tensor and a Cast per Mean, a shape
 * tensor per Reshape, a scalar tensor per number operand). Not recorded on a gradient tape.
 */
export class RawOps {
  private readonly b: NodeBackend;
  private readonly consts = new Map<string, tf.Tensor>();
  private readonly tF: OpAttr;
  private readonly mm: OpAttr[][][];
  private readonly meanKeep: OpAttr[];
  private readonly reshapeA: OpAttr[];
  private readonly transposeA: OpAttr[];
  private readonly gatherA: OpAttr[];
  private readonly argMaxA: OpAttr[];
  private readonly tLen: OpAttr;

  constructor() {
    this.b = backend();
    this.tF = attr.type('T', 'float32');
    this.mm = [false, true].map((x) => [false, true].map((y) => [this.tF, attr.bool('adj_x', x), attr.bool('adj_y', y)]));
    this.meanKeep = [attr.bool('keep_dims', true), this.tF, attr.type('Tidx', 'int32')];
    this.reshapeA = [this.tF, attr.type('Tshape', 'int32')];
    this.transposeA = [this.tF, attr.type('Tperm', 'int32')];
    this.gatherA = [attr.type('Tparams', 'float32'), attr.type('Tindices', 'int32'), attr.type('Taxis', 'int32'), attr.int('batch_dims', 0)];
    this.argMaxA = [this.tF, attr.type('Tidx', 'int32'), attr.type('output_type', 'int32')];
    this.tLen = attr.type('Tlen', 'int32');
  }

  /** A kept int32 constant (shapes, axes, sizes), created once per distinct value. */
  ints(values: number[]): tf.Tensor {
    return this.kept(`i${values.join(',')}`, () => tf.tensor1d(values, 'int32'));
  }

  /** The kept constant under `key`, made by `make` the first time. */
  private kept(key: string, make: () => tf.Tensor): tf.Tensor {
    let t = this.consts.get(key);
    if (!t) {
      t = tf.keep(make());
      this.consts.set(key, t);
    }
    return t;
  }

  /** A kept float32 scalar, created once per value. */
  scalar(value: number): tf.Tensor {
    return this.kept(`f${value}`, () => tf.scalar(value, 'float32'));
  }

  private one(name: string, attrs: OpAttr[], inputs: tf.Tensor[]): tf.Tensor {
    return this.b.executeSingleOutput(name, attrs, inputs);
  }

  matMul(a: tf.Tensor, b: tf.Tensor, transposeA = false, transposeB = false): tf.Tensor {
    return this.one('BatchMatMulV2', this.mm[transposeA ? 1 : 0]![transposeB ? 1 : 0]!, [a, b]);
  }

  add(a: tf.Tensor, b: tf.Tensor): tf.Tensor {
    return this.one('AddV2', [this.tF], [a, b]);
  }

  mul(a: tf.Tensor, b: tf.Tensor): tf.Tensor {
    return this.one('Mul', [this.tF], [a, b]);
  }

  square(x: tf.Tensor): tf.Tensor {
    return this.one('Square', [this.tF], [x]);
  }

  rsqrt(x: tf.Tensor): tf.Tensor {
    return this.one('Rsqrt', [this.tF], [x]);
  }

  sigmoid(x: tf.Tensor): tf.Tensor {
    return this.one('Sigmoid', [this.tF], [x]);
  }

  softmax(x: tf.Tensor): tf.Tensor {
    return this.one('Softmax', [this.tF], [x]);
  }

  /** Mean over the last axis, kept as size 1. */
  meanLast(x: tf.Tensor): tf.Tensor {
    return this.one('Mean', this.meanKeep, [x, this.ints([x.rank - 1])]);
  }

  reshape(x: tf.Tensor, shape: number[]): tf.Tensor {
    return this.one('Reshape', this.reshapeA, [x, this.ints(shape)]);
  }

  transpose(x: tf.Tensor, perm: number[]): tf.Tensor {
    return this.one('Transpose', this.transposeA, [x, this.ints(perm)]);
  }

  /** Rows of a float32 matrix by int32 ids. */
  gatherRows(params: tf.Tensor, ids: tf.Tensor): tf.Tensor {
    return this.one('GatherV2', this.gatherA, [params, ids, this.axis(0)]);
  }

  /** SplitV along `axis` into pieces of the given sizes. */
  split(x: tf.Tensor, sizes: number[], axis: number): tf.Tensor[] {
    return this.b.executeMultipleOutputs('SplitV', [attr.int('num_split', sizes.length), this.tF, this.tLen],
      [x, this.ints(sizes), this.axis(axis)], sizes.length);
  }

  /** Unstacks along axis 0 (outputs alias the input's buffer). */
  unstack(x: tf.Tensor): tf.Tensor[] {
    const n = x.shape[0]!;
    return this.b.executeMultipleOutputs('Unpack', [attr.int('num', n), this.tF, attr.int('axis', 0)], [x], n);
  }

  argMaxLast(x: tf.Tensor): tf.Tensor {
    return this.one('ArgMax', this.argMaxA, [x, this.axis(x.rank - 1)]);
  }

  /** A kept int32 scalar. */
  axis(a: number): tf.Tensor {
    return this.kept(`a${a}`, () => tf.scalar(a, 'int32'));
  }

  /**
   * x[rows[i], ...] = updates[i, ...], in x's own buffer (TensorFlow's InplaceUpdate aliases its input on purpose):
   * every tensor that shares x's buffer (reshapes, axis-0 unstacks) sees the new rows. Only for buffers this code
   * owns and reads in order (the KV cache); eager CPU execution is synchronous.
   */
  inplaceUpdate(x: tf.Tensor, rows: tf.Tensor, updates: tf.Tensor): void {
    this.one('InplaceUpdate', [this.tF], [x, rows, updates]).dispose();
  }

  /** A new float32 tensor of zeros, allocated by TensorFlow. */
  zeros(shape: number[]): tf.Tensor {
    return this.one('Fill', [this.tF, attr.type('index_type', 'int32')], [this.ints(shape), this.scalar(0)]);
  }

  /** Drops the cached constants when there are many (shapes of many different inputs); call between forward passes. */
  trim(max = 512): void {
    if (this.consts.size > max) this.dispose();
  }

  dispose(): void {
    tf.dispose([...this.consts.values()]);
    this.consts.clear();
  }
}

let raw: RawOps | undefined;
let rawBackend: unknown;

/** The process's RawOps for the active native backend (created once; recreated if the backend instance changed). */
export function rawOps(): RawOps {
  const b = tf.backend();
  if (!raw || rawBackend !== b) {
    raw = new RawOps();
    rawBackend = b;
  }
  return raw;
}

/**
 * A float32 TensorFlow resource variable: state that fused TensorFlow ops update in place (the optimizer's moments).
 * Offers what AdamW uses of a tf.Variable: shape, size, dataSync, assign, dispose.
 */
export class ResourceVariable {
  readonly shape: number[];
  readonly size: number;
  private handle: tf.Tensor | undefined;

  constructor(init: tf.Tensor) {
    this.shape = [...init.shape];
    this.size = init.size;
    // An anonymous resource: TensorFlow frees it with its last handle.
    this.handle = tf.keep(nativeOp('VarHandleOp', [], [
      attr.type('dtype', 'float32'), attr.shape('shape', this.shape), attr.string('container', ''),
      attr.string('shared_name', 'cd2c89b7-88b7-44c8-ad83-06c2a9158347'),
    ]));
    this.assign(init);
  }

  get resource(): tf.Tensor {
    if (!this.handle) throw new Error('ResourceVariable used after dispose');
    return this.handle;
  }

  /** The current value; shares the variable's buffer until the next in-place update (which then copies). */
  read(): tf.Tensor {
    return nativeOp('ReadVariableOp', [this.resource], [attr.type('dtype', 'float32')]);
  }

  dataSync(): Float32Array {
    const t = this.read();
    const data = t.dataSync() as Float32Array;
    t.dispose();
    return data;
  }

  /** Takes `value` (TensorFlow shares its buffer rather than copying it). */
  assign(value: tf.Tensor): void {
    nativeOps('AssignVariableOp', [this.resource, value], [attr.type('dtype', 'float32')], 0);
  }

  dispose(): void {
    this.handle?.dispose();
    this.handle = undefined;
  }
}

/** Σ x² of a float32 tensor as a scalar, in one pass and without a squared copy (EuclideanNorm, squared). */
export function sumOfSquares(x: tf.Tensor): tf.Scalar {
  return tf.tidy(() => {
    const axes = tf.tensor1d(Array.from({ length: x.rank }, (_, i) => i), 'int32');
    const norm = nativeOp('EuclideanNorm', [x, axes], [attr.type('T', 'float32'), attr.type('Tidx', 'int32'), attr.bool('keep_dims', false)]);
    return tf.square(norm) as tf.Scalar;
  });
}

/**
 * One AdamW update of parameter `p` in two fused passes: p·(1 − lr·wd) into the resource `work` (skipped without weight
 * decay), then TensorFlow's ResourceApplyAdam on `work`, `m`, `v`: `adamWReference` (./optim/adamw.ts) rearranged
 * with α = lr·√(1−β2ᵗ)/(1−β1ᵗ) and ε' = ε·√(1−β2ᵗ), and tested against it. `p` then holds the result (sharing
 * `work`'s buffer).
 */
export function adamWStep(
  p: tf.Variable,
  work: ResourceVariable,
  m: ResourceVariable,
  v: ResourceVariable,
  g: tf.Tensor,
  hp: AdamWStepHp,
  scalars?: tf.Tensor[],
): void {
  tf.tidy(() => {
    if (hp.weightDecay > 0) {
      const decayed = tf.mul(p, 1 - hp.lr * hp.weightDecay);
      work.assign(decayed);
      decayed.dispose(); // work is the buffer's only holder now, so ResourceApplyAdam updates it in place
    } else {
      work.assign(p); // shared with p: ResourceApplyAdam copies it once (copy-on-write)
    }
    nativeOps('ResourceApplyAdam', [work.resource, m.resource, v.resource, ...(scalars ?? adamScalars(hp)), g],
      [attr.type('T', 'float32'), attr.bool('use_locking', false), attr.bool('use_nesterov', false)], 0);
    p.assign(work.read());
  });
}

export interface AdamWStepHp {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  step: number;
}

/** ResourceApplyAdam's scalar inputs for a step (the same for every parameter: make them once per update). */
export function adamScalars(hp: AdamWStepHp): tf.Tensor[] {
  const bc2 = 1 - hp.beta2 ** hp.step;
  return [hp.beta1 ** hp.step, hp.beta2 ** hp.step, hp.lr, hp.beta1, hp.beta2, hp.eps * Math.sqrt(bc2)].map((x) => tf.scalar(x, 'float32'));
}

/** True while a gradient is being recorded (tf.grad / variableGrads / minimize). */
export function taping(): boolean {
  return ((tf.engine() as unknown as { state: { gradientDepth: number } }).state.gradientDepth ?? 0) > 0;
}
