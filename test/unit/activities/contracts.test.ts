/**
 * The train queue's activity contracts for workers in other languages (src/activities/contracts.ts): the committed
 * JSON Schemas are what the zod shapes give, and they accept what the TypeScript side sends and returns.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { CONTRACTS_PATH, contractsText, trainContracts } from '../../../src/activities/contracts';
import { resolveFromRoot } from '../../../src/infra/binaries';
import { parseConfig } from '../../../src/run/config';
import { NON_RETRYABLE_TYPES } from '../../../src/run/workflowUtil';

test('the committed contracts are the zod shapes\' (else: npx tsx scripts/export-contracts.ts)', () => {
  assert.equal(readFileSync(resolveFromRoot(CONTRACTS_PATH), 'utf8'), contractsText());
});

test('the contracts name the train queue\'s activities, their required fields and the failure types not retried', () => {
  const c = trainContracts();
  assert.deepEqual(Object.keys(c.activities), ['rlTrain', 'sftTrain']);
  assert.deepEqual(c.nonRetryableErrorTypes, [...NON_RETRYABLE_TYPES]);
  const rl = c.activities['rlTrain']!.input as { required: string[]; properties: Record<string, { required?: string[]; properties?: Record<string, unknown> }> };
  for (const k of ['runId', 'step', 'policy', 'reference', 'rolloutsKey', 'advantagesKey', 'tokenizerDir', 'rl', 'hp', 'state']) assert.ok(rl.required.includes(k), k);
  // Activities get the live hyperparameters only: the settings carry no `hp` of their own.
  assert.ok(!('hp' in (rl.properties['rl']!.properties ?? {})));
  assert.ok(rl.properties['hp']!.properties && 'lr' in rl.properties['hp']!.properties);
  // A config's defaults are optional on input: a minimal SFT config object validates by its required fields only.
  const sft = c.activities['sftTrain']!.input as { properties: { sft: { required?: string[] } } };
  const cfg = parseConfig({ run: { id: 'contracts' } });
  for (const k of sft.properties.sft.required ?? []) assert.ok(k in cfg.sft, `sft.${k}`);
});
