/** Inputs and outputs of the tracking workflow's activity (plain JSON, zod-checked at the activity's door). */
import { z } from 'zod';
import { TrackerConfig } from '../../run/trackingConfig';

export const TrackSyncInput = z.object({
  runId: z.string().min(1),
  trackers: z.array(TrackerConfig).min(1),
  /** The run ended so: the trackers mark it (MLflow's run status) after the last points. */
  end: z.enum(['FINISHED', 'FAILED', 'KILLED']).optional(),
});
export type TrackSyncInput = z.input<typeof TrackSyncInput>;

export const TrackSyncResult = z.object({
  trackers: z.array(z.object({ tracker: z.string(), points: z.number().int(), params: z.number().int(), redelivered: z.boolean(), finished: z.boolean() })),
});
export type TrackSyncResult = z.infer<typeof TrackSyncResult>;
