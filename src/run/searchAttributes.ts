/**
 * The project's custom search attributes: registered on the namespace by `cm2 infra up` (and the test
 * infrastructure), set by the workflows, visible and filterable in the Temporal Web UI
 * (e.g. `Cm2Stage = "prepare" AND Cm2RunId = "demo"`). No Node imports: workflow code uses this file.
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const CM2_RUN_ID = defineSearchAttributeKey('Cm2RunId', SearchAttributeType.KEYWORD);
export const CM2_STAGE = defineSearchAttributeKey('Cm2Stage', SearchAttributeType.KEYWORD);
export const CM2_STATE = defineSearchAttributeKey('Cm2State', SearchAttributeType.KEYWORD);
export const CM2_STEP = defineSearchAttributeKey('Cm2Step', SearchAttributeType.INT);
export const CM2_MEAN_REWARD = defineSearchAttributeKey('Cm2MeanReward', SearchAttributeType.DOUBLE);

/** `--search-attribute NAME=Type` values for `temporal server start-dev`. */
export const SEARCH_ATTRIBUTE_FLAGS: string[] = [
  'Cm2RunId=Keyword',
  'Cm2Stage=Keyword',
  'Cm2State=Keyword',
  'Cm2Step=Int',
  'Cm2MeanReward=Double',
];
