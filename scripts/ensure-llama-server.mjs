// Puts llama.cpp's OpenAI-compatible HTTP server (`llama-server`) in the project cache, once per machine, for the
// tests that talk to a real LLM server (test/integration/realLlmServer.test.ts) and for users who want a local
// endpoint. GitHub is out of reach here; PyPI's `llama-cpp-python` source distribution vendors llama.cpp whole. So:
//   1. `python3 -m pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36` into a temporary folder;
//   2. only `vendor/llama.cpp/` is unpacked, configured with cmake (static, CPU only, no curl/openssl, portable
//      instruction set: the cached binary must run wherever this cache is read) and the `llama-server` target built
//      (about 8 minutes on 2 cores);
//   3. the binary is copied to <cache>/bin/llama-server-<version> via a .partial file and renamed into place.
// The cache is CM2_CACHE_DIR, default ~/.cache/cm2 (as scripts/ensure-native.mjs). CM2_LLAMA_SERVER_BIN=<path> names
// a binary to use instead (nothing is built).
//
//   node scripts/ensure-llama-server.mjs [--require] [--print]
//     --require  exit 1 when the server cannot be had (.ci/run: CI runs the real-server tests), else only say why
//     --print    print the binary's path
//
// Plain Node, no npm dependencies.
import { spawnSync } from 'node:child_process';
import { copyFileSync, chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cacheRoot, python, run } from './setup-util.mjs';

export const PACKAGE = 'llama-cpp-python';
export const VERSION = '0.3.36';

export { cacheRoot };

/** Where the binary is (CM2_LLAMA_SERVER_BIN) or goes (the cache), present or not. */
export function llamaServerPath(env = process.env) {
  return env.CM2_LLAMA_SERVER_BIN || path.join(cacheRoot(env), 'bin', `llama-server-${PACKAGE}-${VERSION}`);
}

function which(name) {
  return spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).status === 0;
}

/** The binary's path once it is in place (built if needed), or `{ ok: false, reason }`. */
export function ensureLlamaServer({ log = (line) => console.error(`[llama-server] ${line}`), env = process.env } = {}) {
  const dest = llamaServerPath(env);
  if (env.CM2_LLAMA_SERVER_BIN) {
    return existsSync(dest) ? { ok: true, path: dest } : { ok: false, reason: `CM2_LLAMA_SERVER_BIN=${dest} does not exist` };
  }
  if (existsSync(dest) && statSync(dest).size > 0) return { ok: true, path: dest };
  for (const tool of ['cmake', 'c++', 'tar']) {
    if (!which(tool)) return { ok: false, reason: `${tool} is not on PATH (needed to build llama-server from source)` };
  }
  const tmp = mkdtempSync(path.join(tmpdir(), 'cm2-llama-'));
  try {
    log(`fetching ${PACKAGE}==${VERSION} (source distribution with llama.cpp vendored) from PyPI`);
    run(python(`fetches the ${PACKAGE} source distribution`), ['-m', 'pip', 'download', '--quiet', '--disable-pip-version-check', '--no-deps', '--no-binary', ':all:', '-d', tmp, `${PACKAGE}==${VERSION}`]);
    const sdist = readdirSync(tmp).find((f) => f.endsWith('.tar.gz'));
    if (!sdist) return { ok: false, reason: `pip download left no .tar.gz in ${tmp}` };
    const top = `llama_cpp_python-${VERSION}`;
    run('tar', ['-xzf', path.join(tmp, sdist), '-C', tmp, `${top}/vendor/llama.cpp`]);
    const src = path.join(tmp, top, 'vendor', 'llama.cpp');
    const build = path.join(src, 'build');
    const jobs = String(Math.max(1, cpus().length));
    log(`building llama-server from ${PACKAGE} ${VERSION}'s vendored llama.cpp with ${jobs} jobs (about 8 minutes on 2 cores, once per machine)`);
    run('cmake', ['-S', src, '-B', build, '-DCMAKE_BUILD_TYPE=Release', '-DBUILD_SHARED_LIBS=OFF', '-DGGML_NATIVE=OFF',
      '-DLLAMA_CURL=OFF', '-DLLAMA_OPENSSL=OFF', '-DLLAMA_BUILD_TESTS=OFF', '-DLLAMA_BUILD_EXAMPLES=OFF']);
    run('cmake', ['--build', build, '--target', 'llama-server', '-j', jobs]);
    const bin = path.join(build, 'bin', 'llama-server');
    if (!existsSync(bin)) return { ok: false, reason: `the build finished without ${bin}` };
    mkdirSync(path.dirname(dest), { recursive: true });
    const partial = `${dest}.partial`;
    copyFileSync(bin, partial);
    chmodSync(partial, 0o755);
    run(partial, ['--version']);
    renameSync(partial, dest);
    log(`cached ${dest}`);
    return { ok: true, path: dest };
  } catch (e) {
    return { ok: false, reason: e instanceof Error ? e.message : String(e) };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const r = ensureLlamaServer();
  if (r.ok) {
    if (args.includes('--print')) console.log(r.path);
    else console.error(`[llama-server] ${r.path}`);
  } else {
    console.error(`[llama-server] not available: ${r.reason}`);
    if (args.includes('--require')) process.exit(1);
  }
}
