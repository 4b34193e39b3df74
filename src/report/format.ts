/**
 * Numbers for the run report's charts and tables (pure, deterministic, no locale): fixed-point without "-0", digit
 * grouping, values by format (number, percent, USD, seconds), "nice" axis scales (1, 2, 5 × 10^k) and moving averages.
 */
export type Point = readonly [number, number];

/** How values print: on bars, in tooltips, and (except for functions) on the value axis. */
export type ValueFormat = 'number' | 'percent' | 'usd' | 'seconds' | ((v: number) => string);

/** `v.toFixed(d)` without a "-0". */
export function fixed(v: number, d: number): string {
  const s = v.toFixed(d);
  return /^-0(\.0*)?$/.test(s) ? s.slice(1) : s;
}

/** A coordinate: rounded to 0.01; never "NaN" (a non-finite coordinate, from absurd data, becomes 0). */
export function c(v: number): string {
  if (!Number.isFinite(v)) return '0';
  const r = Math.round(v * 100) / 100;
  return Object.is(r, -0) ? '0' : String(r);
}

/** Adds thousands separators to an integer's digits (locale-independent). */
export function group(digits: string): string {
  return digits.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/** Integer with thousands separators ("12,345"); "–" when not finite. */
export function formatInt(v: number): string {
  if (!Number.isFinite(v)) return '–';
  const r = Math.round(v);
  return (r < 0 ? '-' : '') + group(String(Math.abs(r)));
}

/** A count or measurement, compact: 12,345 → "12.3k", 0.01234 → "0.0123". */
export function formatNumber(v: number): string {
  if (!Number.isFinite(v)) return '–';
  const a = Math.abs(v);
  if (a >= 1e9) return `${fixed(v / 1e9, 2)}G`;
  if (a >= 1e6) return `${fixed(v / 1e6, 2)}M`;
  if (a >= 1e4) return `${fixed(v / 1e3, 1)}k`;
  if (Number.isInteger(v)) return formatInt(v);
  if (a >= 100) return fixed(v, 1);
  if (a >= 0.001) return String(Number(v.toPrecision(3)));
  return v.toExponential(2);
}

/** Seconds as "12.3 s", "4 min 05 s", "2 h 03 min". */
export function formatSeconds(v: number): string {
  if (!Number.isFinite(v)) return '–';
  if (Math.abs(v) < 60) return `${fixed(v, 1)} s`;
  const total = Math.round(v);
  const sign = total < 0 ? '-' : '';
  const t = Math.abs(total);
  const h = Math.floor(t / 3600);
  const m = Math.floor((t % 3600) / 60);
  const s = t % 60;
  return h > 0 ? `${sign}${h} h ${String(m).padStart(2, '0')} min` : `${sign}${m} min ${String(s).padStart(2, '0')} s`;
}

export function formatValue(v: number, format: ValueFormat = 'number'): string {
  if (!Number.isFinite(v)) return '–';
  if (typeof format === 'function') return format(v);
  switch (format) {
    case 'percent':
      return `${fixed(v * 100, 1)}%`;
    case 'usd':
      return `$${fixed(v, 4)}`;
    case 'seconds':
      return formatSeconds(v);
    default:
      return formatNumber(v);
  }
}

export interface Scale {
  min: number;
  max: number;
  step: number;
  ticks: number[];
  /** The unit tick labels are written in, for a time axis: seconds per unit and its name. */
  unit?: readonly [number, string];
}

export function niceNum(x: number): number {
  const e = Math.floor(Math.log10(x));
  const f = x / 10 ** e;
  const nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  return Number((nf * 10 ** e).toPrecision(12));
}

export function decimalsOf(step: number): number {
  return Math.max(0, Math.min(20, -Math.floor(Math.log10(step) + 1e-9)));
}

/**
 * An axis range covering [lo, hi] with about `target` intervals of 1, 2 or 5 × 10^k. A (near-)constant range is
 * padded (0 → [0, 1], v → v ± 10 %); non-finite bounds give [0, 1]; `integer` keeps the step ≥ 1.
 */
export function niceScale(lo: number, hi: number, opts: { target?: number; integer?: boolean } = {}): Scale {
  const target = Math.max(1, opts.target ?? 5);
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) [lo, hi] = [0, 1];
  if (lo > hi) [lo, hi] = [hi, lo];
  if (hi - lo <= Math.max(Math.abs(lo), Math.abs(hi)) * 1e-9) {
    if (lo === 0 && hi === 0) hi = 1;
    else {
      const pad = Math.max(Math.abs(lo), Math.abs(hi)) * 0.1;
      lo -= pad;
      hi += pad;
    }
  }
  const range = hi - lo;
  if (!Number.isFinite(range)) return { min: lo, max: hi, step: 0, ticks: [lo, hi] };
  let step = niceNum(range / target);
  if (opts.integer) step = Math.max(1, step);
  const d = decimalsOf(step);
  const min = Number((Math.floor(lo / step + 1e-9) * step).toFixed(d));
  const max = Number((Math.ceil(hi / step - 1e-9) * step).toFixed(d));
  const n = Math.max(1, Math.round((max - min) / step));
  const ticks = Array.from({ length: n + 1 }, (_, i) => Number((min + i * step).toFixed(d)));
  return { min, max: ticks[n]!, step, ticks };
}

/** Seconds shown in hours or minutes on a long time axis: the unit's size and name. */
export function timeUnit(hi: number): [number, string] {
  return hi >= 3 * 3600 ? [3600, 'h'] : hi >= 180 ? [60, 'min'] : [1, 's'];
}

/**
 * The axis of values in [lo, hi]: nice ticks in the unit the labels use (hours or minutes for a long time axis),
 * returned in data units.
 */
export function valueScale(lo: number, hi: number, format: ValueFormat | undefined, opts: { target?: number; integer?: boolean } = {}): Scale {
  if (format !== 'seconds') return niceScale(lo, hi, opts);
  const [unit, name] = timeUnit(Math.max(Math.abs(lo), Math.abs(hi)));
  const s = niceScale(lo / unit, hi / unit, opts);
  return { min: s.min * unit, max: s.max * unit, step: s.step * unit, ticks: s.ticks.map((t) => t * unit), unit: [unit, name] };
}

/** Tick labels for a scale: compact (k/M/G) for large ranges, enough decimals to tell ticks apart. */
export function axisFormatter(scale: Scale, format: ValueFormat | undefined): (v: number) => string {
  if (format === 'seconds') {
    const [unit, name] = scale.unit ?? timeUnit(Math.max(Math.abs(scale.min), Math.abs(scale.max)));
    const d = decimalsOf(scale.step / unit);
    return (v) => `${fixed(v / unit, d)} ${name}`;
  }
  if (format === 'percent') {
    const d = decimalsOf(scale.step * 100);
    return (v) => `${fixed(v * 100, d)}%`;
  }
  const mag = Math.max(Math.abs(scale.min), Math.abs(scale.max));
  const [unit, suffix] = mag >= 1e9 ? [1e9, 'G'] : mag >= 1e6 ? [1e6, 'M'] : mag >= 1e4 ? [1e3, 'k'] : [1, ''];
  const d = decimalsOf(scale.step / unit);
  const prefix = format === 'usd' ? '$' : '';
  return (v) => (v === 0 && suffix ? `${prefix}0` : `${prefix}${fixed(v / unit, d)}${suffix}`);
}

/** Trailing moving average over the last `window` finite values; a non-finite input stays a gap (NaN). */
export function movingAverage(values: readonly number[], window: number): number[] {
  const w = Math.max(1, Math.floor(window));
  const recent: number[] = [];
  let sum = 0;
  return values.map((v) => {
    if (!Number.isFinite(v)) return Number.NaN;
    recent.push(v);
    sum += v;
    if (recent.length > w) sum -= recent.shift()!;
    return sum / recent.length;
  });
}

