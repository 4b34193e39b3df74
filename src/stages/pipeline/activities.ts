/**
 * Activities of the `cm2Pipeline` workflow (api queue): stage markers in S3 (a finished stage is not redone when
 * the pipeline is started again) and the HTML report of the run.
 *
 * S3 layout: `runs/<id>/pipeline/<stage>.json` (marker: the stage's result and times), `runs/<id>/report/report.html`
 * and `report.json` (the data the page was drawn from).
 */
import { z } from 'zod';
import { ifExists } from '../../storage/store';
import { pipelineKeys } from '../../run/layout';
import { collectReport, type StageInfo } from '../../report/collect';
import { renderReport } from '../../report/html';
import { type ActivityDeps, parseInput } from '../activityKit';
import { StageMarker, StageMarkerInput, RecordStageInput, PipelineReportInput } from './shapes';

export function createPipelineActivities({ store }: ActivityDeps) {
  return {
    /** The marker of a finished stage, or null. */
    async pipelineStageMarker(raw: z.input<typeof StageMarkerInput>): Promise<StageMarker | null> {
      const input = parseInput(StageMarkerInput, raw, 'pipelineStageMarker');
      return (await ifExists(() => store.getJson(pipelineKeys.marker(input.runId, input.stage), StageMarker))) ?? null;
    },

    /** Marks a stage finished (one whole-object write: atomic). */
    async pipelineRecordStage(raw: z.input<typeof RecordStageInput>): Promise<{ key: string }> {
      const { runId, ...marker } = parseInput(RecordStageInput, raw, 'pipelineRecordStage');
      const key = pipelineKeys.marker(runId, marker.stage);
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
      await store.putJson(pipelineKeys.reportData(input.runId), data);
      await store.putText(pipelineKeys.reportHtml(input.runId), renderReport(data), 'text/html; charset=utf-8');
      return { key: pipelineKeys.reportHtml(input.runId), dataKey: pipelineKeys.reportData(input.runId) };
    },
  };
}

export type PipelineActivities = ReturnType<typeof createPipelineActivities>;
