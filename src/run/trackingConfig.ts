/**
 * The `tracking` section of the config (issue 35): experiment trackers that receive a run's metrics, parameters and
 * results, any number of them. Secrets never live here: MLflow's credentials come from the environment as for its own
 * client (`MLFLOW_TRACKING_TOKEN`, or `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`), W&B's API key from
 * `WANDB_API_KEY` when `wandb sync` uploads.
 */
import { z } from 'zod';

const name = z.string().min(1).max(256);

export const MlflowTracker = z.object({
  kind: z.literal('mlflow'),
  uri: z.url().describe('MLflow tracking server, e.g. `http://127.0.0.1:5000` (its REST API, `/api/2.0/mlflow/...`).'),
  experiment: name.default('cm2').describe('Experiment name; created when missing.'),
  runName: name.optional().describe('Run name shown by MLflow; default: the cm2 run id.'),
});

export const TensorBoardTracker = z.object({
  kind: z.literal('tensorboard'),
  dir: z.string().min(1).describe('Log directory on the machine of the api worker that syncs (one subfolder per run: `<dir>/<run id>`); `tensorboard --logdir <dir>` reads it.'),
});

export const WandbTracker = z.object({
  kind: z.literal('wandb'),
  project: name.describe('W&B project.'),
  entity: name.optional().describe('W&B entity (team or user); default: the API key\'s.'),
  mode: z.enum(['offline', 'online']).default('offline').describe('`offline`: run files under `dir` that `wandb sync` uploads; `online`: uploaded as logged (needs `WANDB_API_KEY`).'),
  dir: z.string().min(1).default('wandb').describe('Where the run files go (`<dir>/<run>/batch-N/wandb/`), on the machine of the api worker that syncs (it needs `node scripts/ensure-trackers.mjs`: W&B\'s own client writes them).'),
});

export const TrackerConfig = z.discriminatedUnion('kind', [MlflowTracker, TensorBoardTracker, WandbTracker]);
export type TrackerConfig = z.infer<typeof TrackerConfig>;

export const TrackingConfig = z.array(TrackerConfig).default([])
  .describe('Experiment trackers that receive every SFT and RL step, the run\'s config as parameters and its results (`[{kind: mlflow, uri, experiment}, {kind: tensorboard, dir}, {kind: wandb, project, mode}]`); synced from S3 by the run\'s tracking workflow, so a tracker outage never fails or slows the run (docs/tracking.md).');

/** A tracker's stable id within a run: its cursor and pending batch in S3 are named by it. */
export function trackerId(t: TrackerConfig): string {
  const base = t.kind === 'mlflow' ? `${t.uri}|${t.experiment}` : t.kind === 'tensorboard' ? t.dir : `${t.entity ?? ''}/${t.project}|${t.mode}|${t.dir}`;
  let h = 0x811c9dc5;
  for (const ch of base) h = Math.imul(h ^ ch.charCodeAt(0), 0x01000193) >>> 0;
  return `${t.kind}-${h.toString(16).padStart(8, '0')}`;
}
