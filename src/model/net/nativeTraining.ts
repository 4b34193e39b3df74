/**
 * The trainable path of QwenModel on native TensorFlow: the per-shape layer contexts (RoPE tables, attention bias
 * chunks) and the training graphs of the whole decoder stack (trainGraph.ts), run forward and backward as a customGrad.
 */
import * as tf from '@tensorflow/tfjs';
import type { QwenDims } from './qwenConfig';
import { PARAM_NAMES, type LayerContext } from './layer';
import { taping } from './native';
import type { LayerVars } from './nativeInference';
import { attentionBiasChunks } from './portableAttention';
import { ropeTables } from './ops';
import { type HeadDims, type StackGraph, StackGraphCache, type StackLora } from './trainGraph';

/**
 * LoRA factors a training pass differentiates in place of the weights (lora.ts, low-rank mode): the layout and, per
 * layer, A and B of each site in the layout's order.
 */
export interface AttachedLora {
  spec: StackLora;
  factors: tf.Tensor[][];
}

/** What the training path needs of the model. */
export interface TrainingHost {
  readonly dims: QwenDims;
  readonly layerVars: readonly LayerVars[];
  readonly rotate: tf.Tensor2D;
  positionsOf(B: number, T: number, past: number, positions?: number[][]): number[];
}

export class NativeTraining {
  private stackGraphs?: StackGraphCache | null;
  /** layer contexts by batch shape (layerContext) */
  private readonly contexts = new Map<string, LayerContext>();
  /** LoRA training on frozen weights: the stack graphs differentiate these factors, not the weights */
  private lora?: AttachedLora;

  constructor(private readonly m: TrainingHost) {}

  /** Trains `lora`'s factors through the stack graphs from now on (undefined: the weights again). */
  attachLora(lora: AttachedLora | undefined): void {
    this.lora = lora;
  }

  get loraAttached(): boolean {
    return this.lora !== undefined;
  }

  /**
   * What every layer of a training pass shares: RoPE tables and the attention bias chunks. Without positions and key
   * mask (SFT, the benches) they depend on (B, T) only and are kept for the next pass of the same shape.
   */
  layerContext(B: number, T: number, positions?: number[][], keyMask?: number[][], segments?: number[][]): LayerContext {
    const d = this.m.dims;
    const key = `${B}x${T}`;
    const shared = !positions && !keyMask && !segments;
    const have = shared ? this.contexts.get(key) : undefined;
    if (have) return have;
    const { cos, sin } = ropeTables(this.m.positionsOf(B, T, 0, positions), d.headDim, d.ropeTheta);
    const scale = 1 / Math.sqrt(d.headDim);
    const c3 = tf.tensor3d(cos, [B * T, 1, d.headDim]);
    const s3 = tf.tensor3d(sin, [B * T, 1, d.headDim]);
    const ctx: LayerContext = {
      B, T, heads: d.heads, kvHeads: d.kvHeads, headDim: d.headDim, eps: d.eps,
      cosQ: tf.mul(c3, scale), sinQ: tf.mul(s3, scale), cosK: c3, sinK: s3, rotate: this.m.rotate,
      biasChunks: attentionBiasChunks(B, T, keyMask, segments),
    };
    if (shared) {
      tf.keep(ctx.cosQ);
      tf.keep(ctx.sinQ);
      tf.keep(c3);
      tf.keep(s3);
      ctx.biasChunks.forEach((t) => tf.keep(t));
      this.contexts.set(key, ctx);
      for (const [k, old] of this.contexts) {
        if (this.contexts.size <= 8) break;
        this.disposeContext(old);
        this.contexts.delete(k);
      }
    }
    return ctx;
  }

  disposeContext(ctx: LayerContext): void {
    tf.dispose([ctx.cosQ, ctx.sinQ, ctx.cosK, ctx.sinK, ...ctx.biasChunks]);
  }

  /**
   * The training graphs of the decoder stack by batch shape (trainGraph.ts), built on first use; null when graphs are
   * off (CM2_TF_GRAPH=0) or one could not be built (reported once; training then runs layer by layer, eagerly).
   */
  stackGraphCache(): StackGraphCache | null {
    if (this.stackGraphs === undefined) {
      const d = this.m.dims;
      const present = PARAM_NAMES.filter((n) => this.m.layerVars[0]![n] !== undefined);
      this.stackGraphs = process.env.CM2_TF_GRAPH === '0' ? null : new StackGraphCache({ layers: d.layers, hidden: d.hidden, heads: d.heads, kvHeads: d.kvHeads, headDim: d.headDim, intermediate: d.intermediate, eps: d.eps, present });
    }
    return this.stackGraphs;
  }

  stackGraph(B: number, T: number, head: HeadDims): StackGraph | null {
    const cache = this.stackGraphCache();
    if (!cache) return null;
    try {
      return cache.get(B, T, head, this.lora?.spec);
    } catch (e) {
      console.warn(`training graph unavailable, training layer by layer: ${(e as Error).message.split('\n')[0]}`);
      cache.dispose();
      this.stackGraphs = null;
      return null;
    }
  }

  /**
   * What both stack graphs are fed besides x: the layers' weights (flat, `perLayer` each), the rotary tables and the
   * context's inputs (tables, rotation, bias chunks).
   */
  private stackFeeds(graph: StackGraph, ctx: LayerContext) {
    const names = graph.dims.present;
    const tables = [ctx.cosQ, ctx.sinQ, ctx.cosK, ctx.sinK];
    return { perLayer: names.length, weights: this.m.layerVars.flatMap((L) => names.map((n) => L[n]!)), tables, inputs: [...tables, ctx.rotate, ...ctx.biasChunks] };
  }

  /** The backward graph's per-layer feeds, after its leading ones: each layer's weights, then its saved activations. */
  private layerBackwardFeeds(ws: tf.Tensor[], saved: tf.Tensor[], perLayer: number, k: number, factors?: tf.Tensor[][]): tf.Tensor[] {
    return this.m.layerVars.flatMap((_, i) => [...ws.slice(i * perLayer, (i + 1) * perLayer), ...saved.slice(i * k, (i + 1) * k), ...(factors?.[i] ?? [])]);
  }

  /**
   * x [B·T, hidden] through every decoder layer, the final norm and the head to log p(target) [B·T] as one graph run,
   * and (while a gradient is recorded) the backward pass as another, a customGrad. What it differentiates: with LoRA
   * attached, x and the adapter's factors (every weight frozen); else x, the final norm's weight, the head's weight and
   * the layers' weights. `at` is targetIndex of the targets. The forward run's saved tensors go to the backward run in
   * named slots: the layers' activations, the head's three, the rotary tables, then `at` and the norm and head weights,
   * which may be tensors derived inside the caller's tidy (the norm / T of a sampling temperature) and gone by backward
   * time.
   */
  stackLogprobsThroughGraph(graph: StackGraph, x: tf.Tensor2D, ctx: LayerContext, norm: tf.Tensor1D, head: tf.Tensor2D, at: tf.Tensor2D): tf.Tensor1D {
    const { perLayer, weights, tables, inputs } = this.stackFeeds(graph, ctx);
    const k = graph.savedPerLayer;
    const n = this.m.layerVars.length * k;
    const forward = (xi: tf.Tensor, ws: tf.Tensor[], normW: tf.Tensor, headW: tf.Tensor): tf.Tensor[] => [xi, ...inputs, ...ws, normW, headW, at];
    if (!taping()) return graph.runForward(forward(x, weights, norm, head), false)[0]! as tf.Tensor1D;
    const lora = this.lora;
    const f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const save = args.pop() as tf.GradSaveFunc;
      const ts = args as tf.Tensor[];
      const [normW, headW] = lora ? [norm, head] : [ts[1]!, ts[2]!];
      const ws = lora ? weights : ts.slice(3);
      const [value, ...saved] = graph.runForward(forward(ts[0]!, ws, normW, headW), true);
      // The tables are saved too: the tidy around the forward pass disposes what is not saved.
      save([...saved, ...tables, at, normW, headW]);
      return {
        value: value!,
        gradFunc: (dy: tf.Tensor, s: tf.Tensor[]) => {
          const slots = { layers: s.slice(0, n), head: s.slice(n, n + 3), tables: s.slice(n + 3, n + 7), at: s[n + 7]!, norm: s[n + 8]!, headW: s[n + 9]! };
          const feeds = [dy, slots.norm, slots.headW, slots.at, ...slots.head, ...slots.tables, this.m.rotate, ...this.layerBackwardFeeds(ws, slots.layers, perLayer, k, lora?.factors)];
          const out = graph.runBackward(feeds);
          tf.dispose(s); // the activations are no longer needed (the engine's later dispose is a no-op)
          // LoRA: dx, then the factors'. Else dx, the layers', the final norm's and the head's, put in the customGrad's
          // input order.
          return lora ? out : [out[0]!, ...out.slice(-2), ...out.slice(1, -2)];
        },
      };
    });
    return (lora ? f(x, ...lora.factors.flat()) : f(x, norm, head, ...weights)) as tf.Tensor1D;
  }

  dispose(): void {
    this.stackGraphs?.dispose();
    this.stackGraphs = undefined;
    for (const ctx of this.contexts.values()) this.disposeContext(ctx);
    this.contexts.clear();
  }
}
