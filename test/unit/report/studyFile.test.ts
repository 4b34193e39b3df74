import assert from 'node:assert/strict';
import test from 'node:test';
import { emptyStudyFile, paired, seedGroups, pairedSearch, parseStudyFile, policyStats, promptRewards, studyFileMarkdown, studyFileText, withPolicy, withSearch, type StudyFilePolicy, type StudySearch } from '../../../src/report/studyFile';

const prompts = ['u1', 'u2', 'u3', 'u4'];
const policy = (kind: StudyFilePolicy['kind'], rewards: number[], extra: Partial<StudyFilePolicy> = {}): StudyFilePolicy => ({
  kind, granularity: kind === 'rl' ? 'trajectory' : null, seed: kind === 'rl' ? 1 : null, steps: kind === 'rl' ? 8 : 0,
  from: kind === 'rl' ? 'sft' : kind === 'sft' ? 'base' : null, heldOut: Object.fromEntries(prompts.map((u, i) => [u, rewards[i]!])), config: {}, ...extra,
});

test('per-prompt rewards come from an evaluation\'s advantage rows (mean over a prompt\'s samples); a row without a reward names the file and row', () => {
  assert.deepEqual(promptRewards([{ id: 'a#0', reward: 0.5 }, { id: 'b#0', reward: 1 }, { id: 'a#1', reward: 0 }]), { a: 0.25, b: 1 });
  assert.deepEqual(promptRewards([{ id: 'x#y#0', reward: 0.2 }]), { 'x#y': 0.2 }, 'the sample index is after the last #');
  assert.throws(() => promptRewards([{ id: 'a#0', reward: 1 }, { id: 'b#0' }], 'runs/r/rl/eval/step-0008/advantages.json'), /step-0008\/advantages.json: rows\[1\]\.reward: missing/);
});

test('the first policy fixes the prompts; a policy evaluated on other prompts is refused', () => {
  let f = withPolicy(emptyStudyFile(), 'sft', policy('sft', [0.1, 0.2, 0.3, 0.4]));
  assert.deepEqual(f.prompts, prompts);
  f = withPolicy(f, 'rl-s1', policy('rl', [0.2, 0.2, 0.5, 0.4]));
  assert.deepEqual(Object.keys(f.policies), ['sft', 'rl-s1']);
  const other = policy('rl', [0, 0, 0, 0]);
  other.heldOut = { u1: 0, u2: 0, u3: 0, u9: 1 };
  assert.throws(() => withPolicy(f, 'rl-s2', other), /policy rl-s2 was evaluated on other prompts than the study's 4 \(1 missing, first u4; 1 not in the study, first u9\)/);
  // replacing a policy keeps the order and the prompts
  f = withPolicy(f, 'sft', policy('sft', [0.1, 0.2, 0.3, 0.5]));
  assert.equal(f.policies.sft!.heldOut.u4, 0.5);
});

test('paired statistics: mean difference, sd(d)/√n, wins and losses; the unpaired figure beside it', () => {
  let f = withPolicy(emptyStudyFile(), 'sft', policy('sft', [0.1, 0.5, 0.3, 0.9]));
  f = withPolicy(f, 'rl', policy('rl', [0.2, 0.6, 0.3, 1.0]));
  const d = paired(f, 'rl', 'sft');
  assert.equal(d.n, 4);
  assert.ok(Math.abs(d.diff - 0.075) < 1e-12);
  // d = [0.1, 0.1, 0, 0.1]: sd = 0.05, se = 0.025
  assert.ok(Math.abs(d.se! - 0.025) < 1e-12);
  assert.ok(Math.abs(d.z! - 3) < 1e-9);
  assert.deepEqual([d.wins, d.losses, d.ties], [3, 0, 1]);
  const a = policyStats(f, 'rl');
  const b = policyStats(f, 'sft');
  assert.ok(Math.abs(d.unpairedZ! - (a.mean - b.mean) / Math.sqrt(a.se! ** 2 + b.se! ** 2)) < 1e-12);
  assert.ok(d.unpairedZ! < 0.5, 'the same prompts\' spread hides the gain unpaired');
});

test('seeds averaged: RL policies of one granularity from one policy, averaged per prompt, paired against it; one seed alone is no group', () => {
  let f = withPolicy(emptyStudyFile(), 'sft', policy('sft', [0.1, 0.5, 0.3, 0.9]));
  f = withPolicy(f, 'trajectory-s1', policy('rl', [0.3, 0.5, 0.3, 0.9]));
  assert.deepEqual(seedGroups(f), [], 'one seed');
  f = withPolicy(f, 'trajectory-s2', policy('rl', [0.1, 0.7, 0.1, 0.9], { seed: 2 }));
  f = withPolicy(f, 'turn-s1', policy('rl', [0, 0, 0, 0], { granularity: 'turn' }));
  const [g, ...rest] = seedGroups(f);
  assert.equal(rest.length, 0, 'turn has one seed');
  assert.deepEqual([g!.granularity, g!.from, g!.policies], ['trajectory', 'sft', ['trajectory-s1', 'trajectory-s2']]);
  // averaged [0.2, 0.6, 0.2, 0.9] − sft = [0.1, 0.1, −0.1, 0]: mean 0.025
  assert.ok(Math.abs(g!.paired.diff - 0.025) < 1e-12);
  assert.deepEqual([g!.paired.wins, g!.paired.losses, g!.paired.ties], [2, 1, 1]);
  // seed means 0.5 and 0.45: sd 0.0354
  assert.ok(Math.abs(g!.seedSd - Math.SQRT1_2 * 0.05) < 1e-12);
  assert.match(studyFileMarkdown(f), /\| trajectory: trajectory-s1, trajectory-s2 \| sft \| 0\.4750 \| \+0\.0250 ± 0\.0479 \(\+0\.5 SE\) \| 2 \/ 1 \/ 1 \| 0\.0354 \|/);
});

test('the file round-trips as stable text; a malformed or incomplete file is refused naming the file and field', () => {
  let f = withPolicy(emptyStudyFile(), 'sft', policy('sft', [0.1, 0.5, 0.3, 0.9], { bfcl: { simple_python: { correct: 3, total: 50 } }, commit: 'abc', machine: 'AMD EPYC, 2 cores' }));
  f = { ...f, log: [{ at: '2026-11-28T05:00:00Z', piece: 'rl-s9', text: 'stopped: collapsed at step 3' }] };
  const text = studyFileText(f);
  assert.ok(text.endsWith('}\n'));
  assert.deepEqual(parseStudyFile(text, 'docs/results/x.json'), f);
  assert.throws(() => parseStudyFile('{', 'docs/results/x.json'), /docs\/results\/x.json: not JSON/);
  assert.throws(() => parseStudyFile(JSON.stringify({ prompts: [], policies: { a: { kind: 'sft' } } }), 'x.json'), /x.json: policies\.a\.granularity/);
  const holes = JSON.parse(text);
  delete holes.policies.sft.heldOut.u3;
  assert.throws(() => parseStudyFile(JSON.stringify(holes), 'x.json'), /x.json: policies\.sft\.heldOut: no reward for 1 of the 4 prompts \(first u3\)/);
});

test('the Markdown shows every policy, RL against its SFT policy paired and unpaired, BFCL and the log', () => {
  let f = withPolicy(emptyStudyFile(), 'base', policy('base', [0, 0.1, 0, 0.2], { bfcl: { simple_python: { correct: 5, total: 50 }, irrelevance: { correct: 10, total: 50 } } }));
  f = withPolicy(f, 'sft', policy('sft', [0.1, 0.5, 0.3, 0.9], { bfcl: { simple_python: { correct: 7, total: 50 } } }));
  f = withPolicy(f, 'trajectory-s1', policy('rl', [0.2, 0.6, 0.3, 1.0]));
  f = { ...f, log: [{ at: '2026-11-28T05:00:00Z', piece: 'search lr=5e-5', text: 'collapsed' }] };
  const md = studyFileMarkdown(f, { title: '### Study' });
  assert.match(md, /^### Study\n\n4 held-out prompts/);
  assert.match(md, /\| trajectory-s1 \| RL, trajectory, seed 1 \| sft \| 8 \| 0\.5250 ± 0\.\d{4} \| \+0\.0750 ± 0\.0250 \(\+3\.0 SE\) \| 3 \/ 0 \/ 1 \| \+0\.\d \|/);
  assert.match(md, /\| sft \| sft \| base \| 0 \| 0\.4500 ± 0\.\d{4} \| – \| – \| – \|/);
  assert.match(md, /\| simple_python \| 10\.0% \(5\/50\) \| 14\.0% \(7\/50\) \|/);
  assert.match(md, /\| irrelevance \| 20\.0% \(10\/50\) \| – \|/);
  assert.match(md, /- 2026-11-28, search lr=5e-5: collapsed/);
});

test('the search is recorded on validation prompts of its own, disjoint from the held-out ones, and paired against the SFT baseline', () => {
  const vp = ['v1', 'v2', 'v3'];
  const run = (rewards: number[], steps: number, lr: number, extra: Partial<StudySearch> = {}): StudySearch => ({
    steps, settings: { steps, hp: { lr, granularity: 'trajectory' }, groupSize: 8, seed: 1 }, validation: Object.fromEntries(vp.map((u, i) => [u, rewards[i]!])), ...extra,
  });
  let f = withPolicy(emptyStudyFile(), 'sft', policy('sft', [0.1, 0.5, 0.3, 0.9]));
  f = withSearch(f, 'sft', run([0.2, 0.4, 0.6], 0, 1e-5));
  assert.deepEqual(f.validationPrompts, vp);
  // the baseline alone: a table whose rows have as many cells as its header
  const only = studyFileMarkdown(f).split('\n');
  const head = only.findIndex((l) => l.startsWith('| run |'));
  assert.deepEqual(only.slice(head, head + 3), ['| run | RL steps | validation reward (mean ± SE) | vs baseline, paired: Δ ± SE (z) | won / lost / tied | last training reward |', '| --- | --- | --- | --- | --- | --- |', '| sft | 0 | 0.4000 ± 0.1155 | – | – | – |']);
  f = withSearch(f, 'lr1e-5', run([0.3, 0.5, 0.6], 4, 1e-5, { train: [{ step: 4, mean: 0.31, std: 0.2 }] }));
  f = withSearch(f, 'lr5e-5', run([0, 0.1, 0.2], 4, 5e-5, { note: 'collapsed: KL 0.07 at step 3' }));
  const d = pairedSearch(f, 'lr1e-5', 'sft');
  assert.ok(Math.abs(d.diff - 0.2 / 3) < 1e-12);
  assert.deepEqual([d.wins, d.losses, d.ties], [2, 0, 1]);
  const md = studyFileMarkdown(f);
  assert.match(md, /Hyperparameter search: 3 validation prompts \(disjoint from the held-out ones\), greedy; baseline `sft`/);
  assert.match(md, /\| run \| hp\.lr \| RL steps \|/, 'only the settings that differ between runs (and lr) are columns');
  // a setting the config gained since the first runs (recorded by later runs only, one value) is not a difference
  const later = withSearch(f, 'later', run([0.3, 0.5, 0.6], 4, 1e-5, { settings: { steps: 4, hp: { lr: 1e-5, granularity: 'trajectory' }, groupSize: 8, seed: 1, engine: { kind: 'embedded' } } }));
  assert.match(studyFileMarkdown(later), /\| run \| hp\.lr \| RL steps \|/);
  assert.match(md, /\| lr1e-5 \| 0\.00001 \| 4 \| 0\.4667 ± 0\.\d{4} \| \+0\.0667 ± 0\.0333 \(\+2\.0 SE\) \| 2 \/ 0 \/ 1 \| 0\.3100 \(step 4\) \|/);
  assert.match(md, /\| sft \| – \| 0 \| 0\.4000 ± /);
  assert.match(md, /- lr5e-5: collapsed: KL 0\.07 at step 3/);
  // other validation prompts, or validation prompts that are held-out prompts, are refused
  assert.throws(() => withSearch(f, 'x', { ...run([0, 0, 0], 4, 1e-5), validation: { v1: 0, v2: 0, v9: 0 } }), /search x was evaluated on other prompts than the study's 3/);
  assert.throws(() => withSearch(withPolicy(emptyStudyFile(), 'sft', policy('sft', [0, 0, 0, 0])), 'sft', { ...run([0, 0, 0], 0, 1e-5), validation: { u1: 0, v2: 0 } }), /1 validation prompts are held-out prompts too \(first u1\)/);
  const text = studyFileText(f);
  assert.deepEqual(parseStudyFile(text, 'x.json'), f);
  const holes = JSON.parse(text);
  delete holes.searches['lr5e-5'].validation.v2;
  assert.throws(() => parseStudyFile(JSON.stringify(holes), 'x.json'), /x.json: searches\.lr5e-5\.validation: no reward for 1 of the 3 validation prompts/);
  // a file written before searches existed still reads
  const old = JSON.parse(text);
  delete old.searches;
  delete old.validationPrompts;
  assert.deepEqual(parseStudyFile(JSON.stringify(old), 'x.json').searches, {});
});

test('the format figures: items passed per focus and how the episodes ended, per policy and per search run, round-tripped', () => {
  const episodes = (calls: number, broken: number) => ({
    passByFocus: { 'assistant.content.user_visible_reply': { passed: 10, total: 40 }, 'assistant.tool_calls': { passed: calls, total: 20 } },
    endReasons: { turn_control: 4 - broken, error_tool_call: broken },
  });
  let f = withPolicy(emptyStudyFile(), 'base', policy('base', [0, 0, 0, 0]));
  f = withPolicy(f, 'sft', policy('sft', [0.1, 0.5, 0.3, 0.9], { episodes: episodes(5, 3) }));
  f = withPolicy(f, 'trajectory-s1', policy('rl', [0.2, 0.6, 0.3, 1.0], { episodes: { ...episodes(12, 1), endReasons: { turn_control: 2, error_tool_call: 1, max_assistant_turns: 1 } } }));
  assert.deepEqual(parseStudyFile(studyFileText(f), 'x.json'), f);
  const md = studyFileMarkdown(f);
  assert.match(md, /What the 4 episodes did/);
  // the focus columns in a fixed order (tool calls first), end reasons with the broken calls first, a policy without figures left out
  assert.match(md, /\| policy \| tool-call items \| reply items \| ended: error_tool_call \| ended: turn_control \| ended: max_assistant_turns \|/);
  assert.match(md, /\| sft \| 5\/20 \(25%\) \| 10\/40 \(25%\) \| 3 \| 1 \| 0 \|/);
  assert.match(md, /\| trajectory-s1 \| 12\/20 \(60%\) \| 10\/40 \(25%\) \| 1 \| 2 \| 1 \|/);
  assert.doesNotMatch(md, /\| base \| \d+\/\d+/);
  assert.doesNotMatch(md, /The first step against the reference/, 'no first-step table until a policy has the counts');
  f = withPolicy(f, 'sft', { ...f.policies.sft!, episodes: { ...episodes(5, 3), firstStep: { 'right tool, same arguments': 1, 'wrong tool, the first offered': 2, 'broken call': 1 } } });
  f = withPolicy(f, 'trajectory-s1', { ...f.policies['trajectory-s1']!, episodes: { ...episodes(12, 1), firstStep: { 'right tool, same arguments': 3, 'reply, as the reference': 1 } } });
  assert.deepEqual(parseStudyFile(studyFileText(f), 'x.json'), f);
  const md2 = studyFileMarkdown(f);
  // the outcomes some policy has, in the fixed order
  assert.match(md2, /\| policy \| right tool, same arguments \| wrong tool, the first offered \| broken call \| reply, as the reference \|\n\|---\|---\|---\|---\|---\|\n\| sft \| 1 \| 2 \| 1 \| 0 \|\n\| trajectory-s1 \| 3 \| 0 \| 0 \| 1 \|/);
  assert.throws(() => parseStudyFile(JSON.stringify({ ...JSON.parse(studyFileText(f)), policies: { sft: { ...f.policies.sft, episodes: { ...episodes(1, 1), firstStep: { 'a guess': 1 } } } } }), 'x.json'), /x.json: policies\.sft\.episodes\.firstStep/);
  assert.throws(() => parseStudyFile(JSON.stringify({ ...JSON.parse(studyFileText(f)), policies: { sft: { ...f.policies.sft, episodes: { passByFocus: {}, endReasons: { x: 1.5 } } } } }), 'x.json'), /x.json: policies\.sft\.episodes\.endReasons\.x/);
});
