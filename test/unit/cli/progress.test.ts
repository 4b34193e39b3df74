/**
 * The progress line: per-phase progress (compression ∥ selection never push a counter past its total), a formatter
 * that cannot throw whatever a workflow reports, and the notes about retries and task queues nobody polls.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { temporal } from '@temporalio/proto';
import { formatProgress, progressBar } from '../../../src/cli/stages';
import { activityNotes, heartbeatText, pendingView, shortDuration, withHeartbeatCount, workflowQueueNote, type PendingView } from '../../../src/cli/watch';
import type { StageProgress } from '../../../src/run/workflowShapes';
import { phaseTracker } from '../../../src/run/workflowUtil';

const progress = (over: Partial<StageProgress> = {}): StageProgress => ({ stage: 'prepare', phase: 'rule_filter', done: 2, total: 5, counts: { imported: 40 }, ...over });

describe('formatProgress', () => {
  test('one phase: bar, done/total, counts', () => {
    const line = formatProgress(progress());
    assert.match(line, /^\[prepare\] rule_filter\s+\[########\.{12}\] 2\/5 {2}imported=40$/);
  });

  test('the crash of issue 12: done above total (old workflows summed two phases into one counter) draws a full bar', () => {
    // Before the fix this threw `RangeError: Invalid count value: -1` (and -7 on every later resume).
    for (const [done, total] of [[6, 5], [12, 5], [1, 0], [-3, 5], [Number.NaN, 5], [3, Number.POSITIVE_INFINITY], [2.7, 5]] as const) {
      const line = formatProgress(progress({ done, total }));
      const bar = /\[([#.]+)\]/.exec(line)![1]!;
      assert.equal(bar.length, 20, `${done}/${total}: ${line}`);
    }
    assert.match(formatProgress(progress({ done: 12, total: 5 })), /\[#{20}\] 12\/5/);
  });

  test('whatever a workflow of any version answers, a line comes back', () => {
    const odd = [{}, { stage: 'x' }, { stage: 'x', phase: 'p', done: 1, total: 2 }, { phases: [null, { name: 'a', done: 'x', total: 3 }] }, { counts: null }, null];
    for (const p of odd) assert.equal(typeof formatProgress(p as unknown as StageProgress), 'string');
    assert.equal(progressBar(5, 0), `[${'.'.repeat(20)}]`);
    assert.equal(progressBar(-1, 4, 4), '[....]');
    assert.equal(progressBar(9, 4, 4), '[####]');
  });

  test('phases running at the same time each show their own count', () => {
    const line = formatProgress(progress({ phase: 'compression + selection', done: 5, total: 12, phases: [{ name: 'compression', done: 3, total: 5 }, { name: 'selection', done: 2, total: 7 }] }));
    assert.match(line, /^\[prepare\] compression \+ selection \[[#.]{20}\] 5\/12 \(compression 3\/5, selection 2\/7\)/);
  });
});

describe('phaseTracker', () => {
  test('parallel phases count against their own totals; the summed counter never passes its total', () => {
    const p: StageProgress = { stage: 'prepare', phase: 'starting', done: 0, total: 0, counts: {} };
    const details: string[] = [];
    const phases = phaseTracker(p, 'shards', (t) => details.push(t));
    const split = phases.only('split', 1);
    split.tick();
    split.end();
    // Compression: 2 shards, selection: 5 shards, interleaved as the workflow's lanes finish them.
    const comp = phases.add('compression', 2);
    const sel = phases.add('selection', 5);
    const seen: [number, number][] = [];
    for (const h of [sel, comp, sel, sel, comp, comp, comp, sel, sel]) {
      h.tick(); // compression is ticked 4 times for 2 shards: extra ticks must not count
      seen.push([p.done, p.total]);
      assert.ok(p.done <= p.total, `${p.done}/${p.total}`);
      assert.ok(p.phases!.every((x) => x.done <= x.total));
      assert.match(formatProgress(p), /^\[prepare\] compression \+ selection/);
    }
    assert.deepEqual(seen.at(-1), [7, 7]);
    assert.equal(details.at(-1), '**compression**: 2/2 shards, **selection**: 5/5 shards');
    comp.end();
    assert.equal(p.phase, 'selection');
    assert.deepEqual([p.done, p.total], [5, 5]);
    sel.end();
    assert.deepEqual(p.phases, []);
    const report = phases.only('report', 1);
    assert.deepEqual([p.phase, p.done, p.total], ['report', 0, 1]);
    report.tick();
    assert.deepEqual([p.done, p.total], [1, 1]);
  });

  test('a sequential phase replaces the running ones', () => {
    const p: StageProgress = { stage: 's', phase: '', done: 0, total: 0, counts: {} };
    const phases = phaseTracker(p, 'shards', () => undefined);
    phases.only('a', 3).tick();
    phases.only('b', 2);
    assert.deepEqual(p.phases, [{ name: 'b', done: 0, total: 2 }]);
    assert.equal(p.phase, 'b');
  });
});

describe('progress-line notes', () => {
  const now = 1_000_000_000;
  const sec = (s: number) => now - s * 1000;

  test('a retrying activity shows its attempt and last failure; a backoff shows when the next try is', () => {
    const p: PendingView = { type: 'sftTrain', state: 'scheduled', attempt: 2, lastFailure: 'activity Heartbeat timeout', taskQueue: 'cm2-gpu', nextAttemptAt: now + 4000, waitingSince: now + 4000 };
    assert.deepEqual(activityNotes([p], new Map(), now), ['sftTrain attempt 2, last failure: activity Heartbeat timeout, next try in 4s']);
  });

  test('work waiting on a queue nobody polls says so (the dead gpu worker of issue 12)', () => {
    const p: PendingView = { type: 'sftTrain', state: 'scheduled', attempt: 2, lastFailure: 'activity Heartbeat timeout', taskQueue: 'cm2-gpu', waitingSince: sec(95) };
    assert.deepEqual(activityNotes([p], new Map([['cm2-gpu', sec(130)]]), now), ['sftTrain attempt 2, last failure: activity Heartbeat timeout, waiting 1m35s: no worker polling cm2-gpu (last poll 2m10s ago)']);
    assert.deepEqual(activityNotes([{ ...p, attempt: 1 }], new Map([['cm2-gpu', null]]), now), ['sftTrain waiting 1m35s: no worker polling cm2-gpu']);
    // Polled recently: a busy worker, not a missing one.
    assert.deepEqual(activityNotes([{ ...p, attempt: 1 }], new Map([['cm2-gpu', sec(2)]]), now), ['sftTrain waiting 1m35s for a worker on cm2-gpu']);
  });

  test('work waiting behind other work of the run on the same queue: the workers are busy, not gone (the BFCL chunks of smollm2-i30)', () => {
    const waiting: PendingView = { type: 'evalBfclChunk', state: 'scheduled', attempt: 1, taskQueue: 'cm2-gpu', waitingSince: sec(140) };
    const running: PendingView = { type: 'evalBfclChunk', state: 'started', attempt: 1, taskQueue: 'cm2-gpu' };
    const other: PendingView = { type: 'rlJudge', state: 'started', attempt: 1, taskQueue: 'cm2-api' };
    // The busy gpu worker has not polled for 25 s (it would have said "no worker polling cm2-gpu").
    assert.deepEqual(activityNotes([running, waiting, other], new Map([['cm2-gpu', sec(25)]]), now), ['evalBfclChunk waiting 2m20s: the workers on cm2-gpu are busy (evalBfclChunk running)']);
    assert.deepEqual(activityNotes([running, { ...waiting, attempt: 2, lastFailure: 'boom' }], new Map([['cm2-gpu', null]]), now), ['evalBfclChunk attempt 2, last failure: boom, waiting 2m20s: the workers on cm2-gpu are busy (evalBfclChunk running)']);
    // Work running on another queue says nothing about this one.
    assert.deepEqual(activityNotes([other, waiting], new Map([['cm2-gpu', sec(25)]]), now), ['evalBfclChunk waiting 2m20s: no worker polling cm2-gpu (last poll 25s ago)']);
  });

  test('nothing to say about a running activity or a short wait', () => {
    const started: PendingView = { type: 'rlRollout', state: 'started', attempt: 1 };
    const fresh: PendingView = { type: 'rlJudge', state: 'scheduled', attempt: 1, taskQueue: 'cm2-api', waitingSince: sec(3) };
    assert.deepEqual(activityNotes([started, fresh], new Map([['cm2-api', null]]), now), []);
  });

  test('the workflows queue: no poller, or none for longer than a long poll', () => {
    assert.equal(workflowQueueNote('cm2-workflows', null, now), 'no worker polling cm2-workflows');
    assert.equal(workflowQueueNote('cm2-workflows', sec(30), now), undefined, 'an idle worker long-polls: 30 s is normal');
    assert.equal(workflowQueueNote('cm2-workflows', sec(200), now), 'no worker polling cm2-workflows (last poll 3m20s ago)');
    assert.equal(workflowQueueNote('cm2-workflows', undefined, now), undefined);
  });

  test('raw PendingActivityInfo → view; heartbeat details → text', () => {
    const S = temporal.api.enums.v1.PendingActivityState;
    // The wire form (Long seconds) and plain numbers are both read; plain numbers here.
    const ts = (ms: number) => ({ seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1e6 }) as never;
    const raw: temporal.api.workflow.v1.IPendingActivityInfo = {
      activityType: { name: 'sftTrain' },
      state: S.PENDING_ACTIVITY_STATE_SCHEDULED,
      attempt: 3,
      scheduledTime: ts(sec(600)),
      lastAttemptCompleteTime: ts(sec(50)),
      lastFailure: { message: 'activity Heartbeat timeout', cause: { message: 'heartbeat' } },
      activityOptions: { taskQueue: { name: 'cm2-gpu' } },
      heartbeatDetails: { payloads: [{ data: Buffer.from(JSON.stringify({ step: 7, loss: 1.23456 })) }] },
    };
    const v = pendingView(raw);
    assert.deepEqual(v, { type: 'sftTrain', state: 'scheduled', attempt: 3, lastFailure: 'activity Heartbeat timeout: heartbeat', taskQueue: 'cm2-gpu', waitingSince: sec(50) });
    assert.equal(heartbeatText([raw]), 'step=7 loss=1.235');
    assert.equal(heartbeatText([{ heartbeatDetails: { payloads: [{ data: Buffer.from('not json') }] } }]), '');
    assert.equal(heartbeatText([]), '');
    assert.equal(pendingView({}).type, 'activity');
  });

  test('a stage without a count of its own (SFT) draws its bar from the heartbeat', () => {
    const sft: StageProgress = { stage: 'sft', phase: 'train', done: 0, total: 0, counts: {} };
    assert.match(formatProgress(withHeartbeatCount(sft, { step: 36, total: 150, loss: 3.6 })), /^\[sft\] train\s+\[#{5}\.{15}\] 36\/150/);
    assert.equal(withHeartbeatCount(sft, { phase: 0, round: 1 }), sft);
    assert.equal(withHeartbeatCount(sft, undefined), sft);
    const counted = { ...sft, done: 2, total: 5 };
    assert.equal(withHeartbeatCount(counted, { step: 36, total: 150 }), counted, 'the workflow\'s own count wins');
  });

  test('durations', () => {
    assert.deepEqual([0, 9.6, 60, 75, 3599, 3600, 7322].map(shortDuration), ['0s', '10s', '1m00s', '1m15s', '59m59s', '1h00m', '2h02m']);
  });
});
