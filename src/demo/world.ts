/** The demo tool world as the stages see it (src/stages/world.ts): handed to the activities by src/activities/. */
import type { OfflineWorld } from '../stages/world';
import { OFFLINE_ANNOTATOR, offlineChecklist } from './checklist';
import { demoWorldExecutables } from './executables';
import { generateDemoDataset } from './generator';
import { offlineDataRoles } from './offline';
import { DEFAULT_WORLD_SEED, WORLD_TOOL_NAMES } from './tools';

export const demoWorld: OfflineWorld = {
  generate: (opts) => generateDemoDataset(opts),
  dataRoles: offlineDataRoles,
  annotator: { name: OFFLINE_ANNOTATOR, annotate: offlineChecklist },
  toolNames: WORLD_TOOL_NAMES,
  executables: (names) => demoWorldExecutables(DEFAULT_WORLD_SEED, names),
};
