/**
 * What the progress line says beside a stage's own progress: the running activity's heartbeat (SFT step and loss),
 * an activity that is retrying (its attempt and last failure), and a task queue that has work waiting but no worker
 * polling it (a dead or missing worker: the run is not stuck in the method, it waits for a process).
 *
 * The facts come from Temporal, which outlives workers: the workflow description's pending activities and
 * `DescribeTaskQueue`'s pollers. The shaping is pure (`activityNotes`), the looking (`RunWatch`) never throws: a
 * watch that cannot see something says less, it never stops the CLI.
 */
import type { WorkflowClient } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { StageProgress } from '../run/workflowShapes';

/** A failure chain as one line: each distinct message, outermost first (at most four). */
export function failureText(f: unknown): string {
  const parts: string[] = [];
  let cur = f as { message?: string | null; cause?: unknown } | null | undefined;
  while (cur && parts.length < 4) {
    if (cur.message && !parts.includes(cur.message)) parts.push(cur.message);
    cur = cur.cause as typeof cur;
  }
  return parts.join(': ');
}

/** The innermost message of a failure chain (the root cause: an activity's own error), or ''. */
export function rootCauseText(f: unknown): string {
  let cur = f as { message?: string | null; cause?: unknown } | null | undefined;
  let last = '';
  for (let depth = 0; cur && depth < 12; depth++) {
    if (cur.message) last = cur.message;
    cur = cur.cause as typeof cur;
  }
  return last;
}

/** A protobuf timestamp (seconds as number, string or Long) in epoch ms; undefined when absent or zero. */
export function timestampMs(t: unknown): number | undefined {
  const o = t as { seconds?: number | string | { toNumber(): number } | null; nanos?: number | null } | null | undefined;
  if (!o) return undefined;
  const s = typeof o.seconds === 'object' && o.seconds !== null ? o.seconds.toNumber() : Number(o.seconds ?? 0);
  const ms = s * 1000 + (o.nanos ?? 0) / 1e6;
  return ms > 0 ? ms : undefined;
}

/** Seconds as a short duration: `45s`, `3m10s`, `1h05m`. */
export function shortDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** A pending activity as the watch sees it (from `PendingActivityInfo`). */
export interface PendingView {
  type: string;
  /** scheduled (waiting for a worker or for its retry backoff) | started | other */
  state: 'scheduled' | 'started' | 'other';
  attempt: number;
  lastFailure?: string;
  taskQueue?: string;
  /** Epoch ms since which it waits for a worker to pick it up (scheduled only). */
  waitingSince?: number;
  /** Epoch ms of its next attempt while it waits out a retry backoff. */
  nextAttemptAt?: number;
}

/** The latest poll seen on a task queue: epoch ms, or null when Temporal knows no poller at all. */
export type LastPoll = number | null;

/** How long work may wait with no poll on its queue before the line says no worker is polling it. */
export const NO_POLLER_AFTER_S = 20;
/** Idle workers long-poll: a poll can be this old while its worker is alive and waiting (the server's poll timeout). */
export const LONG_POLL_S = 70;

const short = (text: string, max = 90) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);
/** A wait in 5 s steps: the line changes (and a log gets a new line) every 5 s, not every second. */
const coarse = (ms: number) => shortDuration(Math.floor(ms / 5000) * 5);

/**
 * Notes for the progress line (pure): retries (`sftTrain attempt 2, last failure: …`), waits for a worker
 * (`waiting 1m20s: no worker polling cm2-gpu (last poll 1m25s ago)`), or for a worker busy with this run's other work
 * on the same queue (`waiting 2m20s: the workers on cm2-gpu are busy (evalBfclChunk running)`). `lastPoll` maps a queue
 * to its latest poll; a queue missing from it was not looked at.
 */
export function activityNotes(pending: readonly PendingView[], lastPoll: ReadonlyMap<string, LastPoll>, now: number): string[] {
  const notes: string[] = [];
  // What runs on each queue: a worker busy with this run's other work does not poll, and its last poll ages while it
  // runs (the gpu worker of a BFCL evaluation holds one chunk while the next waits). A dead worker's activities stop
  // being `started` once their heartbeat times out, so the note then says nobody polls.
  const running = new Map<string, string[]>();
  for (const p of pending) {
    if (p.state !== 'started' || p.taskQueue === undefined) continue;
    const types = running.get(p.taskQueue) ?? [];
    if (!types.includes(p.type)) types.push(p.type);
    running.set(p.taskQueue, types);
  }
  for (const p of pending) {
    const parts: string[] = [];
    if (p.attempt > 1) parts.push(`${p.type} attempt ${p.attempt}${p.lastFailure ? `, last failure: ${short(p.lastFailure)}` : ''}`);
    if (p.state === 'scheduled') {
      if (p.nextAttemptAt !== undefined && p.nextAttemptAt > now) {
        if (p.nextAttemptAt - now >= 1000) parts.push(`next try in ${shortDuration((p.nextAttemptAt - now) / 1000)}`);
      } else if (p.waitingSince !== undefined && now - p.waitingSince >= NO_POLLER_AFTER_S * 1000) {
        const waited = coarse(now - p.waitingSince);
        const queue = p.taskQueue;
        const poll = queue !== undefined ? lastPoll.get(queue) : undefined;
        const label = parts.length ? '' : `${p.type} `;
        const busy = queue !== undefined ? running.get(queue) : undefined;
        if (busy !== undefined) parts.push(`${label}waiting ${waited}: the workers on ${queue} are busy (${busy.join(', ')} running)`);
        else if (queue !== undefined && poll === null) parts.push(`${label}waiting ${waited}: no worker polling ${queue}`);
        else if (queue !== undefined && typeof poll === 'number' && now - poll >= NO_POLLER_AFTER_S * 1000) {
          parts.push(`${label}waiting ${waited}: no worker polling ${queue} (last poll ${coarse(now - poll)} ago)`);
        } else parts.push(`${label}waiting ${waited} for a worker${queue ? ` on ${queue}` : ''}`);
      }
    }
    if (parts.length) notes.push(parts.join(', '));
  }
  return notes;
}

/** A note for a workflow task queue whose workflow does not answer queries and which nobody polls (pure). */
export function workflowQueueNote(queue: string, poll: LastPoll | undefined, now: number): string | undefined {
  if (poll === undefined) return undefined;
  if (poll === null) return `no worker polling ${queue}`;
  const age = (now - poll) / 1000;
  return age >= LONG_POLL_S ? `no worker polling ${queue} (last poll ${coarse(now - poll)} ago)` : undefined;
}

/** `PendingActivityInfo` (raw proto of a workflow description) → `PendingView`. */
export function pendingView(p: temporal.api.workflow.v1.IPendingActivityInfo): PendingView {
  const S = temporal.api.enums.v1.PendingActivityState;
  const state = p.state === S.PENDING_ACTIVITY_STATE_SCHEDULED ? 'scheduled' : p.state === S.PENDING_ACTIVITY_STATE_STARTED ? 'started' : 'other';
  const attempt = Number(p.attempt ?? 1) || 1;
  const scheduled = timestampMs(p.scheduledTime);
  const lastComplete = timestampMs(p.lastAttemptCompleteTime);
  const next = timestampMs(p.nextAttemptScheduleTime);
  // A retry waits for a worker from its backoff's end; a first attempt from its scheduling.
  const waitingSince = attempt > 1 ? next ?? lastComplete ?? scheduled : scheduled;
  const failure = failureText(p.lastFailure);
  const queue = p.activityOptions?.taskQueue?.name;
  return {
    type: p.activityType?.name ?? 'activity',
    state,
    attempt,
    ...(failure ? { lastFailure: failure } : {}),
    ...(queue ? { taskQueue: queue } : {}),
    ...(state === 'scheduled' && waitingSince !== undefined ? { waitingSince } : {}),
    ...(state === 'scheduled' && next !== undefined ? { nextAttemptAt: next } : {}),
  };
}

/** The first pending activity's heartbeat details (the object it reported), or undefined. */
export function heartbeatDetails(pending: readonly temporal.api.workflow.v1.IPendingActivityInfo[]): Record<string, unknown> | undefined {
  try {
    const payload = pending[0]?.heartbeatDetails?.payloads?.[0];
    if (!payload?.data) return undefined;
    const details = JSON.parse(Buffer.from(payload.data).toString('utf8')) as unknown;
    return details && typeof details === 'object' && !Array.isArray(details) ? (details as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** The first pending activity's heartbeat details as `key=value` text (SFT step, loss), or ''. */
export function heartbeatText(pending: readonly temporal.api.workflow.v1.IPendingActivityInfo[]): string {
  const details = heartbeatDetails(pending);
  if (!details) return '';
  return Object.entries(details)
    .map(([k, v]) => `${k}=${typeof v === 'number' && !Number.isInteger(v) ? v.toFixed(3) : String(v)}`)
    .join(' ');
}

/**
 * A stage's progress with the bar taken from its running activity's heartbeat when the workflow has no count of its
 * own (SFT reports `step`/`total` only from inside `sftTrain`). Pure; the input is not changed.
 */
export function withHeartbeatCount(p: StageProgress, details: Record<string, unknown> | undefined): StageProgress {
  if (!p || !details || (typeof p.total === 'number' && p.total > 0) || (Array.isArray(p.phases) && p.phases.length > 1)) return p;
  const total = details['total'];
  const done = details['step'] ?? details['done'];
  if (typeof total !== 'number' || typeof done !== 'number' || !(total > 0)) return p;
  return { ...p, done, total, phases: [] };
}

/**
 * Looks at a workflow for the progress line: heartbeat and notes. Task queues are described only when work waits on
 * them, at most every `queueEveryMs`. Every error is swallowed (the result is then just shorter).
 */
export class RunWatch {
  private readonly polls = new Map<string, { at: number; last: LastPoll }>();

  constructor(
    private readonly client: WorkflowClient,
    private readonly opts: { queueEveryMs?: number; now?: () => number } = {},
  ) {}

  private now(): number {
    return this.opts.now?.() ?? Date.now();
  }

  /** The latest poll on a queue (cached for `queueEveryMs`); undefined when it could not be described. */
  async lastPoll(queue: string, kind: 'workflow' | 'activity'): Promise<LastPoll | undefined> {
    const key = `${kind}:${queue}`;
    const cached = this.polls.get(key);
    if (cached && this.now() - cached.at < (this.opts.queueEveryMs ?? 5000)) return cached.last;
    try {
      const res = await this.client.workflowService.describeTaskQueue({
        namespace: this.client.options.namespace,
        taskQueue: { name: queue, kind: temporal.api.enums.v1.TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
        taskQueueType: kind === 'workflow' ? temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW : temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
      });
      const times = (res.pollers ?? []).map((p) => timestampMs(p.lastAccessTime)).filter((t): t is number => t !== undefined);
      const last = times.length ? Math.max(...times) : null;
      this.polls.set(key, { at: this.now(), last });
      return last;
    } catch {
      return undefined;
    }
  }

  /** Heartbeat text and notes of a workflow's pending activities. Never throws. */
  async look(workflowId: string): Promise<{ heartbeat: string; details?: Record<string, unknown>; notes: string[] }> {
    try {
      const raw = (await this.client.getHandle(workflowId).describe()).raw;
      const pending = raw.pendingActivities ?? [];
      const views = pending.map(pendingView);
      const polls = new Map<string, LastPoll>();
      for (const v of views) {
        if (v.state !== 'scheduled' || !v.taskQueue || polls.has(v.taskQueue)) continue;
        const last = await this.lastPoll(v.taskQueue, 'activity');
        if (last !== undefined) polls.set(v.taskQueue, last);
      }
      const notes = activityNotes(views, polls, this.now());
      const wft = raw.pendingWorkflowTask;
      if (wft && Number(wft.attempt ?? 1) > 1) notes.push(`workflow task attempt ${Number(wft.attempt)} (a workflow worker keeps failing it: \`cm2 logs\`)`);
      const details = heartbeatDetails(pending);
      return { heartbeat: heartbeatText(pending), ...(details ? { details } : {}), notes };
    } catch {
      return { heartbeat: '', notes: [] };
    }
  }

  /** A note when the workflows queue has nobody polling it (used when a workflow query gets no answer). */
  async workflowQueue(queue: string): Promise<string | undefined> {
    return workflowQueueNote(queue, await this.lastPoll(queue, 'workflow'), this.now());
  }
}
