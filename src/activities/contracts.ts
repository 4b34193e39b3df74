/**
 * The contracts of the activities a worker in another language may serve (issue 32: the training activities on the
 * `train` queue, served by PyTorch workers): each activity's input and result as JSON Schema, generated from the zod
 * shapes the TypeScript worker parses them with (one definition, no hand copies), and the failure types that are not
 * retried. `npx tsx scripts/export-contracts.ts` writes them to python/cm2_torch/cm2_torch/contracts.json, where the
 * Python worker validates what it receives and returns; test/unit/activities/contracts.test.ts fails when the committed
 * file is not what the shapes give.
 *
 * Inputs are described as they may arrive (`io: 'input'`: fields with a default may be absent); results as they are
 * produced. Values JSON Schema cannot state (none at present) would be left open rather than refused.
 */
import { z } from 'zod';
import { AdvantagesFile, RlTrainInput, RlTrainResult, RolloutFile } from '../stages/rl/shapes';
import { CheckpointManifest } from '../storage/checkpoints';
import { S3Config } from '../run/s3Config';
import { TemporalConfig } from '../run/temporalConfig';
import { SftDataRow, SftPlanFile, SftTrainInput, SftTrainResult } from '../stages/sft/shapes';
import { NON_RETRYABLE_TYPES } from '../run/workflowUtil';

/** Where the contracts are committed, from the project root. */
export const CONTRACTS_PATH = 'python/cm2_torch/cm2_torch/contracts.json';

/** The activities of the train queue, with their shapes. */
export const TRAIN_ACTIVITIES = {
  rlTrain: { input: RlTrainInput, result: RlTrainResult },
  sftTrain: { input: SftTrainInput, result: SftTrainResult },
} as const;

export interface ActivityContracts {
  /** Bumped when the file's own layout changes (not the shapes'). */
  format: 1;
  /** ApplicationFailure types a stage activity fails with at once (the workflows do not retry them). */
  nonRetryableErrorTypes: string[];
  activities: Record<string, { input: unknown; result: unknown }>;
  /** The files those activities read and write in S3, as the TypeScript side writes them. */
  files: Record<string, unknown>;
  /** The config sections a worker needs (connection, queues, bucket), with every default filled in. */
  defaults: { temporal: { address: string; namespace: string; taskQueues: Record<string, string | undefined> }; s3: Record<string, unknown> };
}

/** The files of the train queue's activities: the batch and the SFT plan and data they read, the checkpoint manifest they write. */
export const TRAIN_FILES = { rollouts: RolloutFile, advantages: AdvantagesFile, checkpointManifest: CheckpointManifest, sftPlan: SftPlanFile, sftData: SftDataRow } as const;

export function trainContracts(): ActivityContracts {
  const schema = (s: z.ZodType, io: 'input' | 'output') => z.toJSONSchema(s, { io, unrepresentable: 'any', target: 'draft-2020-12' });
  return {
    format: 1,
    nonRetryableErrorTypes: [...NON_RETRYABLE_TYPES],
    activities: Object.fromEntries(Object.entries(TRAIN_ACTIVITIES).map(([name, c]) => [name, { input: schema(c.input, 'input'), result: schema(c.result, 'output') }])),
    files: Object.fromEntries(Object.entries(TRAIN_FILES).map(([name, s]) => [name, schema(s, 'output')])),
    defaults: { temporal: pick(TemporalConfig.parse({}), ['address', 'namespace', 'taskQueues', 'apiKeyEnv']), s3: S3Config.parse({}) },
  };
}

const pick = <T extends object, K extends keyof T>(o: T, keys: K[]): Pick<T, K> => Object.fromEntries(keys.map((k) => [k, o[k]])) as Pick<T, K>;

/** The file's text: stable key order (as generated), two-space indent, a final newline. */
export const contractsText = (c: ActivityContracts = trainContracts()): string => `${JSON.stringify(c, null, 2)}\n`;
