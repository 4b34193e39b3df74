import assert from 'node:assert/strict';
import test from 'node:test';
import { renderReport } from '../../../src/report/html';
import { emptyStudyFile, paired, withPolicy, type StudyFilePolicy } from '../../../src/report/studyFile';
import { studyFileReportData, studyFileSvgs } from '../../../src/report/studyFileReport';
import { ReportData } from '../../../src/report/reportData';

const prompts = ['u1', 'u2', 'u3', 'u4'];
const policy = (kind: StudyFilePolicy['kind'], rewards: number[], extra: Partial<StudyFilePolicy> = {}): StudyFilePolicy => ({
  kind, granularity: kind === 'rl' ? 'trajectory' : null, seed: kind === 'rl' ? 1 : null, steps: kind === 'rl' ? 8 : 0,
  from: kind === 'rl' ? 'sft' : kind === 'sft' ? 'base' : null, heldOut: Object.fromEntries(prompts.map((u, i) => [u, rewards[i]!])), config: {}, ...extra,
});

const study = () => {
  let f = withPolicy(emptyStudyFile(), 'base', policy('base', [0, 0, 0, 0], { bfcl: { simple_python: { correct: 0, total: 50 }, irrelevance: { correct: 50, total: 50 } } }));
  f = withPolicy(f, 'sft', policy('sft', [0.1, 0.5, 0.3, 0.9], { bfcl: { simple_python: { correct: 10, total: 50 }, irrelevance: { correct: 40, total: 50 } } }));
  f = withPolicy(f, 'trajectory-s1', policy('rl', [0.2, 0.6, 0.3, 1.0], {
    train: [{ step: 1, mean: 0.2, std: 0.1 }, { step: 2, mean: 0.3, std: 0.1, kl: 0.001 }],
    evals: [{ step: 2, mean: 0.525, se: 0.2 }],
    bfcl: { simple_python: { correct: 12, total: 50 }, irrelevance: { correct: 41, total: 50 } },
  }));
  f = withPolicy(f, 'turn-s1', policy('rl', [0.1, 0.4, 0.3, 0.9], { granularity: 'turn' }));
  return { ...f, log: [{ at: '2026-11-28T08:00:00Z', piece: 'search lr 5e-5', text: 'collapsed at step 3' }] };
};

test('a study file becomes the report page: every policy, RL paired against its SFT policy, curves from SFT at step 0, BFCL with the overall', () => {
  const f = study();
  const data = ReportData.parse(studyFileReportData(f, { name: 'smollm2-study', generatedAt: '2026-11-28T09:00:00Z', source: 'docs/results/smollm2-study.json' }));
  assert.deepEqual(data.study!.policies.map((p) => p.label), ['base', 'sft', 'trajectory-s1', 'turn-s1']);
  const t1 = data.study!.policies[2]!;
  const d = paired(f, 'trajectory-s1', 'sft');
  assert.equal(t1.paired!.against, 'sft');
  assert.ok(Math.abs(t1.paired!.diff - d.diff) < 1e-12 && Math.abs(t1.paired!.z! - 3) < 1e-9);
  assert.deepEqual([t1.paired!.wins, t1.paired!.losses, t1.paired!.ties], [3, 0, 1]);
  assert.equal(data.study!.policies[0]!.paired, undefined, 'the base is compared with nothing');
  assert.ok(Math.abs(data.study!.policies[3]!.paired!.diff + 0.025) < 1e-12);
  // headline: SFT vs the per-prompt mean of the RL policies
  assert.ok(Math.abs(data.heldOut.sft! - 0.45) < 1e-12 && Math.abs(data.heldOut.rl! - (0.525 + 0.425) / 2) < 1e-12 && data.heldOut.prompts === 4);
  assert.deepEqual(data.rl!.steps.map((s) => [s.series, s.step]), [['trajectory-s1', 1], ['trajectory-s1', 2]]);
  assert.deepEqual(data.rl!.evals.filter((e) => e.series === 'trajectory-s1').map((e) => e.step), [0, 2], 'step 0 is the SFT policy');
  const bfcl = data.bfcl!.find((b) => b.policy === 'sft')!;
  assert.deepEqual(bfcl.overall, { correct: 50, total: 100, accuracy: 0.5 });
  assert.match(data.study!.settings['pieces without a policy']!, /search lr 5e-5: collapsed/);
  const html = renderReport(data);
  assert.match(html, /RL − SFT, paired per prompt/);
  assert.match(html, /won \/ lost \/ tied/);
  assert.match(html, /3 \/ 0 \/ 1/);
});

test('the stand-alone charts: held-out per policy, paired Δ, curves and BFCL, each only when there is something to draw', () => {
  const svgs = studyFileSvgs(study());
  assert.deepEqual(Object.keys(svgs).sort(), ['bfcl', 'curves', 'heldout', 'paired']);
  for (const svg of Object.values(svgs)) assert.match(svg, /^<svg[\s\S]*<\/svg>$/);
  assert.match(svgs.paired!, /trajectory-s1/);
  assert.match(svgs.paired!, /z 3\.0, 3\/0\/1/);
  assert.match(svgs.curves!, /trajectory-s1 \(held-out\)/);
  const only = withPolicy(emptyStudyFile(), 'base', policy('base', [0, 0, 0, 0]));
  assert.deepEqual(Object.keys(studyFileSvgs(only)), ['heldout']);
  assert.deepEqual(studyFileSvgs(emptyStudyFile()), {});
});

test('the first-step chart: the share of episodes per outcome, for the policies that have the counts, outcomes none has left out', () => {
  let f = study();
  const figures = (firstStep: Record<string, number>) => ({ passByFocus: {}, endReasons: {}, firstStep });
  f = withPolicy(f, 'sft', { ...f.policies.sft!, episodes: figures({ 'right tool, same arguments': 1, 'wrong tool, the first offered': 3 }) });
  f = withPolicy(f, 'trajectory-s1', { ...f.policies['trajectory-s1']!, episodes: figures({ 'right tool, same arguments': 3, 'broken call': 1 }) });
  const svg = studyFileSvgs(f).firststep!;
  assert.match(svg, /^<svg[\s\S]*<\/svg>$/);
  for (const s of ['right tool, same arguments', 'wrong tool, the first offered', 'broken call', 'sft', 'trajectory-s1']) assert.ok(svg.includes(s), s);
  assert.ok(!svg.includes('tool not offered'));
  assert.ok(svg.includes('75'), 'shares, as percentages');
});
