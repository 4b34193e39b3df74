/** The serving engine of `rl.engine` (issue 33): whether a run uses one, and its client (src/llm/engine.ts). */
import { engineFor, type SyncableEngine } from '../../llm/engine';
import type { RlSettings } from '../../run/config';

export type EngineSettings = RlSettings['engine'];

/** Whether the rollouts generate on a serving engine. Inputs recorded before `engine` existed have none: embedded. */
export const usesEngine = (rl: Pick<RlSettings, 'engine'> | { engine?: undefined }): boolean => (rl.engine?.kind ?? 'embedded') !== 'embedded';

/** The engine client of the settings (requests name `adapter`, if any: a LoRA adapter the engine serves); its token from the workers' environment. */
export function engineOf(e: EngineSettings, env: NodeJS.ProcessEnv = process.env, adapter?: string): SyncableEngine {
  if (e.kind === 'embedded') throw new Error('rl.engine.kind embedded has no engine client');
  return engineFor({ ...e, kind: e.kind, ...(adapter ? { adapter } : {}) }, env);
}
