/**
 * Inputs and progress shapes of the workflows: plain JSON, small, no secrets (API keys and S3 credentials
 * are resolved by the workers from their environment). Types only, so workflow code can import them.
 */
import type { ChecklistConfig, DataConfig, SftConfig } from './config';
import type { LlmConfig } from '../llm/llmConfig';
import type { Effort } from '../kernel/roleContracts';

export interface ActivityTimeouts {
  /** Per attempt. */
  startToCloseTimeout: string;
  /** How fast a dead worker is detected. */
  heartbeatTimeout: string;
  /** Cap of the retry backoff (outages are waited out, attempts are unlimited). */
  maxRetryInterval: string;
}

export interface PrepareWorkflowInput {
  runId: string;
  data: DataConfig;
  llm: LlmConfig;
  /** The LLM-filter cascade, resolved from the config (effort of each pass). */
  llmFilterPasses: Effort[];
  taskQueues: { api: string; gpu: string };
  activity: ActivityTimeouts;
}

export interface ChecklistWorkflowInput {
  runId: string;
  /** S3 key of the JSONL file of examples to annotate (default: the prepare stage's RL split). */
  sourceKey: string;
  checklist: ChecklistConfig;
  llm: LlmConfig;
  taskQueues: { api: string; gpu: string };
  activity: ActivityTimeouts;
}

export interface SftWorkflowInput {
  runId: string;
  sft: SftConfig;
  /** JSONL of training dialogues (default: the cold-start split). */
  sourceKey: string;
  /** JSONL of held-out dialogues for the format check (default: the RL split). */
  evalSourceKey: string;
  /** `train`: where `sftTrain` goes (absent: the gpu queue). */
  taskQueues: { api: string; gpu: string; train?: string };
  activity: ActivityTimeouts;
}

/** One phase of a stage with its own counter (phases that run at the same time each have one). */
export interface PhaseProgress {
  name: string;
  /** Units (shards, steps) done in this phase; never above `total`. */
  done: number;
  total: number;
}

export interface StageProgress {
  stage: string;
  /** The running phase, or the running phases joined by ' + ' (e.g. `compression + selection`). */
  phase: string;
  /** Units done in the running phase(s), summed over `phases`. */
  done: number;
  total: number;
  /**
   * The running phases, each counted against its own total (the prepare stage runs compression and selection at the
   * same time). Absent in progress reported by older workflow code: readers fall back to `phase`/`done`/`total`.
   */
  phases?: PhaseProgress[];
  /** Examples after each finished phase. */
  counts: Record<string, number>;
}
