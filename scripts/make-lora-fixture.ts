/**
 * Writes the tfjs side of the LoRA fixtures: an adapter on test/fixtures/hf-tiny-llama-tied made by LoraAdapter.create
 * (rank 3, alpha 6, the seven projections, token 7's embedding row trained), every tensor then set to seeded random
 * values, saved in PEFT's format under test/fixtures/tfjs-lora-llama. Then `python3 scripts/make-peft-fixture.py`
 * loads it with PeftModel.from_pretrained and records peft-logits.json next to it.
 *   npx tsx scripts/make-lora-fixture.ts
 */
import * as tf from '@tensorflow/tfjs';
import { join } from 'node:path';
import { loadHfCheckpoint } from '../src/model/formats/checkpoint';
import { LoraAdapter, LoraSettings } from '../src/model/net/lora';
import { Rng } from '../src/model/net/random';

async function main(): Promise<void> {
  await tf.setBackend('cpu');
  const fixtures = join(__dirname, '..', 'test', 'fixtures');
  const model = loadHfCheckpoint(join(fixtures, 'hf-tiny-llama-tied'));
  const adapter = LoraAdapter.create(model, LoraSettings.parse({ rank: 3, alpha: 6, trainTokens: [7] }), 5);
  const rng = new Rng(99);
  for (const v of adapter.params().values()) v.assign(tf.tensor(Array.from({ length: v.size }, () => 0.3 * rng.normal()), v.shape));
  adapter.merge();
  const dir = join(fixtures, 'tfjs-lora-llama');
  adapter.save(dir, 'hf-tiny-llama-tied');
  adapter.dispose();
  model.dispose();
  console.log(`wrote ${dir}`);
}

void main();
