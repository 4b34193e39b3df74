/**
 * Policies and training checkpoints in S3, for the activities. Large ones go through a temp folder: model weights and
 * AdamW moments are safetensors files written and read one tensor at a time, moved to and from S3 as streams (sha256
 * checked against the manifest on the way down), so nothing holds a whole checkpoint in memory and a model's size is
 * bounded by the machine, not by a Buffer (2 GiB) or the wasm heap (4 GiB). Small ones (up to `inMemoryMaxBytes`,
 * 256 MiB by default) take the same format through memory instead, which is faster than files at that size; the bytes,
 * hashes and keys are the same either way.
 *
 * Checkpoint folder (src/storage/checkpoints.ts): `model.safetensors` (F32, HF names and layout), `optimizer.safetensors`
 * (`m.<name>`, `v.<name>` in HF layout as the weights; step and `layout: "hf"` in the metadata; files written before
 * that field are in the trainer's internal layout and load as such: AdamW.load), optionally `config.json`, and the
 * manifest.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CheckpointManifest, downloadCheckpoint, downloadHfFolder, withTempDir, writeCheckpoint, type CheckpointFile } from './checkpoints';
import { sha256, type ObjectRef, type ObjectStore } from './store';
import { policyKey, PolicyRef } from '../run/layout';
import { HfWeights, loadHfCheckpoint, modelFromSource, writeModelWeightsAsync } from '../model/formats/checkpoint';
import { parseQwenConfig, type QwenConfig } from '../model/net/qwenConfig';
import type { QwenModel } from '../model/net/qwen';
import { openAdamWState, parseAdamWState, writeAdamWStateAsync, type AdamW, type AdamWState } from '../model/optim/adamw';
import { serializeTensors, type WrittenFile } from '../model/formats/safetensorsWrite';
import type { LoraAdapter } from '../model/net/lora';
import { applyLoraCheckpoint, isLoraCheckpoint, loraBaseOf, type LoraCheckpointState } from './loraCheckpoint';

/** Checkpoints up to this many bytes go through memory; larger ones through temp files. */
export const IN_MEMORY_MAX_BYTES = 256 * 2 ** 20;

export interface TransferOptions {
  /** Override of IN_MEMORY_MAX_BYTES (0: always temp files). */
  inMemoryMaxBytes?: number;
}

const limit = (opts: TransferOptions) => opts.inMemoryMaxBytes ?? IN_MEMORY_MAX_BYTES;

/**
 * A training checkpoint's two big files in `dir`: model.safetensors and optimizer.safetensors, one tensor at a time,
 * disk writes overlapped with their sha256. The moments are in HF layout as the weights are: the optimizer's
 * parameters are the model's variables, laid out as the model says when the optimizer was made without a layout.
 */
export async function writeCheckpointFiles(dir: string, model: QwenModel, optimizer: AdamW): Promise<{ weights: WrittenFile; optimizer: WrittenFile }> {
  const weights = await writeModelWeightsAsync(join(dir, 'model.safetensors'), model);
  return { weights, optimizer: await writeAdamWStateAsync(join(dir, 'optimizer.safetensors'), optimizer, { layout: optimizer.layout ?? model }) };
}

/**
 * Writes step `step`'s checkpoint (weights, optimizer, optional config.json, then the manifest). `state` may be computed
 * from the weights' sha256 (known once they are written).
 */
export async function saveTrainingCheckpoint(
  store: ObjectStore,
  prefix: string,
  step: number,
  model: QwenModel,
  optimizer: AdamW,
  state: Record<string, unknown> | ((written: { weightsSha256: string }) => Record<string, unknown>),
  opts: { config?: Record<string, unknown> } & TransferOptions = {},
): Promise<{ manifestKey: string; manifest: CheckpointManifest; weightsSha256: string }> {
  const config: Record<string, CheckpointFile> = opts.config ? { 'config.json': Buffer.from(JSON.stringify(opts.config)) } : {};
  const stateOf = (weightsSha256: string) => (typeof state === 'function' ? state({ weightsSha256 }) : state);
  if (3 * 4 * model.numParams() <= limit(opts)) {
    const weights = serializeTensors(model.weightEntries(), { format: 'pt' });
    const layout = optimizer.layout ?? model; // as writeCheckpointFiles
    const moments = serializeTensors(optimizer.momentEntries(layout), optimizer.stateMetadata(layout));
    const weightsSha256 = sha256(weights);
    const written = await writeCheckpoint(store, prefix, step, { ...config, 'model.safetensors': weights, 'optimizer.safetensors': moments }, stateOf(weightsSha256));
    return { ...written, weightsSha256 };
  }
  return withTempDir(async (dir) => {
    const { weights, optimizer: moments } = await writeCheckpointFiles(dir, model, optimizer);
    const files = {
      ...config,
      'model.safetensors': { path: weights.path, sha256: weights.sha256 },
      'optimizer.safetensors': { path: moments.path, sha256: moments.sha256 },
    };
    const written = await writeCheckpoint(store, prefix, step, files, stateOf(weights.sha256));
    return { ...written, weightsSha256: weights.sha256 };
  });
}

export interface OpenedCheckpoint {
  manifest: CheckpointManifest;
  weights: HfWeights;
  config?: QwenConfig;
  optimizer?: AdamWState;
}

/**
 * Opens a checkpoint for `use`: fetches (verified) the files it needs, gives the weights (read one tensor at a time)
 * and, unless `optimizer` is false, the AdamW state (moments read one at a time while `AdamW.load` assigns them).
 * Everything is closed (and the temp folder removed) when `use` returns, so load what you need inside it.
 */
export async function withCheckpoint<T>(
  store: ObjectStore,
  manifestKey: string,
  use: (ckpt: OpenedCheckpoint) => Promise<T> | T,
  opts: { optimizer?: boolean; /** the manifest, when the caller has read it already */ manifest?: CheckpointManifest } & TransferOptions = {},
): Promise<T> {
  const wanted = ['config.json', 'model.safetensors', ...(opts.optimizer === false ? [] : ['optimizer.safetensors'])];
  const manifest = opts.manifest ?? (await store.getJson(manifestKey, CheckpointManifest));
  if (!manifest.files['model.safetensors']) throw new Error(`${manifestKey}: the checkpoint has no model.safetensors`);
  const size = wanted.reduce((n, f) => n + (manifest.files[f]?.bytes ?? 0), 0);
  if (size <= limit(opts)) {
    const bytes: Record<string, Buffer> = {};
    for (const f of wanted) if (manifest.files[f]) bytes[f] = await store.getVerified(manifest.files[f]);
    const config = bytes['config.json'] ? parseQwenConfig(JSON.parse(bytes['config.json'].toString('utf8'))) : undefined;
    const weights = HfWeights.fromBytes(bytes['model.safetensors']!, `${manifestKey}: model.safetensors`);
    try {
      const optimizer = bytes['optimizer.safetensors'] ? parseAdamWState(bytes['optimizer.safetensors'], `${manifestKey}: optimizer.safetensors`) : undefined;
      return await use({ manifest, weights, ...(config ? { config } : {}), ...(optimizer ? { optimizer } : {}) });
    } finally {
      weights.close();
    }
  }
  return withTempDir(async (dir) => {
    const { paths } = await downloadCheckpoint(store, manifestKey, dir, wanted);
    const config = paths['config.json'] ? parseQwenConfig(JSON.parse(readFileSync(paths['config.json'], 'utf8'))) : undefined;
    const weights = HfWeights.open(dir);
    const opened = paths['optimizer.safetensors'] ? openAdamWState(paths['optimizer.safetensors']) : undefined;
    try {
      return await use({ manifest, weights, ...(config ? { config } : {}), ...(opened ? { optimizer: opened.state } : {}) });
    } finally {
      opened?.close();
      weights.close();
    }
  });
}

/** A model from a checkpoint's weights (its config.json, or `config`), built one tensor at a time. */
export function checkpointModel(ckpt: { weights: HfWeights; config?: QwenConfig }, where: string, config?: QwenConfig): QwenModel {
  const cfg = ckpt.config ?? config;
  if (!cfg) throw new Error(`${where}: the checkpoint has no config.json`);
  return modelFromSource(cfg, ckpt.weights, where);
}

/** Overwrites a model's weights from a checkpoint, one tensor at a time (names and shapes must match). */
export function assignFromWeights(model: QwenModel, weights: HfWeights): void {
  for (const name of weights.names()) model.assignWeights(new Map([[name, weights.read(name)]]));
}

/**
 * An HF model folder in S3 (config.json + model.safetensors, or index + shards), loaded one tensor at a time; a small
 * single model.safetensors through memory.
 */
export async function loadStoredHfModel(store: ObjectStore, prefix: string, opts: TransferOptions = {}): Promise<QwenModel> {
  const ref = await store.ref(`${prefix}/model.safetensors`);
  if (ref && ref.bytes <= limit(opts)) {
    const config = parseQwenConfig(await store.getJson(`${prefix}/config.json`));
    const weights = HfWeights.fromBytes(await store.getVerified(ref), `s3 ${prefix}/model.safetensors`);
    try {
      return modelFromSource(config, weights, `s3 ${prefix}`);
    } finally {
      weights.close();
    }
  }
  return withTempDir(async (dir) => {
    await downloadHfFolder(store, prefix, dir);
    return loadHfCheckpoint(dir);
  });
}

/** The model's weights as `key` (one F32 model.safetensors): through memory when small, else a temp file streamed up. */
export function uploadModelWeights(store: ObjectStore, key: string, model: QwenModel, opts: TransferOptions = {}): Promise<ObjectRef> {
  if (4 * model.numParams() <= limit(opts)) return store.putBytes(key, serializeTensors(model.weightEntries(), { format: 'pt' }));
  return withTempDir(async (dir) => {
    const w = await writeModelWeightsAsync(join(dir, 'model.safetensors'), model);
    return store.putFile(key, w.path, { sha256: w.sha256 });
  });
}

/** A stored policy that cannot be loaded as it is (retrying will not help). */
export class BadPolicyError extends Error {
  override readonly name = 'BadPolicyError';
}

/** What `loadPolicy` hands to `restore` of a LoRA checkpoint: its adapter (the caller owns it) and base. */
export interface RestoredLora {
  adapter: LoraAdapter;
  base: LoraCheckpointState['base'];
}

/**
 * A policy from S3, streamed one tensor at a time. With `restore`, also the checkpoint's AdamW state, handed to
 * `restore` while its file is open (the moments are read one at a time as the optimizer loads them); without it the
 * optimizer state is not fetched. A LoRA checkpoint (loraCheckpoint.ts) is its base with the adapter merged in; with
 * `restore` the adapter comes too (to train on), else it is dropped once merged.
 */
export async function loadPolicy(store: ObjectStore, p: PolicyRef, restore?: (model: QwenModel, optimizer: AdamWState, lora?: RestoredLora) => void): Promise<QwenModel> {
  if (p.kind === 'hf') return loadStoredHfModel(store, p.prefix);
  const manifest = await store.getJson(p.manifestKey, CheckpointManifest);
  if (isLoraCheckpoint(manifest)) return loadLoraPolicy(store, p.manifestKey, manifest, restore);
  return withCheckpoint(store, p.manifestKey, (ckpt) => {
    if (!ckpt.config) throw new BadPolicyError(`${p.manifestKey}: the checkpoint has no config.json or model.safetensors`);
    const model = checkpointModel(ckpt, p.manifestKey);
    try {
      if (restore) {
        if (!ckpt.optimizer) throw new BadPolicyError(`${p.manifestKey}: the checkpoint has no optimizer.safetensors`);
        restore(model, ckpt.optimizer);
      }
    } catch (e) {
      model.dispose();
      throw e;
    }
    return model;
  }, { optimizer: restore !== undefined, manifest });
}

async function loadLoraPolicy(store: ObjectStore, manifestKey: string, manifest: CheckpointManifest, restore?: (model: QwenModel, optimizer: AdamWState, lora?: RestoredLora) => void): Promise<QwenModel> {
  let base: LoraCheckpointState['base'];
  try {
    base = loraBaseOf(manifest, manifestKey);
  } catch (e) {
    throw new BadPolicyError((e as Error).message);
  }
  const model = await loadStoredHfModel(store, base.prefix);
  let adapter: LoraAdapter | undefined;
  try {
    const applied = await applyLoraCheckpoint(store, manifestKey, manifest, model, { optimizer: restore !== undefined });
    adapter = applied.adapter;
    if (restore) {
      restore(model, applied.optimizer!, { adapter, base });
      adapter = undefined; // the caller's now
    }
  } catch (e) {
    adapter?.dispose();
    model.dispose();
    throw e;
  }
  adapter?.dispose(); // the merged weights stay in the model
  return model;
}

/**
 * A worker's loaded policies for read-only use (rollouts, reference log-probs), by policyKey, the `capacity` most
 * recently used kept. A policy about to be trained is taken out (`take`) so that a failed update never leaves a
 * half-updated model in the cache; the updated one is put back (`put`).
 */
export class PolicyCache {
  private readonly models = new Map<string, QwenModel>();

  constructor(private readonly store: ObjectStore, private readonly capacity = 3) {}

  async get(p: PolicyRef): Promise<QwenModel> {
    const key = policyKey(p);
    const have = this.models.get(key);
    if (have) {
      this.models.delete(key);
      this.models.set(key, have); // most recent last
      return have;
    }
    const m = await loadPolicy(this.store, p);
    this.put(p, m);
    return m;
  }

  /** The cached model of `p`, removed from the cache (the caller owns it now), or undefined. */
  take(p: PolicyRef): QwenModel | undefined {
    const key = policyKey(p);
    const m = this.models.get(key);
    this.models.delete(key);
    return m;
  }

  put(p: PolicyRef, model: QwenModel): void {
    this.models.set(policyKey(p), model);
    while (this.models.size > this.capacity) {
      const oldest = this.models.keys().next().value as string;
      this.models.get(oldest)?.dispose();
      this.models.delete(oldest);
    }
  }
}
