/** The workflow's validator of `setHyperparameters` and the config schema agree: both read src/run/hyperparameters.ts. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RlHyperparameters } from '../../../src/run/config';
import { validateHyperparameters } from '../../../src/run/hyperparameters';

test('every value the config schema accepts the update accepts, and every value it refuses the update refuses', () => {
  const values: unknown[] = [-1, -1e-9, 0, 1e-12, 1e-6, 0.5, 1, 1 + 1e-9, 9.99, 10, 10.01, Number.NaN, Number.POSITIVE_INFINITY, '1e-5', null, true];
  for (const field of ['lr', 'klCoef'] as const) {
    for (const v of values) {
      const schemaOk = RlHyperparameters.safeParse({ [field]: v }).success;
      const updateOk = validateHyperparameters({ [field]: v }) === undefined;
      assert.equal(updateOk, schemaOk, `${field} = ${String(v)}: schema ${schemaOk}, update ${updateOk}`);
    }
  }
  for (const g of ['trajectory', 'turn', 'step', 'episode', '', 3]) {
    assert.equal(validateHyperparameters({ granularity: g }) === undefined, RlHyperparameters.safeParse({ granularity: g }).success, String(g));
  }
  assert.match(validateHyperparameters({ lr: 2 })!, /^lr must be a number in \(0, 1\]$/);
  assert.match(validateHyperparameters({ klCoef: -1 })!, /^klCoef must be a number in \[0, 10\]$/);
  assert.match(validateHyperparameters({ beta: 1 })!, /unknown field\(s\) beta/);
  assert.equal(validateHyperparameters({}), 'nothing to change');
});
