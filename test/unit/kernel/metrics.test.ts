/** The project's metric catalogue (src/kernel/metricNames.ts): Prometheus-valid names, counters named `_total`, and every metric documented. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { CM2_METRICS } from '../../../src/kernel/metricNames';
import { REPO } from '../../helpers/paths';

test('every cm2 metric has a Prometheus name, counters end in _total, and docs/observability.md documents each with its labels', () => {
  const doc = readFileSync(path.join(REPO, 'docs', 'observability.md'), 'utf8');
  const names = Object.values(CM2_METRICS).map((m) => m.name);
  assert.equal(new Set(names).size, names.length, 'names are unique');
  for (const m of Object.values(CM2_METRICS)) {
    assert.match(m.name, /^cm2_[a-z0-9_]+$/);
    assert.equal(m.kind === 'counter', m.name.endsWith('_total'), `${m.name}: _total exactly on counters`);
    if (m.kind === 'counter') assert.equal(m.valueType, 'int', 'the SDK\'s counters are integers');
    const row = doc.split('\n').find((l) => l.startsWith(`| \`${m.name}\` |`));
    assert.ok(row, `${m.name} has a row in the docs`);
    assert.ok(row.includes(`| ${m.kind} |`), `${m.name} documented as a ${m.kind}`);
    for (const label of m.labels) assert.ok(row.includes(`\`${label}\``), `${m.name}: label ${label} documented`);
  }
});
