/** Bar charts for the run report (simple, stacked, grouped): one layout, both orientations (see svg.ts). */
import { AXIS, CHAR, escapeXml, fillColor, finite, GRID, legend, type LegendItem, line, PALETTE, svgOpen, text, textWidth, truncate } from './svg';
import { axisFormatter, c, formatValue, type ValueFormat, valueScale } from './format';

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

/** What every bar chart's options say about its frame: value format, orientation, size, axis label. */
interface BarFrame {
  title: string;
  valueFormat?: ValueFormat;
  horizontal?: boolean;
  valueLabel?: string;
  width?: number;
  height?: number;
}

const frameOf = (o: BarFrame): Pick<BarLayout, 'format' | 'horizontal' | 'width' | 'height' | 'valueLabel'> => ({
  format: o.valueFormat,
  horizontal: o.horizontal ?? false,
  width: o.width ?? 640,
  height: o.height,
  valueLabel: o.valueLabel,
});

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
    ...frameOf(o),
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
    ...frameOf(o),
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
    ...frameOf(o),
    legend: o.groups.length > 1 ? o.groups.map((g, k) => ({ name: g.name, color: fillColor(k), kind: 'box' as const })) : [],
  });
}
