/**
 * What the stages need of an offline tool world, handed to them by the activity registry (src/activities/) so that no
 * stage imports one: the demo world (src/demo/world.ts) is the one the project ships. With no endpoint configured it
 * supplies every built-in: the dialogues of `data.source.kind: demo`, the data roles (LLM filter, CoT compressor), the
 * checklist annotator, and the tools RL may execute instead of simulating (`rl.executableTools`).
 */
import type { Example } from '../kernel/schema';
import type { ChecklistOutput } from './checklist/schema';
import type { DataRoles } from '../kernel/roleContracts';
import type { Executable } from './rl/env/toolEnv';

/** The generator's settings (`data.source` of kind demo, src/run/dataConfig.ts). */
export interface WorldSourceOptions {
  seed: number;
  count: number;
  brokenRate?: number;
  terseRate?: number;
}

export interface OfflineWorld {
  /** The seeded dialogues of `data.source.kind: demo`: the same options give the same dialogues. */
  generate(opts: WorldSourceOptions): Example[];
  /** The deterministic data roles, for a run whose filter and compressor roles have no endpoint. */
  dataRoles(): DataRoles;
  /** The deterministic checklist annotator: the name recorded with its checklists, and the annotation (throws on an example it cannot annotate). */
  annotator: { name: string; annotate(example: Example): ChecklistOutput };
  /** The names of the world's tools (what `rl.executableTools: true` stands for on the world's own data). */
  toolNames: readonly string[];
  /** Executables for some of the world's tools (names that are not the world's are left out). */
  executables(names: readonly string[]): Record<string, Executable>;
}
