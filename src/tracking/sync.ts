/**
 * Brings one experiment tracker up to date with a run's S3 (issue 35), exactly once:
 *
 * 1. A batch left by an attempt that died while delivering it (`pending.json`) is delivered again, unchanged,
 *    timestamps included: trackers that keep a value per (key, step, timestamp) drop the copy (MLflow), files are
 *    written again under the same name (TensorBoard).
 * 2. The new points (past the cursor: for every series, the last step the tracker has), the parameters if not sent,
 *    links that changed, and the end of the run when it ended, become the next batch: written to `pending.json`
 *    first, then delivered, then the cursor advances and the pending batch goes.
 *
 * A crash between any two of those writes leaves either the old cursor and no batch (the batch is made again from
 * the same sources), or the batch (delivered again, 1.), never a gap or a second copy. Sources only grow, so the
 * cursor's "last step per series" is all a tracker needs to say what it lacks.
 */
import { z } from 'zod';
import { ifExists, type ObjectStore } from '../storage/store';
import { trackKeys } from '../run/layout';
import type { TrackerConfig } from '../run/trackingConfig';
import { trackerId } from '../run/trackingConfig';
import { advance, emptyCursor, metricPoints, newPoints, settingsParams, type MetricPoint, type TrackCursor } from './records';
import { readTrackSources } from './sources';

export type { RunEnd } from '../run/control';
import type { RunEnd } from '../run/control';

export interface TrackBatch {
  /** 1, 2, …: the batch's number for this tracker (TensorBoard names its file by it) */
  seq: number;
  /** epoch ms the batch was made: every point's timestamp */
  time: number;
  points: MetricPoint[];
  params: Record<string, string>;
  tags: Record<string, string>;
  end?: RunEnd;
  /** the tracker had marked the run ended, and it goes on (resumed): mark it running again */
  reopen?: boolean;
}

/** A tracker's side: delivers a batch (idempotently for a batch delivered again); may return ids to keep in the cursor. */
export interface TrackerSink {
  deliver(batch: TrackBatch, cursor: TrackCursor): Promise<Record<string, string> | void>;
}

const Cursor = z.object({
  sent: z.record(z.string(), z.number()),
  params: z.boolean(),
  links: z.record(z.string(), z.string()),
  remote: z.record(z.string(), z.string()).optional(),
  finished: z.boolean().optional(),
  read: z.object({ sft: z.number(), rlStep: z.number(), rlEval: z.number() }).partial().optional(),
  seq: z.number().int().optional(),
});
type StoredCursor = z.infer<typeof Cursor>;

const Pending = z.object({
  batch: z.object({
    seq: z.number().int(),
    time: z.number(),
    points: z.array(z.object({ key: z.string(), step: z.number(), value: z.number() })),
    params: z.record(z.string(), z.string()),
    tags: z.record(z.string(), z.string()),
    end: z.enum(['FINISHED', 'FAILED', 'KILLED']).optional(),
    reopen: z.boolean().optional(),
  }),
  after: Cursor,
});

export interface SyncResult {
  tracker: string;
  points: number;
  params: number;
  /** a batch of an earlier attempt was delivered again */
  redelivered: boolean;
  finished: boolean;
}

/** The highest step among rows of a kind that the tracker has every point of (the next read starts after it). */
function readUpTo(rows: readonly { step: number }[], before: number | undefined): number | undefined {
  let top = before;
  for (const r of rows) if (top === undefined || r.step > top) top = r.step;
  return top;
}

export async function syncTracker(store: ObjectStore, runId: string, tracker: TrackerConfig, sink: TrackerSink, opts: { end?: RunEnd; now?: () => number; log?: (l: string) => void } = {}): Promise<SyncResult> {
  const id = trackerId(tracker);
  const now = opts.now ?? Date.now;
  const cursorKey = trackKeys.cursor(runId, id);
  const pendingKey = trackKeys.pending(runId, id);
  let cursor: StoredCursor = (await ifExists(() => store.getJson(cursorKey, Cursor))) ?? { ...emptyCursor(), read: {}, seq: 0 };
  const wasFinished = cursor.finished === true;
  let redelivered = false;
  const deliver = async (batch: TrackBatch, after: StoredCursor) => {
    const remote = await sink.deliver(batch, cursor);
    cursor = { ...after, ...(remote || cursor.remote ? { remote: { ...cursor.remote, ...after.remote, ...(remote ?? {}) } } : {}) };
    await store.putJson(cursorKey, cursor);
    await store.remove(pendingKey);
  };

  const pending = await ifExists(() => store.getJson(pendingKey, Pending));
  if (pending) {
    opts.log?.(`${id}: delivering again batch ${pending.batch.seq} of an earlier attempt (${pending.batch.points.length} points)`);
    await deliver(pending.batch, pending.after);
    redelivered = true;
  }

  const read = cursor.read ?? {};
  const src = await readTrackSources(store, runId, {
    ...(read.sft !== undefined ? { sftAfter: read.sft } : {}),
    ...(read.rlStep !== undefined ? { rlStepAfter: read.rlStep } : {}),
    ...(read.rlEval !== undefined ? { rlEvalAfter: read.rlEval } : {}),
  });
  const points = newPoints(metricPoints(src), cursor);
  const params = cursor.params || !src.settings ? {} : settingsParams(src.settings);
  const tags: Record<string, string> = {};
  for (const [k, v] of Object.entries(src.links)) if (cursor.links[k] !== v) tags[k] = v;
  if (points.length === 0 && Object.keys(params).length === 0 && Object.keys(tags).length === 0 && !opts.end && !wasFinished) {
    return { tracker: id, points: 0, params: 0, redelivered, finished: false };
  }
  const seq = (cursor.seq ?? 0) + 1;
  const batch: TrackBatch = { seq, time: now(), points, params, tags, ...(opts.end ? { end: opts.end } : wasFinished ? { reopen: true } : {}) };
  const stepRows = src.rlRows.filter((r) => r['kind'] !== 'eval').map((r) => ({ step: Number(r['step']) }));
  const evalRows = src.rlRows.filter((r) => r['kind'] === 'eval').map((r) => ({ step: Number(r['step']) }));
  const nextRead = {
    ...read,
    ...(readUpTo(src.sftSteps, read.sft) !== undefined ? { sft: readUpTo(src.sftSteps, read.sft)! } : {}),
    ...(readUpTo(stepRows, read.rlStep) !== undefined ? { rlStep: readUpTo(stepRows, read.rlStep)! } : {}),
    ...(readUpTo(evalRows, read.rlEval) !== undefined ? { rlEval: readUpTo(evalRows, read.rlEval)! } : {}),
  };
  const after: StoredCursor = {
    ...(advance(cursor as TrackCursor, points) as StoredCursor),
    params: cursor.params || Boolean(src.settings),
    links: { ...cursor.links, ...tags },
    read: nextRead,
    seq,
    // a run resumed after it ended (`cm2 resume` of a stopped run) is running again
    finished: Boolean(opts.end),
  };
  await store.putJson(pendingKey, { batch, after });
  await deliver(batch, after);
  opts.log?.(`${id}: batch ${seq}: ${points.length} points, ${Object.keys(params).length} parameters, ${Object.keys(tags).length} links${opts.end ? `, run ${opts.end}` : ''}`);
  return { tracker: id, points: points.length, params: Object.keys(params).length, redelivered, finished: Boolean(opts.end) };
}
