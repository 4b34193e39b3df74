// Types of scripts/ensure-bfcl.mjs (plain Node), for TypeScript importers.
/** The bfcl-eval release the requirements name, installed without its dependencies. */
export function bfclWheel(): string;
export const REQUIREMENTS: string;
/** The venv folder for the current pins of python/bfcl_bridge/requirements.txt (present or not). */
export function bfclVenv(env?: NodeJS.ProcessEnv): string;
/** The venv's python when the environment is complete, else undefined. */
export function bfclPython(env?: NodeJS.ProcessEnv): string | undefined;
/** Makes the environment if it is missing; returns its python. */
export function ensureBfcl(env?: NodeJS.ProcessEnv, log?: (line: string) => void): string | undefined;
