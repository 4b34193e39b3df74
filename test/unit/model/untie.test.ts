import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { loadHfCheckpoint, saveHfCheckpoint } from '../../../src/model/formats/checkpoint';
import { modelUntieCommand } from '../../../src/cli/modelCommand';
import { FIXTURES } from '../../helpers/paths';

test('a tied model saved untied: lm_head.weight a copy of the embedding, tie_word_embeddings false, the same logits', async () => {
  await tf.setBackend('cpu');
  const tied = loadHfCheckpoint(join(FIXTURES, 'hf-tiny-llama-tied'));
  assert.equal(tied.config.tie_word_embeddings, true);
  const dir = mkdtempSync(join(tmpdir(), 'cm2-untie-'));
  saveHfCheckpoint(dir, tied, { untie: true });
  assert.equal(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')).tie_word_embeddings, false);
  const untied = loadHfCheckpoint(dir);
  assert.equal(untied.config.tie_word_embeddings, false);
  const w = untied.namedWeights();
  assert.deepEqual([...w.get('lm_head.weight')!.data], [...w.get('model.embed_tokens.weight')!.data]);
  const ids = [[1, 5, 9, 2, 33, 60, 7, 12]];
  const a = tf.tidy(() => tied.forward(ids).arraySync());
  const b = tf.tidy(() => untied.forward(ids).arraySync());
  assert.deepEqual(b, a);
  // an untied model is written as it is
  const again = mkdtempSync(join(tmpdir(), 'cm2-untie-'));
  saveHfCheckpoint(again, untied, { untie: true });
  assert.deepEqual(readFileSync(join(again, 'model.safetensors')), readFileSync(join(dir, 'model.safetensors')));
  tied.dispose();
  untied.dispose();
});

test('cm2 model untie: the folder untied; refuses to overwrite', () => {
  const out = join(mkdtempSync(join(tmpdir(), 'cm2-untie-cli-')), 'out');
  const r = modelUntieCommand({ checkpoint: join(FIXTURES, 'hf-tiny-llama-tied'), out });
  assert.equal(r.untied, true);
  assert.equal(JSON.parse(readFileSync(join(out, 'config.json'), 'utf8')).tie_word_embeddings, false);
  assert.throws(() => modelUntieCommand({ checkpoint: join(FIXTURES, 'hf-tiny-llama-tied'), out }), /already there/);
});
