// Types of scripts/ensure-vllm.mjs (plain Node), for TypeScript importers.
export const REQUIREMENTS: string;
/** The vLLM wheel python/vllm_engine/requirements.txt names (installed without its dependencies). */
export function vllmWheel(): string;
/** The venv folder for the current pins of python/vllm_engine/requirements.txt (present or not). */
export function vllmVenv(env?: NodeJS.ProcessEnv): string;
/** The venv's python when the environment is complete, else undefined. */
export function vllmPython(env?: NodeJS.ProcessEnv): string | undefined;
/** Makes the environment if it is missing; returns its python. */
export function ensureVllm(env?: NodeJS.ProcessEnv, log?: (line: string) => void): string | undefined;
