// Types of scripts/ensure-servers.mjs (plain Node, run before the npm dependencies exist), for TypeScript importers.
export type ServerName = 'temporal' | 'minio';
export interface BuildMarker {
  pid: number;
  startedAt?: number;
  phase?: 'starting' | 'downloading' | 'compiling';
  downloaded?: number;
  compiled?: number;
}

export const MINIO_MODULE: string;
export const MINIO_VERSION: string;
export const MINIO_PACKAGES: number;
export const MINIO_BUILD_SECONDS: number;
export const NAMES: readonly ServerName[];
export function binDir(env?: NodeJS.ProcessEnv): string;
export function buildLogOf(name: ServerName, env?: NodeJS.ProcessEnv): string;
export function findServerBinary(name: ServerName, env?: NodeJS.ProcessEnv): string | undefined;
export function buildInProgress(name: ServerName, env?: NodeJS.ProcessEnv): BuildMarker | undefined;
export function buildHere(name: ServerName, env?: NodeJS.ProcessEnv, claimed?: boolean): Promise<string>;
export function progressLine(name: ServerName, marker: BuildMarker, now?: number): string;
export function waitForBuild(name: ServerName, env?: NodeJS.ProcessEnv, log?: (line: string) => void, everyMs?: number): Promise<string>;
export function startServerBuilds(opts?: { env?: NodeJS.ProcessEnv; log?: (line: string) => void }): ServerName[];
export function ensureServerBinaries(opts?: { env?: NodeJS.ProcessEnv; log?: (line: string) => void }): Promise<Record<ServerName, string>>;
