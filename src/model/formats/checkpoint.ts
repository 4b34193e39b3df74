/**
 * HF checkpoints: a folder with config.json and model.safetensors, or sharded weights listed in
 * model.safetensors.index.json ({metadata, weight_map: {name: file}}), tensors in F32, BF16 or F16. Loading streams
 * one tensor at a time from the files into the model (a checkpoint is never held whole next to the model, and files
 * of any size are read). Saving writes config.json and F32 safetensors tensor by tensor — one model.safetensors, or
 * shards plus the index when the weights exceed `maxShardSize` (transformers' layout and default) — which HF
 * transformers loads with from_pretrained.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseQwenConfig, type QwenConfig } from '../net/qwenConfig';
import { QwenModel } from '../net/qwen';
import { SafetensorsReader, type HeaderEntry } from './safetensors';
import { shardsOfIndex, writeSafetensors, writeSafetensorsAsync, writeShardedSafetensors, type WrittenFile } from './safetensorsWrite';

export function readHfConfig(dir: string): QwenConfig {
  const file = join(dir, 'config.json');
  if (!existsSync(file)) throw new Error(`${dir}: no config.json`);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${file}: not valid JSON (${(e as Error).message})`);
  }
  return parseQwenConfig(raw);
}

/** The tensors of a checkpoint folder, readable one at a time by name (single file or shards). Close when done. */
export class HfWeights {
  private constructor(
    readonly dir: string,
    private readonly readers: SafetensorsReader[],
    private readonly byName: Map<string, SafetensorsReader>,
  ) {}

  /** Opens `dir/model.safetensors`, else the shards listed in `dir/model.safetensors.index.json`. */
  static open(dir: string, opts: { chunkBytes?: number } = {}): HfWeights {
    const single = join(dir, 'model.safetensors');
    const index = join(dir, 'model.safetensors.index.json');
    const readers: SafetensorsReader[] = [];
    const byName = new Map<string, SafetensorsReader>();
    try {
      if (existsSync(single)) {
        const r = SafetensorsReader.open(single, opts);
        readers.push(r);
        for (const name of r.names()) byName.set(name, r);
      } else if (existsSync(index)) {
        let weightMap: unknown;
        try {
          weightMap = (JSON.parse(readFileSync(index, 'utf8')) as { weight_map?: unknown }).weight_map;
        } catch (e) {
          throw new Error(`${index}: not valid JSON (${(e as Error).message})`);
        }
        if (!weightMap || typeof weightMap !== 'object' || Array.isArray(weightMap) || Object.values(weightMap).some((f) => typeof f !== 'string')) {
          throw new Error(`${index}: weight_map must map tensor names to shard file names`);
        }
        for (const [file, names] of shardsOfIndex(weightMap as Record<string, string>)) {
          const path = join(dir, file);
          if (!existsSync(path)) throw new Error(`${index}: lists ${file} (for ${names[0]}${names.length > 1 ? ', …' : ''}), which is missing`);
          const r = SafetensorsReader.open(path, opts);
          readers.push(r);
          for (const name of names) {
            if (!r.has(name)) throw new Error(`${index}: maps tensor ${name} to ${file}, which has no such tensor`);
            byName.set(name, r);
          }
        }
      } else throw new Error(`${dir}: neither model.safetensors nor model.safetensors.index.json`);
    } catch (e) {
      for (const r of readers) r.close();
      throw e;
    }
    return new HfWeights(dir, readers, byName);
  }

  /** Over one model.safetensors already in memory (small checkpoints); `where` names it in errors. */
  static fromBytes(bytes: Uint8Array, where: string): HfWeights {
    const r = SafetensorsReader.fromBytes(bytes, where);
    return new HfWeights(where, [r], new Map(r.names().map((n) => [n, r])));
  }

  names(): string[] {
    return [...this.byName.keys()];
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  entry(name: string): HeaderEntry & { file: string } {
    const r = this.byName.get(name);
    if (!r) throw new Error(`${this.dir}: the checkpoint has no tensor ${name}`);
    return { ...r.entry(name), file: r.path };
  }

  /** One tensor as floats (F32, BF16 and F16 are upcast); with `shape`, checks it. */
  read(name: string, shape?: readonly number[]): Float32Array {
    const r = this.byName.get(name);
    if (!r) throw new Error(`${this.dir}: the checkpoint has no tensor ${name}`);
    return r.read(name, shape);
  }

  close(): void {
    for (const r of this.readers) r.close();
  }
}

/** All tensors of a checkpoint folder as Float32Array, by HF name (small checkpoints; loadHfCheckpoint streams). */
export function readHfWeights(dir: string): Map<string, { shape: number[]; data: Float32Array }> {
  const w = HfWeights.open(dir);
  try {
    return new Map(w.names().map((name) => [name, { shape: w.entry(name).shape, data: w.read(name) }]));
  } finally {
    w.close();
  }
}

/** Names a checkpoint may carry that the model does not use. */
const ignorable = (name: string, tied: boolean) => (tied && name === 'lm_head.weight') || name.endsWith('rotary_emb.inv_freq');

/**
 * A model built tensor by tensor from a weight source (HF names, HF layout). Names the model does not have are an
 * error (except lm_head.weight of a tied model and rotary inv_freq buffers), as QwenModel.fromWeights.
 */
export function modelFromSource(config: QwenConfig, source: { names(): string[]; read(name: string, shape?: readonly number[]): Float32Array; has(name: string): boolean }, where: string): QwenModel {
  const used = new Set<string>();
  const model = QwenModel.fromLoader(config, (name, shape) => {
    if (!source.has(name)) throw new Error(`${where}: weight ${name} is missing`);
    used.add(name);
    return source.read(name, shape);
  });
  const extra = source.names().filter((k) => !used.has(k) && !ignorable(k, model.dims.tied));
  if (extra.length > 0) {
    model.dispose();
    throw new Error(`${where}: unexpected weights: ${extra.slice(0, 5).join(', ')}${extra.length > 5 ? ', …' : ''}`);
  }
  return model;
}

/** Loads config.json and the weights (single file or shards; F32, BF16, F16), one tensor at a time. */
export function loadHfCheckpoint(dir: string, opts: { chunkBytes?: number } = {}): QwenModel {
  const config = readHfConfig(dir);
  const weights = HfWeights.open(dir, opts);
  try {
    return modelFromSource(config, weights, dir);
  } finally {
    weights.close();
  }
}

/** The transformers class that loads each model_type. */
export const HF_ARCHITECTURES = { qwen3: 'Qwen3ForCausalLM', qwen2: 'Qwen2ForCausalLM', llama: 'LlamaForCausalLM' } as const;

/** The config.json a saved model carries (the loaded config, with architectures and dtype float32). */
export function hfConfigJson(model: QwenModel): Record<string, unknown> {
  const arch = HF_ARCHITECTURES[model.config.model_type];
  const { torch_dtype: _old, ...rest } = model.config as QwenConfig & { torch_dtype?: unknown };
  return { ...rest, architectures: model.config.architectures ?? [arch], dtype: 'float32' };
}

/** The model's weights as one F32 safetensors file, written tensor by tensor (for S3 checkpoints). */
export function writeModelWeights(path: string, model: QwenModel, opts: { chunkBytes?: number } = {}): WrittenFile {
  return writeSafetensors(path, model.weightEntries(), { metadata: { format: 'pt' }, ...opts });
}

/** `writeModelWeights` with writes and hashing overlapped (for async callers; the same bytes). */
export function writeModelWeightsAsync(path: string, model: QwenModel, opts: { chunkBytes?: number } = {}): Promise<WrittenFile> {
  return writeSafetensorsAsync(path, model.weightEntries(), { metadata: { format: 'pt' }, ...opts });
}

export interface SaveOptions {
  /** Bytes, or a size like "5GB"/"500MB" (decimal units, as transformers); default transformers' "50GB". */
  maxShardSize?: number | string;
  chunkBytes?: number;
  /**
   * A tied model written untied: its head as a weight of its own (`lm_head.weight`, a copy of the embedding) and
   * `tie_word_embeddings: false`, the same function. For readers that mishandle a tied head: vLLM's CPU build keeps
   * serving the old head after reloading a tied model's weights (docs/decisions.md).
   */
  untie?: boolean;
}

/**
 * config.json + F32 weights, tensor by tensor: model.safetensors, or shards + model.safetensors.index.json when the
 * weights exceed `maxShardSize`. Returns the weight files written (with sha256).
 */
export function saveHfCheckpoint(dir: string, model: QwenModel, opts: SaveOptions = {}): WrittenFile[] {
  mkdirSync(dir, { recursive: true });
  const untie = opts.untie === true && model.config.tie_word_embeddings === true;
  writeFileSync(join(dir, 'config.json'), `${JSON.stringify({ ...hfConfigJson(model), ...(untie ? { tie_word_embeddings: false } : {}) }, null, 2)}\n`);
  const entries = [...model.weightEntries()];
  const embed = entries.find((e) => e.name === 'model.embed_tokens.weight');
  if (untie && !embed) throw new Error('saveHfCheckpoint: untie needs model.embed_tokens.weight');
  return writeShardedSafetensors(dir, untie ? [...entries, { ...embed!, name: 'lm_head.weight' }] : entries, {
    metadata: { format: 'pt' },
    totalParameters: model.numParams() + (untie ? embed!.shape.reduce((a, b) => a * b, 1) : 0),
    ...(opts.maxShardSize !== undefined ? { maxShardSize: opts.maxShardSize } : {}),
    ...(opts.chunkBytes !== undefined ? { chunkBytes: opts.chunkBytes } : {}),
  });
}
