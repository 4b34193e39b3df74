/** Inputs and outputs of the pipeline stage's activities (plain JSON, zod-checked at the activity's door). */
import { z } from 'zod';

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
