/** A small RL setup in S3: demo-world examples with offline checklists, and a tiny random policy in HF layout. */
import path from 'node:path';
import { loadChatTokenizer } from '../../src/chat/tokenize';
import { toStoredVariant, type AnnotatedExample } from '../../src/stages/checklist/schema';
import type { Cm2Config } from '../../src/run/config';
import { type ObjectStore } from '../../src/storage/store';
import { runKey } from '../../src/run/layout';
import { parseQwenConfig } from '../../src/model/net/qwenConfig';
import { QwenModel } from '../../src/model/net/qwen';
import { offlineChecklist } from '../../src/demo/checklist';
import { generateDemoDataset } from '../../src/demo/generator';
import { serializeSafetensors } from '../../src/model/formats/safetensorsWrite';

const root = path.resolve(__dirname, '..', '..');

export const TINY_POLICY = { model_type: 'qwen3', hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8, tie_word_embeddings: true, rope_theta: 10000, max_position_embeddings: 4096 };

/** RL config overrides sized for tests: a handful of short rollouts per step. */
export const tinyRl = (over: Record<string, unknown> = {}) => ({
  steps: 3,
  promptsPerStep: 2,
  groupSize: 2,
  hp: { lr: 1e-3, klCoef: 1e-3, granularity: 'trajectory' },
  microBatch: 4,
  rollout: { maxNewTokens: 12, maxModelLen: 1400, promptMargin: 0 },
  eval: { prompts: 2, every: 2 },
  continueAsNewEvery: 2,
  ...over,
});

/** `mapExample` turns the annotated demo examples into other data (e.g. a real dataset's, without the demo's `meta`). */
/** `policyDir`: an HF folder (config.json + model.safetensors) to start from instead of the tiny random policy. */
export async function writeRlFixture(cfg: Cm2Config, store: ObjectStore, count = 16, mapExample: (ex: AnnotatedExample) => AnnotatedExample = (ex) => ex, opts: { policyDir?: string } = {}): Promise<void> {
  const examples = generateDemoDataset({ seed: 11, count, brokenRate: 0 });
  const annotated = examples.map((ex) => mapExample({ ...ex, checklists: [toStoredVariant(offlineChecklist(ex), 0)] }));
  await store.putJsonl(runKey(cfg.run.id, 'checklists', 'annotated.jsonl'), annotated);
  const prefix = runKey(cfg.run.id, 'sft', 'final');
  if (opts.policyDir) {
    await store.putFile(`${prefix}/model.safetensors`, path.join(opts.policyDir, 'model.safetensors'));
    await store.putFile(`${prefix}/config.json`, path.join(opts.policyDir, 'config.json'));
    return;
  }
  const tok = loadChatTokenizer(path.join(root, 'assets', 'demo-tokenizer'));
  const model = QwenModel.init(parseQwenConfig({ vocab_size: tok.vocabSize, eos_token_id: tok.special.imEnd, ...TINY_POLICY }), 5);
  await store.putJson(`${prefix}/config.json`, model.config);
  await store.putBytes(`${prefix}/model.safetensors`, serializeSafetensors(model.namedWeights(), { format: 'pt' }));
  model.dispose();
}

/**
 * A tiny random Qwen3 as the run's SFT policy folder in S3 (`runs/<id>/sft/final`: config.json, model.safetensors),
 * with the run's tokenizer vocabulary and `maxPositions` positions; returns the folder's prefix.
 */
export async function writeTinySftPolicy(cfg: Cm2Config, store: ObjectStore, maxPositions: number): Promise<string> {
  const tok = loadChatTokenizer(path.resolve(__dirname, '..', '..', cfg.sft.tokenizerDir));
  const model = QwenModel.init(parseQwenConfig({ vocab_size: tok.vocabSize, eos_token_id: tok.special.imEnd, ...TINY_POLICY, max_position_embeddings: maxPositions }), 7);
  const prefix = runKey(cfg.run.id, 'sft', 'final');
  await store.putJson(`${prefix}/config.json`, model.config);
  await store.putBytes(`${prefix}/model.safetensors`, serializeSafetensors(model.namedWeights(), { format: 'pt' }));
  model.dispose();
  return prefix;
}
