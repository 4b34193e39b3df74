/**
 * Policies and training checkpoints in S3, for the activities: model weights and AdamW moments go through a temp
 * folder as safetensors files written and read one tensor at a time, and to and from S3 as streams (sha256 checked
 * against the manifest on the way down). Nothing holds a whole checkpoint in memory, so a model's size is bounded by
 * the machine, not by a Buffer (2 GiB) or the wasm heap (4 GiB).
 *
 * Checkpoint folder (src/infra/checkpoints.ts): `model.safetensors` (F32, HF names and layout), `optimizer.safetensors`
 * (`m.<name>`, `v.<name>`, step in the metadata), optionally `config.json`, and the manifest.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { downloadCheckpoint, downloadHfFolder, withTempDir, writeCheckpoint, type CheckpointManifest } from '../infra/checkpoints';
import type { ObjectRef, ObjectStore } from '../infra/store';
import { HfWeights, loadHfCheckpoint, modelFromSource, writeModelWeights } from '../model/checkpoint';
import { parseQwenConfig, type QwenConfig } from '../model/config';
import type { QwenModel } from '../model/qwen';
import { openAdamWState, writeAdamWState, type AdamW, type AdamWState } from '../train/adamw';

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
  opts: { config?: Record<string, unknown> } = {},
): Promise<{ manifestKey: string; manifest: CheckpointManifest; weightsSha256: string }> {
  return withTempDir(async (dir) => {
    const weights = writeModelWeights(join(dir, 'model.safetensors'), model);
    const moments = writeAdamWState(join(dir, 'optimizer.safetensors'), optimizer);
    const files = {
      ...(opts.config ? { 'config.json': Buffer.from(JSON.stringify(opts.config)) } : {}),
      'model.safetensors': { path: weights.path, sha256: weights.sha256 },
      'optimizer.safetensors': { path: moments.path, sha256: moments.sha256 },
    };
    const written = await writeCheckpoint(store, prefix, step, files, typeof state === 'function' ? state({ weightsSha256: weights.sha256 }) : state);
    return { ...written, weightsSha256: weights.sha256 };
  });
}

/**
 * Opens a checkpoint for `use`: downloads (verified) the files it needs into a temp folder, gives the weights (read one
 * tensor at a time) and, unless `optimizer` is false, the AdamW state (moments read one at a time while
 * `AdamW.load` assigns them). Everything is closed and removed when `use` returns, so load what you need inside it.
 */
export async function withCheckpoint<T>(
  store: ObjectStore,
  manifestKey: string,
  use: (ckpt: { manifest: CheckpointManifest; weights: HfWeights; config?: QwenConfig; optimizer?: AdamWState }) => Promise<T> | T,
  opts: { optimizer?: boolean } = {},
): Promise<T> {
  return withTempDir(async (dir) => {
    const wanted = ['config.json', 'model.safetensors', ...(opts.optimizer === false ? [] : ['optimizer.safetensors'])];
    const { manifest, paths } = await downloadCheckpoint(store, manifestKey, dir, wanted);
    if (!paths['model.safetensors']) throw new Error(`${manifestKey}: the checkpoint has no model.safetensors`);
    const config = paths['config.json'] ? parseQwenConfig(JSON.parse(readFileSync(paths['config.json'], 'utf8'))) : undefined;
    const weights = HfWeights.open(dir);
    const opened = opts.optimizer !== false && paths['optimizer.safetensors'] ? openAdamWState(paths['optimizer.safetensors']) : undefined;
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

/** An HF model folder in S3 (config.json + model.safetensors, or index + shards), loaded one tensor at a time. */
export function loadStoredHfModel(store: ObjectStore, prefix: string): Promise<QwenModel> {
  return withTempDir(async (dir) => {
    await downloadHfFolder(store, prefix, dir);
    return loadHfCheckpoint(dir);
  });
}

/** The model's weights as `key` (one F32 model.safetensors), written to a temp file and uploaded as a stream. */
export function uploadModelWeights(store: ObjectStore, key: string, model: QwenModel): Promise<ObjectRef> {
  return withTempDir(async (dir) => {
    const w = writeModelWeights(join(dir, 'model.safetensors'), model);
    return store.putFile(key, w.path, { sha256: w.sha256 });
  });
}
