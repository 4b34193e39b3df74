/** The RL data (issue 28): invalid lines counted by reason, a shrunk held-out set said so, a floor on what is left. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { heldOutShrunk, rlDataShortfall, selectRlData } from '../../../../src/stages/rl/data';
import { toStoredVariant } from '../../../../src/stages/checklist/schema';
import { generateDemoDataset } from '../../../../src/demo/generator';
import { offlineChecklist } from '../../../../src/demo/checklist';

// Non-demo rows: the checklists are computed on demo dialogues, then `meta.world` is dropped.
const annotated = generateDemoDataset({ seed: 9, count: 6, brokenRate: 0 }).map((ex) => ({ ...ex, checklists: [toStoredVariant(offlineChecklist(ex), 0)], meta: {} }));
const line = (v: unknown) => JSON.stringify(v);
const { checklists: _c, ...noChecklists } = annotated[0]!;
const noUser = { ...annotated[1]!, messages: annotated[1]!.messages.filter((m) => m.role !== 'user') };

test('invalid lines are counted by reason; too-long prompts apart; the held-out set takes what it can', () => {
  const lines = [...annotated.map(line), '{"cut', line(noChecklists), line(noUser)];
  const long = annotated[5]!.uuid;
  const s = selectRlData(lines, { promptLength: (ex) => (ex.uuid === long ? 500 : 100), maxPromptTokens: 400, heldOut: 24 });
  assert.equal(s.kept.length, 5);
  assert.equal(s.tooLong, 1);
  assert.equal(s.invalid, 3);
  assert.equal(s.invalidReasons['not JSON'], 1);
  assert.equal(s.invalidReasons['no user message'], 1);
  assert.ok(Object.keys(s.invalidReasons).some((r) => r.startsWith('checklists: ')), JSON.stringify(s.invalidReasons));
  assert.deepEqual([s.heldOut, s.train, s.heldOutRequested], [4, 1, 24]);
  assert.equal(heldOutShrunk(s), 'held-out prompts: 4 of 24 asked for (rl.eval.prompts; only 5 usable example(s), one at least is trained on)');
  assert.equal(rlDataShortfall({ ...s, lines: lines.length }, 1, 'k', 400), undefined);
  assert.equal(
    rlDataShortfall({ ...s, lines: lines.length }, 2, 'k', 400)?.replace(/checklists: .*?(?=, 1× no user)/, 'checklists: …'),
    'rl data: 1 of 9 lines of k left to train on (3 invalid: 1× checklists: …, 1× no user message, 1× not JSON; 1 too long: prompt over 400 tokens (rl.rollout.maxModelLen − promptMargin); 4 held out (rl.eval.prompts)); at least 2 needed (rl.minExamples)',
  );
});

test('a held-out set of the size asked for is not reported; nothing usable fails at the default floor', () => {
  const s = selectRlData(annotated.map(line), { promptLength: () => 1, maxPromptTokens: 10, heldOut: 2 });
  assert.equal(heldOutShrunk(s), undefined);
  assert.deepEqual([s.heldOut, s.train], [2, 4]);
  const none = selectRlData(['oops', line(noUser)], { promptLength: () => 1, maxPromptTokens: 10, heldOut: 2 });
  assert.equal(rlDataShortfall({ ...none, lines: 2 }, 1, 'k', 10), 'rl data: 0 of 2 lines of k left to train on (2 invalid: 1× no user message, 1× not JSON); at least 1 needed (rl.minExamples)');
});

test('validation prompts follow the held-out ones, are never trained on, and shrink before the last training example', () => {
  const s = selectRlData(annotated.map(line), { promptLength: () => 1, maxPromptTokens: 10, heldOut: 2, validation: 3 });
  assert.deepEqual([s.heldOut, s.validation, s.train, s.validationRequested], [2, 3, 1, 3]);
  // the held-out set comes first and does not move when validation prompts are added
  const plain = selectRlData(annotated.map(line), { promptLength: () => 1, maxPromptTokens: 10, heldOut: 2 });
  assert.deepEqual(s.kept.slice(0, 2).map((e) => e.uuid), plain.kept.slice(0, 2).map((e) => e.uuid));
  assert.equal(plain.validation, 0);
  const few = selectRlData(annotated.map(line), { promptLength: () => 1, maxPromptTokens: 10, heldOut: 2, validation: 10 });
  assert.deepEqual([few.heldOut, few.validation, few.train], [2, 3, 1]);
  assert.match(rlDataShortfall({ ...few, lines: 6 }, 2, 'k', 10)!, /2 held out \(rl\.eval\.prompts\); 3 for validation \(rl\.eval\.validation\)\); at least 2 needed/);
});
