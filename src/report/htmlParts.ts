/** Building blocks of the report page (src/report/html.ts): number formats, sections, figures and tables. */
import { escapeXml as esc } from './svg';
import { formatValue } from './format';
import { formatFailed } from '../kernel/heldOut';

export const reward = (v: number | undefined): string => (v === undefined || !Number.isFinite(v) ? '–' : v.toFixed(4));
export const pct = (v: number | undefined): string => (v === undefined ? '–' : formatValue(v, 'percent'));
export const usd = (v: number): string => formatValue(v, 'usd');
export const ratio = (a: number, b: number): number => (b > 0 ? a / b : Number.NaN);

/** "+0.1234" / "-0.0100" / "±0.0000", with a class for colour. */
export function signed(v: number, digits = 4): { text: string; cls: string } {
  if (!Number.isFinite(v)) return { text: '–', cls: '' };
  const s = Math.abs(v).toFixed(digits);
  if (Number(s) === 0) return { text: `±${s}`, cls: '' };
  return v > 0 ? { text: `+${s}`, cls: 'up' } : { text: `-${s}`, cls: 'down' };
}

export const NO_DATA = '<p class="nodata">no data</p>';

export function section(id: string, title: string, body: string): string {
  return `<section id="${id}">\n<h2>${esc(title)}</h2>\n${body}\n</section>`;
}

export function figure(svg: string, caption?: string): string {
  return `<figure>\n${svg}\n${caption ? `<figcaption>${esc(caption)}</figcaption>\n` : ''}</figure>`;
}

export interface Column {
  head: string;
  num?: boolean;
}

/** Text columns (left-aligned) with these headings. */
export const textCols = (...heads: string[]): Column[] => heads.map((head) => ({ head }));

/** Number columns (right-aligned) with these headings. */
export const numCols = (...heads: string[]): Column[] => heads.map((head) => ({ head, num: true }));

/** A table; cells are already-escaped HTML. */
export function table(columns: readonly Column[], rows: readonly (readonly string[])[], foot?: readonly string[]): string {
  const cell = (tag: 'td' | 'th', col: Column | undefined, html: string): string => `<${tag}${col?.num ? ' class="num"' : ''}>${html}</${tag}>`;
  const head = `<tr>${columns.map((col) => cell('th', col, esc(col.head))).join('')}</tr>`;
  const body = rows.map((r) => `<tr>${r.map((h, i) => cell('td', columns[i], h)).join('')}</tr>`).join('\n');
  const footer = foot ? `\n<tfoot><tr>${foot.map((h, i) => cell('td', columns[i], h)).join('')}</tr></tfoot>` : '';
  return `<table>\n<thead>${head}</thead>\n<tbody>\n${body}\n</tbody>${footer}\n</table>`;
}

/** Items in first-appearance order (deterministic, follows the collector's order). */
export function distinct(values: readonly string[]): string[] {
  return [...new Set(values)];
}

/** RL step rows grouped by series (first-appearance order), each sorted by step. */
export function bySeries<T extends { series: string; step: number }>(rows: readonly T[]): Array<{ name: string; rows: T[] }> {
  return distinct(rows.map((r) => r.series)).map((name) => ({ name, rows: rows.filter((r) => r.series === name).sort((a, b) => a.step - b.step) }));
}

export const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);

export const seText = (se: number | undefined): string => (se === undefined || !Number.isFinite(se) ? '' : ` <span class="se">± ${se.toFixed(4)}</span>`);

/** ` [3 of 24 rollouts failed, scored 0]` after a held-out mean, when some failed (they count as 0 in the mean). */
export const failedText = (failed: number | undefined, rollouts: number | undefined): string => {
  const t = formatFailed(failed, rollouts);
  return t ? ` <span class="failed">${esc(t.trim())}</span>` : '';
};
