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
import { axisFormatter, c, movingAverage, niceScale, type Point, type ValueFormat, valueScale } from './format';

/** Distinct series colours (matplotlib tab10); series past the tenth reuse them with a dash pattern. */
export const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'] as const;
export const DASHES = ['6 3', '2 2', '8 3 2 3'] as const;
/** Lighter partners of `PALETTE` for filled areas past the tenth (stacked phases), where dashes do not show. */
export const PALETTE_LIGHT = ['#aec7e8', '#ffbb78', '#98df8a', '#ff9896', '#c5b0d5', '#c49c94', '#f7b6d2', '#c7c7c7', '#dbdb8d', '#9edae5'] as const;

export function seriesColor(i: number): string {
  return PALETTE[i % PALETTE.length]!;
}

/** Colour of the i-th filled area (bars, stacks): twenty distinct colours, then they repeat. */
export function fillColor(i: number): string {
  const k = i % (PALETTE.length + PALETTE_LIGHT.length);
  return k < PALETTE.length ? PALETTE[k]! : PALETTE_LIGHT[k - PALETTE.length]!;
}

export function seriesDash(i: number): string | undefined {
  const cycle = Math.floor(i / PALETTE.length);
  return cycle === 0 ? undefined : DASHES[(cycle - 1) % DASHES.length];
}

export const XML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Escapes text for XML/HTML content and attribute values; drops characters XML does not allow. */
export function escapeXml(text: string): string {
  // eslint-disable-next-line no-control-regex -- removing the control characters XML 1.0 forbids is the point
  return text.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g, '').replace(/[&<>"']/g, (ch) => XML_ESCAPES[ch]!);
}

// ---------------------------------------------------------------------------------------------------------------
// Shared drawing

export const FONT = 'system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif';
/** Average glyph width at font-size 11 (for layout estimates). */
export const CHAR = 6.4;
export const TEXT = '#333';
export const GRID = '#e5e5e5';
export const AXIS = '#888';

export function textWidth(s: string, size = 11): number {
  return Array.from(s).length * CHAR * (size / 11);
}

export function truncate(s: string, maxChars: number): string {
  const chars = Array.from(s);
  return chars.length <= maxChars ? s : `${chars.slice(0, Math.max(1, maxChars - 1)).join('')}…`;
}

export function svgOpen(width: number, height: number, title: string): string {
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${c(width)} ${c(height)}" width="${c(width)}" height="${c(height)}" ` +
    `role="img" aria-label="${escapeXml(title)}" font-family="${FONT}" font-size="11">\n` +
    `<title>${escapeXml(title)}</title>\n<rect x="0" y="0" width="${c(width)}" height="${c(height)}" fill="#fff"/>\n` +
    `<text x="8" y="18" font-size="13" font-weight="600" fill="${TEXT}"${titleFit(title, width)}>${escapeXml(title)}</text>`
  );
}

/** A title wider than the chart (bold glyphs ~10% wider than the estimate) is squeezed to fit instead of cut off. */
function titleFit(title: string, width: number): string {
  const room = width - 16;
  return textWidth(title, 13) * 1.1 > room ? ` textLength="${c(room)}" lengthAdjust="spacingAndGlyphs"` : '';
}

export interface TextOpts {
  anchor?: 'start' | 'middle' | 'end';
  size?: number;
  fill?: string;
  rotate?: number;
  baseline?: 'middle';
}

export function text(x: number, y: number, content: string, o: TextOpts = {}): string {
  const attrs = [`x="${c(x)}"`, `y="${c(y)}"`];
  if (o.anchor && o.anchor !== 'start') attrs.push(`text-anchor="${o.anchor}"`);
  if (o.baseline) attrs.push(`dominant-baseline="${o.baseline}"`);
  if (o.size) attrs.push(`font-size="${o.size}"`);
  attrs.push(`fill="${o.fill ?? TEXT}"`);
  if (o.rotate) attrs.push(`transform="rotate(${o.rotate} ${c(x)} ${c(y)})"`);
  return `<text ${attrs.join(' ')}>${escapeXml(content)}</text>`;
}

export function line(x1: number, y1: number, x2: number, y2: number, stroke: string, extra = ''): string {
  return `<line x1="${c(x1)}" y1="${c(y1)}" x2="${c(x2)}" y2="${c(y2)}" stroke="${stroke}"${extra}/>`;
}

export interface LegendItem {
  name: string;
  color: string;
  kind: 'line' | 'box';
  dash?: string;
}

/** Legend items flowing left to right, wrapping at `maxWidth`; returns the markup and its height. */
export function legend(items: readonly LegendItem[], x0: number, y0: number, maxWidth: number): { svg: string; height: number } {
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

export const finite = (v: number): boolean => Number.isFinite(v);

/** Min/max without spreading (series may be long); `init` when empty. */
export function minOf(values: readonly number[], init: number): number {
  let m = init;
  for (const v of values) if (v < m) m = v;
  return m;
}
export function maxOf(values: readonly number[], init: number): number {
  let m = init;
  for (const v of values) if (v > m) m = v;
  return m;
}

/** At most about `max` points of a segment, evenly strided, first and last kept (long loss curves). */
export function thin(seg: readonly Point[], max: number): readonly Point[] {
  if (seg.length <= max) return seg;
  const stride = Math.ceil(seg.length / max);
  const out = seg.filter((_, k) => k % stride === 0);
  if (out[out.length - 1] !== seg[seg.length - 1]) out.push(seg[seg.length - 1]!);
  return out;
}

/** Consecutive runs of finite points. */
export function segments(points: readonly Point[]): Point[][] {
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
