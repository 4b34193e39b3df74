/** `cm2 model …`: import a pretrained model (GGUF or HF folder), inspect a Qwen2/Qwen3/Llama HF checkpoint with the tfjs model. */
import { activeBackend, readNativeStatus, selectBackend, type BackendPref } from '../model/net/backend';
import { copyFileSync, existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { loadHfCheckpoint, saveHfCheckpoint } from '../model/formats/checkpoint';
import { LoraAdapter } from '../model/net/lora';
import { formatImportSummary, importModel, type ImportSummary } from '../model/formats/modelImport';

/** `cm2 model import SOURCE --out DIR`: a .gguf file or an HF folder → the HF checkpoint the pipeline uses. */
export function modelImportCommand(source: string, opts: { out: string; maxShardSize?: string; format?: 'cm2' | 'own'; seed?: number; alignNorm?: boolean; force?: boolean; json?: boolean }): ImportSummary {
  const summary = importModel(source, opts.out, {
    ...(opts.maxShardSize !== undefined ? { maxShardSize: opts.maxShardSize } : {}),
    ...(opts.format !== undefined ? { format: opts.format } : {}),
    ...(opts.seed !== undefined ? { seed: opts.seed } : {}),
    ...(opts.alignNorm === false ? { alignNorm: false } : {}),
    ...(opts.force ? { force: true } : {}),
  });
  console.log(opts.json ? JSON.stringify(summary, null, 2) : formatImportSummary(summary).join('\n'));
  return summary;
}

export function parseIds(list: string): number[] {
  const ids = list.split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  if (ids.length === 0 || ids.some((n) => !Number.isInteger(n) || n < 0)) throw new Error(`--input-ids: expected comma-separated token ids, got '${list}'`);
  return ids;
}

/** The logits of the last position, as a JSON array on stdout (the backend choice goes to stderr). */
export async function modelLogitsCommand(opts: { checkpoint: string; adapter?: string; inputIds: string; backend: BackendPref }): Promise<number[]> {
  const ids = parseIds(opts.inputIds);
  await selectBackend(opts.backend, (line) => console.error(line));
  const model = loadHfCheckpoint(opts.checkpoint);
  if (opts.adapter) {
    try {
      LoraAdapter.load(model, opts.adapter).dispose(); // the merged weights stay in the model
    } catch (e) {
      model.dispose();
      throw e;
    }
  }
  const bad = ids.find((i) => i >= model.dims.vocab);
  if (bad !== undefined) throw new Error(`--input-ids: ${bad} is outside the vocabulary (${model.dims.vocab})`);
  const logits = model.forward([ids], { lastOnly: true });
  const row = Array.from(logits.dataSync());
  logits.dispose();
  model.dispose();
  console.log(JSON.stringify(row));
  return row;
}

/** Files of an HF folder besides the weights that a merged folder keeps (tokenizer, chat template, generation). */
const COMPANIONS = /^(tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|generation_config\.json|chat_template\.(jinja|json)|vocab\.json|merges\.txt|added_tokens\.json)$/;

/**
 * `cm2 model merge --checkpoint BASE --adapter DIR --out OUT`: the base with the adapter merged in, as an HF folder
 * (F32 weights, the base's config, tokenizer and templates), which transformers, llama.cpp's converter or vLLM load.
 */
export function modelMergeCommand(opts: { checkpoint: string; adapter: string; out: string; maxShardSize?: string }): { out: string; adapted: number } {
  if (existsSync(join(opts.out, 'config.json'))) throw new Error(`--out ${opts.out}: a checkpoint is already there`);
  const model = loadHfCheckpoint(opts.checkpoint);
  try {
    const adapter = LoraAdapter.load(model, opts.adapter);
    const adapted = adapter.numParams();
    adapter.dispose();
    saveHfCheckpoint(opts.out, model, opts.maxShardSize !== undefined ? { maxShardSize: opts.maxShardSize } : {});
    for (const f of readdirSync(opts.checkpoint)) if (COMPANIONS.test(f)) copyFileSync(join(opts.checkpoint, f), join(opts.out, f));
    console.log(`merged ${opts.adapter} (${adapted.toLocaleString('en-US')} adapter values) into ${opts.checkpoint} → ${opts.out}`);
    return { out: opts.out, adapted };
  } finally {
    model.dispose();
  }
}

/**
 * `cm2 model untie --checkpoint DIR --out OUT`: a tied model written untied (its head as `lm_head.weight`, the same
 * function) with the folder's tokenizer and templates: what a serving engine is started from, because vLLM's CPU build
 * reloads a tied head stale (README, "Rollouts on a serving engine"). An untied model is copied as it is.
 */
export function modelUntieCommand(opts: { checkpoint: string; out: string; maxShardSize?: string }): { out: string; untied: boolean } {
  if (existsSync(join(opts.out, 'config.json'))) throw new Error(`--out ${opts.out}: a checkpoint is already there`);
  const model = loadHfCheckpoint(opts.checkpoint);
  try {
    const untied = model.config.tie_word_embeddings === true;
    saveHfCheckpoint(opts.out, model, { untie: true, ...(opts.maxShardSize !== undefined ? { maxShardSize: opts.maxShardSize } : {}) });
    for (const f of readdirSync(opts.checkpoint)) if (COMPANIONS.test(f)) copyFileSync(join(opts.checkpoint, f), join(opts.out, f));
    console.log(`${opts.checkpoint} → ${opts.out}${untied ? ' (untied: lm_head.weight written)' : ' (not tied: copied as it is)'}`);
    return { out: opts.out, untied };
  } finally {
    model.dispose();
  }
}

/** `cm2 backend`: activates the backend as model work would and says which one and why. */
export async function backendCommand(opts: { backend: BackendPref; json?: boolean }): Promise<void> {
  const native = readNativeStatus();
  const lines: string[] = [];
  let chosen: string | undefined;
  let error: string | undefined;
  try {
    chosen = await selectBackend(opts.backend, (l) => lines.push(l));
  } catch (e) {
    error = (e as Error).message;
  }
  const active = activeBackend();
  if (opts.json) {
    console.log(JSON.stringify({ backend: chosen ?? null, why: active?.why ?? error, native, attempts: lines }, null, 2));
  } else {
    console.log(`backend: ${chosen ?? 'none'}${active ? ` (${active.why})` : ''}`);
    console.log(`native TensorFlow: ${native.ok ? `${native.backend}, TensorFlow ${native.tensorflow}, ${native.package}, addon ${native.addon ? `with cm2's patch ${native.addon} (per-session thread pools)` : 'without cm2\'s patch (one shared thread pool)'}, libraries in ${native.libDir}` : `not in use: ${native.reason}`}`);
    if (!native.ok) console.log('  install or retry: node scripts/ensure-native.mjs --force   (CM2_NATIVE=cpu|gpu|off chooses)');
    for (const l of lines) console.log(`  ${l}`);
    if (error) console.log(`error: ${error}`);
  }
  if (!chosen) process.exitCode = 1;
}
