/**
 * Small SVG charts for the run report (src/report/html.ts): line charts (optionally smoothed, with bands), bar
 * charts, stacked bars and grouped bars, each returned as one self-contained `<svg>` string (presentation
 * attributes only: no CSS classes, scripts, ids or external fonts, so several charts can share a page).
 *
 * Pure and deterministic: the same options give the same string (coordinates rounded to 0.01, no random ids, no
 * clock, no locale). Every text that comes from data is XML-escaped (`escapeXml`). Non-finite numbers (NaN,
 * ±Infinity) are never drawn: a line breaks at them, a bar shows "–". Axes get "nice" ticks (1, 2, 5 × 10^k);
 * a constant series or a single point gets a padded range, an empty chart says "no data".
 *
 * Sizes: `width`/`height` are in SVG user units (pixels at 100 %); a legend, when there is one, is added below.
 */

export type Point = readonly [number, number];

/** How values print: on bars, in tooltips, and (except for functions) on the value axis. */
export type ValueFormat = 'number' | 'percent' | 'usd' | 'seconds' | ((v: number) => string);

/** Distinct series colours (matplotlib tab10); series past the tenth reuse them with a dash pattern. */
export const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'] as const;
const DASHES = ['6 3', '2 2', '8 3 2 3'] as const;
/** Lighter partners of `PALETTE` for filled areas past the tenth (stacked phases), where dashes do not show. */
const PALETTE_LIGHT = ['#aec7e8', '#ffbb78', '#98df8a', '#ff9896', '#c5b0d5', '#c49c94', '#f7b6d2', '#c7c7c7', '#dbdb8d', '#9edae5'] as const;

export function seriesColor(i: number): string {
  return PALETTE[i % PALETTE.length]!;
}

/** Colour of the i-th filled area (bars, stacks): twenty distinct colours, then they repeat. */
export function fillColor(i: number): string {
  const k = i % (PALETTE.length + PALETTE_LIGHT.length);
  return k < PALETTE.length ? PALETTE[k]! : PALETTE_LIGHT[k - PALETTE.length]!;
}

function seriesDash(i: number): string | undefined {
  const cycle = Math.floor(i / PALETTE.length);
  return cycle === 0 ? undefined : DASHES[(cycle - 1) % DASHES.length];
}

const XML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Escapes text for XML/HTML content and attribute values; drops characters XML does not allow. */
export function escapeXml(text: string): string {
  // eslint-disable-next-line no-control-regex -- removing the control characters XML 1.0 forbids is the point
  return text.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g, '').replace(/[&<>"']/g, (ch) => XML_ESCAPES[ch]!);
}

// ---------------------------------------------------------------------------------------------------------------
// Numbers

/** `v.toFixed(d)` without a "-0". */
function fixed(v: number, d: number): string {
  const s = v.toFixed(d);
  return /^-0(\.0*)?$/.test(s) ? s.slice(1) : s;
}

/** A coordinate: rounded to 0.01; never "NaN" (a non-finite coordinate, from absurd data, becomes 0). */
function c(v: number): string {
  if (!Number.isFinite(v)) return '0';
  const r = Math.round(v * 100) / 100;
  return Object.is(r, -0) ? '0' : String(r);
}

/** Adds thousands separators to an integer's digits (locale-independent). */
function group(digits: string): string {
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

function niceNum(x: number): number {
  const e = Math.floor(Math.log10(x));
  const f = x / 10 ** e;
  const nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  return Number((nf * 10 ** e).toPrecision(12));
}

function decimalsOf(step: number): number {
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
function timeUnit(hi: number): [number, string] {
  return hi >= 3 * 3600 ? [3600, 'h'] : hi >= 180 ? [60, 'min'] : [1, 's'];
}

/**
 * The axis of values in [lo, hi]: nice ticks in the unit the labels use (hours or minutes for a long time axis),
 * returned in data units.
 */
function valueScale(lo: number, hi: number, format: ValueFormat | undefined, opts: { target?: number; integer?: boolean } = {}): Scale {
  if (format !== 'seconds') return niceScale(lo, hi, opts);
  const [unit, name] = timeUnit(Math.max(Math.abs(lo), Math.abs(hi)));
  const s = niceScale(lo / unit, hi / unit, opts);
  return { min: s.min * unit, max: s.max * unit, step: s.step * unit, ticks: s.ticks.map((t) => t * unit), unit: [unit, name] };
}

/** Tick labels for a scale: compact (k/M/G) for large ranges, enough decimals to tell ticks apart. */
function axisFormatter(scale: Scale, format: ValueFormat | undefined): (v: number) => string {
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

// ---------------------------------------------------------------------------------------------------------------
// Shared drawing

const FONT = 'system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif';
/** Average glyph width at font-size 11 (for layout estimates). */
const CHAR = 6.4;
const TEXT = '#333';
const GRID = '#e5e5e5';
const AXIS = '#888';

function textWidth(s: string, size = 11): number {
  return Array.from(s).length * CHAR * (size / 11);
}

function truncate(s: string, maxChars: number): string {
  const chars = Array.from(s);
  return chars.length <= maxChars ? s : `${chars.slice(0, Math.max(1, maxChars - 1)).join('')}…`;
}

function svgOpen(width: number, height: number, title: string): string {
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${c(width)} ${c(height)}" width="${c(width)}" height="${c(height)}" ` +
    `role="img" aria-label="${escapeXml(title)}" font-family="${FONT}" font-size="11">\n` +
    `<title>${escapeXml(title)}</title>\n<rect x="0" y="0" width="${c(width)}" height="${c(height)}" fill="#fff"/>\n` +
    `<text x="8" y="18" font-size="13" font-weight="600" fill="${TEXT}">${escapeXml(title)}</text>`
  );
}

interface TextOpts {
  anchor?: 'start' | 'middle' | 'end';
  size?: number;
  fill?: string;
  rotate?: number;
  baseline?: 'middle';
}

function text(x: number, y: number, content: string, o: TextOpts = {}): string {
  const attrs = [`x="${c(x)}"`, `y="${c(y)}"`];
  if (o.anchor && o.anchor !== 'start') attrs.push(`text-anchor="${o.anchor}"`);
  if (o.baseline) attrs.push(`dominant-baseline="${o.baseline}"`);
  if (o.size) attrs.push(`font-size="${o.size}"`);
  attrs.push(`fill="${o.fill ?? TEXT}"`);
  if (o.rotate) attrs.push(`transform="rotate(${o.rotate} ${c(x)} ${c(y)})"`);
  return `<text ${attrs.join(' ')}>${escapeXml(content)}</text>`;
}

function line(x1: number, y1: number, x2: number, y2: number, stroke: string, extra = ''): string {
  return `<line x1="${c(x1)}" y1="${c(y1)}" x2="${c(x2)}" y2="${c(y2)}" stroke="${stroke}"${extra}/>`;
}

interface LegendItem {
  name: string;
  color: string;
  kind: 'line' | 'box';
  dash?: string;
}

/** Legend items flowing left to right, wrapping at `maxWidth`; returns the markup and its height. */
function legend(items: readonly LegendItem[], x0: number, y0: number, maxWidth: number): { svg: string; height: number } {
  if (items.length === 0) return { svg: '', height: 0 };
  const rowH = 16;
  const parts: string[] = [];
  let x = x0;
  let y = y0;
  for (const item of items) {
    const label = truncate(item.name, 48);
    const w = 18 + textWidth(label) + 16;
    if (x > x0 && x + w > x0 + maxWidth) {
      x = x0;
      y += rowH;
    }
    const dash = item.dash ? ` stroke-dasharray="${item.dash}"` : '';
    parts.push(
      item.kind === 'line'
        ? line(x, y + 8, x + 14, y + 8, item.color, ` stroke-width="2.5"${dash}`)
        : `<rect x="${c(x)}" y="${c(y + 3)}" width="12" height="10" fill="${item.color}"/>`,
    );
    parts.push(`${text(x + 18, y + 12, label)}`);
    x += w;
  }
  return { svg: `<g>\n${parts.join('\n')}\n</g>`, height: y - y0 + rowH + 6 };
}

// ---------------------------------------------------------------------------------------------------------------
// Line chart

export interface LineSeries {
  name: string;
  /** [x, y] in drawing order; a non-finite x or y breaks the line there. */
  points: readonly Point[];
  /** Optional shaded band, [x, low, high] per point (e.g. mean ± std); clamped to `yMin`/`yMax` when given. */
  band?: ReadonlyArray<readonly [number, number, number]>;
  /** Overrides the chart's `smooth` for this series (1 = raw only, e.g. sparse evaluation points). */
  smooth?: number;
}

export interface LineChartOptions {
  title: string;
  xLabel?: string;
  yLabel?: string;
  series: readonly LineSeries[];
  /** The y range covers at least [yMin, yMax]; data outside widens it (nothing is clipped). */
  yMin?: number;
  yMax?: number;
  /** Default 640 × 300 (without the legend). */
  width?: number;
  height?: number;
  /** Moving-average window: draw the trailing average of this many points on top of the faint raw line. */
  smooth?: number;
  yFormat?: ValueFormat;
  /** Whole-number y ticks (counts). */
  yInteger?: boolean;
  /** Markers on every point of series with at most this many points (default 30). */
  markersUpTo?: number;
}

const finite = (v: number): boolean => Number.isFinite(v);

/** Min/max without spreading (series may be long); `init` when empty. */
function minOf(values: readonly number[], init: number): number {
  let m = init;
  for (const v of values) if (v < m) m = v;
  return m;
}
function maxOf(values: readonly number[], init: number): number {
  let m = init;
  for (const v of values) if (v > m) m = v;
  return m;
}

/** At most about `max` points of a segment, evenly strided, first and last kept (long loss curves). */
function thin(seg: readonly Point[], max: number): readonly Point[] {
  if (seg.length <= max) return seg;
  const stride = Math.ceil(seg.length / max);
  const out = seg.filter((_, k) => k % stride === 0);
  if (out[out.length - 1] !== seg[seg.length - 1]) out.push(seg[seg.length - 1]!);
  return out;
}

/** Consecutive runs of finite points. */
function segments(points: readonly Point[]): Point[][] {
  const out: Point[][] = [];
  let cur: Point[] = [];
  for (const p of points) {
    if (finite(p[0]) && finite(p[1])) cur.push(p);
    else if (cur.length) {
      out.push(cur);
      cur = [];
    }
  }
  if (cur.length) out.push(cur);
  return out;
}

export function lineChart(o: LineChartOptions): string {
  const width = o.width ?? 640;
  const height = o.height ?? 300;
  const windowOf = (s: LineSeries): number => {
    const w = s.smooth ?? o.smooth ?? 1;
    return Number.isFinite(w) && w > 1 ? Math.floor(w) : 0;
  };
  const smoothed = [...new Set(o.series.map(windowOf).filter((w) => w > 0))];
  const markersUpTo = o.markersUpTo ?? 30;

  const xs: number[] = [];
  const ys: number[] = [];
  for (const s of o.series)
    for (const [x, y] of s.points)
      if (finite(x) && finite(y)) {
        xs.push(x);
        ys.push(y);
      }
  const bandYs: number[] = [];
  for (const s of o.series) for (const [x, lo, hi] of s.band ?? []) if (finite(x)) bandYs.push(...[lo, hi].filter(finite));
  const hasData = xs.length > 0;

  const clampBand = (v: number): number => Math.min(o.yMax ?? Infinity, Math.max(o.yMin ?? -Infinity, v));
  const yVals = [...ys, ...bandYs.map(clampBand)];
  let yLo = minOf(yVals, o.yMin ?? Infinity);
  let yHi = maxOf(yVals, o.yMax ?? -Infinity);
  if (!finite(yLo) && !finite(yHi)) [yLo, yHi] = [0, 1];
  else if (!finite(yLo)) yLo = Math.min(0, yHi);
  else if (!finite(yHi)) yHi = Math.max(1, yLo);
  const yScale = valueScale(yLo, yHi, o.yFormat, { target: 5, ...(o.yInteger ? { integer: true } : {}) });
  const xScale = hasData ? niceScale(minOf(xs, Infinity), maxOf(xs, -Infinity), { target: 6, integer: xs.every((x) => Number.isInteger(x)) }) : niceScale(0, 1);
  const yTick = axisFormatter(yScale, o.yFormat);
  const xTick = axisFormatter(xScale, undefined);

  const tickW = Math.max(...yScale.ticks.map((t) => textWidth(yTick(t))));
  const left = 12 + tickW + (o.yLabel ? 18 : 0);
  const right = 18;
  const top = 30;
  const bottom = 24 + (o.xLabel ? 16 : 0);
  const pw = Math.max(40, width - left - right);
  const ph = Math.max(40, height - top - bottom);
  const sx = (x: number): number => left + ((x - xScale.min) / (xScale.max - xScale.min)) * pw;
  const sy = (y: number): number => top + ph - ((y - yScale.min) / (yScale.max - yScale.min)) * ph;

  const parts: string[] = [];
  // Grid, ticks, axes.
  const grid: string[] = [];
  for (const t of yScale.ticks) {
    grid.push(line(left, sy(t), left + pw, sy(t), GRID));
    grid.push(text(left - 6, sy(t) + 4, yTick(t), { anchor: 'end', size: 10 }));
  }
  for (const t of xScale.ticks) {
    grid.push(line(sx(t), top + ph, sx(t), top + ph + 4, AXIS));
    grid.push(text(sx(t), top + ph + 16, xTick(t), { anchor: 'middle', size: 10 }));
  }
  grid.push(line(left, top + ph, left + pw, top + ph, AXIS));
  grid.push(line(left, top, left, top + ph, AXIS));
  if (o.xLabel) grid.push(text(left + pw / 2, top + ph + 34, o.xLabel, { anchor: 'middle' }));
  if (o.yLabel) grid.push(text(12, top + ph / 2, o.yLabel, { anchor: 'middle', rotate: -90 }));
  parts.push(`<g>\n${grid.join('\n')}\n</g>`);
  if (smoothed.length) parts.push(text(width - right, 18, `moving average of ${smoothed.join('/')}; raw values faint`, { anchor: 'end', size: 10, fill: '#777' }));

  if (!hasData) parts.push(text(left + pw / 2, top + ph / 2, 'no data', { anchor: 'middle', size: 13, fill: '#999' }));

  // Bands first, all of them, so that no band covers another series' line.
  const bandOpacity = o.series.length > 1 ? 0.08 : 0.15;
  o.series.forEach((s, i) => {
    const color = seriesColor(i);
    const g: string[] = [];
    const band = (s.band ?? []).map(([x, lo, hi]) => [x, clampBand(lo), clampBand(hi)] as const);
    let run: Array<readonly [number, number, number]> = [];
    const flushBand = (): void => {
      if (run.length >= 2) {
        const upper = run.map(([x, , hi]) => `${c(sx(x))},${c(sy(hi))}`);
        const lower = [...run].reverse().map(([x, lo]) => `${c(sx(x))},${c(sy(lo))}`);
        g.push(`<polygon points="${[...upper, ...lower].join(' ')}" fill="${color}" fill-opacity="${bandOpacity}" stroke="none"/>`);
      } else if (run.length === 1) {
        const [x, lo, hi] = run[0]!;
        g.push(line(sx(x), sy(lo), sx(x), sy(hi), color, ' stroke-opacity="0.5" stroke-width="3"'));
      }
      run = [];
    };
    for (const b of band) {
      if (b.every(finite)) run.push(b);
      else flushBand();
    }
    flushBand();
    if (g.length) parts.push(`<g>\n<title>${escapeXml(s.name)} (band)</title>\n${g.join('\n')}\n</g>`);
  });

  o.series.forEach((s, i) => {
    const color = seriesColor(i);
    const dash = seriesDash(i);
    const dashAttr = dash ? ` stroke-dasharray="${dash}"` : '';
    const g: string[] = [];

    const draw = (points: readonly Point[], strokeWidth: number, opacity: number, allMarkers: boolean): void => {
      for (const full of segments(points)) {
        const seg = thin(full, 1500);
        if (seg.length >= 2) {
          const d = seg.map(([x, y], k) => `${k === 0 ? 'M' : 'L'}${c(sx(x))} ${c(sy(y))}`).join(' ');
          g.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="${strokeWidth}" stroke-opacity="${opacity}" stroke-linejoin="round"${dashAttr}/>`);
        }
        if (allMarkers || seg.length === 1)
          for (const [x, y] of seg) g.push(`<circle cx="${c(sx(x))}" cy="${c(sy(y))}" r="2.5" fill="${color}" fill-opacity="${opacity}"/>`);
      }
    };
    const count = s.points.filter(([x, y]) => finite(x) && finite(y)).length;
    const smooth = windowOf(s);
    if (smooth) {
      draw(s.points, 1, 0.3, false);
      const avg = movingAverage(
        s.points.map(([x, y]) => (finite(x) ? y : Number.NaN)),
        smooth,
      );
      draw(
        s.points.map(([x], k) => [x, avg[k]!] as const),
        2,
        1,
        count <= markersUpTo,
      );
    } else draw(s.points, 2, 1, count <= markersUpTo);
    parts.push(`<g>\n<title>${escapeXml(s.name)}</title>\n${g.join('\n')}\n</g>`);
  });

  const lg =
    o.series.length > 1
      ? legend(
          o.series.map((s, i) => ({ name: s.name, color: seriesColor(i), kind: 'line' as const, ...(seriesDash(i) ? { dash: seriesDash(i)! } : {}) })),
          left,
          height + 2,
          pw,
        )
      : { svg: '', height: 0 };
  if (lg.svg) parts.push(lg.svg);
  return `${svgOpen(width, height + lg.height, o.title)}\n${parts.join('\n')}\n</svg>`;
}

// ---------------------------------------------------------------------------------------------------------------
// Bars (simple, stacked, grouped): one layout, both orientations

interface Segment {
  row: number;
  track: number;
  from: number;
  to: number;
  color: string;
  tooltip: string;
}

interface EndLabel {
  row: number;
  track: number;
  at: number;
  text: string;
}

interface BarLayout {
  title: string;
  rows: readonly string[];
  /** Bars side by side per row (1 for simple and stacked bars). */
  tracks: number;
  segments: readonly Segment[];
  endLabels: readonly EndLabel[];
  lo: number;
  hi: number;
  format: ValueFormat | undefined;
  horizontal: boolean;
  width: number;
  height: number | undefined;
  valueLabel: string | undefined;
  legend: readonly LegendItem[];
}

function renderBars(L: BarLayout): string {
  const scale = valueScale(L.lo, L.hi, L.format, { target: 5 });
  const tick = axisFormatter(scale, L.format);
  const n = L.rows.length;
  const width = L.width;
  const parts: string[] = [];
  const norm = (v: number): number => (v - scale.min) / (scale.max - scale.min);
  const zero = Math.min(scale.max, Math.max(scale.min, 0));
  let height: number;
  let legendAt: { x: number; w: number };

  if (L.horizontal) {
    const trackH = L.tracks > 1 ? 11 : 14;
    const rowH = Math.max(22, L.tracks * trackH + 8);
    const labelChars = Math.min(44, Math.max(0, ...L.rows.map((r) => Array.from(r).length)));
    const labelW = Math.min(290, Math.max(40, labelChars * CHAR + 8));
    const endW = Math.min(170, Math.max(0, ...L.endLabels.map((e) => textWidth(e.text, 10) + 8)));
    const left = labelW + 10;
    const right = 14 + endW;
    const top = 30;
    const pw = Math.max(60, width - left - right);
    const ph = Math.max(1, n) * rowH + (n === 0 ? rowH : 0);
    const sx = (v: number): number => left + norm(v) * pw;
    const rowY = (row: number): number => top + row * rowH + (rowH - L.tracks * trackH) / 2;
    const trackY = (row: number, track: number): number => rowY(row) + track * trackH;
    for (const t of scale.ticks) {
      parts.push(line(sx(t), top, sx(t), top + ph, GRID));
      parts.push(text(sx(t), top + ph + 14, tick(t), { anchor: 'middle', size: 10 }));
    }
    parts.push(line(sx(zero), top, sx(zero), top + ph, AXIS));
    L.rows.forEach((r, row) => parts.push(text(left - 6, top + row * rowH + rowH / 2 + 4, truncate(r, 44), { anchor: 'end' })));
    for (const s of L.segments) {
      const a = sx(Math.min(s.from, s.to));
      const b = sx(Math.max(s.from, s.to));
      parts.push(
        `<rect x="${c(a)}" y="${c(trackY(s.row, s.track) + 1)}" width="${c(Math.max(0, b - a))}" height="${c(trackH - 2)}" fill="${s.color}"><title>${escapeXml(s.tooltip)}</title></rect>`,
      );
    }
    for (const e of L.endLabels) parts.push(text(sx(Math.max(e.at, zero)) + 4, trackY(e.row, e.track) + trackH / 2 + 3.5, e.text, { size: 10 }));
    if (n === 0) parts.push(text(left + pw / 2, top + ph / 2 + 4, 'no data', { anchor: 'middle', size: 13, fill: '#999' }));
    let bottom = top + ph + 20;
    if (L.valueLabel) {
      parts.push(text(left + pw / 2, bottom + 12, L.valueLabel, { anchor: 'middle' }));
      bottom += 16;
    }
    height = bottom + 4;
    legendAt = { x: left, w: pw };
  } else {
    const tickW = Math.max(...scale.ticks.map((t) => textWidth(tick(t))));
    const left = 12 + tickW + (L.valueLabel ? 18 : 0);
    const right = 14;
    const top = 30;
    const pw = Math.max(60, width - left - right);
    const slot = pw / Math.max(1, n);
    const labelChars = Math.max(0, ...L.rows.map((r) => Array.from(r).length));
    const rotated = labelChars * CHAR > slot - 4;
    const shownChars = rotated ? 22 : Math.max(1, Math.floor((slot - 4) / CHAR));
    const bottom = rotated ? 14 + Math.min(labelChars, shownChars) * CHAR * 0.82 : 24;
    const total = L.height ?? 300;
    const ph = Math.max(40, total - top - bottom);
    const sy = (v: number): number => top + ph - norm(v) * ph;
    const barW = Math.min(40, (slot * 0.75) / L.tracks);
    const trackX = (row: number, track: number): number => left + row * slot + (slot - barW * L.tracks) / 2 + track * barW;
    for (const t of scale.ticks) {
      parts.push(line(left, sy(t), left + pw, sy(t), GRID));
      parts.push(text(left - 6, sy(t) + 4, tick(t), { anchor: 'end', size: 10 }));
    }
    parts.push(line(left, top, left, top + ph, AXIS));
    parts.push(line(left, sy(zero), left + pw, sy(zero), AXIS));
    L.rows.forEach((r, row) => {
      const x = left + row * slot + slot / 2;
      const label = truncate(r, shownChars);
      parts.push(rotated ? text(x, top + ph + 12, label, { anchor: 'end', rotate: -35, size: 10 }) : text(x, top + ph + 15, label, { anchor: 'middle', size: 10 }));
    });
    for (const s of L.segments) {
      const a = sy(Math.max(s.from, s.to));
      const b = sy(Math.min(s.from, s.to));
      parts.push(
        `<rect x="${c(trackX(s.row, s.track) + 0.5)}" y="${c(a)}" width="${c(Math.max(0, barW - 1))}" height="${c(Math.max(0, b - a))}" fill="${s.color}"><title>${escapeXml(s.tooltip)}</title></rect>`,
      );
    }
    // Value labels above bars where they fit (the tooltip has them otherwise).
    const room = L.tracks === 1 ? slot - 4 : barW + 2;
    for (const e of L.endLabels)
      if (textWidth(e.text, 10) <= room)
        parts.push(text(trackX(e.row, e.track) + barW / 2, sy(Math.max(e.at, zero)) - 4, e.text, { anchor: 'middle', size: 10 }));
    if (n === 0) parts.push(text(left + pw / 2, top + ph / 2, 'no data', { anchor: 'middle', size: 13, fill: '#999' }));
    if (L.valueLabel) parts.push(text(12, top + ph / 2, L.valueLabel, { anchor: 'middle', rotate: -90 }));
    height = total;
    legendAt = { x: left, w: pw };
  }
  const lg = legend(L.legend, legendAt.x, height + 2, legendAt.w);
  if (lg.svg) parts.push(lg.svg);
  return `${svgOpen(width, height + lg.height, L.title)}\n<g>\n${parts.join('\n')}\n</g>\n</svg>`;
}

export interface Bar {
  label: string;
  value: number;
  /** Shown after the value, e.g. "12/40". */
  note?: string;
}

export interface BarChartOptions {
  title: string;
  bars: readonly Bar[];
  /** Labels on the left, bars to the right (better for long labels). Default: vertical bars. */
  horizontal?: boolean;
  valueFormat?: ValueFormat;
  /** The value axis covers at least [min(0, yMin), yMax] (e.g. 1 for rates); larger data widens it. */
  yMax?: number;
  yMin?: number;
  valueLabel?: string;
  color?: string;
  /** Default 640; vertical charts default to 300 high, horizontal ones grow with the number of bars. */
  width?: number;
  height?: number;
}

export function barChart(o: BarChartOptions): string {
  const values = o.bars.map((b) => b.value).filter(finite);
  const color = o.color ?? PALETTE[0];
  return renderBars({
    title: o.title,
    rows: o.bars.map((b) => b.label),
    tracks: 1,
    segments: o.bars.flatMap((b, row) =>
      finite(b.value) ? [{ row, track: 0, from: 0, to: b.value, color, tooltip: `${b.label}: ${formatValue(b.value, o.valueFormat)}${b.note ? ` (${b.note})` : ''}` }] : [],
    ),
    endLabels: o.bars.map((b, row) => ({ row, track: 0, at: finite(b.value) ? b.value : 0, text: `${formatValue(b.value, o.valueFormat)}${b.note ? ` (${b.note})` : ''}` })),
    lo: Math.min(0, ...values, o.yMin ?? 0),
    hi: Math.max(0, ...values, o.yMax ?? 0),
    format: o.valueFormat,
    horizontal: o.horizontal ?? false,
    width: o.width ?? 640,
    height: o.height,
    valueLabel: o.valueLabel,
    legend: [],
  });
}

export interface StackedBarChartOptions {
  title: string;
  /** One bar per category (e.g. stage or step). */
  categories: readonly string[];
  /** One stack layer per name (e.g. phase); `values[i]` belongs to `categories[i]`. Negative or non-finite values count as 0. */
  stacks: ReadonlyArray<{ name: string; values: readonly number[] }>;
  horizontal?: boolean;
  valueFormat?: ValueFormat;
  valueLabel?: string;
  width?: number;
  height?: number;
}

export function stackedBarChart(o: StackedBarChartOptions): string {
  const segs: Segment[] = [];
  const totals = o.categories.map((cat, row) => {
    let acc = 0;
    o.stacks.forEach((s, k) => {
      const v = s.values[row] ?? 0;
      if (!finite(v) || v <= 0) return;
      segs.push({ row, track: 0, from: acc, to: acc + v, color: fillColor(k), tooltip: `${cat} · ${s.name}: ${formatValue(v, o.valueFormat)}` });
      acc += v;
    });
    return acc;
  });
  return renderBars({
    title: o.title,
    rows: o.categories,
    tracks: 1,
    segments: segs,
    endLabels: totals.map((t, row) => ({ row, track: 0, at: t, text: formatValue(t, o.valueFormat) })),
    lo: 0,
    hi: Math.max(0, ...totals),
    format: o.valueFormat,
    horizontal: o.horizontal ?? false,
    width: o.width ?? 640,
    height: o.height,
    valueLabel: o.valueLabel,
    legend: o.stacks.map((s, k) => ({ name: s.name, color: fillColor(k), kind: 'box' as const })),
  });
}

export interface GroupedBarChartOptions {
  title: string;
  categories: readonly string[];
  /** One bar per group in every category (e.g. one per policy); `values[i]` belongs to `categories[i]`. */
  groups: ReadonlyArray<{ name: string; values: readonly number[] }>;
  horizontal?: boolean;
  valueFormat?: ValueFormat;
  yMax?: number;
  valueLabel?: string;
  width?: number;
  height?: number;
}

export function groupedBarChart(o: GroupedBarChartOptions): string {
  const segs: Segment[] = [];
  const ends: EndLabel[] = [];
  const values: number[] = [];
  o.categories.forEach((cat, row) =>
    o.groups.forEach((g, track) => {
      const v = g.values[row];
      if (v === undefined || !finite(v)) return;
      values.push(v);
      segs.push({ row, track, from: 0, to: v, color: fillColor(track), tooltip: `${cat} · ${g.name}: ${formatValue(v, o.valueFormat)}` });
      ends.push({ row, track, at: v, text: formatValue(v, o.valueFormat) });
    }),
  );
  return renderBars({
    title: o.title,
    rows: o.categories,
    tracks: Math.max(1, o.groups.length),
    segments: segs,
    endLabels: ends,
    lo: Math.min(0, ...values),
    hi: Math.max(0, ...values, o.yMax ?? 0),
    format: o.valueFormat,
    horizontal: o.horizontal ?? false,
    width: o.width ?? 640,
    height: o.height,
    valueLabel: o.valueLabel,
    legend: o.groups.length > 1 ? o.groups.map((g, k) => ({ name: g.name, color: fillColor(k), kind: 'box' as const })) : [],
  });
}
