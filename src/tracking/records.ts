/**
 * What a run tells its experiment trackers (issue 35), shaped from what the stages already wrote to S3 (pure; the
 * reading is ./sources.ts): every SFT step (loss, learning rate, gradient norm, tokens/s), every RL step's row
 * (rewards, KL, loss, `logprobGap`, judge calls and cost, phase times: every number in the row), every held-out
 * evaluation, the SFT format checks, BFCL and τ²-Bench per evaluated policy, and the run's settings as parameters.
 *
 * A metric is a series `key` with one value per `step`. Sources only grow, step by step: a tracker is up to date
 * when it has, for every key, every step up to the last one sent (./sync.ts keeps that cursor), so nothing is sent
 * twice and nothing is skipped.
 */

export interface MetricPoint {
  key: string;
  step: number;
  value: number;
}

import type { SftStepRow } from '../run/layout';
export type { SftStepRow };

export interface TrackSources {
  /** The run's resolved settings (the pipeline input's stages), flattened into parameters. */
  settings?: Record<string, unknown>;
  sftSteps: SftStepRow[];
  /** The SFT stage's format checks of the base and the trained policy (`sft/report.json`), at the last SFT step. */
  sftChecks?: { step: number; base?: Record<string, unknown>; sft?: Record<string, unknown> };
  /** RL rows as `runs/<id>/rl/metrics.jsonl` holds them (`kind` step or eval). */
  rlRows: Record<string, unknown>[];
  bfcl: { label: string; overall: { accuracy: number }; categories: Record<string, { accuracy: number }> }[];
  tau2: { label: string; average: number; domains: Record<string, { avg_reward: number; pass_hat_k: Record<string, number> }> }[];
  /** Links the trackers show beside the numbers (the report, the final policies), as `s3://bucket/key`. */
  links: Record<string, string>;
}

/** Series names keep to what every tracker takes in a key: letters, digits, `_ - . /`. */
export function metricKey(...parts: string[]): string {
  return parts.map((p) => p.replace(/[^A-Za-z0-9_.\-/]+/g, '_')).join('/');
}

/** Every finite number under `value`, with its path joined by `/` (`reward/mean`, `seconds/rollout`). */
export function numericLeaves(value: unknown, prefix: string, out: [string, number][] = []): [string, number][] {
  if (typeof value === 'number') {
    if (Number.isFinite(value)) out.push([prefix, value]);
  } else if (typeof value === 'boolean') out.push([prefix, value ? 1 : 0]);
  else if (value && typeof value === 'object' && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) numericLeaves(v, prefix ? `${prefix}/${k}` : k, out);
  }
  return out;
}

/** Fields of a row that are its identity, not a measurement. */
const NOT_METRICS = new Set(['step', 'kind', 'granularity']);

export function metricPoints(src: TrackSources): MetricPoint[] {
  const points: MetricPoint[] = [];
  const put = (key: string, step: number, value: number) => {
    if (Number.isFinite(value)) points.push({ key, step, value });
  };
  for (const r of src.sftSteps) {
    put('sft/loss', r.step, r.loss);
    put('sft/lr', r.step, r.lr);
    put('sft/grad_norm', r.step, r.gradNorm);
    put('sft/tokens', r.step, r.tokens);
    if (r.ms > 0) put('sft/tokens_per_s', r.step, (r.tokens * 1000) / r.ms);
  }
  if (src.sftChecks) {
    for (const which of ['base', 'sft'] as const) {
      const c = src.sftChecks[which];
      if (!c) continue;
      for (const [k, v] of numericLeaves(c, '')) if (/share$/i.test(k) || k === 'prompts') put(metricKey('sft_check', which, k), src.sftChecks.step, v);
    }
  }
  for (const row of src.rlRows) {
    const step = Number(row['step']);
    if (!Number.isInteger(step)) continue;
    const prefix = row['kind'] === 'eval' ? 'heldout' : 'rl';
    for (const [k, v] of Object.entries(row)) {
      if (NOT_METRICS.has(k)) continue;
      for (const [path, value] of numericLeaves(v, k)) put(metricKey(prefix, path), step, value);
    }
  }
  for (const b of src.bfcl) {
    put(metricKey('bfcl', b.label, 'overall'), 0, b.overall.accuracy);
    for (const [c, a] of Object.entries(b.categories)) put(metricKey('bfcl', b.label, c), 0, a.accuracy);
  }
  for (const t of src.tau2) {
    put(metricKey('tau2', t.label, 'average'), 0, t.average);
    for (const [d, m] of Object.entries(t.domains)) {
      put(metricKey('tau2', t.label, d, 'avg_reward'), 0, m.avg_reward);
      for (const [k, v] of Object.entries(m.pass_hat_k)) put(metricKey('tau2', t.label, d, `pass_hat_${k}`), 0, v);
    }
  }
  return points;
}

/**
 * The run's settings as parameters: every leaf under its dotted path (`rl.hp.lr`), arrays and objects of leaves as
 * compact JSON, values cut to MLflow's limit. Keys that could only name secrets' variables are kept (they are names).
 */
export function settingsParams(settings: Record<string, unknown> | undefined, maxValue = 6000): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (v: unknown, path: string) => {
    if (v === undefined) return;
    if (v !== null && typeof v === 'object' && !Array.isArray(v)) {
      const entries = Object.entries(v as Record<string, unknown>);
      if (entries.length === 0 && path) out[path] = '{}';
      for (const [k, x] of entries) walk(x, path ? `${path}.${k}` : k);
      return;
    }
    const text = typeof v === 'string' ? v : JSON.stringify(v);
    if (path) out[path] = text.length > maxValue ? `${text.slice(0, maxValue - 1)}…` : text;
  };
  walk(settings ?? {}, '');
  return out;
}

/** A tracker's cursor: for each series, the last step it has; whether the parameters and links went. */
export interface TrackCursor {
  sent: Record<string, number>;
  params: boolean;
  links: Record<string, string>;
  /** Tracker-side identity (MLflow: its experiment and run ids), found again by tag when this is lost. */
  remote?: Record<string, string>;
  finished?: boolean;
}

export const emptyCursor = (): TrackCursor => ({ sent: {}, params: false, links: {} });

/** The points a tracker at `cursor` does not have yet, in step order per series. */
export function newPoints(points: readonly MetricPoint[], cursor: TrackCursor): MetricPoint[] {
  return points.filter((p) => p.step > (cursor.sent[p.key] ?? -Infinity)).sort((a, b) => a.step - b.step || a.key.localeCompare(b.key));
}

/** The cursor after `points` were delivered. */
export function advance(cursor: TrackCursor, points: readonly MetricPoint[]): TrackCursor {
  const sent = { ...cursor.sent };
  for (const p of points) sent[p.key] = Math.max(sent[p.key] ?? -Infinity, p.step);
  return { ...cursor, sent };
}
