/** The demo world's tools as executables of the RL tool environment (`rl.executableTools`, src/stages/rl/env/answers.ts). */
import type { Executable } from '../stages/rl/env/toolEnv';
import { DEFAULT_WORLD_SEED, WORLD_TOOL_NAMES, executeTool, toolResultText } from './tools';

/**
 * The demo world's tools as executables: exactly `toolResultText(executeTool(name, args, worldSeed))`; `names`
 * picks some of them (names that are not the world's tools are left out).
 */
export function demoWorldExecutables(worldSeed: number = DEFAULT_WORLD_SEED, names: readonly string[] = WORLD_TOOL_NAMES): Record<string, Executable> {
  const chosen = names.filter((name) => WORLD_TOOL_NAMES.includes(name));
  return Object.fromEntries(chosen.map((name) => [name, (args: Record<string, unknown>) => toolResultText(executeTool(name, args, worldSeed))]));
}
