/** The serving engine of `rl.engine` (issue 33): whether a run uses one, and its client (src/llm/engine.ts). */
import { SglangEngine, VllmEngine, type SyncableEngine } from '../../llm/engine';
import type { RlSettings } from '../../run/config';

export type EngineSettings = RlSettings['engine'];

/** Whether the rollouts generate on a serving engine. Inputs recorded before `engine` existed have none: embedded. */
export const usesEngine = (rl: Pick<RlSettings, 'engine'> | { engine?: undefined }): boolean => (rl.engine?.kind ?? 'embedded') !== 'embedded';

/** The engine client of the settings (requests name `adapter`, if any: a LoRA adapter the engine serves); its token from the workers' environment. */
export function engineOf(e: EngineSettings, env: NodeJS.ProcessEnv = process.env, adapter?: string): SyncableEngine {
  const key = e.apiKeyEnv ? env[e.apiKeyEnv] : undefined;
  const o = { baseUrl: e.url, model: e.model, ...(adapter ? { adapter } : {}), concurrency: e.concurrency, ...(key ? { apiKey: key } : {}) };
  return e.kind === 'sglang' ? new SglangEngine(o) : new VllmEngine(o);
}

