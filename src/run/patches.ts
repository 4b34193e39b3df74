/**
 * Replay compatibility, one style. A running workflow is replayed by whatever code the worker runs now, so the code must
 * issue, for a recorded history, the commands that history holds:
 * - a change of behaviour for inputs that recorded histories hold goes through `patched(PATCH.x)` (the Temporal way:
 *   the marker is recorded by new runs, absent from old ones), with its id in this table, saying what it changed;
 * - a field added to a workflow's input is absent from inputs recorded before it: the workflow reads it with the value
 *   that means the old behaviour, at its door (`recordedDefaults` in the RL workflow; an absent `chunkSize` is "no
 *   chunks", which the activities also accept), never by a test deep in the body.
 * test/unit/run/workflowReplay.test.ts replays histories of real runs (test/fixtures/histories) against the code.
 * Plain data: workflow code imports it.
 */
export const PATCH = {
  /** The SFT workflow imports a base model the gpu worker may lack (`sftImportBase`) before its first evaluation. */
  sftImportBase: 'sft-import-base',
  /** With a train queue of its own, the SFT workflow writes the data, plan and initial policy for the trainer (`sftPrepare`) first. */
  sftPrepare: 'sft-prepare',
  /**
   * A step's hyperparameters are fixed when its advantages are scheduled, not before its rollouts, so an update accepted
   * during the rollouts applies to that step, as the `setHyperparameters` reply says.
   */
  rlHpAtAdvantages: 'rl-hp-at-advantages',
  /** The pipeline writes the RL stage's held-out figures into its memo (the Web UI and `cm2 status` see them). */
  pipelineHeldOutMemo: 'pipeline-heldout-memo',
  /** With `tracking`, the pipeline starts the run's tracking workflow (an abandoned child) and signals it at its end. */
  pipelineTracking: 'pipeline-tracking',
  /**
   * The tracking child's parent-close policy is REQUEST_CANCEL, not ABANDON: a pipeline that closes without `trackDone`
   * (terminated, timed out) ends its tracking workflow (KILLED) rather than leaving it syncing forever.
   */
  trackingCancelOnClose: 'tracking-cancel-on-close',
} as const;
