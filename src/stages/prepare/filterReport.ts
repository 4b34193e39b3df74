/**
 * The rule-filter report (stage 1a): which examples survive, how many fail each check (overlapping, like the
 * reference's `error_type` counts), and for every rejected example its origin and reasons. Pure: the CLI command
 * (src/cli/filterCommand.ts) and the pipeline activity do the I/O.
 */
import { applyRuleFilters, DEFAULT_ENABLED_FILTERS, resolveEnabledFilters, RULE_FILTER_NAMES, type RuleFilterName } from './filters';
import type { DropReason, Example, ImportError, RowOrigin } from '../../kernel/schema';

export interface RejectedExample {
  uuid: string;
  file?: string;
  line?: number;
  kind?: RowOrigin['kind'];
  reasons: DropReason[];
}

export interface FilterReport {
  /** Filters that ran, in the order they ran. */
  enabled: RuleFilterName[];
  /** Examples that reached the filters (rows that failed to import are not counted; see `importErrors`). */
  total: number;
  kept: number;
  dropped: number;
  /** Number of examples failing each enabled filter; an example may count under several codes. */
  reasons: Record<string, number>;
  rejected: RejectedExample[];
  importErrors: ImportError[];
}

export interface FilterRow {
  example: Example;
  /** Where the row came from; falls back to `example.meta.origin` set by the importers. */
  origin?: RowOrigin;
}

function originOf(row: FilterRow): RowOrigin | undefined {
  if (row.origin) return row.origin;
  const o = row.example.meta?.origin;
  if (typeof o !== 'object' || o === null) return undefined;
  const { file, line, kind } = o as Record<string, unknown>;
  if (typeof file === 'string' && typeof line === 'number' && (kind === 'line' || kind === 'row')) return { file, line, kind };
  return undefined;
}

/** Run the enabled rule filters over imported rows and build the report plus the kept examples (input order). */
export function runRuleFilterReport(
  rows: readonly FilterRow[],
  importErrors: readonly ImportError[] = [],
  enabled: readonly string[] = DEFAULT_ENABLED_FILTERS,
): { report: FilterReport; kept: Example[] } {
  const wanted = new Set(resolveEnabledFilters(enabled));
  const order = RULE_FILTER_NAMES.filter((name) => wanted.has(name));
  const reasons: Record<string, number> = Object.fromEntries(order.map((name) => [name, 0]));
  const kept: Example[] = [];
  const rejected: RejectedExample[] = [];
  for (const row of rows) {
    const verdict = applyRuleFilters(row.example, order);
    if (verdict.kept) {
      kept.push(row.example);
      continue;
    }
    for (const code of new Set(verdict.reasons.map((r) => r.code))) reasons[code] = (reasons[code] ?? 0) + 1;
    const origin = originOf(row);
    rejected.push({ uuid: row.example.uuid, ...(origin ?? {}), reasons: verdict.reasons });
  }
  return {
    report: {
      enabled: order,
      total: rows.length,
      kept: kept.length,
      dropped: rejected.length,
      reasons,
      rejected,
      importErrors: [...importErrors],
    },
    kept,
  };
}
