/** `cm2 logs RUN`: a run's Temporal histories (pipeline and stages) as timed lines, optionally followed. */
import type { Client } from '@temporalio/client';
import { z } from 'zod';
import { Cm2Config } from '../run/config';
import { pipelineWorkflowId, stageOfWorkflowId, STAGES, stageWorkflowId, trackWorkflowId } from '../run/layout';
import { connect } from './pipelineCommand';
import { failureText } from './watch';
import { describeWorkflow, fmtSeconds } from './runStatus';

export const HistoryEvent = z.looseObject({ eventId: z.unknown(), eventTime: z.unknown() });
export const tsMs = (t: unknown): number => {
  const o = t as { seconds?: number | { toNumber(): number } | string; nanos?: number } | null;
  if (!o) return 0;
  const s = typeof o.seconds === 'object' && o.seconds !== null ? o.seconds.toNumber() : Number(o.seconds ?? 0);
  return s * 1000 + (o.nanos ?? 0) / 1e6;
};

export interface LogLine {
  time: number;
  source: string;
  text: string;
}

/** Human lines for the events of one workflow history (pure; `source` names the workflow). */
export function historyLines(source: string, events: readonly Record<string, unknown>[]): LogLine[] {
  const out: LogLine[] = [];
  const activityType = new Map<string, string>();
  const startedAt = new Map<string, number>();
  for (const raw of events) {
    const ev = HistoryEvent.parse(raw) as Record<string, unknown>;
    const time = tsMs(ev['eventTime']);
    const attr = (name: string) => ev[name] as Record<string, unknown> | null | undefined;
    const push = (text: string) => out.push({ time, source, text });
    const id = String(ev['eventId']);
    let a;
    if ((a = attr('workflowExecutionStartedEventAttributes'))) push(`started (${(a['workflowType'] as { name?: string } | undefined)?.name ?? 'workflow'}${(a['continuedExecutionRunId'] as string | undefined) ? ', continued as new' : ''})`);
    else if ((a = attr('activityTaskScheduledEventAttributes'))) {
      const type = (a['activityType'] as { name?: string } | undefined)?.name ?? '?';
      activityType.set(id, type);
      startedAt.set(id, time);
    } else if ((a = attr('activityTaskStartedEventAttributes'))) {
      const attempt = Number(a['attempt'] ?? 1);
      if (attempt > 1) push(`${activityType.get(String(a['scheduledEventId'])) ?? 'activity'} attempt ${attempt} (earlier attempts failed: ${failureText(a['lastFailure']) || 'see the Web UI'})`);
    } else if ((a = attr('activityTaskCompletedEventAttributes'))) {
      const sid = String(a['scheduledEventId']);
      const t0 = startedAt.get(sid);
      push(`${activityType.get(sid) ?? 'activity'} done${t0 !== undefined ? ` in ${fmtSeconds((time - t0) / 1000)}` : ''}`);
    } else if ((a = attr('activityTaskFailedEventAttributes'))) push(`${activityType.get(String(a['scheduledEventId'])) ?? 'activity'} FAILED: ${failureText(a['failure'])}`);
    else if ((a = attr('activityTaskTimedOutEventAttributes'))) push(`${activityType.get(String(a['scheduledEventId'])) ?? 'activity'} timed out: ${failureText(a['failure'])}`);
    else if ((a = attr('workflowExecutionSignaledEventAttributes'))) push(`signal ${String(a['signalName'])}`);
    else if ((a = attr('workflowExecutionUpdateAcceptedEventAttributes'))) push(`update ${String((a['acceptedRequest'] as { input?: { name?: string } } | undefined)?.input?.name ?? '')} accepted`);
    else if ((a = attr('startChildWorkflowExecutionInitiatedEventAttributes'))) push(`stage ${String(a['workflowId'])} starting`);
    else if ((a = attr('childWorkflowExecutionCompletedEventAttributes'))) push(`stage ${String((a['workflowExecution'] as { workflowId?: string } | undefined)?.workflowId)} completed`);
    else if ((a = attr('childWorkflowExecutionFailedEventAttributes'))) push(`stage ${String((a['workflowExecution'] as { workflowId?: string } | undefined)?.workflowId)} FAILED: ${failureText(a['failure'])}`);
    else if ((a = attr('childWorkflowExecutionCanceledEventAttributes'))) push(`stage ${String((a['workflowExecution'] as { workflowId?: string } | undefined)?.workflowId)} cancelled`);
    else if ((a = attr('childWorkflowExecutionTerminatedEventAttributes'))) push(`stage ${String((a['workflowExecution'] as { workflowId?: string } | undefined)?.workflowId)} terminated`);
    else if (attr('workflowExecutionCompletedEventAttributes')) push('completed');
    else if ((a = attr('workflowExecutionFailedEventAttributes'))) push(`FAILED: ${failureText(a['failure'])}`);
    else if (attr('workflowExecutionContinuedAsNewEventAttributes')) push('continued as new (history kept small)');
    else if ((a = attr('workflowExecutionTerminatedEventAttributes'))) push(`terminated${a['reason'] ? `: ${String(a['reason'])}` : ''}`);
    else if (attr('workflowExecutionCanceledEventAttributes')) push('cancelled');
    else if ((a = attr('workflowTaskFailedEventAttributes'))) push(`workflow task failed (a worker problem, retried): ${failureText(a['failure'])}`);
  }
  return out;
}

/** Every execution (continue-as-new chains included) of the run's workflows, oldest first, as log lines. */
export async function runLogLines(client: Client, runId: string): Promise<LogLine[]> {
  // the stages, and the experiment trackers' sync (`tracking`): a tracker's outage shows as its retries
  const ids = [pipelineWorkflowId(runId), ...STAGES.map((s) => stageWorkflowId(runId, s)), trackWorkflowId(runId)];
  const lines: LogLine[] = [];
  for (const workflowId of ids) {
    const executions: string[] = [];
    for await (const w of client.workflow.list({ query: `WorkflowId = "${workflowId}"` })) executions.push(w.runId);
    for (const execRunId of executions) {
      const history = await client.workflow.getHandle(workflowId, execRunId).fetchHistory();
      lines.push(...historyLines(stageOfWorkflowId(runId, workflowId) ?? workflowId, (history.events ?? []) as unknown as Record<string, unknown>[]));
    }
    // Retries in progress are not in history until they end: show them from the description.
    const d = await describeWorkflow(client, workflowId);
    for (const p of d?.raw.pendingActivities ?? []) {
      if ((p.attempt ?? 1) > 1) {
        lines.push({ time: Date.now(), source: stageOfWorkflowId(runId, workflowId) ?? workflowId, text: `now: ${p.activityType?.name ?? 'activity'} attempt ${p.attempt}, last failure: ${failureText(p.lastFailure)}` });
      }
    }
  }
  return lines.sort((a, b) => a.time - b.time);
}

export async function logsCommand(cfg: Cm2Config, runId: string, follow: boolean): Promise<void> {
  const { client } = await connect(cfg);
  const print = (l: LogLine) => console.log(`${new Date(l.time).toISOString().replace('T', ' ').slice(0, 19)}  ${l.source.padEnd(9)} ${l.text}`);
  const key = (l: LogLine) => `${l.time}|${l.source}|${l.text}`;
  const shown = new Set<string>();
  for (;;) {
    const lines = await runLogLines(client, runId);
    if (lines.length === 0 && shown.size === 0) {
      console.log(`no workflows of run ${runId} (\`cm2 status\` lists the runs)`);
      return;
    }
    for (const l of lines) {
      if (l.text.startsWith('now: ')) continue;
      if (!shown.has(key(l))) {
        shown.add(key(l));
        print(l);
      }
    }
    const now = lines.filter((l) => l.text.startsWith('now: '));
    if (!follow) {
      for (const l of now) print(l);
      return;
    }
    const d = await describeWorkflow(client, pipelineWorkflowId(runId));
    if (d && d.status.name !== 'RUNNING') return;
    await new Promise((r) => setTimeout(r, 2000));
  }
}
