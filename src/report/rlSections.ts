/** The RL sections of the report page (src/report/html.ts): training curves and steps, held-out evaluations, judge. */
import { bySeries, failedText, figure, NO_DATA, numCols, pct, ratio, reward, section, seText, signed, sum, table, textCols } from './htmlParts';
import type { ReportData, ReportRlStep } from './reportData';
import { barChart } from './barChart';
import { formatInt, formatNumber } from './format';
import { escapeXml as esc, lineChart } from './svg';

export function rlSection(d: ReportData): string {
  const steps = d.rl?.steps ?? [];
  if (steps.length === 0) return section('rl', 'RL training', NO_DATA);
  const groups = bySeries(steps);
  const parts: string[] = [];
  parts.push(
    figure(
      rewardChart(
        'Training reward per RL step (mean ± std over rollouts)',
        groups.map((g) => ({ name: g.name, rows: g.rows.map((r) => ({ step: r.step, mean: r.rewardMean, spread: r.rewardStd })) })),
      ),
    ),
  );
  const optional = (key: 'kl' | 'loss' | 'logprobGap', title: string, yLabel: string): void => {
    const series = groups
      .map((g) => ({ name: g.name, points: g.rows.filter((r) => r[key] !== undefined).map((r) => [r.step, r[key]!] as const) }))
      .filter((s) => s.points.length > 0);
    if (series.length) parts.push(figure(lineChart({ title, xLabel: 'RL step', yLabel, series })));
  };
  optional('kl', 'KL to the reference policy per RL step', 'KL');
  optional('loss', 'Policy loss per RL step', 'loss');
  optional('logprobGap', 'Sampler/trainer log-probability gap per RL step (mean |Δ log p| over the sampled tokens)', '|Δ log p|');

  const summary = groups.map((g) => {
    const first = g.rows[0]!;
    const last = g.rows[g.rows.length - 1]!;
    const best = g.rows.reduce((a, b) => (b.rewardMean > a.rewardMean ? b : a));
    const tokens = g.rows.some((r) => r.tokens !== undefined) ? formatNumber(sum(g.rows.map((r) => r.tokens ?? 0))) : '–';
    return [
      esc(g.name),
      formatInt(g.rows.length),
      formatInt(last.step),
      reward(first.rewardMean),
      reward(last.rewardMean),
      `${reward(best.rewardMean)} <span class="muted">@${formatInt(best.step)}</span>`,
      formatInt(sum(g.rows.map((r) => r.rollouts))),
      formatInt(sum(g.rows.map((r) => r.failedSamples))),
      formatInt(sum(g.rows.map((r) => r.judgeCalls))),
      formatInt(sum(g.rows.map((r) => r.cacheHits))),
      tokens,
    ];
  });
  parts.push(
    table(
      [...textCols('series'), ...numCols('steps', 'last step', 'first reward', 'last reward', 'best reward', 'rollouts', 'failed samples', 'judge calls', 'cache hits', 'generated tokens')],
      summary,
    ),
  );
  const stepRow = (r: ReportRlStep): string[] => [
    esc(r.series),
    formatInt(r.step),
    reward(r.rewardMean),
    reward(r.rewardStd),
    formatInt(r.rollouts),
    formatInt(r.failedSamples),
    r.kl === undefined ? '–' : formatNumber(r.kl),
    r.loss === undefined ? '–' : formatNumber(r.loss),
    r.logprobGap === undefined ? '–' : `${formatNumber(r.logprobGap)} <span class="muted">max ${formatNumber(r.logprobGapMax ?? r.logprobGap)}</span>`,
    formatInt(r.judgeCalls),
    formatInt(r.cacheHits),
    r.tokens === undefined ? '–' : formatInt(r.tokens),
  ];
  parts.push(
    `<details>\n<summary>All ${formatInt(steps.length)} RL steps</summary>\n${table(
      [...textCols('series'), ...numCols('step', 'reward', 'std', 'rollouts', 'failed', 'KL', 'loss', 'log p gap', 'judge calls', 'cache hits', 'tokens')],
      groups.flatMap((g) => g.rows.map(stepRow)),
    )}\n</details>`,
  );
  return section('rl', 'RL training', parts.join('\n'));
}

export function heldOutSection(d: ReportData): string {
  const evals = d.rl?.evals ?? [];
  if (evals.length === 0) return section('heldout', 'Held-out evaluations', NO_DATA);
  const groups = bySeries(evals);
  // ± one standard error across prompts, where known.
  const chart = rewardChart(
    'Held-out mean checklist reward (step 0 = SFT policy)',
    groups.map((g) => ({ name: g.name, rows: g.rows.map((e) => ({ step: e.step, mean: e.rewardMean, ...(e.rewardSe !== undefined ? { spread: e.rewardSe } : {}) })) })),
  );
  const withSe = evals.some((e) => e.rewardSe !== undefined);
  const rows = groups.map((g) => {
    const first = g.rows[0]!;
    const last = g.rows[g.rows.length - 1]!;
    const ch = signed(last.rewardMean - first.rewardMean);
    const at = (e: typeof first) => `${reward(e.rewardMean)}${seText(e.rewardSe)}${failedText(e.failed, e.rollouts)} <span class="muted">@${formatInt(e.step)}</span>`;
    return [esc(g.name), formatInt(g.rows.length), at(first), at(last), `<span class="${ch.cls}">${ch.text}</span>`];
  });
  // Failed rollouts count as reward 0 in a mean: where any evaluation knows its count, the table shows it.
  const withFailed = evals.some((e) => e.failed !== undefined);
  const failedCell = (e: (typeof evals)[number]) => (e.failed === undefined ? '–' : `${formatInt(e.failed)}${e.rollouts !== undefined ? ` / ${formatInt(e.rollouts)}` : ''}`);
  const every = groups.flatMap((g) => g.rows.map((e) => [esc(g.name), formatInt(e.step), reward(e.rewardMean), e.rewardSe === undefined ? '–' : e.rewardSe.toFixed(4), e.prompts === undefined ? '–' : formatInt(e.prompts), ...(withFailed ? [failedCell(e)] : [])]));
  const note = [withSe ? 'shaded: ± one standard error across held-out prompts' : '', withFailed ? 'failed rollouts (judge or tool environment) count as reward 0 in a mean' : ''].filter(Boolean).join('; ');
  return section(
    'heldout',
    'Held-out evaluations',
    `${figure(chart, note || undefined)}\n${table([...textCols('series'), ...numCols('evaluations', 'first', 'latest', 'change')], rows)}` +
      (withSe || withFailed ? `\n<details><summary>every evaluation</summary>\n${table([...textCols('series'), ...numCols('step', 'mean', 'standard error', 'prompts', ...(withFailed ? ['failed rollouts'] : []))], every)}\n</details>` : ''),
  );
}

export function judgeSection(d: ReportData): string {
  const focus = d.rl?.passByFocus ?? [];
  if (focus.length === 0) return section('judge', 'Judge pass rate per focus_on', NO_DATA);
  const chart = barChart({
    title: 'Checklist items judged passed, per focus_on',
    bars: focus.map((f) => ({ label: f.focus, value: ratio(f.passed, f.total), note: `${formatInt(f.passed)}/${formatInt(f.total)}` })),
    horizontal: true,
    valueFormat: 'percent',
    yMax: 1,
  });
  const rows = focus.map((f) => [esc(f.focus), formatInt(f.passed), formatInt(f.total), pct(ratio(f.passed, f.total))]);
  const passed = sum(focus.map((f) => f.passed));
  const total = sum(focus.map((f) => f.total));
  return section(
    'judge',
    'Judge pass rate per focus_on',
    `${figure(chart, 'Summed over the training steps of all series.')}\n${table(
      [...textCols('focus_on'), ...numCols('passed', 'judged', 'pass rate')],
      rows,
      ['all', formatInt(passed), formatInt(total), pct(ratio(passed, total))],
    )}`,
  );
}

/** Mean checklist reward per RL step on [0, 1], one line per series, with a band of ± `spread` where it is given. */
function rewardChart(title: string, series: { name: string; rows: { step: number; mean: number; spread?: number }[] }[]): string {
  return lineChart({
    title,
    xLabel: 'RL step',
    yLabel: 'mean checklist reward',
    yMin: 0,
    yMax: 1,
    series: series.map((g) => ({
      name: g.name,
      points: g.rows.map((r) => [r.step, r.mean] as const),
      ...(g.rows.some((r) => r.spread !== undefined) ? { band: g.rows.filter((r) => r.spread !== undefined).map((r) => [r.step, r.mean - r.spread!, r.mean + r.spread!] as const) } : {}),
    })),
  });
}
