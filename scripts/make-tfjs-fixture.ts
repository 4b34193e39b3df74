/**
 * Writes the tfjs side of the parity fixtures: tiny Qwen3 (untied) and Qwen2 (tied) models from QwenModel.init(config,
 * 1234), saved as HF checkpoints under test/fixtures/tfjs-tiny-*. Then `python3 scripts/make-hf-fixture.py` loads them in
 * transformers and records transformers-logits.json next to them.
 *   npx tsx scripts/make-tfjs-fixture.ts
 */
import * as tf from '@tensorflow/tfjs';
import { join } from 'node:path';
import { saveHfCheckpoint } from '../src/model/formats/checkpoint';
import { TINY_FIXTURE_SEED, tinyFixtureConfigs } from '../test/helpers/tinyFixtures';
import { QwenModel } from '../src/model/net/qwen';

async function main(): Promise<void> {
  await tf.setBackend('cpu');
  for (const [name, config] of Object.entries(tinyFixtureConfigs)) {
    const model = QwenModel.init(config, TINY_FIXTURE_SEED);
    const dir = join(__dirname, '..', 'test', 'fixtures', name);
    saveHfCheckpoint(dir, model);
    model.dispose();
    console.log(`wrote ${dir}`);
  }
}

void main();
