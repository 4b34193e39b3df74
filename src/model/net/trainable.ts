/**
 * What a trainer updates: every weight of the model (full fine-tuning), or LoRA adapters on a frozen base (lora.ts).
 * The SFT and GRPO trainers differentiate the loss with respect to `tape`, sum micro-batches by tape name, `project`
 * the sums onto `params` (what the optimizer updates and checkpoints) and call `afterUpdate` after the optimizer step.
 */
import type * as tf from '@tensorflow/tfjs';
import type { LoraAdapter } from './lora';
import type { ParamLayout } from './params';

export interface TrainableSet {
  readonly kind: 'full' | 'lora';
  /** the model variables the gradient tape differentiates, by model weight name */
  readonly tape: ReadonlyMap<string, tf.Variable>;
  /** what the optimizer updates (and a checkpoint stores with its moments), by name */
  readonly params: ReadonlyMap<string, tf.Variable>;
  /** summed tape gradients → gradients of `params`. Returns the same map when they are the same thing. */
  project(grads: Map<string, tf.Tensor>): Map<string, tf.Tensor>;
  /** after each optimizer step (LoRA: the merged weights into the model) */
  afterUpdate(): void;
  /**
   * How `params` are held against HF / PEFT's layout, for the optimizer's checkpoints (written in that layout); absent
   * for a model without one (test models), whose optimizer files stay in its own layout.
   */
  readonly layout?: ParamLayout;
}

/** Every parameter of the model, trained as it is (the model's layout when it has one: QwenModel). */
export function fullTrainable(model: { namedVariables(): Map<string, tf.Variable> } & Partial<ParamLayout>): TrainableSet {
  const vars = model.namedVariables();
  return { kind: 'full', tape: vars, params: vars, project: (g) => g, afterUpdate: () => {}, ...(model.hfTransposed ? { layout: model as ParamLayout } : {}) };
}

/**
 * The adapter's A, B (and token rows). Where the model has training graphs (native TensorFlow) and no token rows are
 * trained, the tape watches A and B themselves and the graphs compute their gradients from the layers' inputs and
 * output gradients, never the dense weight gradient (low-rank mode, `model.attachLora`); elsewhere the tape watches
 * the merged weights and their gradients are projected onto the adapter. The same update either way (tested).
 * `lowRank: false` forces the merged path.
 */
export function loraTrainable(adapter: LoraAdapter, opts: { lowRank?: boolean } = {}): TrainableSet {
  const low = opts.lowRank === false ? undefined : adapter.lowRank();
  if (low && adapter.model.attachLora(low)) {
    return { kind: 'lora', tape: adapter.params(), params: adapter.params(), project: (g) => g, afterUpdate: () => adapter.merge(), layout: adapter };
  }
  adapter.model.attachLora(undefined);
  return { kind: 'lora', tape: adapter.tapeVariables(), params: adapter.params(), project: (g) => adapter.project(g), afterUpdate: () => adapter.merge(), layout: adapter };
}

/** Applies one optimizer step from summed tape gradients; disposes every gradient. Returns the pre-clip norm. */
export function applyUpdate(set: TrainableSet, sums: Map<string, tf.Tensor>, apply: (grads: Map<string, tf.Tensor>) => number): number {
  const grads = set.project(sums);
  try {
    return apply(grads);
  } finally {
    for (const g of sums.values()) g.dispose();
    if (grads !== sums) for (const g of grads.values()) g.dispose();
    set.afterUpdate();
  }
}
