/** What a workflow's histories say about its activities (integration tests). */
import type { temporal } from '@temporalio/proto';
import { connectClient } from '../../src/infra/temporal';
import type { Cm2Config } from '../../src/run/config';

/** Every activity execution of a workflow id (all runs of a continue-as-new chain): type, worker identity, input. */
export async function activityStarts(cfg: Cm2Config, workflowId: string) {
  const client = await connectClient(cfg);
  const out: { type: string; identity: string; taskQueue: string; input: Record<string, unknown>; scheduledAt: number; closedAt: number }[] = [];
  const seenRuns = new Set<string>();
  // Walk the continue-as-new chain from its first run.
  const latest = await client.workflow.getHandle(workflowId).describe();
  let runId: string | undefined = latest.raw.workflowExecutionInfo?.firstRunId || latest.runId;
  let order = 0;
  while (runId && !seenRuns.has(runId)) {
    seenRuns.add(runId);
    const history = await client.workflow.getHandle(workflowId, runId).fetchHistory();
    const scheduled = new Map<number, { type: string; taskQueue: string; input: Record<string, unknown>; at: number }>();
    const started = new Map<number, string>();
    let next: string | undefined;
    for (const e of history.events ?? []) {
      order++;
      const id = Number(e.eventId);
      const s = e.activityTaskScheduledEventAttributes;
      if (s) {
        const data = s.input?.payloads?.[0]?.data;
        scheduled.set(id, { type: s.activityType?.name ?? '', taskQueue: s.taskQueue?.name ?? '', input: data ? (JSON.parse(Buffer.from(data).toString()) as Record<string, unknown>) : {}, at: order });
      }
      const st = e.activityTaskStartedEventAttributes;
      if (st) started.set(Number(st.scheduledEventId), st.identity ?? '');
      const closed = (e.activityTaskCompletedEventAttributes ?? e.activityTaskFailedEventAttributes) as temporal.api.history.v1.IActivityTaskCompletedEventAttributes | null | undefined;
      if (closed) {
        const sch = scheduled.get(Number(closed.scheduledEventId));
        if (sch) out.push({ type: sch.type, taskQueue: sch.taskQueue, identity: started.get(Number(closed.scheduledEventId)) ?? '', input: sch.input, scheduledAt: sch.at, closedAt: order });
      }
      const can = e.workflowExecutionContinuedAsNewEventAttributes;
      if (can) next = can.newExecutionRunId ?? undefined;
    }
    runId = next;
  }
  return out;
}
