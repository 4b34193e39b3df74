// Types of scripts/ensure-llama-server.mjs (plain Node), for TypeScript importers.
export const PACKAGE: string;
export const VERSION: string;
export function cacheRoot(env?: NodeJS.ProcessEnv): string;
export function llamaServerPath(env?: NodeJS.ProcessEnv): string;
export function ensureLlamaServer(opts?: { log?: (line: string) => void; env?: NodeJS.ProcessEnv }): { ok: true; path: string } | { ok: false; reason: string };
