/**
 * Stage 5 activities: RL with checklist rewards. Thin adapters over this folder's method modules (rollout loop,
 * judge phase, rewards, advantages, batch summary, GRPO) and src/model.
 *
 * - gpu queue: `rlRollout` (advance every live episode of a step by one turn: batched generation + tool calls),
 *   `rlTrain` (one GRPO update → checkpoint), `rlEngineSync` (a serving engine made to serve a policy: ./engineActivity.ts).
 * - api queue: `rlJudge` (verdicts for the turns that just completed, then turn control), `rlAdvantages`,
 *   `rlRecordStep` (metrics JSONL), `rlPruneCheckpoints` (retention, `rl.keepCheckpoints`).
 *
 * Everything large lives in S3; activities exchange keys and small numbers. Each activity writes its output under
 * a key fixed by (run, step, phase), so a retry after a crash overwrites the same object with the same content
 * (rollouts are seeded, LLM answers cached) and a completed one is not redone (`once`).
 *
 * Metrics: the judge and batch counters are added when a phase's result is first stored (`once`'s `onStored`), so a
 * retry or a resumed run that finds the result does not count it again (src/stages/activityMetrics.ts).
 *
 * Exactly-once updates: `rlTrain(step n)` returns the step-n checkpoint when its manifest exists; otherwise it loads
 * step n−1 (weights + AdamW state), applies one update and writes step n, manifest last. The worker's in-memory
 * policy is dropped before it is mutated, so a failed attempt never leaves a half-updated model in the cache.
 */
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { promptIds } from '../../chat/tokenize';
import { AnnotatedExample } from '../checklist/schema';
import type { Example } from '../../kernel/schema';
import { stepFolder, listCheckpointFolders, removeCheckpoint } from '../../storage/checkpoints';
import { checkpointsToPrune } from '../../run/retention';
import { isOnline } from '../../llm/llmConfig';
import { ifExists } from '../../storage/store';
import { rlKeys } from '../../run/layout';
import { trainStep } from './trainActivity';
import { engineSync } from './engineActivity';
import { heapGuard, heartbeat, once, parseInput } from '../activityKit';
import { rlWorker, rolloutPhase, judgePhase, type RlDeps, type RlWorker } from './episodesActivity';
export type { RlDeps } from './episodesActivity';
import { missingSimulatorMessage, toolsNeedingSimulator } from './env/answers';
import { countsOf, summariseBatch } from './algo/batch';
import { heldOutShrunk, rlDataShortfall, selectRlData } from './data';
import { formatReasons } from '../../kernel/floor';
import { recordJudgePhase, recordRlBatch } from '../activityMetrics';
import { RlDataInput, RlData, PhaseResult, RlJudgeInput, RlRolloutInput, RlAdvantagesInput, RlMergeInput, RlMergeResult, RlAdvantagesResult, RlTrainInput, RlTrainResult, RlRecordInput, RlPruneInput, RlPruneResult, RlEngineSyncInput, type RlEngineSyncResult } from './shapes';

export * from './shapes';

/**
 * The RL data (./data.ts): annotated examples whose prompt fits the context (spec §6.1's length filter), the first
 * `eval.prompts` of them held out, then `eval.validation` for searches. Invalid lines are counted by reason; a held-out
 * set smaller than asked for is logged and in the result; fewer than `rl.minExamples` left to train on fails the stage
 * (not retried), and so (`ConfigError`) does a tool of the data that has neither an executable nor a simulator endpoint.
 */
async function prepareRlData(w: RlWorker, input: z.infer<typeof RlDataInput>): Promise<RlData> {
  const tok = w.tokenizer(input.tokenizerDir);
  const lines = (await w.store.getText(input.sourceKey)).split('\n').filter((l) => l.trim() !== '');
  const maxPromptTokens = input.rl.rollout.maxModelLen - input.rl.rollout.promptMargin;
  const promptLength = (ex: AnnotatedExample) => promptIds(ex.messages.slice(0, ex.messages.findIndex((m) => m.role === 'user') + 1), ex.tools, tok).length;
  const { kept, ...sel } = selectRlData(lines, { promptLength, maxPromptTokens, heldOut: input.rl.eval.prompts, validation: input.rl.eval.validation });
  if (input.rl.eval.on === 'validation' && sel.validation === 0) throw ApplicationFailure.nonRetryable(`rl.eval.on: validation, but no validation prompts (rl.eval.validation ${input.rl.eval.validation}; ${kept.length} usable examples, ${sel.heldOut} held out)`, 'BadConfig');
  if (sel.validation < sel.validationRequested) w.log(`validation prompts: ${sel.validation} of ${sel.validationRequested} asked for (rl.eval.validation; only ${kept.length} usable examples)`);
  const short = rlDataShortfall({ ...sel, lines: lines.length }, input.rl.minExamples, input.sourceKey, maxPromptTokens);
  if (short) throw ApplicationFailure.nonRetryable(short, 'TooFewOutputs');
  if (sel.invalid) w.log(`${input.sourceKey}: ${sel.invalid} invalid line(s) left out: ${formatReasons(sel.invalidReasons)}`);
  const shrunk = heldOutShrunk({ ...sel, kept });
  if (shrunk) w.log(shrunk);
  // No silent zeros: tools that neither an executable nor the simulator answers fail the run here (./env/answers.ts).
  if (input.llm && !isOnline(input.llm.roles.simulator)) {
    const unanswered = toolsNeedingSimulator(kept, new Set(w.executableNames(input.rl)));
    if (unanswered.size) throw ApplicationFailure.nonRetryable(`${input.sourceKey}: ${missingSimulatorMessage(unanswered, kept.length)}`, 'ConfigError');
  }
  const key = rlKeys.folder(input.runId, 'data', 'examples.jsonl');
  await w.store.putJsonl(key, kept);
  return { key, train: sel.train, heldOut: sel.heldOut, ...(sel.validation ? { validation: sel.validation } : {}), tooLong: sel.tooLong, invalid: sel.invalid, invalidReasons: sel.invalidReasons, heldOutRequested: sel.heldOutRequested };
}

export function createRlActivities(deps: RlDeps) {
  const w = rlWorker(deps);
  const { store, log, tokenizer, dataset, readRollouts, ensureBackend, policies } = w;

  return {
    /** The RL data: the examples that fit, held-out and validation prompts first (prepareRlData). api queue. */
    async rlPrepareData(raw: z.input<typeof RlDataInput>): Promise<RlData> {
      const input = parseInput(RlDataInput, raw, 'rlPrepareData');
      return once(store, rlKeys.folder(input.runId, 'data', 'result.json'), RlData, () => prepareRlData(w, input));
    },

    /** Advance every live episode by one turn (phase 0 creates them). gpu queue. */
    async rlRollout(raw: z.input<typeof RlRolloutInput>): Promise<PhaseResult> {
      const input = parseInput(RlRolloutInput, raw, 'rlRollout');
      return heapGuard('rlRollout', log, () => once(store, `${rlKeys.phase(input.folder, input.phase)}.result`, PhaseResult, () => rolloutPhase(w, input)));
    },

    /** Make the serving engine of `rl.engine` serve `policy` (probe, export, load, probe). gpu queue. */
    async rlEngineSync(raw: z.input<typeof RlEngineSyncInput>): Promise<RlEngineSyncResult> {
      const input = parseInput(RlEngineSyncInput, raw, 'rlEngineSync');
      return engineSync(w, input);
    },

    /** Judge the turns that just completed, then continue or end each episode (turn control). api queue. */
    async rlJudge(raw: z.input<typeof RlJudgeInput>): Promise<PhaseResult> {
      const input = parseInput(RlJudgeInput, raw, 'rlJudge');
      return once(store, `${rlKeys.phase(input.folder, input.phase)}.result`, PhaseResult, () => judgePhase(w, input), (result) => recordJudgePhase(input.runId, result.judge));
    },

    /** Merge the finished chunks of a fanned-out batch, in chunk order (groups were numbered per step). api queue. */
    async rlMergeChunks(raw: z.input<typeof RlMergeInput>): Promise<RlMergeResult> {
      const input = parseInput(RlMergeInput, raw, 'rlMergeChunks');
      const outKey = rlKeys.merged(input.folder);
      return once(store, `${outKey}.result`, RlMergeResult, async () => {
        const rollouts = (await Promise.all(input.parts.map(readRollouts))).flat();
        const ids = new Set<string>();
        for (const r of rollouts) {
          if (ids.has(r.id)) throw ApplicationFailure.nonRetryable(`${input.folder}: rollout ${r.id} is in two chunks`, 'BadInput');
          ids.add(r.id);
        }
        await store.putJson(outKey, { rollouts });
        return { key: outKey, counts: countsOf(rollouts), rollouts: rollouts.length };
      });
    },

    /** Rewards and advantages of a finished batch (pure functions over the verdicts). api queue. */
    async rlAdvantages(raw: z.input<typeof RlAdvantagesInput>): Promise<RlAdvantagesResult> {
      const input = parseInput(RlAdvantagesInput, raw, 'rlAdvantages');
      const outKey = rlKeys.advantages(input.folder);
      return once(store, `${outKey}.result`, RlAdvantagesResult, async () => {
        const t0 = Date.now();
        const d = await dataset(input.dataKey);
        const rollouts = await readRollouts(input.rolloutsKey ?? rlKeys.phase(input.folder, input.phase));
        const summary = summariseBatch(rollouts, d.checklists, input.rl, input.granularity);
        await store.putJson(outKey, { granularity: input.granularity, rows: summary.rows, advantages: summary.rows.map((r) => r.advantages) });
        return {
          key: outKey,
          ...summary.metrics,
          seconds: (Date.now() - t0) / 1000,
        };
      }, (result) => recordRlBatch(input.runId, input.folder.startsWith(`${rlKeys.folder(input.runId, 'eval')}/`) ? 'heldout' : 'train', result.rollouts, result.failed));
    },

    /** One GRPO update from step−1's policy; writes step's checkpoint. Exactly once per step (./trainActivity.ts). gpu. */
    async rlTrain(raw: z.input<typeof RlTrainInput>): Promise<RlTrainResult> {
      const input = parseInput(RlTrainInput, raw, 'rlTrain');
      return heapGuard('rlTrain', log, () => once(store, `${stepFolder(rlKeys.checkpoints(input.runId), input.step)}/train-result.json`, RlTrainResult, async () => {
        await ensureBackend();
        const ctx = {
          store, policies, tokenizer: tokenizer(input.tokenizerDir),
          onMicro: (micro: number, total: number) => heartbeat({ step: input.step, micro, total }),
          onPhase: (phase: string) => heartbeat({ step: input.step, phase }),
        };
        return trainStep(ctx, input);
      }));
    },

    /** Append (idempotently) one row to `runs/<id>/rl/metrics.jsonl`: rows of steps ≥ this one are replaced. api. */
    async rlRecordStep(raw: z.input<typeof RlRecordInput>): Promise<{ key: string; rows: number }> {
      const input = parseInput(RlRecordInput, raw, 'rlRecordStep');
      const key = rlKeys.metrics(input.runId);
      const text = (await ifExists(() => store.getText(key))) ?? '';
      let rows = text.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as Record<string, unknown>);
      rows = rows.filter((r) => Number(r['step']) < input.step || (r['kind'] !== input.row['kind'] && Number(r['step']) <= input.step));
      rows.push({ step: input.step, ...input.row });
      await store.putJsonl(key, rows);
      await store.putJson(rlKeys.metricsRow(input.runId, input.step, String(input.row['kind'] ?? 'step')), { step: input.step, ...input.row });
      return { key, rows: rows.length };
    },

    /**
     * Removes the checkpoints at or below `step` that `keep` does not list (src/run/retention.ts), each manifest first,
     * so a kill midway leaves no folder that passes for a checkpoint; a retry lists again and finishes. api.
     */
    async rlPruneCheckpoints(raw: z.input<typeof RlPruneInput>): Promise<z.infer<typeof RlPruneResult>> {
      const input = parseInput(RlPruneInput, raw, 'rlPruneCheckpoints');
      if (!input.keep.includes(input.step)) throw ApplicationFailure.nonRetryable(`rlPruneCheckpoints: the current policy (step ${input.step}) is not in keep`, 'BadInput');
      const prefix = rlKeys.checkpoints(input.runId);
      const folders = await listCheckpointFolders(store, prefix);
      const removed = checkpointsToPrune([...folders.keys()], input.step, input.keep);
      // Tests only: a pause after each removal, so a kill can land in the middle of pruning.
      const delayMs = Number(process.env['CM2_TEST_PRUNE_DELAY_MS'] ?? 0);
      let objects = 0;
      for (const step of removed) {
        objects += await removeCheckpoint(store, prefix, step, folders.get(step) ?? [], async (key) => {
          heartbeat({ step, key });
          if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
        });
      }
      if (removed.length) log(`pruned RL checkpoints ${removed.join(', ')} (${objects} objects)`);
      return { removed, objects };
    },
  };
}

export type RlActivities = ReturnType<typeof createRlActivities>;

// ---------------------------------------------------------------------------------------------------------------
// Helpers

export type { Example };
