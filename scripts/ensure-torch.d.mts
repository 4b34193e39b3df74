// Types of scripts/ensure-torch.mjs (plain Node), for TypeScript importers.
export const REQUIREMENTS: string;
/** The venv folder for the current pins of python/cm2_torch/requirements.txt (present or not). */
export function torchVenv(env?: NodeJS.ProcessEnv): string;
/** The venv's python when the environment is complete, else undefined. */
export function torchPython(env?: NodeJS.ProcessEnv): string | undefined;
/** Makes the environment if it is missing; returns its python. */
export function ensureTorch(env?: NodeJS.ProcessEnv, log?: (line: string) => void): string | undefined;
