/**
 * Where a run's things live: every S3 key, every workflow id and every search attribute of a run, in one place.
 * Pure (no Node imports): workflow code uses this file as much as activities, the CLI, reports and scripts do.
 *
 * S3: everything of run `<id>` is under `runs/<id>/`:
 *   data/          prepare: imported/, rule_filter/, <llm step>/, split/, compression/, selection/ shards and their
 *                  results; dropped/<step>/; import_errors.jsonl; the outputs cold_start.jsonl and rl.jsonl
 *   prepare/       report.json
 *   llm/ledger/    per-shard LLM call ledgers of the prepare stage
 *   checklists/    input/ shards, examples/ and failed/ (one object per example), annotated.jsonl, failed.jsonl,
 *                  report.json
 *   sft/           checkpoints/, final/ (the HF folder RL starts from), train-result.json, eval-<which>.json (and
 *                  eval-<which>/chunk-NNNNN.json when run in chunks), report.json, metrics/NNNNNN.json (a step's numbers)
 *   rl/            data/, steps/step-NNNNNN/ (rollout phases, advantages), eval/step-NNNNNN/, checkpoints/,
 *                  metrics.jsonl, metrics/
 *   eval/bfcl/     <label>.json and <label>.summary.json per evaluated policy (and <label>/chunk-NNNNN.json when
 *                  run in chunks)
 *   eval/tau2/     <label>.json and <label>.summary.json per evaluated policy, <label>/<domain>/<task>-t<trial>.json
 *                  per finished episode
 *   tracking/      <tracker>/cursor.json and pending.json: what each experiment tracker has been sent
 *   pipeline/      input.json, <stage>.json (stage markers)
 *   report/        report.html, report.json
 *
 * Temporal: the pipeline is `cm2-<id>`, each stage `cm2-<id>-<stage>` (started alone or as the pipeline's child).
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { z } from 'zod';

/** `runs/<runId>/<parts...>`; parts are joined with `/`. */
export function runKey(runId: string, ...parts: (string | number)[]): string {
  return ['runs', runId, ...parts.map(String)].join('/');
}

/** A step number as it appears in keys: six digits, zero-padded (sorts in step order). */
export const padStep = (step: number): string => String(step).padStart(6, '0');

/** The stage workflows of a run, in pipeline order; each is `cm2-<run>-<stage>`. */
export const STAGES = ['prepare', 'checklist', 'sft', 'rl', 'eval'] as const;
export type StageName = (typeof STAGES)[number];

/** The workflow type of a stage (`prepareWorkflow`, …, `evalWorkflow`: the names the workers register). */
export const stageWorkflowType = (stage: StageName): string => `${stage}Workflow`;

/** The pipeline workflow of a run. */
export const pipelineWorkflowId = (runId: string): string => `cm2-${runId}`;
/** The run's tracking workflow (experiment trackers, `tracking`): `cm2-<id>-track`. */
export const trackWorkflowId = (runId: string): string => `cm2-${runId}-track`;
/** A stage workflow of a run, started alone or as the pipeline's child. */
export const stageWorkflowId = (runId: string, stage: string): string => `cm2-${runId}-${stage}`;
/** The stage a workflow id names (`pipeline` for the pipeline itself), or undefined when it is not this run's. */
export function stageOfWorkflowId(runId: string, workflowId: string): string | undefined {
  if (workflowId === pipelineWorkflowId(runId)) return 'pipeline';
  const prefix = `${pipelineWorkflowId(runId)}-`;
  return workflowId.startsWith(prefix) ? workflowId.slice(prefix.length) : undefined;
}

/** Stage 1–2 (prepare): shards, results and outputs under `runs/<id>/data/`. */
export const prepareKeys = {
  data: (runId: string, ...parts: (string | number)[]) => runKey(runId, 'data', ...parts),
  /** The cold-start split (SFT's default input). */
  coldStart: (runId: string) => runKey(runId, 'data', 'cold_start.jsonl'),
  /** The RL split (the checklist stage's default input). */
  rl: (runId: string) => runKey(runId, 'data', 'rl.jsonl'),
  ledger: (runId: string, step: string, shard: string) => runKey(runId, 'llm', 'ledger', step, `${shard}.jsonl`),
  report: (runId: string) => runKey(runId, 'prepare', 'report.json'),
};

/** Stage 4 (checklist annotation): `runs/<id>/checklists/`. */
export const checklistKeys = {
  folder: (runId: string, ...parts: (string | number)[]) => runKey(runId, 'checklists', ...parts),
  example: (runId: string, uuid: string) => runKey(runId, 'checklists', 'examples', `${encodeURIComponent(uuid)}.json`),
  failedExample: (runId: string, uuid: string) => runKey(runId, 'checklists', 'failed', `${encodeURIComponent(uuid)}.json`),
  /** The annotated examples (RL's default input). */
  annotated: (runId: string) => runKey(runId, 'checklists', 'annotated.jsonl'),
  failed: (runId: string) => runKey(runId, 'checklists', 'failed.jsonl'),
  report: (runId: string) => runKey(runId, 'checklists', 'report.json'),
};

/** One SFT optimizer step's numbers: the trainer's step result, and the row `sftKeys.stepRow` holds (the trackers read it). */
export interface SftStepRow {
  step: number;
  loss: number;
  lr: number;
  gradNorm: number;
  tokens: number;
  ms: number;
}

/** Stage 3 (cold-start SFT): `runs/<id>/sft/`. */
export const sftKeys = {
  checkpoints: (runId: string) => runKey(runId, 'sft', 'checkpoints'),
  /** The trained policy as an HF folder (RL's default initial policy). */
  final: (runId: string) => runKey(runId, 'sft', 'final'),
  /** With `sft.lora`: the trained adapter in PEFT's format (the final folder holds it merged). */
  adapter: (runId: string) => runKey(runId, 'sft', 'adapter'),
  trainResult: (runId: string) => runKey(runId, 'sft', 'train-result.json'),
  /** What a trainer in another language runs from (data, plan, initial policy: src/stages/sft/prepareActivity.ts). */
  prepared: (runId: string) => runKey(runId, 'sft', 'prepared'),
  evalResult: (runId: string, which: string) => runKey(runId, 'sft', `eval-${which}.json`),
  /** One chunk of a format check run in chunks (`sft.eval.chunkSize`): its samples and timing. */
  evalChunk: (runId: string, which: string, index: number) => runKey(runId, 'sft', `eval-${which}`, `chunk-${String(index).padStart(5, '0')}.json`),
  report: (runId: string) => runKey(runId, 'sft', 'report.json'),
  /** One optimizer step's numbers (loss, lr, gradient norm, tokens, ms), written as the step ends (the trackers read them). */
  stepRows: (runId: string) => runKey(runId, 'sft', 'metrics'),
  stepRow: (runId: string, step: number) => runKey(runId, 'sft', 'metrics', `${padStep(step)}.json`),
};

/** Stage 5 (RL): `runs/<id>/rl/`. */
export const rlKeys = {
  folder: (runId: string, ...parts: (string | number)[]) => runKey(runId, 'rl', ...parts),
  /** The rollouts, verdicts and advantages of one training step. */
  step: (runId: string, step: number) => runKey(runId, 'rl', 'steps', `step-${padStep(step)}`),
  /** The held-out evaluation of the policy after `step` updates. */
  eval: (runId: string, step: number) => runKey(runId, 'rl', 'eval', `step-${padStep(step)}`),
  /** One rollout phase (a turn of every live episode) of a step or evaluation folder. */
  phase: (folder: string, phase: number) => `${folder}/phase-${String(phase).padStart(3, '0')}.json`,
  advantages: (folder: string) => `${folder}/advantages.json`,
  /** The folder of one rollout chunk of a step or evaluation (fan-out, `rl.rollout.chunkPrompts`): phases as above. */
  chunk: (folder: string, chunk: number) => `${folder}/chunk-${String(chunk).padStart(3, '0')}`,
  /** The finished rollouts of every chunk of a step or evaluation, in chunk order. */
  merged: (folder: string) => `${folder}/rollouts.json`,
  checkpoints: (runId: string) => runKey(runId, 'rl', 'checkpoints'),
  metrics: (runId: string) => runKey(runId, 'rl', 'metrics.jsonl'),
  metricsRow: (runId: string, step: number, kind: string) => runKey(runId, 'rl', 'metrics', `${padStep(step)}-${kind}.json`),
};

/** Evaluations: BFCL under `runs/<id>/eval/bfcl/`, τ²-Bench under `runs/<id>/eval/tau2/`. */
export const evalKeys = {
  folder: (runId: string) => runKey(runId, 'eval', 'bfcl'),
  bfcl: (runId: string, label: string) => runKey(runId, 'eval', 'bfcl', `${label}.json`),
  /** One chunk of an evaluation run in chunks (`eval.bfcl.chunkSize`), beside its results file `resultKey`. */
  bfclChunk: (resultKey: string, index: number) => `${resultKey.replace(/\.json$/, '')}/chunk-${String(index).padStart(5, '0')}.json`,
  /** τ²-Bench results of a policy: `runs/<id>/eval/tau2/<label>.json` (and `.summary.json`). */
  tau2: (runId: string, label: string) => runKey(runId, 'eval', 'tau2', `${label}.json`),
  /** The folder of a run's τ²-Bench results (the report lists its `<label>.summary.json`). */
  tau2Folder: (runId: string) => runKey(runId, 'eval', 'tau2'),
  /** One finished τ²-Bench episode (tau2's simulation and reward), beside its results file `resultKey`. */
  tau2Episode: (resultKey: string, domain: string, taskId: string, trial: number) => `${resultKey.replace(/\.json$/, '')}/${domain}/${encodeURIComponent(taskId)}-t${trial}.json`,
  /** A multi-turn entry's episode (transcript and verdict) within a chunk: a killed worker redoes none that finished. */
  bfclEpisode: (resultKey: string, index: number, entryId: string) => `${resultKey.replace(/\.json$/, '')}/chunk-${String(index).padStart(5, '0')}/${entryId}.json`,
};

/** The pipeline's own objects: its input, stage markers and the report. */
/** Experiment trackers (issue 35): per tracker, what it has (`cursor.json`) and the batch being delivered (`pending.json`). */
export const trackKeys = {
  cursor: (runId: string, tracker: string) => runKey(runId, 'tracking', tracker, 'cursor.json'),
  pending: (runId: string, tracker: string) => runKey(runId, 'tracking', tracker, 'pending.json'),
};

export const pipelineKeys = {
  input: (runId: string) => runKey(runId, 'pipeline', 'input.json'),
  marker: (runId: string, stage: string) => runKey(runId, 'pipeline', `${stage}.json`),
  reportHtml: (runId: string) => runKey(runId, 'report', 'report.html'),
  reportData: (runId: string) => runKey(runId, 'report', 'report.json'),
};

/**
 * The project's custom search attributes: registered on the namespace by `cm2 infra up` (and the test
 * infrastructure), set by the workflows, visible and filterable in the Temporal Web UI
 * (e.g. `Cm2Stage = "prepare" AND Cm2RunId = "demo"`).
 */
export const CM2_RUN_ID = defineSearchAttributeKey('Cm2RunId', SearchAttributeType.KEYWORD);
export const CM2_STAGE = defineSearchAttributeKey('Cm2Stage', SearchAttributeType.KEYWORD);
export const CM2_STATE = defineSearchAttributeKey('Cm2State', SearchAttributeType.KEYWORD);
export const CM2_STEP = defineSearchAttributeKey('Cm2Step', SearchAttributeType.INT);
export const CM2_MEAN_REWARD = defineSearchAttributeKey('Cm2MeanReward', SearchAttributeType.DOUBLE);

/** `--search-attribute NAME=Type` values for `temporal server start-dev`. */
export const SEARCH_ATTRIBUTE_FLAGS: string[] = [
  'Cm2RunId=Keyword',
  'Cm2Stage=Keyword',
  'Cm2State=Keyword',
  'Cm2Step=Int',
  'Cm2MeanReward=Double',
];

/** A stored policy: an HF-layout folder (the SFT output, an uploaded base) or an RL checkpoint manifest. */
export const PolicyRef = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('hf'), prefix: z.string().min(1) }),
  z.object({ kind: z.literal('ckpt'), manifestKey: z.string().min(1), step: z.number().int().nonnegative() }),
]);
export type PolicyRef = z.infer<typeof PolicyRef>;

/** The policy's identity: equal for the same stored weights. */
export const policyKey = (p: PolicyRef): string => (p.kind === 'hf' ? `hf:${p.prefix}` : `ckpt:${p.manifestKey}`);
