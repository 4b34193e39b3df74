/**
 * Which task queue serves what (issue 32 item 1): the training activities are the `train` registry, on the gpu queue
 * unless `temporal.taskQueues.train` names a queue of their own; a worker for `train` alone is refused while training
 * goes to the gpu queue (it would receive the gpu queue's other tasks). No servers needed.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { activitiesByQueue } from '../../../src/activities';
import { parseConfig } from '../../../src/run/config';
import { ObjectStore } from '../../../src/storage/store';
import { queueName, startWorkers } from '../../../src/workers';

test('the training activities are the train registry, and only there', () => {
  const cfg = parseConfig({ run: { id: 'queues' } });
  const r = activitiesByQueue(ObjectStore.fromConfig(cfg.s3));
  assert.deepEqual(Object.keys(r.train).sort(), ['rlTrain', 'sftTrain']);
  for (const name of Object.keys(r.train)) {
    assert.ok(!(name in r.gpu) && !(name in r.api), `${name} in one registry only`);
  }
  assert.ok('rlRollout' in r.gpu && 'sftEvaluate' in r.gpu && 'sftImportBase' in r.gpu);
});

test('the train queue is the gpu queue by default; a worker for train alone is refused there', async () => {
  const cfg = parseConfig({ run: { id: 'queues' } });
  assert.equal(queueName(cfg, 'train'), 'cm2-gpu');
  await assert.rejects(startWorkers(cfg, ['train']), /temporal\.taskQueues\.train/);
  const own = parseConfig({ run: { id: 'queues' }, temporal: { taskQueues: { train: 'cm2-train' } } });
  assert.equal(queueName(own, 'train'), 'cm2-train');
  assert.equal(queueName(own, 'gpu'), 'cm2-gpu');
});
