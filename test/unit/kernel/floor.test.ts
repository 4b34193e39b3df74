/** Output floors (issue 28): a stage below its configured minimum fails with the reasons counted. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { belowFloor, formatReasons } from '../../../src/kernel/floor';
import { checklistShortfall } from '../../../src/stages/checklist/floor';

test('reasons are counted, most frequent first', () => {
  assert.equal(formatReasons({ b: 1, a: 1, c: 5, none: 0 }), '5× c, 1× a, 1× b');
  assert.equal(formatReasons({}), '');
});

test('a stage at or above its floor passes; below it, the message names the counts and the setting', () => {
  const check = { stage: 'x', of: 4, what: 'rows kept', setting: 'x.min', lost: ['3 dropped: 3× too long', ''] };
  assert.equal(belowFloor({ ...check, usable: 1, min: 1 }), undefined);
  assert.equal(belowFloor({ ...check, usable: 0, min: 0 }), undefined);
  assert.equal(belowFloor({ ...check, usable: 1, min: 2 }), 'x: 1 of 4 rows kept (3 dropped: 3× too long); at least 2 needed (x.min)');
});

test('checklist: nothing annotated on non-demo data without an annotator endpoint', () => {
  const report = { annotated: 0, total: 12, failed: 12, inputErrors: 0, failureReasons: { 'offline annotator cannot annotate non-demo data — configure llm.roles.annotator': 12 } };
  assert.equal(
    checklistShortfall(report, 1),
    'checklist: 0 of 12 examples annotated (12 failed: 12× offline annotator cannot annotate non-demo data — configure llm.roles.annotator); at least 1 needed (checklist.minAnnotated)',
  );
  assert.equal(checklistShortfall(report, 0), undefined, 'minAnnotated 0: never fails');
  assert.equal(checklistShortfall({ ...report, annotated: 3, failed: 9, failureReasons: { 'invalid checklist after 3 attempt(s)': 9 } }, 1), undefined);
  assert.match(checklistShortfall({ ...report, annotated: 3, failed: 9 }, 10)!, /^checklist: 3 of 12 examples annotated \(9 failed: /);
});
