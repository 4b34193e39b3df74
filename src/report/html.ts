/**
 * The run report page (`cm2 report RUN`): `renderReport(data)` turns a `ReportData` (src/report/reportData.ts) into one
 * self-contained HTML5 page — inline CSS and SVG (src/report/svg.ts), no JavaScript, no external assets — so it
 * opens offline, attaches to an issue and prints. Pure and deterministic: no I/O, no clock, no locale.
 *
 * Sections, in order: header (run id, generation time, config file, Web UI link), held-out reward SFT → RL, a
 * study's policies (only for a study: scripts/rl-study.ts), stages, data funnel, SFT (loss, tool-call shares), RL
 * training (reward per step ± std per series, KL, policy loss, every step in a collapsible table), held-out
 * evaluations, judge pass rate per `focus_on`, failures, LLM usage and cost, time per phase, BFCL. A section whose
 * input is absent or empty says "no data".
 *
 * Formats: rewards with 4 decimals, shares and rates in percent, costs in $ with 4 decimals, times as durations.
 * All data text is HTML-escaped; the Web UI link is only a link when it is http(s).
 */
import { escapeXml as esc, lineChart, type LineSeries } from './svg';
import type { ReportData } from './reportData';
import { barChart, groupedBarChart, stackedBarChart } from './barChart';
import { formatInt, formatNumber, formatSeconds, formatValue } from './format';
import { bySeries, distinct, failedText, figure, NO_DATA, numCols, pct, ratio, reward, section, seText, signed, sum, table, textCols, usd } from './htmlParts';
import { heldOutSection, judgeSection, rlSection } from './rlSections';

// ---------------------------------------------------------------------------------------------------------------
// Sections

const STATE_CLASS: Record<string, string> = {
  completed: 'ok',
  succeeded: 'ok',
  running: 'run',
  failed: 'bad',
  terminated: 'bad',
  timed_out: 'bad',
  canceled: 'warn',
  cancelled: 'warn',
  paused: 'warn',
  stopped: 'warn',
};

function header(d: ReportData): string {
  const meta = [`generated ${esc(d.generatedAt.replace('T', ' '))}`];
  if (d.configFile) meta.push(`config <code>${esc(d.configFile)}</code>`);
  if (d.uiUrl) meta.push(/^https?:\/\//i.test(d.uiUrl) ? `<a href="${esc(d.uiUrl)}">Temporal Web UI</a>` : `Web UI: <code>${esc(d.uiUrl)}</code>`);
  return `<header>\n<h1>CM2 run <code>${esc(d.runId)}</code></h1>\n<p class="meta">${meta.join(' · ')}</p>\n</header>`;
}

function nav(d: ReportData): string {
  const links: Array<[string, string]> = [
    ...(d.study ? [['study', 'Study'] as [string, string]] : []),
    ['stages', 'Stages'],
    ['data', 'Data'],
    ['sft', 'SFT'],
    ['rl', 'RL training'],
    ['heldout', 'Held-out'],
    ['judge', 'Judge pass rate'],
    ['failures', 'Failures'],
    ['usage', 'LLM usage'],
    ['time', 'Time'],
    ['bfcl', 'BFCL'],
    ...(d.tau2?.length ? [['tau2', 'τ²-Bench'] as [string, string]] : []),
  ];
  return `<nav>${links.map(([id, name]) => `<a href="#${id}">${name}</a>`).join(' ')}</nav>`;
}

/** ` ± 0.0123` after a reward, when its standard error is known. */
function headline(d: ReportData): string {
  const { sft, rl, sftSe, rlSe, prompts, sftFailed, sftRollouts, rlFailed, rlRollouts } = d.heldOut;
  if (sft === undefined && rl === undefined) return `<div class="headline">\n<div class="label">Held-out mean checklist reward</div>\n${NO_DATA}\n</div>`;
  let delta = '';
  if (sft !== undefined && rl !== undefined) {
    const s = signed(rl - sft);
    const rel = sft !== 0 && Number.isFinite(sft) ? ` (${signed(((rl - sft) / Math.abs(sft)) * 100, 1).text}%)` : '';
    // How many standard errors apart (unpaired: √(SE_SFT² + SE_RL²)).
    const seDiff = sftSe !== undefined && rlSe !== undefined ? Math.sqrt(sftSe ** 2 + rlSe ** 2) : undefined;
    const z = seDiff !== undefined && seDiff > 0 ? ` <span class="muted">= ${((rl - sft) / seDiff).toFixed(1)} standard errors of the difference</span>` : '';
    delta = `<div class="delta ${s.cls}">${s.text}${rel}${z}</div>`;
  }
  const note = sftSe !== undefined || rlSe !== undefined
    ? `\n<div class="muted">± one standard error across ${prompts !== undefined ? `${formatInt(prompts)} ` : ''}held-out prompts</div>`
    : '';
  return (
    `<div class="headline">\n<div class="label">Held-out mean checklist reward</div>\n` +
    `<div class="values"><span class="policy">SFT</span> <span class="big">${reward(sft)}</span>${seText(sftSe)}${failedText(sftFailed, sftRollouts)} <span class="arrow">→</span> ` +
    `<span class="policy">RL</span> <span class="big">${reward(rl)}</span>${seText(rlSe)}${failedText(rlFailed, rlRollouts)}</div>\n${delta}${note}\n</div>`
  );
}

/**
 * A study's policies (base, SFT, RL per seed × granularity): held-out reward with standard errors, RL against its SFT
 * policy (paired per prompt when the study recorded every prompt's reward, the unpaired distance beside it), settings.
 */
function studySection(d: ReportData): string {
  const st = d.study;
  if (!st) return '';
  const chart = barChart({
    title: 'Held-out mean checklist reward per policy (± one standard error across prompts)',
    bars: st.policies.map((p) => ({ label: p.label, value: p.mean, ...(p.se !== undefined ? { note: `± ${p.se.toFixed(4)}` } : {}) })),
    horizontal: true,
    yMax: 1,
  });
  const withPaired = st.policies.filter((p) => p.paired);
  const pairedChart = withPaired.length
    ? figure(
        barChart({
          title: 'RL − SFT, paired per prompt (Δ ± paired SE)',
          bars: withPaired.map((p) => ({ label: p.label, value: p.paired!.diff, note: `${p.paired!.se === undefined ? '' : `± ${p.paired!.se.toFixed(4)}, `}z ${p.paired!.z === undefined ? '–' : p.paired!.z.toFixed(1)}` })),
          horizontal: true,
        }),
        'z above 2: the policy beats the one it started from by more than two paired standard errors.',
      )
    : '';
  const zCell = (v: number | undefined): string => (v === undefined ? '–' : `<span class="${v > 2 ? 'up' : v < -2 ? 'down' : ''}">${v >= 0 ? '+' : '−'}${Math.abs(v).toFixed(1)}</span>`);
  const rows = st.policies.map((p) => {
    const pr = p.paired;
    return [
      esc(p.label), esc(p.kind), esc(p.granularity ?? '–'), p.seed === undefined ? '–' : formatInt(p.seed), formatInt(p.steps), `${reward(p.mean)}${seText(p.se)}`,
      ...(withPaired.length ? [pr ? `${pr.diff >= 0 ? '+' : '−'}${Math.abs(pr.diff).toFixed(4)}${seText(pr.se)}` : '–', zCell(pr?.z), pr ? `${pr.wins} / ${pr.losses} / ${pr.ties}` : '–'] : []),
      zCell(p.seApart),
    ];
  });
  const heads = withPaired.length ? ['Δ vs SFT, paired', 'paired z', 'won / lost / tied', 'unpaired z'] : ['SE above SFT'];
  const settings = Object.entries(st.settings).map(([k, v]) => `<li>${esc(k)}: ${esc(v)}</li>`).join('\n');
  return section(
    'study',
    'Study: base, SFT and RL policies',
    `${figure(chart)}\n${pairedChart}\n${table([...textCols('policy', 'kind', 'granularity'), ...numCols('seed', 'RL steps', 'held-out reward', ...heads)], rows)}` +
      (settings ? `\n<ul class="reasons">\n${settings}\n</ul>` : ''),
  );
}

function stagesSection(d: ReportData): string {
  if (d.stages.length === 0) return section('stages', 'Stages', NO_DATA);
  const rows = d.stages.map((s) => [
    esc(s.name),
    `<span class="state ${STATE_CLASS[s.state.toLowerCase()] ?? 'idle'}">${esc(s.state)}</span>`,
    s.seconds === undefined ? '–' : esc(formatSeconds(s.seconds)),
    s.workflowId ? `<code>${esc(s.workflowId)}</code>` : '',
    s.detail ? esc(s.detail) : '',
  ]);
  return section('stages', 'Stages', table([...textCols('stage', 'state'), ...numCols('time'), ...textCols('workflow', 'detail')], rows));
}

function dataSection(d: ReportData): string {
  const data = d.data;
  if (!data) return section('data', 'Data', NO_DATA);
  const stats =
    `<div class="stats">` +
    [
      ['imported', data.imported],
      ['kept after filters', data.kept],
      ['cold-start (SFT)', data.coldStart],
      ['RL prompts', data.rl],
    ]
      .map(([k, v]) => `<div class="stat"><div class="v">${formatInt(v as number)}</div><div class="k">${esc(k as string)}</div></div>`)
      .join('') +
    `</div>`;
  if (data.funnel.length === 0) return section('data', 'Data', `${stats}\n<h3>Funnel</h3>\n${NO_DATA}`);
  const chart = barChart({
    title: 'Examples left after each step',
    bars: data.funnel.map((f) => ({ label: f.step, value: f.kept, note: data.imported > 0 ? formatValue(f.kept / data.imported, 'percent') : '' })),
    horizontal: true,
    valueFormat: (v) => formatInt(v),
  });
  // Each step against its own input (compression runs on the cold-start split, selection on the RL split); a funnel
  // without inputs (older reports) falls back to the previous step's count.
  const rows = data.funnel.map((f, i) => {
    const input = f.in ?? (i > 0 ? data.funnel[i - 1]!.kept : undefined);
    return [esc(f.step), input === undefined ? '' : formatInt(input), formatInt(f.kept), pct(ratio(f.kept, data.imported)), input === undefined ? '' : formatInt(input - f.kept)];
  });
  return section('data', 'Data', `${stats}\n${figure(chart)}\n${table([...textCols('step'), ...numCols('in', 'kept', 'of imported', 'dropped')], rows)}`);
}

function sftSection(d: ReportData): string {
  const sft = d.sft;
  if (!sft) return section('sft', 'SFT', NO_DATA);
  const parts: string[] = [];
  const evalLosses = sft.evalLosses ?? [];
  if (sft.losses.length === 0 && evalLosses.length === 0) parts.push(`<h3>Loss</h3>\n${NO_DATA}`);
  else {
    const n = sft.losses.length;
    const series: LineSeries[] = [{ name: 'training loss', points: sft.losses.map((l, i) => [i + 1, l] as const) }];
    if (evalLosses.length) series.push({ name: 'held-out loss', points: [...evalLosses].sort((a, b) => a.step - b.step).map((e) => [e.step, e.loss] as const), smooth: 1 });
    const smooth = n >= 20 ? Math.min(200, Math.max(2, Math.round(n / 20))) : 1;
    parts.push(figure(lineChart({ title: 'SFT loss per optimiser step', xLabel: 'step', yLabel: 'loss', series, smooth })));
    const finiteLosses = sft.losses.filter((l) => Number.isFinite(l));
    if (finiteLosses.length)
      parts.push(`<p>${formatInt(n)} steps; loss ${formatNumber(finiteLosses[0]!)} → ${formatNumber(finiteLosses[finiteLosses.length - 1]!)} (min ${formatNumber(finiteLosses.reduce((a, b) => Math.min(a, b)))}).</p>`);
  }
  if (sft.base || sft.final) {
    const row = (name: string, key: 'wellFormedShare' | 'correctNameShare'): string[] => {
      const b = sft.base?.[key];
      const f = sft.final?.[key];
      const ch = b !== undefined && f !== undefined ? signed((f - b) * 100, 1) : undefined;
      return [esc(name), pct(b), pct(f), ch ? `<span class="${ch.cls}">${ch.text} pt</span>` : '–'];
    };
    parts.push(
      `<h3>Tool calls on held-out prompts</h3>\n${table(
        [...textCols('share'), ...numCols('base model', 'SFT policy', 'change')],
        [row('well-formed tool calls', 'wellFormedShare'), row('correct tool name', 'correctNameShare')],
      )}`,
    );
  } else parts.push(`<h3>Tool calls on held-out prompts</h3>\n${NO_DATA}`);
  return section('sft', 'SFT', parts.join('\n'));
}


function failuresSection(d: ReportData): string {
  const steps = d.rl?.steps ?? [];
  if (d.failures.length === 0 && steps.length === 0) return section('failures', 'Failures', NO_DATA);
  const parts: string[] = ['<h3>Per stage</h3>'];
  if (d.failures.length === 0) parts.push(NO_DATA);
  else {
    const rows = d.failures.map((f) => {
      const reasons = Object.entries(f.reasons).sort(([a, x], [b, y]) => y - x || (a < b ? -1 : a > b ? 1 : 0));
      const list = reasons.length ? `<ul class="reasons">${reasons.map(([r, n]) => `<li>${esc(r)}: ${formatInt(n)}</li>`).join('')}</ul>` : '<span class="muted">none</span>';
      const examples = f.examples?.length
        ? `<details><summary>${formatInt(f.examples.length)} examples</summary><ul class="examples">${f.examples.map((e) => `<li><code>${esc(e.id)}</code> ${esc(e.reason)}</li>`).join('')}</ul></details>`
        : '';
      return [esc(f.stage), formatInt(f.count), list + examples];
    });
    parts.push(table([...textCols('stage'), ...numCols('failed'), ...textCols('reasons')], rows));
  }
  parts.push('<h3>Failed samples per RL step</h3>');
  if (steps.length === 0) parts.push(NO_DATA);
  else
    parts.push(
      figure(
        lineChart({
          title: 'Failed samples per RL step (judge or tool-environment failure; reward 0)',
          xLabel: 'RL step',
          yLabel: 'failed samples',
          yMin: 0,
          yInteger: true,
          series: bySeries(steps).map((g) => ({ name: g.name, points: g.rows.map((r) => [r.step, r.failedSamples] as const) })),
        }),
      ),
    );
  return section('failures', 'Failures', parts.join('\n'));
}

function usageSection(d: ReportData): string {
  if (d.usage.length === 0) return section('usage', 'LLM usage and cost', NO_DATA);
  const label = (u: ReportData['usage'][number]): string => (u.role ? `${u.stage} / ${u.role}` : u.stage);
  const labels = d.usage.map(label);
  const cost = barChart({ title: 'LLM cost per stage', bars: d.usage.map((u) => ({ label: label(u), value: u.costUsd })), horizontal: true, valueFormat: 'usd' });
  const tokens = stackedBarChart({
    title: 'LLM tokens per stage',
    categories: labels,
    stacks: [
      { name: 'prompt tokens', values: d.usage.map((u) => u.promptTokens) },
      { name: 'completion tokens', values: d.usage.map((u) => u.completionTokens) },
    ],
    horizontal: true,
  });
  const rows = d.usage.map((u) => [esc(u.stage), u.role ? esc(u.role) : '', formatInt(u.calls), formatInt(u.promptTokens), formatInt(u.completionTokens), usd(u.costUsd)]);
  const total = (k: 'calls' | 'promptTokens' | 'completionTokens' | 'costUsd'): number => sum(d.usage.map((u) => u[k]));
  return section(
    'usage',
    'LLM usage and cost',
    `${figure(cost)}\n${figure(tokens)}\n${table(
      [...textCols('stage', 'role'), ...numCols('calls', 'prompt tokens', 'completion tokens', 'cost')],
      rows,
      ['total', '', formatInt(total('calls')), formatInt(total('promptTokens')), formatInt(total('completionTokens')), usd(total('costUsd'))],
    )}`,
  );
}

function timeSection(d: ReportData): string {
  if (d.phases.length === 0) return section('time', 'Time per phase', NO_DATA);
  const stages = distinct(d.phases.map((p) => p.stage));
  const phases = distinct(d.phases.map((p) => p.phase));
  const secondsOf = (stage: string, phase: string): number => sum(d.phases.filter((p) => p.stage === stage && p.phase === phase).map((p) => p.seconds));
  const chart = stackedBarChart({
    title: 'Wall-clock time per phase',
    categories: stages,
    stacks: phases.map((phase) => ({ name: phase, values: stages.map((stage) => secondsOf(stage, phase)) })),
    horizontal: true,
    valueFormat: 'seconds',
  });
  const stageTotal = new Map(stages.map((s) => [s, sum(d.phases.filter((p) => p.stage === s).map((p) => p.seconds))]));
  const rows = d.phases.map((p) => [esc(p.stage), esc(p.phase), esc(formatSeconds(p.seconds)), pct(ratio(p.seconds, stageTotal.get(p.stage) ?? 0))]);
  return section(
    'time',
    'Time per phase',
    `${figure(chart)}\n${table([...textCols('stage', 'phase'), ...numCols('time', 'share of stage')], rows, ['total', '', esc(formatSeconds(sum(d.phases.map((p) => p.seconds)))), ''])}`,
  );
}

function bfclSection(d: ReportData): string {
  const results = d.bfcl ?? [];
  if (results.length === 0) return section('bfcl', 'BFCL', NO_DATA);
  const categories = distinct(results.flatMap((r) => Object.keys(r.categories)));
  // BFCL's multi-turn score is the unweighted mean of its multi-turn categories' accuracies (the paper's number).
  const multi = categories.filter((c) => c.startsWith('multi_turn_'));
  const MULTI = 'multi-turn (mean)';
  const multiOf = (r: (typeof results)[number]) => {
    const parts = multi.map((c) => r.categories[c]).filter((a): a is NonNullable<typeof a> => a !== undefined);
    if (parts.length === 0) return undefined;
    return { accuracy: sum(parts.map((a) => a.accuracy)) / parts.length, correct: sum(parts.map((a) => a.correct)), total: sum(parts.map((a) => a.total)) };
  };
  const acc = (r: (typeof results)[number], cat: string): { accuracy: number; correct: number; total: number } | undefined => (cat === 'overall' ? r.overall : cat === MULTI ? multiOf(r) : r.categories[cat]);
  const rowsOf = ['overall', ...(multi.length ? [MULTI] : []), ...categories.filter((cat) => cat !== 'overall')];
  const chart = groupedBarChart({
    title: 'BFCL accuracy per category',
    categories: rowsOf,
    groups: results.map((r) => ({ name: r.policy, values: rowsOf.map((cat) => acc(r, cat)?.accuracy ?? Number.NaN) })),
    horizontal: true,
    valueFormat: 'percent',
    yMax: 1,
  });
  const rows = rowsOf.map((cat) => [
    esc(cat),
    ...results.map((r) => {
      const a = acc(r, cat);
      return a ? `${pct(a.accuracy)} <span class="muted">${formatInt(a.correct)}/${formatInt(a.total)}</span>` : '–';
    }),
  ]);
  const paper = multi.length
    ? `\n<p class="muted">For context, not comparison: the CM2 paper reports BFCL-V4 multi-turn 26.75% (SFT) → 36.50% (CM2) for Qwen3-8B-Base, the mean of the four multi-turn categories${multi.length < 4 ? ` (here ${multi.length} of them)` : ''}.</p>`
    : '';
  return section('bfcl', 'BFCL', `${figure(chart)}\n${table([{ head: 'category' }, ...results.map((r) => ({ head: r.policy, num: true }))], rows)}${paper}`);
}

/**
 * τ²-Bench side by side (shown only when the run evaluated it: `eval.tau2` is off by default): per domain the average
 * reward and pass^k over the trials, and the average of the domains, the paper's τ²-Bench number, beside its figures.
 */
function tau2Section(d: ReportData): string {
  const results = d.tau2 ?? [];
  if (results.length === 0) return '';
  const domains = distinct(results.flatMap((r) => Object.keys(r.domains)));
  const chart = groupedBarChart({
    title: 'τ²-Bench average reward per domain',
    categories: [...domains, 'average'],
    groups: results.map((r) => ({ name: r.policy, values: [...domains.map((dom) => r.domains[dom]?.reward ?? Number.NaN), r.average / 100] })),
    horizontal: true,
    valueFormat: 'percent',
    yMax: 1,
  });
  const cell = (r: (typeof results)[number], dom: string) => {
    const m = r.domains[dom];
    if (!m) return '–';
    const ks = Object.keys(m.passHatK).map(Number).filter((k) => k > 1).sort((a, b) => a - b);
    const k = ks.at(-1);
    const passK = k === undefined ? '' : ` <span class="muted">pass^${k} ${pct(m.passHatK[String(k)]!)}</span>`;
    return `${pct(m.reward)}${passK} <span class="muted">${formatInt(m.tasks)}×${formatInt(m.trials)}</span>`;
  };
  const rows = [...domains.map((dom) => [esc(dom), ...results.map((r) => cell(r, dom))]), ['average', ...results.map((r) => `${r.average.toFixed(2)}`)]];
  const paper = `\n<p class="muted">A cell: the domain's average reward (pass^1), pass^k over the trials, tasks × trials. For context, not comparison: the CM2 paper reports a τ²-Bench average of 18.59 (SFT) → 26.76 (CM2) for Qwen3-8B-Base with an LLM user simulator.</p>`;
  return section('tau2', 'τ²-Bench', `${figure(chart)}\n${table([{ head: 'domain' }, ...results.map((r) => ({ head: r.policy, num: true }))], rows)}${paper}`);
}

const CSS = `
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1080px; padding: 16px 24px 48px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222; background: #fff; }
h1 { font-size: 22px; margin: 8px 0 2px; }
h2 { font-size: 18px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 18px 0 6px; }
code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f4f4f4; padding: 1px 4px; border-radius: 3px; }
a { color: #1f5fa8; }
.meta, .muted, figcaption { color: #666; }
.muted { font-size: 12px; }
nav { margin: 10px 0 4px; font-size: 13px; }
nav a { margin-right: 10px; }
figure { margin: 12px 0; }
figure svg { max-width: 100%; height: auto; display: block; }
figcaption { font-size: 12px; margin-top: 2px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border-bottom: 1px solid #e4e4e4; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f6f6f6; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tfoot td { font-weight: 600; border-top: 2px solid #ccc; }
.nodata { color: #999; font-style: italic; }
.headline { margin: 18px 0; padding: 14px 18px; border: 1px solid #cfe0f3; background: #f3f8fd; border-radius: 6px; }
.headline .label { font-size: 13px; color: #555; }
.headline .values { margin-top: 4px; }
.headline .big { font-size: 28px; font-weight: 600; font-variant-numeric: tabular-nums; }
.headline .policy { color: #555; margin-left: 6px; }
.headline .arrow { font-size: 22px; color: #888; margin: 0 8px; }
.headline .delta { font-size: 16px; font-weight: 600; }
.headline .se { font-size: 16px; color: #555; font-variant-numeric: tabular-nums; }
.failed { color: #c62828; font-size: 13px; }
.up { color: #1a7f37; }
.down { color: #c62828; }
.state { display: inline-block; padding: 0 8px; border-radius: 10px; font-size: 12px; background: #eee; color: #555; }
.state.ok { background: #dcf3e2; color: #1a7f37; }
.state.run { background: #dbe9fb; color: #1f5fa8; }
.state.bad { background: #fbdcdc; color: #c62828; }
.state.warn { background: #fdf0d5; color: #8a5a00; }
.stats { display: flex; flex-wrap: wrap; gap: 12px; margin: 8px 0; }
.stat { border: 1px solid #e4e4e4; border-radius: 6px; padding: 8px 14px; min-width: 130px; }
.stat .v { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.stat .k { font-size: 12px; color: #666; }
ul.reasons, ul.examples { margin: 0; padding-left: 18px; }
details { margin: 8px 0; }
summary { cursor: pointer; color: #1f5fa8; }
footer { margin-top: 40px; font-size: 12px; color: #888; }
@media print { nav { display: none; } details { display: block; } }
`;

/** The complete HTML page for one run. */
export function renderReport(data: ReportData): string {
  const body = [
    header(data),
    nav(data),
    headline(data),
    studySection(data),
    stagesSection(data),
    dataSection(data),
    sftSection(data),
    rlSection(data),
    heldOutSection(data),
    judgeSection(data),
    failuresSection(data),
    usageSection(data),
    timeSection(data),
    bfclSection(data),
    tau2Section(data),
    `<footer>CM2 run report · ${esc(data.runId)} · generated ${esc(data.generatedAt)}</footer>`,
  ].join('\n');
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>CM2 run ${esc(data.runId)}</title>
<style>${CSS}</style>
</head>
<body>
${body}
</body>
</html>
`;
}
