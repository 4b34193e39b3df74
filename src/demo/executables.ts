/** The demo world's tools as executables of the RL tool environment (`rl.executableTools`). */
import type { Executable } from '../stages/rl/env/toolEnv';
import { DEFAULT_WORLD_SEED, WORLD_TOOL_NAMES, executeTool, toolResultText } from './tools';

/** The demo world's tools as executables: exactly `toolResultText(executeTool(name, args, worldSeed))`. */
export function demoWorldExecutables(worldSeed: number = DEFAULT_WORLD_SEED): Record<string, Executable> {
  return Object.fromEntries(WORLD_TOOL_NAMES.map((name) => [name, (args: Record<string, unknown>) => toolResultText(executeTool(name, args, worldSeed))]));
}
