/**
 * Inputs and progress shapes of the workflows: plain JSON, small, no secrets (API keys and S3 credentials
 * are resolved by the workers from their environment). Types only, so workflow code can import them.
 */
import type { ChecklistConfig, DataConfig, SftConfig } from '../infra/config';
import type { LlmConfig } from '../infra/llm/config';
import type { Effort } from '../data/roles';

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
  taskQueues: { api: string; gpu: string };
  activity: ActivityTimeouts;
}

export interface StageProgress {
  stage: string;
  phase: string;
  /** Shards done in the current phase. */
  done: number;
  total: number;
  /** Examples after each finished phase. */
  counts: Record<string, number>;
}
