/**
 * Activities of the `cm2Pipeline` workflow (api queue): stage markers in S3 (a finished stage is not redone when
 * the pipeline is started again) and the HTML report of the run.
 *
 * S3 layout: `runs/<id>/pipeline/<stage>.json` (marker: the stage's result and times), `runs/<id>/report/report.html`
 * and `report.json` (the data the page was drawn from).
 */
import { z } from 'zod';
import { ifExists, runKey, type ObjectStore } from '../../storage/store';
import { collectReport, type StageInfo } from '../../report/collect';
import { renderReport } from '../../report/html';
import { parseInput } from '../activityKit';

const Stage = z.enum(['prepare', 'checklist', 'sft', 'rl', 'eval']);

export const StageMarker = z.object({
  stage: Stage,
  result: z.unknown(),
  startedAt: z.number(),
  closedAt: z.number(),
});
export type StageMarker = z.infer<typeof StageMarker>;

export const StageMarkerInput = z.object({ runId: z.string().min(1), stage: Stage });
export const RecordStageInput = StageMarker.extend({ runId: z.string().min(1) });

export const PipelineReportInput = z.object({
  runId: z.string().min(1),
  status: z.object({
    state: z.string(),
    stages: z.array(z.object({
      name: z.string(),
      state: z.string(),
      workflowId: z.string(),
      startedAt: z.number().optional(),
      closedAt: z.number().optional(),
      error: z.string().optional(),
    })),
  }),
  uiUrl: z.string().optional(),
});

export const markerKey = (runId: string, stage: string) => runKey(runId, 'pipeline', `${stage}.json`);
export const reportHtmlKey = (runId: string) => runKey(runId, 'report', 'report.html');
export const reportDataKey = (runId: string) => runKey(runId, 'report', 'report.json');

export interface PipelineDeps {
  store: ObjectStore;
}

export function createPipelineActivities({ store }: PipelineDeps) {
  return {
    /** The marker of a finished stage, or null. */
    async pipelineStageMarker(raw: z.input<typeof StageMarkerInput>): Promise<StageMarker | null> {
      const input = parseInput(StageMarkerInput, raw, 'pipelineStageMarker');
      return (await ifExists(() => store.getJson(markerKey(input.runId, input.stage), StageMarker))) ?? null;
    },

    /** Marks a stage finished (one whole-object write: atomic). */
    async pipelineRecordStage(raw: z.input<typeof RecordStageInput>): Promise<{ key: string }> {
      const { runId, ...marker } = parseInput(RecordStageInput, raw, 'pipelineRecordStage');
      const key = markerKey(runId, marker.stage);
      await store.putJson(key, marker);
      return { key };
    },

    /** Collects the run's numbers from S3 and writes the HTML report (and its data) there. */
    async pipelineReport(raw: z.input<typeof PipelineReportInput>): Promise<{ key: string; dataKey: string }> {
      const input = parseInput(PipelineReportInput, raw, 'pipelineReport');
      const stages: StageInfo[] = input.status.stages.map((s) => ({
        name: s.name,
        state: s.state,
        workflowId: s.workflowId,
        ...(s.startedAt !== undefined && s.closedAt !== undefined ? { seconds: (s.closedAt - s.startedAt) / 1000 } : {}),
        ...(s.error ? { detail: s.error } : {}),
      }));
      const data = await collectReport(store, input.runId, { stages, ...(input.uiUrl ? { uiUrl: input.uiUrl } : {}) });
      await store.putJson(reportDataKey(input.runId), data);
      await store.putText(reportHtmlKey(input.runId), renderReport(data), 'text/html; charset=utf-8');
      return { key: reportHtmlKey(input.runId), dataKey: reportDataKey(input.runId) };
    },
  };
}

export type PipelineActivities = ReturnType<typeof createPipelineActivities>;
