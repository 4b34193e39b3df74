// Types of scripts/ensure-trackers.mjs (plain Node), for TypeScript importers.
export const REQUIREMENTS: string;
/** The venv's python when the environment is complete, else undefined. */
export function trackersPython(env?: NodeJS.ProcessEnv): string | undefined;
/** Makes the environment if it is missing; returns its python. */
export function ensureTrackers(env?: NodeJS.ProcessEnv, log?: (line: string) => void): string | undefined;
