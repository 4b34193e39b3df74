/**
 * Training checkpoints of LoRA runs in S3: the adapter in PEFT's format (adapter_config.json, adapter_model.safetensors),
 * the AdamW state of its tensors (optimizer.safetensors: `m.<PEFT name>`, `v.<PEFT name>`, step and `layout: "hf"` in
 * the metadata; the adapter's tensors are held in PEFT's layout, so its moments are written as they are held, and files
 * from before the field read the same),
 * the model's config.json and the manifest, whose state names the frozen base (`lora.base`, a stored HF folder). A
 * checkpoint is the adapter's size, not the model's (a rank-8 adapter on all seven projections of SmolLM2-135M: 2.44 M values, 9.8 MB, and 19.6 MB of moments,
 * against 538 MB and 1.08 GB).
 */
import { z } from 'zod';
import { writeCheckpoint, type CheckpointFile, type CheckpointManifest } from './checkpoints';
import { sha256, type ObjectStore } from './store';
import { ADAPTER_CONFIG, ADAPTER_WEIGHTS, LoraAdapter } from '../model/net/lora';
import type { QwenModel } from '../model/net/qwen';
import { parseAdamWState, type AdamW, type AdamWState } from '../model/optim/adamw';
import { SafetensorsReader } from '../model/formats/safetensors';
import { serializeTensors } from '../model/formats/safetensorsWrite';

/** The manifest state's `lora` entry: the stored HF folder the adapter applies to. */
export const LoraCheckpointState = z.object({ base: z.object({ kind: z.literal('hf'), prefix: z.string().min(1) }) });
export type LoraCheckpointState = z.infer<typeof LoraCheckpointState>;

/** Whether a checkpoint holds an adapter rather than weights. */
export const isLoraCheckpoint = (manifest: CheckpointManifest): boolean => manifest.files[ADAPTER_WEIGHTS] !== undefined;

/** The base a LoRA checkpoint applies to (an error naming the manifest when it is not recorded). */
export function loraBaseOf(manifest: CheckpointManifest, where: string): LoraCheckpointState['base'] {
  const parsed = LoraCheckpointState.safeParse(manifest.state['lora']);
  if (!parsed.success) throw new Error(`${where}: a LoRA checkpoint whose state does not name its base (state.lora.base): ${parsed.error.issues[0]?.message ?? ''}`);
  return parsed.data.base;
}

/** Writes step `step`'s LoRA checkpoint (adapter, optimizer, config, then the manifest). */
export async function saveLoraCheckpoint(
  store: ObjectStore,
  prefix: string,
  step: number,
  adapter: LoraAdapter,
  optimizer: AdamW,
  /** the stored HF folder the adapter applies to; undefined when the base is rebuilt from the config (SFT) */
  base: LoraCheckpointState['base'] | undefined,
  state: Record<string, unknown> | ((written: { weightsSha256: string }) => Record<string, unknown>),
  opts: { config?: Record<string, unknown> } = {},
): Promise<{ manifestKey: string; manifest: CheckpointManifest; weightsSha256: string }> {
  const weights = adapter.weightsBytes();
  const weightsSha256 = sha256(weights);
  const files: Record<string, CheckpointFile> = {
    ...(opts.config ? { 'config.json': Buffer.from(JSON.stringify(opts.config)) } : {}),
    [ADAPTER_CONFIG]: Buffer.from(`${JSON.stringify(adapter.configJson(base?.prefix ?? null), null, 2)}\n`),
    [ADAPTER_WEIGHTS]: weights,
    // HF (PEFT) layout: the adapter's own, which transposes nothing (LoraAdapter.hfTransposed), so `layout: "hf"` even
    // for an optimizer made without a layout.
    'optimizer.safetensors': serializeTensors(optimizer.momentEntries(optimizer.layout ?? adapter), optimizer.stateMetadata(optimizer.layout ?? adapter)),
  };
  const s = typeof state === 'function' ? state({ weightsSha256 }) : state;
  const written = await writeCheckpoint(store, prefix, step, files, base ? { ...s, lora: { base } satisfies LoraCheckpointState } : s);
  return { ...written, weightsSha256 };
}

/**
 * A LoRA checkpoint's adapter on `model` (the base, already loaded): merged into its weights, and the AdamW state
 * when `optimizer` is asked for. The caller owns the adapter (dispose it to keep only the merged weights).
 */
export async function applyLoraCheckpoint(store: ObjectStore, manifestKey: string, manifest: CheckpointManifest, model: QwenModel, opts: { optimizer: boolean }): Promise<{ adapter: LoraAdapter; optimizer?: AdamWState }> {
  const get = async (name: string): Promise<Buffer> => {
    const ref = manifest.files[name];
    if (!ref) throw new Error(`${manifestKey}: the LoRA checkpoint has no ${name}`);
    return store.getVerified(ref);
  };
  const config = JSON.parse((await get(ADAPTER_CONFIG)).toString('utf8')) as unknown;
  const reader = SafetensorsReader.fromBytes(await get(ADAPTER_WEIGHTS), `${manifestKey}: ${ADAPTER_WEIGHTS}`);
  let adapter: LoraAdapter;
  try {
    adapter = LoraAdapter.fromPeft(model, { config, weights: reader, where: manifestKey });
  } finally {
    reader.close();
  }
  if (!opts.optimizer) return { adapter };
  try {
    return { adapter, optimizer: parseAdamWState(await get('optimizer.safetensors'), `${manifestKey}: optimizer.safetensors`) };
  } catch (e) {
    adapter.dispose();
    throw e;
  }
}
