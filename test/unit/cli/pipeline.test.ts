/** Pure parts of the pipeline, its CLI and its report: stage summaries, log lines, report shaping, pass rates. */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildReport, type RunSources } from '../../../src/report/collect';
import { ReportData } from '../../../src/report/reportData';
import { addPassByFocus } from '../../../src/stages/rl/algo/rewards';
import { summarize } from '../../../src/stages/pipeline/workflow';
import { toStoredVariant } from '../../../src/stages/checklist/schema';
import { offlineChecklist } from '../../../src/demo/checklist';
import { generateDemoDataset } from '../../../src/demo/generator';
import { historyLines } from '../../../src/cli/logsCommand';

const ts = (ms: number) => ({ seconds: Math.floor(ms / 1000), nanos: (ms % 1000) * 1e6 });

describe('stage summaries', () => {
  test('headline numbers of each stage; RL held-out rewards at step 0 (SFT) and the latest evaluation', () => {
    assert.deepEqual(summarize('prepare', { total: 40, coldStart: { count: 10 }, rl: { count: 12 }, usage: { costUsd: 0 }, reportKey: 'k' }), { imported: 40, coldStart: 10, rl: 12, costUsd: 0, reportKey: 'k' });
    assert.deepEqual(summarize('sft', { train: { steps: 3, losses: [5, 4, 3], finalPrefix: 'p' }, sft: { wellFormedShare: 0.5 } }), { steps: 3, firstLoss: 5, lastLoss: 3, wellFormed: 0.5, policy: 'p' });
    const rl = summarize('rl', { steps: 4, stopped: false, policy: { kind: 'ckpt', manifestKey: 'm', step: 4 }, evals: [{ step: 0, rewardMean: 0.1 }, { step: 2, rewardMean: 0.2 }, { step: 4, rewardMean: 0.3 }] });
    assert.deepEqual(rl, { steps: 4, heldOutSft: 0.1, heldOutRl: 0.3, heldOutStep: 4, policy: 'm' });
    assert.equal(summarize('rl', { steps: 1, stopped: true, evals: [] })['stopped'], 'yes');
    assert.deepEqual(summarize('checklist', undefined), {});
    const acc = (a: number) => ({ accuracy: a, correct: 0, total: 0 });
    assert.deepEqual(summarize('eval', { bfcl: [{ label: 'sft', overall: acc(0.25) }, { label: 'rl', overall: acc(0.5) }] }), { bfcl_sft: 0.25, bfcl_rl: 0.5 });
  });
});

describe('cm2 logs', () => {
  test('history events become lines: activity durations, retries, failures, signals, stages', () => {
    const t = 1_700_000_000_000;
    const lines = historyLines('rl', [
      { eventId: 1, eventTime: ts(t), workflowExecutionStartedEventAttributes: { workflowType: { name: 'rlWorkflow' } } },
      { eventId: 5, eventTime: ts(t + 1000), activityTaskScheduledEventAttributes: { activityType: { name: 'rlJudge' } } },
      { eventId: 6, eventTime: ts(t + 9000), activityTaskStartedEventAttributes: { scheduledEventId: 5, attempt: 3, lastFailure: { message: 'judge endpoint: 503', cause: { message: 'Service Unavailable' } } } },
      { eventId: 7, eventTime: ts(t + 11000), activityTaskCompletedEventAttributes: { scheduledEventId: 5 } },
      { eventId: 8, eventTime: ts(t + 12000), workflowExecutionSignaledEventAttributes: { signalName: 'pause' } },
      { eventId: 9, eventTime: ts(t + 13000), activityTaskScheduledEventAttributes: { activityType: { name: 'rlTrain' } } },
      { eventId: 10, eventTime: ts(t + 14000), activityTaskFailedEventAttributes: { scheduledEventId: 9, failure: { message: 'heap exhausted' } } },
      { eventId: 11, eventTime: ts(t + 15000), workflowExecutionContinuedAsNewEventAttributes: {} },
    ]);
    assert.deepEqual(lines.map((l) => l.text), [
      'started (rlWorkflow)',
      'rlJudge attempt 3 (earlier attempts failed: judge endpoint: 503: Service Unavailable)',
      'rlJudge done in 10s',
      'signal pause',
      'rlTrain FAILED: heap exhausted',
      'continued as new (history kept small)',
    ]);
    assert.equal(lines[0]!.time, t);
    assert.ok(lines.every((l) => l.source === 'rl'));
  });
});

describe('report data', () => {
  const sources: RunSources = {
    prepare: { total: 40, importErrors: 1, steps: [{ name: 'rule_filter', in: 40, kept: 35, failed: 0, reasons: { role_order: 5 }, usage: { calls: 0, promptTokens: 0, completionTokens: 0, costUsd: 0 } }, { name: 'llm_filter_pass0', in: 35, kept: 30, failed: 2, reasons: {}, usage: { calls: 35, promptTokens: 7000, completionTokens: 700, costUsd: 0.01 } }], coldStart: { count: 12 }, rl: { count: 18 } },
    checklist: { annotator: 'gpt', failed: 1, failureReasons: { 'invalid checklist after 3 attempt(s)': 1 }, usage: { calls: 20, promptTokens: 40000, completionTokens: 9000, costUsd: 0.2 } },
    sft: { train: { losses: [3, 2, 1], seconds: 30 }, base: { wellFormedShare: 0, correctNameShare: 0 }, sft: { wellFormedShare: 0.75, correctNameShare: 0.5 } },
    rl: [{
      runId: 'r',
      rows: [
        { kind: 'eval', step: 0, rewardMean: 0.1, seconds: { rollout: 4, judge: 1 } },
        { kind: 'step', step: 1, granularity: 'turn', reward: { mean: 0.2, std: 0.1 }, failedSamples: 1, rollouts: 8, kl: 0.01, loss: 0.5, judge: { calls: 10, cacheHits: 2, failed: 0, promptTokens: 100, completionTokens: 10, costUsd: 0.001 }, tokens: { generated: 500 }, passByFocus: { 'assistant.tool_calls': { passed: 3, total: 4 } }, seconds: { rollout: 10, judge: 2, train: 5, total: 18 } },
        { kind: 'eval', step: 1, rewardMean: 0.3 },
      ],
    }],
    bfcl: [],
  };

  test('stage reports and RL metrics are shaped into a valid ReportData', () => {
    const data = buildReport('r', sources, { stages: [{ name: 'prepare', state: 'completed', seconds: 12 }, { name: 'sft', state: 'completed', seconds: 40 }], generatedAt: '2026-01-01T00:00:00Z' });
    ReportData.parse(data);
    assert.deepEqual(data.heldOut, { sft: 0.1, rl: 0.3 });
    assert.deepEqual(data.data, { imported: 40, kept: 30, coldStart: 12, rl: 18, funnel: [{ step: 'imported', kept: 40 }, { step: 'rule_filter', in: 40, kept: 35 }, { step: 'llm_filter_pass0', in: 35, kept: 30 }] });
    assert.deepEqual(data.rl!.passByFocus, [{ focus: 'assistant.tool_calls', passed: 3, total: 4 }]);
    assert.deepEqual(data.rl!.steps.map((s) => [s.series, s.step, s.rewardMean, s.judgeCalls, s.cacheHits]), [['turn', 1, 0.2, 10, 2]]);
    assert.deepEqual(data.rl!.evals.map((e) => [e.series, e.step]), [['turn', 0], ['turn', 1]]);
    assert.deepEqual(data.usage.map((u) => [u.stage, u.role, u.calls]), [['prepare', 'llm_filter_pass0', 35], ['checklist', 'gpt', 20], ['rl', 'judge', 10]]);
    assert.deepEqual(data.failures.map((f) => [f.stage, f.count]), [['prepare', 3], ['checklist', 1], ['rl', 1]]);
    assert.ok(data.phases.some((p) => p.stage === 'sft' && p.phase === 'train' && p.seconds === 30));
    assert.ok(data.phases.some((p) => p.stage === 'rl' && p.phase === 'rollout' && p.seconds === 10));
    assert.ok(!data.phases.some((p) => p.phase === 'total'));
  });

  test('several RL runs are drawn as one series each, named by granularity when they differ', () => {
    const other = { runId: 'r-step', rows: [{ kind: 'step' as const, step: 1, granularity: 'step', reward: { mean: 0.4, std: 0 }, failedSamples: 0, rollouts: 8 }] };
    const data = buildReport('r', { ...sources, rl: [...sources.rl, other] }, { stages: [] });
    assert.deepEqual([...new Set(data.rl!.steps.map((s) => s.series))], ['turn', 'step']);
    assert.deepEqual(data.heldOut, { sft: 0.1, rl: 0.3 }, 'held-out rewards come from the run itself');
  });

  test('an empty run gives an empty but valid report', () => {
    const data = buildReport('x', { rl: [], bfcl: [] }, { stages: [] });
    ReportData.parse(data);
    assert.equal(data.rl, undefined);
    assert.deepEqual(data.heldOut, {});
  });
});

describe('judge pass rate per focus_on', () => {
  test('an item passes when some judged step of its turn passed it; judge failures do not pass', () => {
    const ex = generateDemoDataset({ seed: 3, count: 1, brokenRate: 0 })[0]!;
    const variant = toStoredVariant(offlineChecklist(ex), 0);
    const items = variant[0]!;
    const into: Record<string, { passed: number; total: number }> = {};
    // Two steps in turn 0: item 0 passes at step 1 only; item 1 "passes" but the call failed (ok false).
    const steps = [items.map(() => ({ pass: false, ok: true })), items.map((_, c) => ({ pass: c <= 1, ok: c !== 1 }))];
    addPassByFocus([variant], [[{ turn: 0, steps }]], into);
    const total = Object.values(into).reduce((n, v) => n + v.total, 0);
    const passed = Object.values(into).reduce((n, v) => n + v.passed, 0);
    assert.equal(total, items.length);
    assert.equal(passed, 1);
    assert.equal(into[items[0]!.focus_on]!.passed >= 1, true);
  });
});
