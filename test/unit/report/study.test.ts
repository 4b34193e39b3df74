/**
 * A study's numbers (src/report/study.ts, written by scripts/rl-study.ts): standard errors apart from SFT, the
 * summary per granularity, the Markdown block and its place in docs/rl-results.md, and the report page built from
 * it (a valid ReportData with the study section, the RL series and BFCL of every policy).
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Cm2Config } from '../../../src/run/config';
import { renderReport } from '../../../src/report/html';
import { granularitySummaries, seApart, StudyResult, studyMarkdown, studyReportData, upsertStudyBlock, type StudyPolicy } from '../../../src/report/study';
import { ReportData } from '../../../src/report/reportData';

const policy = (over: Partial<StudyPolicy> & Pick<StudyPolicy, 'label' | 'kind' | 'mean'>): StudyPolicy => ({
  runId: `s-${over.label}`,
  steps: over.kind === 'rl' ? 8 : 0,
  se: 0.03,
  prompts: 64,
  evals: [],
  train: [],
  ...over,
});

const acc = (correct: number, total = 50) => ({ accuracy: correct / total, correct, total });

const study = (): StudyResult =>
  StudyResult.parse({
    id: 'st1',
    generatedAt: '2026-11-25T05:00:00.000Z',
    settings: { config: 'config/smollm2.yaml', seeds: '1,2' },
    policies: [
      policy({ label: 'base', kind: 'base', mean: 0.02, se: 0.01 }),
      policy({ label: 'sft', kind: 'sft', mean: 0.16, se: 0.03 }),
      policy({ label: 'trajectory-s1', kind: 'rl', granularity: 'trajectory', seed: 1, mean: 0.3, se: 0.04, evals: [{ step: 8, mean: 0.3, se: 0.04 }], train: [{ step: 1, mean: 0.1, std: 0.2, rollouts: 32, failed: 1 }] }),
      policy({ label: 'trajectory-s2', kind: 'rl', granularity: 'trajectory', seed: 2, mean: 0.2, se: 0.04, evals: [{ step: 4, mean: 0.18, se: 0.04 }, { step: 8, mean: 0.2, se: 0.04 }] }),
      policy({ label: 'turn-s1', kind: 'rl', granularity: 'turn', seed: 1, mean: 0.26, se: 0.03 }),
    ],
    bfcl: [
      { label: 'base', overall: acc(5, 100), categories: { simple_python: acc(3), irrelevance: acc(2) } },
      { label: 'sft', overall: acc(20, 100), categories: { simple_python: acc(6), irrelevance: acc(14) } },
    ],
  });

describe('study statistics', () => {
  test('standard errors apart: (a − b) / √(SE_a² + SE_b²); null without both standard errors', () => {
    assert.equal(seApart({ mean: 0.3, se: 0.04 }, { mean: 0.16, se: 0.03 }), (0.3 - 0.16) / 0.05);
    assert.equal(seApart({ mean: 0.3, se: null }, { mean: 0.16, se: 0.03 }), null);
    assert.equal(seApart({ mean: 0.3, se: 0 }, { mean: 0.16, se: 0 }), null);
  });

  test('per granularity: mean and spread over seeds, the range vs SFT, runs beyond two standard errors', () => {
    const [traj, turn] = granularitySummaries(study().policies);
    assert.equal(traj!.granularity, 'trajectory');
    assert.equal(traj!.runs, 2);
    assert.ok(Math.abs(traj!.mean - 0.25) < 1e-12);
    assert.ok(Math.abs(traj!.sdAcrossSeeds! - Math.sqrt(0.005)) < 1e-12);
    assert.ok(Math.abs(traj!.maxSe! - 2.8) < 1e-9 && Math.abs(traj!.minSe! - 0.8) < 1e-9);
    assert.equal(traj!.beyondTwo, 1);
    assert.equal(turn!.runs, 1);
    assert.equal(turn!.sdAcrossSeeds, null);
    assert.equal(turn!.beyondTwo, 1); // (0.26 − 0.16) / √(0.03² + 0.03²) = 2.36
  });
});

describe('study outputs', () => {
  test('the Markdown block: every policy with its standard error and distance from SFT, the granularity summary, BFCL per category', () => {
    const md = studyMarkdown(study(), { reportPath: '.cm2/reports/st1/report.html', command: 'npx tsx scripts/rl-study.ts --id st1' });
    assert.match(md, /\| sft \| 0 \| 0\.1600 ± 0\.0300 \(64 prompts\) \| – \|/);
    assert.match(md, /\| trajectory-s1 \| 8 \| 0\.3000 ± 0\.0400 \(64 prompts\) \| \+2\.8 SE \|/);
    assert.match(md, /\| base \| 0 \| 0\.0200 ± 0\.0100 \(64 prompts\) \| −4\.4 SE \|/);
    assert.match(md, /\| trajectory \| 2 \| 0\.2500 \| 0\.0707 \| 1 of 2 \| \+0\.8 SE … \+2\.8 SE \|/);
    assert.match(md, /\| simple_python \| 6\.0% \(3\/50\) \| 12\.0% \(6\/50\) \|/);
    assert.match(md, /\| \*\*overall\*\* \| 5\.0% \(5\/100\) \| 20\.0% \(20\/100\) \|/);
    assert.match(md, /```bash\nnpx tsx scripts\/rl-study\.ts --id st1\n```/);
  });

  test('the block replaces its own earlier version in the document and leaves the rest alone; a new study is appended', () => {
    const doc = '# Results\n\nintro\n';
    const once = upsertStudyBlock(doc, 'st1', 'first', '## Study st1');
    assert.equal(once, '# Results\n\nintro\n\n## Study st1\n\n<!-- study:st1 -->\nfirst\n<!-- /study:st1 -->\n');
    const twice = upsertStudyBlock(`${once}\nafter\n`, 'st1', 'second', '## Study st1');
    assert.equal(twice, '# Results\n\nintro\n\n## Study st1\n\n<!-- study:st1 -->\nsecond\n<!-- /study:st1 -->\n\nafter\n');
    const other = upsertStudyBlock(twice, 'st2', 'x', '## Study st2');
    assert.ok(other.includes('second') && other.endsWith('## Study st2\n\n<!-- study:st2 -->\nx\n<!-- /study:st2 -->\n'));
  });

  test('the report page: valid ReportData; held-out curves start at the SFT policy; every policy in BFCL and in the study section', () => {
    const data = ReportData.parse(studyReportData(study()));
    assert.equal(data.heldOut.sft, 0.16);
    assert.ok(Math.abs(data.heldOut.rl! - (0.3 + 0.2 + 0.26) / 3) < 1e-12);
    assert.ok(Math.abs(data.heldOut.rlSe! - Math.sqrt(0.04 ** 2 + 0.04 ** 2 + 0.03 ** 2) / 3) < 1e-12);
    const s2 = data.rl!.evals.filter((e) => e.series === 'trajectory-s2');
    assert.deepEqual(s2.map((e) => [e.step, e.rewardMean]), [[0, 0.16], [4, 0.18], [8, 0.2]]);
    assert.deepEqual(data.rl!.steps.map((s) => [s.series, s.step, s.rollouts, s.failedSamples]), [['trajectory-s1', 1, 32, 1]]);
    assert.deepEqual(data.bfcl!.map((b) => b.policy), ['base', 'sft']);
    assert.ok(Math.abs(data.study!.policies.find((p) => p.label === 'trajectory-s1')!.seApart! - 2.8) < 1e-9);
    const html = renderReport(data);
    assert.match(html, /<section id="study">/);
    assert.match(html, /<a href="#study">Study<\/a>/);
    assert.match(html, /trajectory-s1/);
    assert.ok(html.indexOf('id="study"') < html.indexOf('id="stages"'));
  });

  test('a run report without a study has no study section', () => {
    const html = renderReport(ReportData.parse({ runId: 'r', generatedAt: '2026-11-25T05:00:00.000Z' }));
    assert.doesNotMatch(html, /id="study"/);
  });
});

describe('RL config for studies', () => {
  test('rl.steps 0 is an evaluation-only run; rl.eval.atStart defaults to true and can be turned off', () => {
    const cfg = Cm2Config.parse({ run: { id: 'x' }, rl: { steps: 0, eval: { atStart: false } } });
    assert.equal(cfg.rl.steps, 0);
    assert.equal(cfg.rl.eval.atStart, false);
    assert.equal(Cm2Config.parse({ run: { id: 'x' } }).rl.eval.atStart, true);
    assert.throws(() => Cm2Config.parse({ run: { id: 'x' }, rl: { steps: -1 } }));
  });
});
