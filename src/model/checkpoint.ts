/**
 * HF checkpoints: a folder with config.json and model.safetensors, or sharded weights listed in
 * model.safetensors.index.json ({weight_map: {name: file}}). Saving writes config.json + one F32 model.safetensors,
 * which HF transformers loads with from_pretrained.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseQwenConfig, type QwenConfig } from './config';
import { QwenModel } from './qwen';
import { parseSafetensors, serializeSafetensors } from './safetensors';

export function readHfConfig(dir: string): QwenConfig {
  const file = join(dir, 'config.json');
  if (!existsSync(file)) throw new Error(`${dir}: no config.json`);
  return parseQwenConfig(JSON.parse(readFileSync(file, 'utf8')));
}

/** All tensors of a checkpoint folder as Float32Array, by HF name. */
export function readHfWeights(dir: string): Map<string, { shape: number[]; data: Float32Array }> {
  const single = join(dir, 'model.safetensors');
  const index = join(dir, 'model.safetensors.index.json');
  let files: string[];
  if (existsSync(single)) files = [single];
  else if (existsSync(index)) {
    const map = (JSON.parse(readFileSync(index, 'utf8')) as { weight_map: Record<string, string> }).weight_map;
    files = [...new Set(Object.values(map))].sort().map((f) => join(dir, f));
  } else throw new Error(`${dir}: neither model.safetensors nor model.safetensors.index.json`);
  const out = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const f of files) for (const [name, t] of parseSafetensors(readFileSync(f)).tensors) out.set(name, t);
  return out;
}

export function loadHfCheckpoint(dir: string): QwenModel {
  const config = readHfConfig(dir);
  const weights = new Map([...readHfWeights(dir)].map(([k, t]) => [k, t.data]));
  return QwenModel.fromWeights(config, weights);
}

export function saveHfCheckpoint(dir: string, model: QwenModel): void {
  mkdirSync(dir, { recursive: true });
  const arch = model.config.model_type === 'qwen3' ? 'Qwen3ForCausalLM' : 'Qwen2ForCausalLM';
  const { torch_dtype: _old, ...rest } = model.config as QwenConfig & { torch_dtype?: unknown };
  const config = { ...rest, architectures: model.config.architectures ?? [arch], dtype: 'float32' };
  writeFileSync(join(dir, 'config.json'), `${JSON.stringify(config, null, 2)}\n`);
  writeFileSync(join(dir, 'model.safetensors'), serializeSafetensors(model.namedWeights(), { format: 'pt' }));
}
