/**
 * The plots of a study run in pieces (pure): the committed record (`docs/results/<name>.json`, src/report/studyFile.ts)
 * shaped as the report page's input, and as stand-alone SVG charts that docs/rl-results.md embeds. No I/O.
 *
 * The charts: the held-out reward of every policy (mean ± SE across the same prompts); every RL policy against the
 * policy it started from, paired per prompt (Δ ± paired SE, two-SE line marked in the caption); the training reward
 * per RL step of every RL policy with its held-out evaluations; BFCL per category and policy.
 */
import { barChart, groupedBarChart } from './barChart';
import { promptMeanStats } from '../kernel/heldOut';
import { lineChart } from './svg';
import { bfclTotal, paired, policyStats, type StudyFile } from './studyFile';
import { FIRST_STEP_KINDS } from './firstStep';
import type { ReportDataInput } from './reportData';

const acc = (c: { correct: number; total: number }) => ({ ...c, accuracy: c.total > 0 ? c.correct / c.total : 0 });
const rlNames = (f: StudyFile): string[] => Object.keys(f.policies).filter((n) => f.policies[n]!.kind === 'rl');
/** The policy an RL policy is compared with: the one it started from, when the file has it. */
const refOf = (f: StudyFile, name: string): string | undefined => {
  const from = f.policies[name]!.from;
  return from && f.policies[from] ? from : undefined;
};

/**
 * The report page's input: the study table (every policy's mean ± SE and, for RL, the paired comparison with its SFT
 * policy), RL curves per policy (training reward per step; held-out evaluations with the SFT policy's as step 0), BFCL.
 * The headline compares the SFT policy with the mean of the RL policies on the same prompts.
 */
export function studyFileReportData(f: StudyFile, opts: { name: string; generatedAt: string; source?: string }): ReportDataInput {
  const names = Object.keys(f.policies);
  const sftName = names.find((n) => f.policies[n]!.kind === 'sft');
  const rl = rlNames(f);
  const sft = sftName ? policyStats(f, sftName) : undefined;
  // The RL headline: the per-prompt mean over the RL policies, so its SE is across prompts like the SFT policy's.
  const rlMean = rl.length ? Object.fromEntries(f.prompts.map((u) => [u, rl.reduce((a, n) => a + f.policies[n]!.heldOut[u]!, 0) / rl.length])) : undefined;
  const rlStats = rlMean ? promptMeanStats(f.prompts.map((u) => rlMean[u]!), f.prompts) : undefined;
  const sftEval = sft ? [{ step: 0, rewardMean: sft.mean, ...(sft.se !== null ? { rewardSe: sft.se } : {}), prompts: sft.n }] : [];
  return {
    runId: opts.name,
    generatedAt: opts.generatedAt,
    heldOut: {
      ...(sft ? { sft: sft.mean, ...(sft.se !== null ? { sftSe: sft.se } : {}), prompts: sft.n } : {}),
      ...(rlStats ? { rl: rlStats.mean, ...(rlStats.se !== null ? { rlSe: rlStats.se } : {}) } : {}),
    },
    rl: {
      steps: rl.flatMap((n) => (f.policies[n]!.train ?? []).map((t) => ({ series: n, step: t.step, rewardMean: t.mean, rewardStd: t.std, ...(t.kl !== undefined ? { kl: t.kl } : {}), failedSamples: 0, rollouts: 0, judgeCalls: 0, cacheHits: 0 }))),
      evals: rl.flatMap((n) => [...sftEval, ...(f.policies[n]!.evals ?? []).filter((e) => e.step > 0).map((e) => ({ step: e.step, rewardMean: e.mean, ...(e.se !== null ? { rewardSe: e.se } : {}) }))].map((e) => ({ series: n, ...e }))),
      passByFocus: [],
    },
    bfcl: names.filter((n) => f.policies[n]!.bfcl).map((n) => ({ policy: n, overall: acc(bfclTotal(f.policies[n]!.bfcl!)), categories: Object.fromEntries(Object.entries(f.policies[n]!.bfcl!).map(([c, v]) => [c, acc(v)])) })),
    study: {
      settings: {
        'held-out prompts': `${f.prompts.length}, greedy, the same for every policy`,
        ...(opts.source ? { record: opts.source } : {}),
        ...(f.log.length ? { 'pieces without a policy': f.log.map((l) => `${l.piece}: ${l.text}`).join(' · ') } : {}),
      },
      policies: names.map((n) => {
        const p = f.policies[n]!;
        const s = policyStats(f, n);
        const ref = p.kind === 'rl' ? refOf(f, n) : undefined;
        const d = ref ? paired(f, n, ref) : undefined;
        return {
          label: n,
          kind: p.kind,
          ...(p.granularity ? { granularity: p.granularity } : {}),
          ...(p.seed !== null ? { seed: p.seed } : {}),
          steps: p.steps,
          mean: s.mean,
          ...(s.se !== null ? { se: s.se } : {}),
          ...(d && d.unpairedZ !== null && Number.isFinite(d.unpairedZ) ? { seApart: d.unpairedZ } : {}),
          ...(d && ref
            ? { paired: { against: ref, diff: d.diff, ...(d.se !== null ? { se: d.se } : {}), ...(d.z !== null && Number.isFinite(d.z) ? { z: d.z } : {}), wins: d.wins, losses: d.losses, ties: d.ties } }
            : {}),
        };
      }),
    },
  };
}

/**
 * Stand-alone SVG charts of the study, keyed by a file suffix (`heldout`, `paired`, `curves`, `bfcl`); a chart with
 * nothing to show yet (no RL policy, no BFCL) is left out.
 */
export function studyFileSvgs(f: StudyFile): Record<string, string> {
  const names = Object.keys(f.policies);
  const out: Record<string, string> = {};
  if (!names.length) return out;
  out.heldout = barChart({
    title: `Held-out checklist reward per policy (${f.prompts.length} prompts, greedy; ± one SE across prompts)`,
    bars: names.map((n) => {
      const s = policyStats(f, n);
      return { label: n, value: s.mean, ...(s.se !== null ? { note: `± ${s.se.toFixed(4)}` } : {}) };
    }),
    horizontal: true,
    yMax: Math.min(1, Math.max(0.1, ...names.map((n) => policyStats(f, n).mean * 1.3))),
    valueLabel: 'mean checklist reward',
  });
  const rl = rlNames(f).filter((n) => refOf(f, n));
  if (rl.length) {
    out.paired = barChart({
      title: 'RL − its SFT policy, paired per prompt (Δ ± paired SE; z > 2 is the bar the study sets)',
      bars: rl.map((n) => {
        const d = paired(f, n, refOf(f, n)!);
        const z = d.z === null ? '–' : Number.isFinite(d.z) ? d.z.toFixed(1) : d.z > 0 ? '+∞' : '−∞';
        return { label: n, value: d.diff, note: `${d.se === null ? '' : `± ${d.se.toFixed(4)}, `}z ${z}, ${d.wins}/${d.losses}/${d.ties}` };
      }),
      horizontal: true,
      valueLabel: 'Δ held-out reward (won / lost / tied prompts in the note)',
    });
    const curves = rlNames(f).filter((n) => (f.policies[n]!.train ?? []).length > 0);
    if (curves.length) {
      out.curves = lineChart({
        title: 'Training reward per RL step (± std shaded) and held-out means',
        xLabel: 'RL step',
        yLabel: 'checklist reward',
        yMin: 0,
        series: curves.flatMap((n) => {
          const p = f.policies[n]!;
          const train = p.train!;
          const evals = (p.evals ?? []).map((e) => [e.step, e.mean] as const);
          return [
            { name: `${n} (training)`, points: train.map((t) => [t.step, t.mean] as const), band: train.map((t) => [t.step, t.mean - t.std, t.mean + t.std] as const) },
            ...(evals.length ? [{ name: `${n} (held-out)`, points: evals, smooth: 1 }] : []),
          ];
        }),
      });
    }
  }
  const withFirst = names.filter((n) => f.policies[n]!.episodes?.firstStep);
  if (withFirst.length) {
    const counts = (n: string) => f.policies[n]!.episodes!.firstStep!;
    const kinds = FIRST_STEP_KINDS.filter((k) => withFirst.some((n) => counts(n)[k]));
    out.firststep = groupedBarChart({
      title: 'First step of each held-out episode vs the reference (share of episodes)',
      categories: [...kinds],
      groups: withFirst.map((n) => {
        const total = Object.values(counts(n)).reduce((a, b) => a + (b ?? 0), 0);
        return { name: n, values: kinds.map((k) => (total > 0 ? (counts(n)[k] ?? 0) / total : Number.NaN)) };
      }),
      horizontal: true,
      valueFormat: 'percent',
      yMax: 1,
    });
  }
  const withBfcl = names.filter((n) => f.policies[n]!.bfcl);
  if (withBfcl.length) {
    const cats = [...new Set(withBfcl.flatMap((n) => Object.keys(f.policies[n]!.bfcl!)))];
    const rows = ['overall', ...cats];
    out.bfcl = groupedBarChart({
      title: 'BFCL accuracy per category (greedy)',
      categories: rows,
      groups: withBfcl.map((n) => ({ name: n, values: rows.map((c) => {
        const b = f.policies[n]!.bfcl!;
        const v = c === 'overall' ? bfclTotal(b) : b[c];
        return v && v.total > 0 ? v.correct / v.total : Number.NaN;
      }) })),
      horizontal: true,
      valueFormat: 'percent',
      yMax: 1,
    });
  }
  return out;
}
