/** test/helpers/chaosSchedule and chaosReport: a seed draws one schedule of progress points; the report's comparisons. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { cmpKey, describeEvent, drawSchedule, pointAt, progressKey, progressLabel, PRE_RL_UNITS } from '../../helpers/chaosSchedule';
import { chaosReportDir, compactReport, firstDivergence, stagesDiff, writeReport } from '../../helpers/chaosReport';

test('progress keys order stages, RL steps and the phases of a step; labels name the step in flight', () => {
  const order = [
    progressKey('prepare', 'import', 0),
    progressKey('prepare', 'compression + selection', 2),
    progressKey('checklist', 'annotate', 1),
    progressKey('sft', 'train', 0),
    progressKey('rl', 'data', 0),
    progressKey('rl', 'eval', 0),
    progressKey('rl', 'rollout', 0),
    progressKey('rl', 'train', 0),
    progressKey('rl', 'eval', 2),
    progressKey('rl', 'rollout', 36),
    progressKey('rl', 'advantages', 36),
    progressKey('rl', 'train', 36),
    progressKey('rl', 'done', 100),
    progressKey('eval', 'bfcl', 0),
  ];
  for (let i = 1; i < order.length; i++) assert.ok(cmpKey(order[i - 1]!, order[i]!) < 0, `${progressLabel(order[i - 1]!)} before ${progressLabel(order[i]!)}`);
  assert.equal(progressLabel(progressKey('rl', 'train', 36)), 'rl step 37 train');
  assert.equal(progressLabel(progressKey('sft', 'train', 0)), 'sft train');
  // An unknown phase counts as the stage's start.
  assert.deepEqual(progressKey('checklist', 'something new', 0), progressKey('checklist', 'starting', 0));
});

test('a seed draws the same schedule every time, of progress points inside the run; another seed another', () => {
  const one = drawSchedule(1538141866, 100, { clock: 'progress', killEverySteps: [15, 30] });
  assert.deepEqual(drawSchedule(1538141866, 100, { clock: 'progress', killEverySteps: [15, 30] }), one);
  assert.notDeepEqual(drawSchedule(7, 100, { clock: 'progress', killEverySteps: [15, 30] }), one);
  const total = Object.values(PRE_RL_UNITS).reduce((n, u) => n + u, 0) + 100;
  assert.equal(one.filter((e) => e.kind === 'restart' && e.server === 'Temporal').length, 1);
  assert.equal(one.filter((e) => e.kind === 'restart' && e.server === 'MinIO').length, 1);
  assert.ok(one.filter((e) => e.kind === 'kill').length >= 4);
  for (const e of one) {
    assert.ok(e.at > 0 && e.at < total, describeEvent(e));
    assert.ok(e.target && cmpKey(e.target, progressKey('rl', 'train', 99)) <= 0, describeEvent(e));
  }
  for (let i = 1; i < one.length; i++) assert.ok(cmpKey(one[i - 1]!.target!, one[i]!.target!) <= 0);
  // Repeated restarts (the bench): about every 150 units.
  const bench = drawSchedule(3, 1000, { clock: 'progress', killEverySteps: [15, 30], serverEverySteps: 150 });
  assert.ok(bench.filter((e) => e.kind === 'restart' && e.server === 'MinIO').length >= 5);
  assert.deepEqual(pointAt(Object.values(PRE_RL_UNITS).reduce((n, u) => n + u, 0) + 36.9, 100), progressKey('rl', 'train', 36));
});

test('at the CI drill\'s scale (60 RL steps) every seed draws at least two worker kills and one restart of each server, all inside the RL steps', () => {
  const total = Object.values(PRE_RL_UNITS).reduce((n, u) => n + u, 0) + 60;
  for (let seed = 1; seed <= 2000; seed++) {
    const s = drawSchedule(seed * 7919, 60, { clock: 'progress', killEverySteps: [15, 30] });
    assert.ok(s.filter((e) => e.kind === 'kill').length >= 2, `seed ${seed * 7919}`);
    for (const server of ['Temporal', 'MinIO']) assert.equal(s.filter((e) => e.kind === 'restart' && e.server === server).length, 1, `seed ${seed * 7919} ${server}`);
    for (const e of s) assert.ok(e.at > 0 && e.at < total && cmpKey(e.target!, progressKey('rl', 'train', 59)) <= 0, `seed ${seed * 7919}: ${describeEvent(e)}`);
  }
});

test('the wall-clock schedule (the fallback) keeps its first events in the former windows', () => {
  const s = drawSchedule(5, 100, { clock: 'wall', killEverySec: [20, 40] });
  const t = s.find((e) => e.kind === 'restart' && e.server === 'Temporal')!;
  assert.ok(t.at >= 10 && t.at <= 50 && !t.target);
  assert.equal(s.filter((e) => e.kind === 'restart').length, 2);
});

test('the report names the first step whose weights differ and the stage results that differ', () => {
  assert.equal(firstDivergence([[1, 'aa'], [2, 'bb']], [[1, 'aa'], [2, 'bb']]), undefined);
  assert.match(firstDivergence([[1, 'aa'], [2, 'bb'], [3, 'cc']], [[1, 'aa'], [2, 'bx'], [3, 'cc']])!, /^step 2: weights bx/);
  assert.match(firstDivergence([[1, 'aa'], [2, 'bb']], [[1, 'aa']])!, /no row for step 2/);
  const st = (rl: number) => [{ name: 'rl', state: 'completed', summary: { steps: 100, heldOutRl: rl } }];
  assert.deepEqual(stagesDiff(st(0.5), st(0.5)), []);
  assert.deepEqual(stagesDiff(st(0.5), st(0.25)), ['rl.heldOutRl: 0.5 → 0.25']);
});

test('the report folder holds report.md and report.json, with the failed checks first', () => {
  const parent = mkdtempSync(path.join(tmpdir(), 'cm2-chaos-report-'));
  try {
    const dir = chaosReportDir(42, parent);
    assert.match(path.basename(dir), /^42-\d{4}-/);
    const body = { seed: 42, steps: 3, dir, failures: ['weights differ from the undisturbed run\'s first at step 2'], schedule: ['SIGKILL the gpu worker at rl step 2 train'], events: ['1.0s [rl step 2 train] {rlTrain#1} gpu worker SIGKILLed'], kills: { workflows: 0, api: 0, gpu: 1 }, temporalRestarts: 0, minioRestarts: 0, stagesDiff: [], paidTwice: [], answered: 3, workerLogs: [] };
    const md = writeReport(body);
    assert.equal(readFileSync(path.join(dir, 'report.md'), 'utf8'), md);
    assert.ok(md.indexOf('Failed checks') < md.indexOf('Events'));
    assert.match(md, /seed 42: FAILED/);
    assert.deepEqual(JSON.parse(readFileSync(path.join(dir, 'report.json'), 'utf8')).failures, body.failures);
    assert.match(compactReport({ ...body, failures: [] }), /^chaos seed 42: passed/);
  } finally {
    rmSync(parent, { recursive: true, force: true });
  }
});
