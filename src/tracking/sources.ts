/**
 * Reads what the experiment trackers get from a run's S3 (./records.ts shapes it): the pipeline input (the resolved
 * settings), SFT step rows past a step, the SFT report, RL step and evaluation rows past a step, BFCL and τ²-Bench
 * summaries, and links to the report and the final policies. Reading only, every source optional: a run that is
 * still going, or one with stages disabled, gives what exists.
 */
import { z } from 'zod';
import { ifExists, type ObjectStore } from '../storage/store';
import { pipelineKeys, rlKeys, sftKeys } from '../run/layout';
import { readSources } from '../report/collect';
import type { SftStepRow, TrackSources } from './records';

const SftStepRow = z.object({ step: z.number().int(), loss: z.number(), lr: z.number(), gradNorm: z.number(), tokens: z.number(), ms: z.number() });

/** The step in a key of a per-step folder (`…/000012.json`, `…/000012-eval.json`). */
const stepOfKey = (key: string): number => Number(/\/(\d{6})(?:-[a-z]+)?\.json$/.exec(key)?.[1] ?? Number.NaN);

export interface SourceOptions {
  /** Rows at or below these steps are known to every tracker: not read again. */
  sftAfter?: number;
  /** RL step rows (`NNNNNN-step.json`) and evaluation rows (`NNNNNN-eval.json`) are read past their own steps. */
  rlStepAfter?: number;
  rlEvalAfter?: number;
}

export async function readTrackSources(store: ObjectStore, runId: string, opts: SourceOptions = {}): Promise<TrackSources> {
  const bucketUrl = (key: string) => `s3://${store.bucket}/${key}`;
  const sftAfter = opts.sftAfter ?? -1;
  const rlAfter = (key: string) => (key.endsWith('-eval.json') ? (opts.rlEvalAfter ?? -1) : (opts.rlStepAfter ?? -1));
  const [input, sftKeysList, rlKeysList, report] = await Promise.all([
    ifExists(() => store.getJson<{ stages?: Record<string, unknown> }>(pipelineKeys.input(runId))),
    store.list(`${sftKeys.stepRows(runId)}/`),
    store.list(`${rlKeys.folder(runId, 'metrics')}/`),
    readSources(store, runId),
  ]);
  const sftSteps: SftStepRow[] = [];
  for (const key of sftKeysList.filter((k) => stepOfKey(k) > sftAfter)) {
    const row = await ifExists(() => store.getJson(key, SftStepRow));
    if (row) sftSteps.push(row);
  }
  const rlRows: Record<string, unknown>[] = [];
  for (const key of rlKeysList.filter((k) => stepOfKey(k) > rlAfter(k))) {
    const row = await ifExists(() => store.getJson<Record<string, unknown>>(key));
    if (row && typeof row === 'object') rlRows.push(row);
  }
  const lastSft = report.sft?.train.losses.length;
  const links: Record<string, string> = {};
  if (await store.exists(pipelineKeys.reportHtml(runId))) links['cm2.report'] = bucketUrl(pipelineKeys.reportHtml(runId));
  if (await store.exists(`${sftKeys.final(runId)}/config.json`)) links['cm2.sft_policy'] = bucketUrl(sftKeys.final(runId));
  if (rlKeysList.length) links['cm2.rl_checkpoints'] = bucketUrl(rlKeys.checkpoints(runId));
  return {
    ...(input?.stages ? { settings: input.stages } : {}),
    sftSteps,
    ...(report.sft && lastSft !== undefined ? { sftChecks: { step: lastSft, ...(report.sft.base ? { base: report.sft.base } : {}), ...(report.sft.sft ? { sft: report.sft.sft } : {}) } } : {}),
    rlRows,
    bfcl: report.bfcl,
    tau2: report.tau2 ?? [],
    links,
  };
}
