/**
 * `cm2 filter --input X.jsonl --output kept.jsonl --report report.json [--filters a,b]`: the rule-based filter of
 * stage 1a on a local file, without Temporal. Input may be JSONL, a JSON array or Nemotron parquet; kept examples
 * are written as JSONL in input order, the report (counts, rejected examples with reasons, import errors) as JSON.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { resolveEnabledFilters } from '../stages/prepare/filters';
import { runRuleFilterReport, type FilterReport } from '../stages/prepare/filterReport';
import { importFile } from '../stages/prepare/import';

export interface FilterCommandOptions {
  input: string;
  output: string;
  report: string;
  /** Filter names to enable; default: the reference's set (`DEFAULT_ENABLED_FILTERS`). Unknown names throw. */
  filters?: string[];
}

export async function filterCommand(opts: FilterCommandOptions): Promise<FilterReport> {
  const enabled = resolveEnabledFilters(opts.filters);
  const { examples, errors } = await importFile(opts.input);
  const { report, kept } = runRuleFilterReport(
    examples.map((example) => ({ example })),
    errors,
    enabled,
  );
  await mkdir(dirname(opts.output), { recursive: true });
  await writeFile(opts.output, kept.map((ex) => JSON.stringify(ex)).join('\n') + (kept.length > 0 ? '\n' : ''), 'utf8');
  await mkdir(dirname(opts.report), { recursive: true });
  await writeFile(opts.report, JSON.stringify(report, null, 2) + '\n', 'utf8');
  return report;
}
