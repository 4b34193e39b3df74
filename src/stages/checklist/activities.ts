/**
 * Stage 4 activities: checklist annotation (spec §5). Thin adapters: the method lives in src/stages/checklist (prompt,
 * validation, repair loop) and src/demo/checklist.ts (offline annotator of the demo world).
 *
 * Idempotency is per example: each annotated example is one S3 object (`checklists/examples/<uuid>.json`), written
 * as soon as it is done. An activity attempt first looks for it and never sends an example that has one to the
 * annotator again — after a worker crash, a retried attempt, or a re-run of the whole stage. LLM answers are also
 * kept in the response cache the moment they arrive, so even a crash between the answer and the example's write
 * costs no second call. A failed example gets `checklists/failed/<uuid>.json` with its reason and last violations;
 * re-runs skip it (it was paid for) unless `retryFailed` is set.
 */
import type { ObjectStore } from '../../storage/store';
import { createHash } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { annotatorAsk, LlmChecklistAnnotator, OfflineChecklistAnnotator, type ChecklistAnnotator, type ExampleAnnotation } from './annotate';
import { AnnotatedExample } from './schema';
import { addUsage, zeroUsage, type Usage } from '../../kernel/roleContracts';
import { Example } from '../../kernel/schema';
import { checklistShortfall } from './floor';
import { isOnline, LlmConfig } from '../../llm/llmConfig';
import { checklistKeys } from '../../run/layout';
import type { OfflineWorld } from '../world';
import { type ActivityDeps, cancellationSignal, heartbeat, llmClients, mapWithHeartbeat, once, parseInput, readShard, saveReport, shardName, ShardRef, writeShard } from '../activityKit';
import { parseExampleLines, reportTotals } from './records';
import { ChecklistInputArgs, ChecklistInputResult, AnnotateShardArgs, AnnotateShardResult, ChecklistReportArgs, ChecklistReport, FailedAnnotation } from './shapes';

export interface ChecklistDeps extends ActivityDeps {
  /** The offline world, whose annotator serves a run with no annotator endpoint (src/stages/world.ts). */
  world: OfflineWorld;
  /** Override the annotator (tests); default: LLM when `llm.roles.annotator` has an endpoint, else offline. */
  annotatorFor?: (llm: LlmConfig) => ChecklistAnnotator;
}


type Outcome = { kind: 'already' } | { kind: 'previouslyFailed' } | { kind: 'done'; result: ExampleAnnotation };

/**
 * One example annotated at most once: skipped when its checklist is stored, or when its annotation failed before and
 * `retryFailed` is off; else annotated, and the checklist (or the failure, with its reason) stored the moment it is done.
 */
async function annotateOnce(store: ObjectStore, annotator: ChecklistAnnotator, input: z.infer<typeof AnnotateShardArgs>, ex: Example): Promise<Outcome> {
  const okKey = checklistKeys.example(input.runId, ex.uuid);
  const failKey = checklistKeys.failedExample(input.runId, ex.uuid);
  if (await store.exists(okKey)) return { kind: 'already' };
  const failedBefore = await store.exists(failKey);
  if (failedBefore && !input.retryFailed) return { kind: 'previouslyFailed' };
  const result = await annotator.annotate(ex, { variants: input.variants, maxAttempts: input.maxAttempts });
  if (result.ok) {
    await store.putJson(okKey, result.annotated);
    if (failedBefore) await store.remove(failKey);
  } else {
    const record: FailedAnnotation = {
      uuid: ex.uuid,
      reason: result.reason,
      violations: result.violations,
      usage: result.usage,
      attempts: result.variants.reduce((n, v) => n + v.attempts, 0),
      ...(result.raw !== undefined ? { raw: result.raw } : {}),
    };
    await store.putJson(failKey, record);
  }
  return { kind: 'done', result };
}

export function createChecklistActivities(deps: ChecklistDeps) {
  const { store } = deps;
  const clientFor = llmClients(store);
  const defaultAnnotator = (llm: LlmConfig): ChecklistAnnotator => {
    const role = llm.roles.annotator;
    if (!isOnline(role)) return new OfflineChecklistAnnotator(deps.world.annotator.name, deps.world.annotator.annotate);
    return new LlmChecklistAnnotator(role.model, annotatorAsk(clientFor(llm), cancellationSignal));
  };
  const annotatorFor = deps.annotatorFor ?? defaultAnnotator;
  const key = checklistKeys.folder;

  return {
    /**
     * Reads the examples to annotate (a JSONL file in the bucket) and cuts them into input shards. Lines that are
     * not examples are recorded with their line number and field, and skipped.
     */
    async checklistInput(raw: z.input<typeof ChecklistInputArgs>): Promise<ChecklistInputResult> {
      const input = parseInput(ChecklistInputArgs, raw, 'checklistInput');
      return once(store, key(input.runId, 'input', 'result.json'), ChecklistInputResult, async () => {
        const bytes = await store.getBytes(input.sourceKey);
        const sourceSha256 = createHash('sha256').update(bytes).digest('hex');
        const { examples, errors } = parseExampleLines(bytes.toString('utf8'), input.sourceKey);
        const inputErrorsKey = key(input.runId, 'input', 'errors.jsonl');
        await store.putJsonl(inputErrorsKey, errors);
        const shards: ShardRef[] = [];
        for (let i = 0; i * input.shardSize < examples.length; i++) {
          shards.push(await writeShard(store, key(input.runId, 'input', `${shardName(i)}.jsonl`), i, examples.slice(i * input.shardSize, (i + 1) * input.shardSize)));
          heartbeat({ shards: shards.length });
        }
        return { shards, total: examples.length, inputErrors: errors.length, inputErrorsKey, sourceSha256 };
      });
    },

    /**
     * Annotates the examples of one shard that have no checklist yet, with bounded concurrency, writing each
     * example's result the moment it is done. LLM transport failures fail the attempt (Temporal retries it after the
     * backoff, and the retry skips everything already written); a checklist that stays invalid is a recorded
     * failure of that example, never of the stage.
     */
    async annotateShard(raw: z.input<typeof AnnotateShardArgs>): Promise<AnnotateShardResult> {
      const input = parseInput(AnnotateShardArgs, raw, 'annotateShard');
      const examples = await readShard(store, input.shard);
      const annotator = annotatorFor(input.llm);
      const concurrency = isOnline(input.llm.roles.annotator) ? input.llm.roles.annotator.concurrency : 4;
      const outcomes = await mapWithHeartbeat<Example, Outcome>(examples, concurrency, (ex) => annotateOnce(store, annotator, input, ex), `annotate ${shardName(input.shard.index)}`);
      let usage: Usage = zeroUsage();
      const count = { annotated: 0, failed: 0, alreadyAnnotated: 0, previouslyFailed: 0 };
      for (const o of outcomes) {
        if (o.kind === 'already') count.alreadyAnnotated++;
        else if (o.kind === 'previouslyFailed') count.previouslyFailed++;
        else if (o.kind === 'done') {
          usage = addUsage(usage, o.result.usage);
          if (o.result.ok) count.annotated++;
          else count.failed++;
        }
      }
      return { index: input.shard.index, in: examples.length, ...count, usage };
    },

    /**
     * Gathers the stage's outputs in input order: `checklists/annotated.jsonl` (stored form), `checklists/failed.jsonl`
     * and `checklists/report.json` (counts, failure reasons, items per turn, attempts, tokens and cost — summed
     * from the per-example records, so the numbers are right however many attempts and re-runs it took).
     */
    async writeChecklistReport(raw: z.input<typeof ChecklistReportArgs>): Promise<ChecklistReport> {
      const input = parseInput(ChecklistReportArgs, raw, 'writeChecklistReport');
      const examples: Example[] = [];
      for (const shard of input.shards) examples.push(...(await readShard(store, shard)));
      type Found = { ok: true; value: AnnotatedExample } | { ok: false; value: FailedAnnotation | undefined; uuid: string };
      const found = await mapWithHeartbeat<Example, Found>(examples, 16, async (ex) => {
        const okKey = checklistKeys.example(input.runId, ex.uuid);
        if (await store.exists(okKey)) return { ok: true, value: await store.getJson(okKey, AnnotatedExample) };
        const failKey = checklistKeys.failedExample(input.runId, ex.uuid);
        return { ok: false, uuid: ex.uuid, value: (await store.exists(failKey)) ? await store.getJson(failKey, FailedAnnotation) : undefined };
      }, 'report');
      const annotated = found.flatMap((f) => (f.ok ? [f.value] : []));
      const failed = found.flatMap((f) =>
        f.ok ? [] : [f.value ?? { uuid: f.uuid, reason: 'not annotated (no record)', violations: [], usage: zeroUsage(), attempts: 0 }],
      );
      const annotatedKey = checklistKeys.annotated(input.runId);
      const failedKey = checklistKeys.failed(input.runId);
      await store.putJsonl(annotatedKey, annotated);
      await store.putJsonl(failedKey, failed);

      const { usage, attempts, turns, items, annotators, variants, failureReasons } = reportTotals(annotated, failed);
      const reportKey = checklistKeys.report(input.runId);
      const report: ChecklistReport = {
        runId: input.runId,
        annotator: annotators.join(', ') || 'none',
        total: examples.length,
        inputErrors: input.inputErrors,
        annotated: annotated.length,
        failed: failed.length,
        failureReasons,
        variants,
        turns,
        items,
        meanItemsPerTurn: turns ? items / turns : 0,
        attempts,
        usage,
        meanCostPerExampleUsd: examples.length ? usage.costUsd / examples.length : 0,
        annotatedKey,
        failedKey,
        reportKey,
      };
      await saveReport(store, reportKey, report);
      // Written first, so `cm2 checklist report` shows the stage that fails here.
      const short = checklistShortfall(report, input.minAnnotated);
      if (short) throw ApplicationFailure.nonRetryable(short, 'TooFewOutputs');
      return report;
    },
  };
}

export type ChecklistActivities = ReturnType<typeof createChecklistActivities>;
