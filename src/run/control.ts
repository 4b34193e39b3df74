/**
 * The signals a user steers a run with (`cm2 rl pause|resume|stop`, `temporal workflow signal --name pause`): the
 * RL workflow and the pipeline (which forwards them to its RL child) both handle them. Pure: workflow code imports it.
 */
import { defineSignal } from '@temporalio/workflow';

export const pauseSignal = defineSignal('pause');
export const resumeSignal = defineSignal('resume');
export const stopSignal = defineSignal('stop');
