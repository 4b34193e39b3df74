import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderReport } from '../../../src/report/html';
import { escapeXml, lineChart, svgOpen } from '../../../src/report/svg';
import { ReportData, type ReportDataInput } from '../../../src/report/reportData';
import { barChart, groupedBarChart, stackedBarChart } from '../../../src/report/barChart';
import { formatSeconds, formatValue, movingAverage, niceScale } from '../../../src/report/format';
import { FIXTURES } from '../../helpers/paths';
import { logprobGapLine } from '../../../src/kernel/heldOut';
import { buildReport } from '../../../src/report/collect';

const sample = (): ReportData => ReportData.parse(JSON.parse(readFileSync(join(FIXTURES, 'report-sample.json'), 'utf8')));
const minimal = (extra: Partial<ReportDataInput> = {}): ReportData => ReportData.parse({ runId: 'run-1', generatedAt: '2025-06-02T09:30:00.000Z', ...extra });

const VOID = new Set(['meta', 'br', 'hr', 'img', 'link', 'input', 'col', 'area', 'base', 'wbr', 'source', 'track', 'embed']);

/** Open/close mismatches of the tags in markup (all data text is escaped, so every `<` starts a tag). */
function tagProblems(markup: string): string[] {
  const stack: string[] = [];
  const problems: string[] = [];
  for (const m of markup.matchAll(/<(\/?)([a-zA-Z][\w:-]*)\b[^>]*?(\/?)>/g)) {
    const [, close, name, self] = m;
    if (self || VOID.has(name!.toLowerCase())) continue;
    if (!close) stack.push(name!);
    else if (stack.pop() !== name) problems.push(`unexpected </${name}> at ${m.index}`);
  }
  return [...problems, ...stack.map((s) => `unclosed <${s}>`)];
}

const svgs = (html: string): string[] => html.match(/<svg\b[\s\S]*?<\/svg>/g) ?? [];

/** The markup of one section, by id. */
function sectionOf(html: string, id: string): string {
  const m = new RegExp(`<section id="${id}">[\\s\\S]*?</section>`).exec(html);
  assert.ok(m, `section ${id}`);
  return m[0];
}

const SECTIONS = ['stages', 'data', 'sft', 'rl', 'heldout', 'judge', 'failures', 'usage', 'time', 'bfcl'];

describe('renderReport', () => {
  test('the sample renders a complete page: one well-formed <svg> per plot, every section, formatted numbers', () => {
    const html = renderReport(sample());
    assert.ok(html.startsWith('<!DOCTYPE html>\n<html lang="en">'));
    assert.ok(html.trimEnd().endsWith('</html>'));
    assert.deepEqual(tagProblems(html), []);
    const plots = svgs(html);
    // data funnel, SFT loss, RL reward, KL, policy loss, held-out, pass rate, failed per step, cost, tokens, time, BFCL
    assert.equal(plots.length, 12);
    assert.equal((html.match(/<svg\b/g) ?? []).length, 12);
    for (const svg of plots) {
      assert.deepEqual(tagProblems(svg), [], svg.slice(0, 200));
      assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg" viewBox="0 0 [\d.]+ [\d.]+"/);
      assert.ok(!svg.includes('<script'));
    }
    for (const id of SECTIONS) assert.ok(!sectionOf(html, id).includes('no data'), id);
    assert.equal(svgs(sectionOf(html, 'rl')).length, 3);
    assert.equal(svgs(sectionOf(html, 'usage')).length, 2);
    // Headline: SFT → RL with the delta; 4-decimal rewards, percent shares, $ with 4 decimals.
    assert.match(html, /<span class="big">0\.5012<\/span>[\s\S]*<span class="big">0\.6036<\/span>/);
    assert.ok(html.includes('+0.1024'));
    assert.ok(html.includes('69.2%'));
    assert.ok(html.includes('$5.0712'));
    assert.ok(html.includes('<a href="http://localhost:8233/namespaces/default/workflows?query=CM2RunId%3D%22run-2025-06-01-demo%22">'));
    assert.ok(html.includes('2 h 40 min'));
    for (const bad of ['NaN', 'Infinity', 'undefined', '[object Object]']) assert.ok(!html.includes(bad), bad);
    // No JavaScript and no external assets.
    assert.ok(!/<script|<link|src=|@import|url\(/i.test(html));
  });

  test('a minimal report renders every section as "no data"', () => {
    const data = minimal();
    assert.deepEqual({ stages: data.stages, heldOut: data.heldOut, failures: data.failures, usage: data.usage, phases: data.phases }, { stages: [], heldOut: {}, failures: [], usage: [], phases: [] });
    const html = renderReport(data);
    assert.deepEqual(tagProblems(html), []);
    assert.equal(svgs(html).length, 0);
    for (const id of SECTIONS) assert.ok(sectionOf(html, id).includes('<p class="nodata">no data</p>'), id);
    assert.match(html, /<div class="headline">[\s\S]*?no data[\s\S]*?<\/div>/);
    assert.ok(!html.includes('NaN'));
  });

  test('sections with empty inputs say "no data"; partial inputs render what exists', () => {
    const html = renderReport(
      minimal({
        heldOut: { sft: 0.5 },
        data: { imported: 0, kept: 0, coldStart: 0, rl: 0, funnel: [] },
        sft: { losses: [] },
        rl: { steps: [], evals: [], passByFocus: [] },
        bfcl: [],
      }),
    );
    assert.deepEqual(tagProblems(html), []);
    assert.ok(html.includes('<span class="big">0.5000</span>'));
    for (const id of ['rl', 'heldout', 'judge', 'failures', 'usage', 'time', 'bfcl']) assert.ok(sectionOf(html, id).includes('no data'), id);
    assert.ok(sectionOf(html, 'data').includes('no data'));
    assert.ok(sectionOf(html, 'sft').includes('no data'));
    assert.ok(!html.includes('NaN'));
  });

  test('text from data is escaped everywhere, never raw', () => {
    const evil = '<script>alert(1)</script> & "x"';
    const escaped = '&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;x&quot;';
    const html = renderReport(
      minimal({
        runId: evil,
        uiUrl: 'javascript:alert(1)',
        configFile: evil,
        stages: [{ name: evil, state: evil, detail: evil, workflowId: evil }],
        rl: {
          steps: [{ series: evil, step: 1, rewardMean: 0.5, rewardStd: 0.1, failedSamples: 0, rollouts: 8, judgeCalls: 4, cacheHits: 0 }],
          evals: [{ series: evil, step: 0, rewardMean: 0.4 }],
          passByFocus: [{ focus: evil, passed: 1, total: 2 }],
        },
        failures: [{ stage: evil, count: 1, reasons: { [evil]: 1 }, examples: [{ id: evil, reason: evil }] }],
        usage: [{ stage: evil, role: evil, calls: 1, promptTokens: 1, completionTokens: 1, costUsd: 0.1 }],
        phases: [{ stage: evil, phase: evil, seconds: 3 }],
        data: { imported: 1, kept: 1, coldStart: 1, rl: 0, funnel: [{ step: evil, kept: 1 }] },
        bfcl: [{ policy: evil, overall: { accuracy: 1, correct: 1, total: 1 }, categories: { [evil]: { accuracy: 1, correct: 1, total: 1 } } }],
      }),
    );
    assert.ok(!html.includes('<script'));
    assert.ok(!html.includes(evil));
    assert.ok(!html.includes('href="javascript:'));
    assert.ok(html.includes(escaped));
    // The pass-rate chart's label is escaped too (possibly truncated, never raw).
    const judge = svgs(sectionOf(html, 'judge'))[0]!;
    assert.ok(judge.includes('&lt;script&gt;alert(1)'));
    assert.deepEqual(tagProblems(html), []);
  });

  test('several series get a legend and distinct colours', () => {
    const html = renderReport(sample());
    const reward = svgs(sectionOf(html, 'rl'))[0]!;
    for (const name of ['trajectory', 'turn', 'step']) assert.ok(reward.includes(`>${name}</text>`), name);
    const strokes = new Set([...reward.matchAll(/<path d="[^"]*" fill="none" stroke="(#[0-9a-f]{6})"/g)].map((m) => m[1]));
    assert.equal(strokes.size, 3);
    const single = lineChart({ title: 't', xLabel: 'x', yLabel: 'y', series: [{ name: 'only', points: [[1, 1], [2, 2]] }] });
    assert.ok(!single.includes('>only</text>'), 'no legend for one series');
    const two = lineChart({ title: 't', series: [{ name: 'a', points: [[1, 1]] }, { name: 'b', points: [[1, 2]] }] });
    assert.ok(two.includes('>a</text>') && two.includes('>b</text>'));
  });

  test('deterministic: the same input gives the same string', () => {
    const a = renderReport(sample());
    const b = renderReport(sample());
    assert.equal(a, b);
    assert.equal(renderReport(minimal()), renderReport(minimal()));
  });

  test('constant series, single points, zero totals and non-finite values never print NaN', () => {
    const html = renderReport(
      minimal({
        heldOut: { sft: 0.5, rl: 0.5 },
        sft: { losses: [1, 1, 1, 1] },
        rl: {
          steps: [{ series: 'trajectory', step: 3, rewardMean: 0, rewardStd: 0, failedSamples: 0, rollouts: 4, judgeCalls: 0, cacheHits: 0 }],
          evals: [{ series: 'trajectory', step: 0, rewardMean: 0.25 }],
          passByFocus: [{ focus: 'tool.content', passed: 0, total: 0 }],
        },
        usage: [{ stage: 'rl', role: 'judge', calls: 0, promptTokens: 0, completionTokens: 0, costUsd: 0 }],
        phases: [{ stage: 'rl', phase: 'rollout', seconds: 0 }],
      }),
    );
    assert.deepEqual(tagProblems(html), []);
    assert.ok(!html.includes('NaN') && !html.includes('Infinity'));
    assert.ok(html.includes('±0.0000'));

    const charts = [
      lineChart({ title: 'constant', series: [{ name: 'c', points: [[1, 0.5], [2, 0.5], [3, 0.5]] }] }),
      lineChart({ title: 'single', series: [{ name: 's', points: [[5, 0.3]] }] }),
      lineChart({ title: 'zero', series: [{ name: 'z', points: [[0, 0]] }] }),
      lineChart({ title: 'empty', series: [] }),
      lineChart({ title: 'empty series', series: [{ name: 'e', points: [] }] }),
      lineChart({ title: 'nan', series: [{ name: 'n', points: [[1, NaN], [2, Infinity], [3, 1], [NaN, 2], [4, -Infinity], [5, 2], [6, 3]] }], smooth: 3 }),
      lineChart({ title: 'band', series: [{ name: 'b', points: [[1, 0.5]], band: [[1, NaN, 0.7]] }], yMin: 0, yMax: 1 }),
      barChart({ title: 'bars', bars: [{ label: 'a', value: NaN }, { label: 'b', value: 0 }], valueFormat: 'percent' }),
      barChart({ title: 'no bars', bars: [], horizontal: true }),
      stackedBarChart({ title: 'stacks', categories: ['x'], stacks: [{ name: 'p', values: [NaN] }, { name: 'q', values: [] }], horizontal: true, valueFormat: 'seconds' }),
      groupedBarChart({ title: 'groups', categories: ['c'], groups: [{ name: 'g', values: [NaN] }], valueFormat: 'percent', yMax: 1 }),
    ];
    for (const svg of charts) {
      assert.ok(!svg.includes('NaN') && !svg.includes('Infinity'), svg.slice(0, 120));
      assert.deepEqual(tagProblems(svg), []);
    }
    // A constant series gets a padded range with distinct tick labels around the value.
    const ticks = [...charts[0]!.matchAll(/text-anchor="end" font-size="10" fill="#333">([^<]+)</g)].map((m) => m[1]);
    assert.ok(ticks.length >= 3 && new Set(ticks).size === ticks.length, ticks.join(','));
    assert.ok(ticks.includes('0.50'), ticks.join(','));
    // Empty charts say so; a single point gets a marker.
    assert.ok(charts[3]!.includes('>no data</text>'));
    assert.ok(charts[8]!.includes('>no data</text>'));
    assert.ok(charts[1]!.includes('<circle'));
    // A non-finite value breaks the line into separate segments.
    assert.match(charts[5]!, /<path d="M[^"L]*L[^"M]*"[^>]*stroke-opacity="0.3"/);
  });

  test('the schema fills defaults and rejects bad input with a path', () => {
    const bad = ReportData.safeParse({
      runId: 'r',
      generatedAt: '2025-06-02T09:30:00Z',
      rl: { steps: [{ series: 's', step: 1, rewardMean: 'high', rewardStd: 0, failedSamples: 0, rollouts: 1, judgeCalls: 0, cacheHits: 0 }], evals: [], passByFocus: [] },
    });
    assert.equal(bad.success, false);
    assert.deepEqual(bad.error!.issues.map((i) => i.path), [['rl', 'steps', 0, 'rewardMean']]);
    const noId = ReportData.safeParse({ generatedAt: '2025-06-02T09:30:00Z' });
    assert.deepEqual(noId.error!.issues.map((i) => i.path), [['runId']]);
    const badDate = ReportData.safeParse({ runId: 'r', generatedAt: 'yesterday' });
    assert.deepEqual(badDate.error!.issues.map((i) => i.path), [['generatedAt']]);
    const negative = ReportData.safeParse({ runId: 'r', generatedAt: '2025-06-02T09:30:00+02:00', usage: [{ stage: 'x', calls: -1, promptTokens: 0, completionTokens: 0, costUsd: 0 }] });
    assert.deepEqual(negative.error!.issues.map((i) => i.path), [['usage', 0, 'calls']]);
    assert.equal(sample().rl!.steps.length, 36);
  });
});

describe('svg helpers', () => {
  test('nice scales: 1-2-5 steps, padded constants, integer steps', () => {
    assert.deepEqual(niceScale(0, 1).ticks, [0, 0.2, 0.4, 0.6, 0.8, 1]);
    assert.deepEqual(niceScale(0.13, 0.87).ticks, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]);
    assert.deepEqual(niceScale(0, 0).ticks, [0, 0.2, 0.4, 0.6, 0.8, 1]);
    assert.deepEqual(niceScale(5, 5, { integer: true }).ticks, [4, 5, 6]);
    assert.deepEqual(niceScale(1, 12, { target: 6, integer: true }).ticks, [0, 2, 4, 6, 8, 10, 12]);
    assert.deepEqual(niceScale(NaN, Infinity).ticks, [0, 0.2, 0.4, 0.6, 0.8, 1]);
    const s = niceScale(-0.03, 0.04);
    assert.ok(s.min <= -0.03 && s.max >= 0.04 && s.ticks.every(Number.isFinite));
  });

  test('formats and moving average', () => {
    assert.equal(escapeXml(`a<b>&"c'`), 'a&lt;b&gt;&amp;&quot;c&#39;');
    assert.equal(formatValue(0.6921, 'percent'), '69.2%');
    assert.equal(formatValue(5.07123, 'usd'), '$5.0712');
    assert.equal(formatValue(NaN, 'usd'), '–');
    assert.equal(formatValue(22_600_520), '22.60M');
    assert.equal(formatSeconds(12.34), '12.3 s');
    assert.equal(formatSeconds(245), '4 min 05 s');
    assert.equal(formatSeconds(9650.4), '2 h 40 min');
    assert.deepEqual(movingAverage([1, 3, NaN, 5, 7], 2), [1, 2, NaN, 4, 6]);
  });
});

test('logprobGap (issue 29): a chart and a column in the RL section when steps carry it; none when they do not', () => {
  const steps = [1, 2, 3].map((step) => ({ series: 'trajectory', step, rewardMean: 0.5, rewardStd: 0.1, failedSamples: 0, rollouts: 32, judgeCalls: 0, cacheHits: 0, logprobGap: 2e-6 * step, logprobGapMax: 1e-5 * step }));
  const html = renderReport(minimal({ rl: { steps, evals: [], passByFocus: [] } } as Partial<ReportDataInput>));
  const rl = sectionOf(html, 'rl');
  assert.match(rl, /Sampler\/trainer log-probability gap/);
  assert.match(rl, /log p gap/);
  assert.match(rl, /max /);
  const without = sectionOf(renderReport(minimal({ rl: { steps: steps.map(({ logprobGap: _a, logprobGapMax: _b, ...s }) => s), evals: [], passByFocus: [] } } as Partial<ReportDataInput>)), 'rl');
  assert.doesNotMatch(without, /Sampler\/trainer log-probability gap/);
});

test('logprobGapLine: a step row\'s gap for cm2 status and cm2 rl status; nothing for rows recorded before it', () => {
  assert.equal(logprobGapLine({ step: 3, logprobGap: { mean: 2.5e-6, max: 1.2e-5, tokens: 412 } }), 'sampler/trainer log p gap: mean 2.50e-6, max 1.20e-5 over 412 sampled tokens');
  assert.equal(logprobGapLine({ step: 3 }), undefined);
  assert.equal(logprobGapLine(undefined), undefined);
});

test('a chart title wider than the chart is squeezed to its width, not cut off; a short one is left alone', () => {
  const long = svgOpen(300, 100, 'A title that is far too long for a chart only three hundred pixels wide, really');
  assert.match(long, /<text x="8" y="18"[^>]* textLength="284" lengthAdjust="spacingAndGlyphs">A title/);
  assert.doesNotMatch(svgOpen(300, 100, 'Short'), /textLength/);
});

test('BFCL multi-turn (issue 34): a row with the mean of the multi-turn categories, as BFCL scores it, and the paper\'s numbers as context', () => {
  const a = (correct: number, total: number) => ({ accuracy: correct / total, correct, total });
  const bfcl = [
    { policy: 'sft', overall: a(5, 40), categories: { simple_python: a(3, 20), multi_turn_base: a(1, 10), multi_turn_miss_func: a(1, 10) } },
    { policy: 'rl-step-16', overall: a(8, 40), categories: { simple_python: a(4, 20), multi_turn_base: a(3, 10), multi_turn_miss_func: a(1, 10) } },
  ];
  const section = sectionOf(renderReport(minimal({ bfcl } as Partial<ReportDataInput>)), 'bfcl');
  assert.match(section, /multi-turn \(mean\)<\/td><td[^>]*>10\.0%[\s\S]*?2\/20[\s\S]*?20\.0%/);
  assert.match(section, /26\.75% \(SFT\) → 36\.50% \(CM2\) for Qwen3-8B-Base[\s\S]*\(here 2 of them\)/);
  const single = sectionOf(renderReport(minimal({ bfcl: [{ policy: 'sft', overall: a(1, 2), categories: { simple_python: a(1, 2) } }] } as Partial<ReportDataInput>)), 'bfcl');
  assert.doesNotMatch(single, /multi-turn|Qwen3-8B/);
});

test('τ²-Bench (issue 34): a section only when the run evaluated it, each domain\'s reward and pass^k side by side, the paper\'s average as context', () => {
  const metrics = (tasks: number, trials: number, reward: number, pass2: number) => ({ tasks, trials, avg_reward: reward, pass_hat_k: { '1': reward, '2': pass2 } });
  const data = buildReport(
    'r',
    {
      rl: [],
      bfcl: [],
      tau2: [
        { label: 'sft', tau2: '26.3', average: 15, domains: { airline: metrics(50, 2, 0.2, 0.1), retail: metrics(114, 2, 0.1, 0.05) }, usage: { user: { calls: 1234, promptTokens: 5_000_000, completionTokens: 40_000, costUsd: 10.32 } } },
        { label: 'rl-step-16', tau2: '26.3', average: 25, domains: { airline: metrics(50, 2, 0.3, 0.2), retail: metrics(114, 2, 0.2, 0.15) } },
      ],
    },
    { stages: [], generatedAt: '2026-01-01T00:00:00Z' },
  );
  const html = renderReport(ReportData.parse(data));
  assert.deepEqual(tagProblems(html), []);
  const section = sectionOf(html, 'tau2');
  assert.match(section, /airline<\/td><td[^>]*>20\.0%[\s\S]*?pass\^2 10\.0%[\s\S]*?50×2[\s\S]*?30\.0%/);
  assert.match(section, /average<\/td><td[^>]*>15\.00<\/td><td[^>]*>25\.00/);
  assert.match(section, /18\.59 \(SFT\) → 26\.76 \(CM2\)/);
  assert.equal(svgs(section).length, 1);
  assert.match(html, /<a href="#tau2">/);
  // the user simulator's calls in the LLM usage table, as a stage's role
  assert.match(sectionOf(html, 'usage'), /eval sft[\s\S]*?τ² user[\s\S]*?1,234[\s\S]*?\$10\.32/);
  const none = renderReport(minimal());
  assert.doesNotMatch(none, /id="tau2"|href="#tau2"/);
});
