/**
 * Held-out means with their standard errors (prompts are the unit) in `cm2 status --json`, the run's end line and the
 * report; and the report's data table, where each step is compared with its own input (selection runs on the RL
 * split, not on compression's output: the `−103 dropped` of issue 12).
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { buildReport, heldOutSummary, lastEvalEpisodes, type RlRow, type RunSources } from '../../../src/report/collect';
import { renderReport } from '../../../src/report/html';
import { ReportData } from '../../../src/report/reportData';
import { formatFailed, formatMeanSe, promptMeanStats } from '../../../src/kernel/heldOut';
import { summarize } from '../../../src/stages/pipeline/workflow';
import { bfclLines, heldOutLine, tau2Lines } from '../../../src/cli/runStatus';
import { heldOutOfMemo } from '../../../src/cli/pipelineCommand';

const close = (a: number | null, b: number, tol = 1e-12) => assert.ok(a !== null && Math.abs(a - b) < tol, `${a} ≉ ${b}`);

describe('promptMeanStats', () => {
  test('one sample per prompt: the usual standard error of the mean (sample sd / √n)', () => {
    const r = [0, 0.5, 1, 0.25];
    const s = promptMeanStats(r, [0, 1, 2, 3]);
    const mean = 0.4375;
    const sd = Math.sqrt(r.reduce((a, x) => a + (x - mean) ** 2, 0) / 3);
    assert.equal(s.n, 4);
    close(s.mean, mean);
    close(s.sd, sd);
    close(s.se, sd / 2);
  });

  test('several samples per prompt are averaged first: the spread is across prompts', () => {
    // Prompt a: 0, 1 (mean 0.5); prompt b: 1, 1 (mean 1); prompt c: 0, 0 (mean 0).
    const s = promptMeanStats([0, 1, 1, 1, 0, 0], ['a', 'a', 'b', 'b', 'c', 'c']);
    assert.equal(s.n, 3);
    close(s.mean, 0.5);
    close(s.sd, 0.5);
    close(s.se, 0.5 / Math.sqrt(3));
  });

  test('fewer than two prompts: no standard error; mismatched input is an error', () => {
    assert.deepEqual(promptMeanStats([0.3, 0.5], [7, 7]), { n: 1, mean: 0.4, sd: null, se: null });
    assert.deepEqual(promptMeanStats([], []), { n: 0, mean: 0, sd: null, se: null });
    assert.throws(() => promptMeanStats([1], []), /1 rewards but 0 group labels/);
    assert.equal(formatMeanSe(0.05591, 0.01234, 32), '0.0559 ± 0.0123 (n=32)');
    assert.equal(formatMeanSe(0.05, null), '0.0500');
    assert.equal(formatMeanSe(undefined, 0.1), '–');
  });
});

const rows: RlRow[] = [
  { kind: 'eval', step: 0, rewardMean: 0.05, rewardSe: 0.01, prompts: 32, rollouts: 32 },
  { kind: 'step', step: 1, granularity: 'trajectory', reward: { mean: 0.1, std: 0.1 }, failedSamples: 0, rollouts: 16 },
  { kind: 'eval', step: 5, rewardMean: 0.08, rewardSe: 0.012, prompts: 32, rollouts: 32 },
  { kind: 'eval', step: 10, rewardMean: 0.1, rewardSe: 0.015, prompts: 32, rollouts: 32 },
];

describe('held-out summary (cm2 status --json, the run end line)', () => {
  test('SFT = step 0, RL = the latest evaluation, each with its standard error; z of the difference', () => {
    const h = heldOutSummary(rows);
    assert.equal(h.sft, 0.05);
    assert.equal(h.sftSe, 0.01);
    assert.equal(h.rl, 0.1);
    assert.equal(h.rlSe, 0.015);
    assert.equal(h.rlStep, 10);
    assert.equal(h.prompts, 32);
    close(h.z, 0.05 / Math.sqrt(0.01 ** 2 + 0.015 ** 2));
    assert.deepEqual(h.evals.map((e) => [e.step, e.mean, e.se, e.n]), [[0, 0.05, 0.01, 32], [5, 0.08, 0.012, 32], [10, 0.1, 0.015, 32]]);
    assert.equal(heldOutLine(h), 'held-out mean checklist reward: SFT 0.0500 ± 0.0100 → RL 0.1000 ± 0.0150 (step 10; 32 prompts, ± one standard error; difference +2.8 standard errors)');
  });

  test('the format figures come from the last evaluation row; a row that predates them gives none', () => {
    const figures = { passByFocus: { 'assistant.tool_calls': { passed: 14, total: 105 } }, endReasons: { error_tool_call: 23, turn_control: 41 } };
    assert.deepEqual(lastEvalEpisodes([{ kind: 'eval', step: 0, rewardMean: 0.1, passByFocus: { x: { passed: 0, total: 1 } }, endReasons: { final_turn: 1 } }, ...rows.slice(0, 2), { kind: 'eval', step: 8, rewardMean: 0.2, ...figures }]), figures);
    assert.equal(lastEvalEpisodes(rows), undefined);
    assert.equal(lastEvalEpisodes([]), undefined);
  });

  test('rows of older runs (no standard error) still give the means', () => {
    const h = heldOutSummary([{ kind: 'eval', step: 0, rewardMean: 0.2 }, { kind: 'eval', step: 3, rewardMean: 0.3 }]);
    assert.deepEqual({ sft: h.sft, sftSe: h.sftSe, rl: h.rl, rlSe: h.rlSe, z: h.z, prompts: h.prompts }, { sft: 0.2, sftSe: null, rl: 0.3, rlSe: null, z: null, prompts: null });
    assert.equal(heldOutLine(h), 'held-out mean checklist reward: SFT 0.2000 → RL 0.3000 (step 3)');
    assert.deepEqual(heldOutSummary([]).evals, []);
  });

  test('the pipeline carries the standard errors from the RL result into its status', () => {
    const s = summarize('rl', { steps: 10, evals: [{ step: 0, rewardMean: 0.05, rewardSe: 0.01, prompts: 32 }, { step: 10, rewardMean: 0.1, rewardSe: 0.015, prompts: 32 }] });
    assert.deepEqual(s, { steps: 10, heldOutSft: 0.05, heldOutSftSe: 0.01, heldOutRl: 0.1, heldOutRlSe: 0.015, heldOutStep: 10, heldOutPrompts: 32 });
  });
});

describe('report', () => {
  const usage = { calls: 0, promptTokens: 0, completionTokens: 0, costUsd: 0 };
  const step = (name: string, input: number, kept: number) => ({ name, in: input, kept, failed: 0, reasons: {}, usage });
  // The demo's shape: 1200 imported → filters → split 30/70 → compression (cold start) ∥ selection (RL split).
  const sources: RunSources = {
    prepare: { total: 1200, importErrors: 0, steps: [step('rule_filter', 1200, 1020), step('llm_filter_pass0', 1020, 990), step('compression', 297, 297), step('selection', 693, 590)], coldStart: { count: 297 }, rl: { count: 590 } },
    rl: [{ runId: 'r', rows }],
    bfcl: [],
  };

  test('each preparation step is compared with its own input (no negative "dropped")', () => {
    const data = buildReport('r', sources, { stages: [], generatedAt: '2026-01-01T00:00:00Z' });
    assert.deepEqual(data.data!.funnel.map((f) => [f.step, f.in, f.kept]), [['imported', undefined, 1200], ['rule_filter', 1200, 1020], ['llm_filter_pass0', 1020, 990], ['compression', 297, 297], ['selection', 693, 590]]);
    const html = renderReport(data);
    const table = /<section id="data">[\s\S]*?<\/section>/.exec(html)![0];
    const cells = [...table.matchAll(/<tr><td>([^<]+)<\/td><td class="num">([^<]*)<\/td><td class="num">([^<]*)<\/td><td class="num">[^<]*<\/td><td class="num">([^<]*)<\/td><\/tr>/g)].map((m) => [m[1], m[2], m[3], m[4]]);
    assert.deepEqual(cells, [['imported', '', '1,200', ''], ['rule_filter', '1,200', '1,020', '180'], ['llm_filter_pass0', '1,020', '990', '30'], ['compression', '297', '297', '0'], ['selection', '693', '590', '103']]);
    assert.ok(!/−\d|-\d{2,}/.test(table.replace(/<svg[\s\S]*?<\/svg>/g, '')), 'no negative counts');
  });

  test('held-out means with their standard errors: headline, table, shaded band', () => {
    const data = buildReport('r', sources, { stages: [], generatedAt: '2026-01-01T00:00:00Z' });
    assert.deepEqual(data.heldOut, { sft: 0.05, sftSe: 0.01, rl: 0.1, rlSe: 0.015, prompts: 32 });
    assert.deepEqual(data.rl!.evals.map((e) => [e.step, e.rewardMean, e.rewardSe, e.prompts]), [[0, 0.05, 0.01, 32], [5, 0.08, 0.012, 32], [10, 0.1, 0.015, 32]]);
    ReportData.parse(data);
    const html = renderReport(data);
    assert.match(html, /<span class="big">0\.0500<\/span> <span class="se">± 0\.0100<\/span>[\s\S]*<span class="big">0\.1000<\/span> <span class="se">± 0\.0150<\/span>/);
    assert.match(html, /= 2\.8 standard errors of the difference/);
    assert.match(html, /± one standard error across 32 held-out prompts/);
    const heldout = /<section id="heldout">[\s\S]*?<\/section>/.exec(html)![0];
    assert.match(heldout, /shaded: ± one standard error across held-out prompts/);
    assert.match(heldout, /<td class="num">10<\/td><td class="num">0\.1000<\/td><td class="num">0\.0150<\/td><td class="num">32<\/td>/);
    assert.ok(!html.includes('NaN'));
  });
});

// Issue 28: a failed rollout counts as reward 0 in a held-out mean, so every place that shows the mean shows how many failed.
describe('failed held-out rollouts beside the mean', () => {
  const withFailed: RlRow[] = [
    { kind: 'eval', step: 0, rewardMean: 0.05, rewardSe: 0.01, prompts: 32, rollouts: 32, failed: 0 },
    { kind: 'eval', step: 10, rewardMean: 0.1, rewardSe: 0.015, prompts: 32, rollouts: 32, failed: 3 },
  ];

  test('cm2 status and the run end line', () => {
    const h = heldOutSummary(withFailed);
    assert.deepEqual([h.sftFailed, h.sftRollouts, h.rlFailed, h.rlRollouts], [0, 32, 3, 32]);
    assert.equal(heldOutLine(h), 'held-out mean checklist reward: SFT 0.0500 ± 0.0100 → RL 0.1000 ± 0.0150 [3 of 32 rollouts failed, scored 0] (step 10; 32 prompts, ± one standard error; difference +2.8 standard errors)');
    assert.equal(formatFailed(1, 1), ' [1 of 1 rollout failed, scored 0]');
    assert.equal(formatFailed(2, null), ' [2 rollouts failed, scored 0]');
    assert.equal(formatFailed(0, 5), '');
  });

  test('the pipeline summary, its status and memo (the list of runs of cm2 status)', () => {
    const s = summarize('rl', { steps: 10, evals: [{ step: 0, rewardMean: 0.05, rewardSe: 0.01, prompts: 32, failed: 0, rollouts: 32 }, { step: 10, rewardMean: 0.1, rewardSe: 0.015, prompts: 32, failed: 3, rollouts: 32 }] });
    assert.deepEqual(s, { steps: 10, heldOutSft: 0.05, heldOutSftSe: 0.01, heldOutSftFailed: 0, heldOutSftRollouts: 32, heldOutRl: 0.1, heldOutRlSe: 0.015, heldOutStep: 10, heldOutRlFailed: 3, heldOutRlRollouts: 32, heldOutPrompts: 32 });
    assert.equal(heldOutOfMemo({ heldOut: { sft: 0.05, rl: 0.1, sftFailed: 0, sftRollouts: 32, rlFailed: 3, rlRollouts: 32 } }), '0.0500 → 0.1000 [3 of 32 rollouts failed, scored 0]');
    assert.equal(heldOutOfMemo({ heldOut: { sft: 0.05, rl: 0.1 } }), '0.0500 → 0.1000', 'memos written before the counts');
  });

  test('the HTML report: headline and held-out table', () => {
    const data = buildReport('r', { rl: [{ runId: 'r', rows: withFailed }], bfcl: [] }, { stages: [], generatedAt: '2026-01-01T00:00:00Z' });
    assert.deepEqual(data.heldOut, { sft: 0.05, sftSe: 0.01, sftFailed: 0, sftRollouts: 32, rl: 0.1, rlSe: 0.015, rlFailed: 3, rlRollouts: 32, prompts: 32 });
    ReportData.parse(data);
    const html = renderReport(data);
    assert.match(html, /<span class="big">0\.1000<\/span> <span class="se">± 0\.0150<\/span> <span class="failed">\[3 of 32 rollouts failed, scored 0\]<\/span>/);
    assert.ok(!/<span class="big">0\.0500<\/span>[^→]*failed/.test(html), 'no note where none failed');
    const heldout = /<section id="heldout">[\s\S]*?<\/section>/.exec(html)![0];
    assert.match(heldout, /failed rollouts \(judge or tool environment\) count as reward 0 in a mean/);
    assert.match(heldout, /<td class="num">10<\/td><td class="num">0\.1000<\/td><td class="num">0\.0150<\/td><td class="num">32<\/td><td class="num">3 \/ 32<\/td>/);
  });
});

test('cm2 status: BFCL per category side by side for every evaluated policy, with the multi-turn mean', () => {
  const a = (correct: number, total: number) => ({ accuracy: correct / total, correct, total });
  const lines = bfclLines([
    { label: 'sft', overall: a(3, 30), categories: { simple_python: a(2, 10), multi_turn_base: a(1, 10), multi_turn_miss_param: a(0, 10) } },
    { label: 'rl-step-16', overall: a(6, 30), categories: { simple_python: a(3, 10), multi_turn_base: a(2, 10), multi_turn_miss_param: a(1, 10) } },
  ]);
  assert.match(lines[0]!, /^\s+BFCL\s+sft\s+rl-step-16$/);
  assert.ok(lines.some((l) => /simple_python\s+20\.0% 2\/10\s+30\.0% 3\/10/.test(l)), lines.join('\n'));
  assert.ok(lines.some((l) => /multi-turn \(mean\)\s+5\.0%\s+15\.0%/.test(l)), lines.join('\n'));
  assert.match(lines.at(-1)!, /overall\s+10\.0% 3\/30\s+20\.0% 6\/30/);
});

test('cm2 status: τ²-Bench per domain side by side (average reward, pass^k at the largest k), with the average of the domains', () => {
  const m = (avg: number, p2: number, tasks = 10) => ({ tasks, trials: 2, avg_reward: avg, pass_hat_k: { 1: avg, 2: p2 } });
  const lines = tau2Lines([
    { label: 'sft', average: 15, domains: { airline: m(0.1, 0.05), retail: m(0.2, 0.1) } },
    { label: 'rl-step-16', average: 25, domains: { airline: m(0.2, 0.1), retail: m(0.3, 0.2) } },
  ]);
  assert.match(lines[0]!, /^\s+τ²-Bench\s+sft\s+rl-step-16$/);
  assert.ok(lines.some((l) => /airline\s+10\.0 \(pass\^2 5\.0\) 10×2\s+20\.0 \(pass\^2 10\.0\) 10×2/.test(l)), lines.join('\n'));
  assert.match(lines.at(-1)!, /average\s+15\.00\s+25\.00/);
});
