/**
 * LoRA adapters on a QwenModel, in PEFT's format (adapter_config.json + adapter_model.safetensors, PEFT's tensor names),
 * trained through the merged weight.
 *
 * An adapted linear layer is W' = W + s·B·A (HF layout: W [out, in], A [r, in], B [out, r], s = alpha / r, or
 * alpha / √r with rsLoRA). The model's variables hold W' (merged), so inference, the KV cache, the fused native weights
 * and every forward path run unchanged; the adapter keeps a copy of the frozen base W and merges again after each
 * update. Gradients, two ways with the same result (tested):
 * - low-rank (`lowRank`, native TensorFlow's training graphs): the tape watches A and B, and the backward graph computes
 *   dA = s·(dy·B)ᵀ·x and dB = s·dyᵀ·(x·Aᵀ) from each adapted layer's input and output gradient; no dense weight
 *   gradient, no gradient of the frozen weights;
 * - merged (elsewhere, and with trainable token rows): the tape's gradient G of W' is projected onto the adapter,
 *   dL/dA = s·Bᵀ·G and dL/dB = s·G·Aᵀ (HF layout): the chain rule through the merge.
 * Either way the optimizer holds the moments of A and B only and a checkpoint the adapter only (docs/decisions.md).
 * LoRA dropout has no merged form, so it must be 0.
 *
 * Trainable token rows (PEFT's `trainable_token_indices`): the embedding rows of the listed ids are trained beside the
 * adapters (new tokens of the CM2 format); PEFT stores their values, not a difference, as
 * `…embed_tokens.token_adapter.trainable_tokens_delta` [k, hidden].
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import type { QwenModel } from './qwen';
import { paramSpecs, type ParamLayout, type ParamSpec } from './params';
import { Rng } from './random';
import { SafetensorsReader } from '../formats/safetensors';
import { serializeTensors } from '../formats/safetensorsWrite';
import type { TensorSource } from '../formats/safetensors';
import type { LoraSettings } from '../../kernel/loraSettings';
import { LINEAR_NAMES, type LinearName } from './layer';
import type { AttachedLora } from './nativeTraining';
import type { StackLora } from './trainGraph';

export { LORA_MODULES, LoraSettings } from '../../kernel/loraSettings';

const PREFIX = 'base_model.model.';
const EMBED = 'model.embed_tokens.weight';
const TOKENS_NAME = `${PREFIX}model.embed_tokens.token_adapter.trainable_tokens_delta`;
export const ADAPTER_CONFIG = 'adapter_config.json';
export const ADAPTER_WEIGHTS = 'adapter_model.safetensors';

/** One adapted linear layer. */
interface Site {
  /** the model's weight name (HF), e.g. model.layers.0.self_attn.q_proj.weight */
  weight: string;
  /** PEFT's tensor names of A and B */
  aName: string;
  bName: string;
  rank: number;
  scale: number;
  inDim: number;
  outDim: number;
}

/** The module path of a weight name (model.layers.0.mlp.up_proj.weight → model.layers.0.mlp.up_proj). */
const moduleOf = (weight: string): string => weight.replace(/\.weight$/, '');

/** PEFT's key match: the whole module name, or its last dotted parts. */
const matchesKey = (module: string, key: string): boolean => module === key || module.endsWith(`.${key}`);

/** PEFT's pattern match for rank_pattern / alpha_pattern keys: `(.*\.)?key$` searched in the module name. */
function patternValue(patterns: Record<string, number> | undefined, module: string): number | undefined {
  for (const [key, value] of Object.entries(patterns ?? {})) if (new RegExp(`(.*\\.)?${key}$`).test(module)) return value;
  return undefined;
}

/** The adapter's shape, as read from or written to adapter_config.json. */
export interface LoraLayout {
  rank: number;
  alpha: number;
  rslora: boolean;
  /** list: PEFT's suffix match; string: a regular expression the whole module name must match */
  targets: string[] | string;
  layers?: number[];
  rankPattern?: Record<string, number>;
  alphaPattern?: Record<string, number>;
  trainTokens: number[];
  dropout: number;
}

export const layoutOf = (s: LoraSettings): LoraLayout => ({ rank: s.rank, alpha: s.alpha, rslora: s.rslora, targets: [...s.targets], trainTokens: [...s.trainTokens], dropout: s.dropout });

/** The linear layers of `specs` that the layout adapts (an error when it names none). */
function sitesOf(specs: readonly ParamSpec[], layout: LoraLayout, where: string): Site[] {
  const sites: Site[] = [];
  const regex = typeof layout.targets === 'string' ? new RegExp(`^(?:${layout.targets})$`) : undefined;
  for (const spec of specs) {
    if (spec.kind !== 'linear') continue;
    const module = moduleOf(spec.name);
    const hit = regex ? regex.test(module) : (layout.targets as string[]).some((k) => matchesKey(module, k));
    if (!hit) continue;
    const layer = /\.layers\.(\d+)\./.exec(module);
    if (layout.layers && (!layer || !layout.layers.includes(Number(layer[1])))) continue;
    const rank = patternValue(layout.rankPattern, module) ?? layout.rank;
    const alpha = patternValue(layout.alphaPattern, module) ?? layout.alpha;
    const [outDim, inDim] = spec.shape as [number, number];
    sites.push({
      weight: spec.name,
      aName: `${PREFIX}${module}.lora_A.weight`,
      bName: `${PREFIX}${module}.lora_B.weight`,
      rank,
      scale: layout.rslora ? alpha / Math.sqrt(rank) : alpha / rank,
      inDim,
      outDim,
    });
  }
  if (sites.length === 0) throw new Error(`${where}: target modules ${JSON.stringify(layout.targets)} match no linear layer of the model`);
  return sites;
}

/** A read adapter_config.json, checked: what this engine can apply, else an error naming the file and the field. */
export function parseAdapterConfig(raw: unknown, file: string): LoraLayout {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw new Error(`${file}: not a JSON object`);
  const c = raw as Record<string, unknown>;
  const fail = (field: string, why: string): never => {
    throw new Error(`${file}: field '${field}' ${why}`);
  };
  if (c['peft_type'] !== 'LORA') fail('peft_type', `is ${JSON.stringify(c['peft_type'])}; only LORA adapters are supported`);
  const num = (field: string, positive = true): number => {
    const v = c[field];
    if (typeof v !== 'number' || !Number.isFinite(v) || (positive && v <= 0)) fail(field, `must be a positive number, got ${JSON.stringify(v)}`);
    return v as number;
  };
  const rank = num('r');
  if (!Number.isInteger(rank)) fail('r', `must be an integer, got ${rank}`);
  const alpha = num('lora_alpha');
  const unsupported: [string, (v: unknown) => boolean, string][] = [
    ['use_dora', (v) => v === true, 'is true: DoRA adapters are not supported'],
    ['fan_in_fan_out', (v) => v === true, 'is true: only nn.Linear layouts (fan_in_fan_out false) are supported'],
    ['bias', (v) => v !== undefined && v !== null && v !== 'none', "is not 'none': trained biases are not supported"],
    ['lora_bias', (v) => v === true, 'is true: LoRA biases are not supported'],
    ['modules_to_save', (v) => Array.isArray(v) && v.length > 0, 'lists modules: fully trained modules are not supported (trainable_token_indices trains embedding rows)'],
    ['layers_pattern', (v) => v !== undefined && v !== null && v !== 'layers' && !(Array.isArray(v) && v.length === 1 && v[0] === 'layers'), "must be null or 'layers'"],
    ['layer_replication', (v) => v !== undefined && v !== null, 'is set: layer replication is not supported'],
    ['use_qalora', (v) => v === true, 'is true: QALoRA adapters are not supported'],
    ['target_parameters', (v) => Array.isArray(v) && v.length > 0, 'lists parameters: LoRA on bare parameters is not supported'],
    ['alora_invocation_tokens', (v) => Array.isArray(v) && v.length > 0, 'is set: activated LoRA is not supported'],
  ];
  for (const [field, bad, why] of unsupported) if (bad(c[field])) fail(field, why);
  const targets = c['target_modules'];
  let t: string[] | string;
  if (typeof targets === 'string') t = targets;
  else if (Array.isArray(targets) && targets.length > 0 && targets.every((x) => typeof x === 'string')) t = targets as string[];
  else t = fail('target_modules', `must be a module name list or a regular expression, got ${JSON.stringify(targets)}`);
  const lt = c['layers_to_transform'];
  let layers: number[] | undefined;
  if (typeof lt === 'number') layers = [lt];
  else if (Array.isArray(lt) && lt.every((x) => Number.isInteger(x))) layers = lt as number[];
  else if (lt !== undefined && lt !== null) fail('layers_to_transform', `must be a layer index or a list of them, got ${JSON.stringify(lt)}`);
  const pattern = (field: string): Record<string, number> | undefined => {
    const v = c[field];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'object' || Array.isArray(v) || Object.values(v).some((x) => typeof x !== 'number' || !(x > 0))) fail(field, 'must map module names to positive numbers');
    return Object.keys(v as object).length > 0 ? (v as Record<string, number>) : undefined;
  };
  const tti = c['trainable_token_indices'];
  let trainTokens: number[] = [];
  if (Array.isArray(tti) && tti.every((x) => Number.isInteger(x) && x >= 0)) trainTokens = tti as number[];
  else if (tti && typeof tti === 'object' && !Array.isArray(tti)) {
    const entries = Object.entries(tti as Record<string, unknown>);
    for (const [key, ids] of entries) {
      if (!matchesKey('model.embed_tokens', key)) fail('trainable_token_indices', `names '${key}': only the input embedding (embed_tokens) is supported`);
      if (!Array.isArray(ids) || !ids.every((x) => Number.isInteger(x) && x >= 0)) fail('trainable_token_indices', `'${key}' must list token ids`);
      trainTokens = ids as number[];
    }
  } else if (tti !== undefined && tti !== null) fail('trainable_token_indices', `must list token ids, got ${JSON.stringify(tti)}`);
  const rankPattern = pattern('rank_pattern');
  const alphaPattern = pattern('alpha_pattern');
  const dropout = typeof c['lora_dropout'] === 'number' ? (c['lora_dropout'] as number) : 0;
  return {
    rank, alpha, rslora: c['use_rslora'] === true, targets: t, trainTokens, dropout,
    ...(layers ? { layers } : {}), ...(rankPattern ? { rankPattern } : {}), ...(alphaPattern ? { alphaPattern } : {}),
  };
}

/** adapter_config.json for a layout, in PEFT's fields (what `PeftModel.from_pretrained` reads). */
export function adapterConfigJson(layout: LoraLayout, baseModel: string | null): Record<string, unknown> {
  return {
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    base_model_name_or_path: baseModel,
    r: layout.rank,
    lora_alpha: layout.alpha,
    lora_dropout: layout.dropout,
    target_modules: layout.targets,
    layers_to_transform: layout.layers ?? null,
    rank_pattern: layout.rankPattern ?? {},
    alpha_pattern: layout.alphaPattern ?? {},
    use_rslora: layout.rslora,
    use_dora: false,
    fan_in_fan_out: false,
    bias: 'none',
    modules_to_save: null,
    init_lora_weights: true,
    inference_mode: true,
    trainable_token_indices: layout.trainTokens.length > 0 ? [...layout.trainTokens] : null,
  };
}

/**
 * LoRA adapters attached to a model. The model's variables hold the merged weights; the adapter holds A, B (and
 * trainable token rows) as variables named by PEFT's tensor names, and the frozen base weights it merges onto.
 */
export class LoraAdapter implements ParamLayout {
  /** PEFT tensor name → variable (A [r, in], B [out, r], HF layout; token rows [k, hidden]) */
  private readonly vars = new Map<string, tf.Variable>();
  /** model weight name → the frozen base (the model's internal layout) */
  private readonly base = new Map<string, tf.Tensor>();
  private readonly sites: Site[];
  private readonly tokenIds: number[];

  private constructor(
    readonly model: QwenModel,
    readonly layout: LoraLayout,
    init: (name: string, shape: [number, number], site?: Site) => Float32Array,
    where: string,
  ) {
    const specs = paramSpecs(model.dims);
    this.sites = sitesOf(specs, layout, where);
    this.tokenIds = [...layout.trainTokens];
    const dup = this.tokenIds.find((id, i) => this.tokenIds.indexOf(id) !== i);
    if (dup !== undefined) throw new Error(`${where}: trainable token ${dup} is listed twice`);
    const bad = this.tokenIds.find((id) => id >= model.dims.vocab);
    if (bad !== undefined) throw new Error(`${where}: trainable token ${bad} is outside the vocabulary (${model.dims.vocab})`);
    const variables = model.namedVariables();
    const variable = (name: string, shape: [number, number], site?: Site): void => {
      const initial = tf.tensor2d(init(name, shape, site), shape);
      this.vars.set(name, tf.variable(initial, true));
      initial.dispose(); // the variable holds the data
    };
    try {
      for (const s of this.sites) {
        variable(s.aName, [s.rank, s.inDim], s);
        variable(s.bName, [s.outDim, s.rank], s);
        this.base.set(s.weight, tf.keep(tf.clone(variables.get(s.weight)!)));
      }
      if (this.tokenIds.length > 0) {
        variable(TOKENS_NAME, [this.tokenIds.length, model.dims.hidden]);
        this.base.set(EMBED, tf.keep(tf.clone(variables.get(EMBED)!)));
      }
    } catch (e) {
      this.dispose();
      throw e;
    }
    this.merge();
  }

  /**
   * New adapters as PEFT initialises them: A ~ U(±1/√in) (kaiming_uniform with a = √5), B = 0, so the adapted model
   * starts equal to the base; token rows start at the base's rows. Deterministic in `seed`.
   */
  static create(model: QwenModel, settings: LoraSettings, seed: number): LoraAdapter {
    const rng = new Rng(seed);
    const embed = settings.trainTokens.length > 0 ? (model.namedVariables().get(EMBED)!.dataSync() as Float32Array) : undefined;
    return new LoraAdapter(model, layoutOf(settings), (name, [rows, cols], site) => {
      const out = new Float32Array(rows * cols);
      if (name === TOKENS_NAME) settings.trainTokens.forEach((id, i) => out.set(embed!.subarray(id * cols, (id + 1) * cols), i * cols));
      else if (name.endsWith('lora_A.weight')) {
        const bound = 1 / Math.sqrt(site!.inDim);
        for (let i = 0; i < out.length; i++) out[i] = (2 * rng.next() - 1) * bound;
      }
      return out;
    }, 'lora');
  }

  /** An adapter from a PEFT folder (adapter_config.json + adapter_model.safetensors) or from in-memory files. */
  static fromPeft(model: QwenModel, files: { config: unknown; weights: SafetensorsReader; where: string }): LoraAdapter {
    const layout = parseAdapterConfig(files.config, `${files.where}/${ADAPTER_CONFIG}`);
    const used = new Set<string>();
    const adapter = new LoraAdapter(model, layout, (name, shape) => {
      if (!files.weights.has(name)) throw new Error(`${files.weights.path}: tensor ${name} is missing`);
      used.add(name);
      return files.weights.read(name, shape);
    }, files.where);
    const extra = files.weights.names().filter((n) => !used.has(n));
    if (extra.length > 0) {
      adapter.dispose();
      throw new Error(`${files.weights.path}: tensors this adapter's config does not explain: ${extra.slice(0, 5).join(', ')}${extra.length > 5 ? ', …' : ''}`);
    }
    return adapter;
  }

  /** Reads `dir` (adapter_config.json + adapter_model.safetensors) onto `model`. */
  static load(model: QwenModel, dir: string): LoraAdapter {
    const cfgFile = join(dir, ADAPTER_CONFIG);
    const weightsFile = join(dir, ADAPTER_WEIGHTS);
    if (!existsSync(cfgFile)) throw new Error(`${dir}: no ${ADAPTER_CONFIG}`);
    if (!existsSync(weightsFile)) throw new Error(`${dir}: no ${ADAPTER_WEIGHTS}${existsSync(join(dir, 'adapter_model.bin')) ? ' (adapter_model.bin is a pickle; save with safe_serialization=True)' : ''}`);
    let config: unknown;
    try {
      config = JSON.parse(readFileSync(cfgFile, 'utf8'));
    } catch (e) {
      throw new Error(`${cfgFile}: not valid JSON (${(e as Error).message})`);
    }
    const weights = SafetensorsReader.open(weightsFile);
    try {
      return LoraAdapter.fromPeft(model, { config, weights, where: dir });
    } finally {
      weights.close();
    }
  }

  /** PEFT's tensors (HF layout), for adapter_model.safetensors. */
  *entries(): Iterable<TensorSource> {
    for (const [name, v] of this.vars) yield { name, shape: [...v.shape], data: () => v.dataSync() as Float32Array };
  }

  /** adapter_model.safetensors's bytes (PEFT's `{"format": "pt"}` metadata). */
  weightsBytes(): Uint8Array {
    return serializeTensors(this.entries(), { format: 'pt' }, ADAPTER_WEIGHTS);
  }

  configJson(baseModel: string | null = null): Record<string, unknown> {
    return adapterConfigJson(this.layout, baseModel);
  }

  /** Writes the PEFT folder `dir`. */
  save(dir: string, baseModel: string | null = null): void {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, ADAPTER_CONFIG), `${JSON.stringify(this.configJson(baseModel), null, 2)}\n`);
    writeFileSync(join(dir, ADAPTER_WEIGHTS), this.weightsBytes());
  }

  /** Number of trained values. */
  numParams(): number {
    let n = 0;
    for (const v of this.vars.values()) n += v.size;
    return n;
  }

  /**
   * ParamLayout: nothing is transposed. The adapter holds A [r, in], B [out, r] and the token rows [k, hidden] as PEFT
   * stores them (adapter_model.safetensors), so its optimizer file is in PEFT's layout as it is; it still says
   * `layout: "hf"` in its metadata, as every optimizer file does (optim/adamw.ts).
   */
  hfTransposed(_name: string): boolean {
    return false;
  }

  /** What the optimizer updates: PEFT tensor name → variable. */
  params(): Map<string, tf.Variable> {
    return new Map(this.vars);
  }

  /** The model variables whose gradients the adapter's come from (model weight name → variable). */
  tapeVariables(): Map<string, tf.Variable> {
    const all = this.model.namedVariables();
    return new Map([...this.base.keys()].map((name) => [name, all.get(name)!]));
  }

  /**
   * The factors as the training graphs take them (low-rank mode: the loss differentiated with respect to A and B
   * directly, no dense weight gradient); undefined when the adapter trains token rows, whose gradient is the
   * embedding's (the merged path then).
   */
  lowRank(): AttachedLora | undefined {
    if (this.tokenIds.length > 0) return undefined;
    const layers = this.model.dims.layers;
    const sites: StackLora['sites'] = Array.from({ length: layers }, () => []);
    const factors: tf.Tensor[][] = Array.from({ length: layers }, () => []);
    const bySite = this.sites
      .map((s) => {
        const m = /^model\.layers\.(\d+)\.(?:self_attn|mlp)\.(q|k|v|o|gate|up|down)_proj\.weight$/.exec(s.weight);
        if (!m) throw new Error(`lora: ${s.weight} is not a linear layer of a decoder layer`);
        return { s, layer: Number(m[1]), name: m[2] as LinearName };
      })
      .sort((x, y) => x.layer - y.layer || LINEAR_NAMES.indexOf(x.name) - LINEAR_NAMES.indexOf(y.name));
    for (const { s, layer, name } of bySite) {
      sites[layer]!.push({ name, rank: s.rank, scale: s.scale });
      factors[layer]!.push(this.vars.get(s.aName)!, this.vars.get(s.bName)!);
    }
    const key = sites.map((l) => l.map((x) => `${x.name}${x.rank}@${x.scale}`).join(',')).join(';');
    return { spec: { key, sites }, factors };
  }

  /**
   * Gradients of the merged weights (by model weight name, internal layout [in, out]; embedding [vocab, hidden]) →
   * gradients of the adapter (by PEFT name, HF layout). The caller owns both maps' tensors.
   */
  project(grads: ReadonlyMap<string, tf.Tensor>): Map<string, tf.Tensor> {
    const out = new Map<string, tf.Tensor>();
    for (const s of this.sites) {
      const g = grads.get(s.weight);
      if (!g) continue;
      const a = this.vars.get(s.aName)!;
      const b = this.vars.get(s.bName)!;
      // Internal layout: W'ᵢₙₜ = Wᵢₙₜ + s·Aᵀ·Bᵀ, so dA = s·Bᵀ·Gᵀ [r, in] and dB = s·Gᵀ·Aᵀ [out, r].
      out.set(s.aName, tf.tidy(() => tf.mul(tf.matMul(b, g as tf.Tensor2D, true, true), s.scale)));
      out.set(s.bName, tf.tidy(() => tf.mul(tf.matMul(g as tf.Tensor2D, a, true, true), s.scale)));
    }
    const ge = grads.get(EMBED);
    if (ge && this.tokenIds.length > 0) out.set(TOKENS_NAME, tf.tidy(() => tf.gather(ge, this.tokenIds)));
    return out;
  }

  /** The merged weights into the model's variables: W + s·B·A per site, the trained token rows. */
  merge(): void {
    const variables = this.model.namedVariables();
    for (const s of this.sites) {
      const merged = tf.tidy(() => tf.add(this.base.get(s.weight)!, tf.mul(tf.matMul(this.vars.get(s.aName)!, this.vars.get(s.bName)!, true, true), s.scale)));
      variables.get(s.weight)!.assign(merged);
      merged.dispose();
    }
    if (this.tokenIds.length > 0) {
      // Rows replaced by selection, not tensorScatterUpdate: tfjs's cpu kernel writes into its input (the base here).
      const vocab = this.model.dims.vocab;
      const pick = new Int32Array(vocab);
      const on = new Uint8Array(vocab);
      this.tokenIds.forEach((id, i) => {
        pick[id] = i;
        on[id] = 1;
      });
      const merged = tf.tidy(() => tf.where(tf.tensor2d(on, [vocab, 1], 'bool'), tf.gather(this.vars.get(TOKENS_NAME)!, tf.tensor1d(pick, 'int32')), this.base.get(EMBED)!));
      variables.get(EMBED)!.assign(merged);
      merged.dispose();
    }
  }

  /** Puts the base weights back into the model (the adapter is then detached; dispose it). */
  unmerge(): void {
    const variables = this.model.namedVariables();
    for (const [name, t] of this.base) variables.get(name)!.assign(t);
  }

  dispose(): void {
    this.model.attachLora(undefined); // the training graphs must not be fed disposed factors
    tf.dispose([...this.vars.values(), ...this.base.values()]);
    this.vars.clear();
    this.base.clear();
  }
}
