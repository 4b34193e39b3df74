/**
 * The data-preparation stage (CM2 stages 1–2) as a workflow: orchestration only.
 *
 * import → rule filters (per shard) → LLM-filter cascade (pass by pass, per shard, early exit: each pass
 * only sees the previous pass's kept set) → seeded cold-start / RL split → CoT compression of the
 * cold-start shards ∥ harder-sample selection of the RL shards → report.
 *
 * Only references and small counts pass through history; shards run with bounded concurrency. Every
 * activity is idempotent (see src/stages/prepare/activities.ts), so a worker killed mid-stage, a retry or a re-run
 * of the whole workflow with the same run id redoes nothing that was finished.
 */
import { setCurrentDetails, workflowInfo } from '@temporalio/workflow';
import type { PrepareActivities } from './activities';
import type { PrepareReport, StepResult } from './shapes';
import type { ShardRef } from '../activityKit';
import type { PrepareWorkflowInput } from '../../run/workflowShapes';
import { beginStage, boundedAll, endStage, phaseTracker, stageActivities, stageProgressQuery } from '../../run/workflowUtil';

/** The stage's progress query (`progress`, shared by every stage). */
export const prepareProgressQuery = stageProgressQuery;

export async function prepareWorkflow(input: PrepareWorkflowInput): Promise<PrepareReport> {
  const progress = beginStage('prepare', input.runId);

  const acts = stageActivities<PrepareActivities>(input.taskQueues.api, input.activity);

  // Progress per phase: compression and selection run at the same time, each against its own shard count.
  const phases = phaseTracker(progress);
  const perShard = async (name: string, shards: ShardRef[], fn: (s: ShardRef) => Promise<StepResult>, parallel = false) => {
    const ph = parallel ? phases.add(name, shards.length) : phases.only(name, shards.length);
    const results = await boundedAll(shards, input.data.shardConcurrency, async (s) => {
      const r = await fn(s);
      ph.tick();
      return r;
    });
    progress.counts[name] = results.reduce((n, r) => n + r.kept.count, 0);
    ph.end();
    return results;
  };

  const importPhase = phases.only('import', 1);
  const imported = await acts.importSource({ runId: input.runId, source: input.data.source, shardSize: input.data.shardSize });
  importPhase.tick();
  importPhase.end();
  progress.counts['imported'] = imported.total;

  const steps: { name: string; results: StepResult[] }[] = [];
  const ruleResults = await perShard('rule_filter', imported.shards, (shard) =>
    acts.ruleFilterShard({ runId: input.runId, shard, enabled: input.data.ruleFilters.enabled }));
  steps.push({ name: 'rule_filter', results: ruleResults });
  let current = ruleResults.map((r) => r.kept);

  if (input.data.llmFilter.enabled) {
    for (const [pass, effort] of input.llmFilterPasses.entries()) {
      const results = await perShard(`llm_filter_pass${pass}`, current, (shard) =>
        acts.llmFilterShard({ runId: input.runId, pass, effort, shard, llm: input.llm }));
      steps.push({ name: `llm_filter_pass${pass}`, results });
      current = results.map((r) => r.kept);
    }
  }

  const splitPhase = phases.only('split', 1);
  const split = await acts.splitData({ runId: input.runId, shards: current, seed: input.data.split.seed, coldStart: input.data.split.coldStart, shardSize: input.data.shardSize });
  splitPhase.tick();
  splitPhase.end();

  const [compressed, selected] = await Promise.all([
    input.data.compression.enabled
      ? perShard('compression', split.coldStart, (shard) => acts.compressShard({ runId: input.runId, shard, llm: input.llm }), true)
      : Promise.resolve(undefined),
    input.data.selection.enabled
      ? perShard('selection', split.rl, (shard) => acts.selectShard({ runId: input.runId, shard, seed: input.data.selection.seed }), true)
      : Promise.resolve(undefined),
  ]);
  if (compressed) steps.push({ name: 'compression', results: compressed });
  if (selected) steps.push({ name: 'selection', results: selected });

  phases.only('report', 1);
  const report = await acts.writePrepareReport({
    runId: input.runId,
    imported,
    steps,
    coldStart: compressed ? compressed.map((r) => r.kept) : split.coldStart,
    rl: selected ? selected.map((r) => r.kept) : split.rl,
  });
  progress.phase = 'done';
  progress.counts['cold_start'] = report.coldStart.count;
  progress.counts['rl'] = report.rl.count;
  setCurrentDetails(`**done**: ${report.coldStart.count} cold-start, ${report.rl.count} RL examples (run ${workflowInfo().runId})`);
  endStage();
  return report;
}
