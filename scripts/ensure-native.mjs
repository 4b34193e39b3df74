// Installs TensorFlow's native runtime for @tensorflow/tfjs-node (CPU) or @tensorflow/tfjs-node-gpu (CUDA) without
// the packages' own install script, whose download of libtensorflow 2.9.1 comes from a host outside the package
// registries. Instead:
//   1. pip downloads PyPI's `tensorflow-cpu` (or, for the GPU, `tensorflow`) wheel, whose
//      `tensorflow/libtensorflow_cc.so.2` exports TensorFlow's C API; only the two shared libraries and the C API
//      headers are kept, in the cache (CM2_CACHE_DIR, default ~/.cache/cm2) under tensorflow/<kind>-<version>/;
//      for the GPU the CUDA/cuDNN libraries the wheel's `and-cuda` extra names are pip-installed there too;
//   2. the package's deps/ points at that cache (links under the names the addon links against);
//   3. the addon (tfjs_binding.node) is compiled once with node-gyp and cached beside the libraries, then copied in;
//   4. a child process loads the package and checks tf.getBackend() === 'tensorflow'.
// The outcome is written to node_modules/.cm2-native.json, which the `auto` backend choice reads (src/model/backend.ts)
// and `cm2 backend` prints. Any failure leaves the WebAssembly fallback in place and says why, once; this script
// never fails the command that called it.
//
//   node scripts/ensure-native.mjs [--force] [--quiet]
//   CM2_NATIVE=auto (default: gpu when an NVIDIA GPU is visible, else cpu) | cpu | gpu | off
//
// Plain Node, no npm dependencies. Importable: `ensureNative({ quiet })` returns the status object.
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, symlinkSync, unlinkSync, writeFileSync, lstatSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const TF_VERSION = '2.16.2';
const NAPI = 8; // the highest N-API version in tfjs-node's package.json; node-pre-gyp's find() picks it on Node ≥ 15
export const statusFile = path.join(root, 'node_modules', '.cm2-native.json');

const KINDS = {
  cpu: { pkg: '@tensorflow/tfjs-node', wheel: 'tensorflow-cpu', backend: 'tfjs-node' },
  gpu: { pkg: '@tensorflow/tfjs-node-gpu', wheel: 'tensorflow', backend: 'tfjs-node-gpu' },
};

function cacheRoot() {
  return process.env.CM2_CACHE_DIR || path.join(homedir(), '.cache', 'cm2');
}

/** True when an NVIDIA GPU is visible to this process. */
export function gpuVisible() {
  if (existsSync('/dev/nvidia0')) return true;
  const r = spawnSync('nvidia-smi', ['-L'], { encoding: 'utf8', timeout: 10_000 });
  return r.status === 0 && /GPU \d/.test(r.stdout ?? '');
}

function python() {
  for (const p of [process.env.PYTHON, 'python3', 'python'].filter(Boolean)) {
    const r = spawnSync(p, ['-c', 'import pip, zipfile'], { encoding: 'utf8' });
    if (r.status === 0) return p;
  }
  throw new Error('no python3 with pip on PATH (pip fetches the TensorFlow wheel that carries the C library)');
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) {
    const tail = `${r.stdout ?? ''}\n${r.stderr ?? ''}`.trim().split('\n').slice(-8).join('\n');
    throw new Error(`${path.basename(cmd)} ${args.slice(0, 3).join(' ')} … exited ${r.status}:\n${tail}`);
  }
  return r.stdout ?? '';
}

// Python, run with the wheel's path: keeps the two libraries and the C API headers, prints the wheel's
// `and-cuda` requirements (one per line) for the GPU build.
const EXTRACT_PY = `
import sys, zipfile, re
whl, dest = sys.argv[1], sys.argv[2]
z = zipfile.ZipFile(whl)
keep = []
for n in z.namelist():
    if n in ('tensorflow/libtensorflow_cc.so.2', 'tensorflow/libtensorflow_framework.so.2'): keep.append(n)
    elif n.startswith(('tensorflow/include/tensorflow/c/', 'tensorflow/include/tsl/c/')) and n.endswith('.h'): keep.append(n)
    elif re.match(r'tensorflow/include/(tsl|tensorflow/core)/platform/ctstring.*\\.h$', n): keep.append(n)
z.extractall(dest, keep)
for n in z.namelist():
    if n.endswith('.dist-info/METADATA'):
        for line in z.read(n).decode().splitlines():
            m = re.match(r'Requires-Dist: (.*?);\\s*extra == "and-cuda"', line)
            if m: print(m.group(1).replace(' ', ''))
`;

/** Fetches the wheel and lays out <cache>/tensorflow/<kind>-<ver>/{lib,include[,nvidia]}; returns that folder. */
function ensureLibraries(kind, log) {
  const dir = path.join(cacheRoot(), 'tensorflow', `${kind}-${TF_VERSION}`);
  const done = path.join(dir, '.complete');
  if (existsSync(done)) return dir;
  const py = python();
  const tmp = mkdtempSync(path.join(tmpdir(), 'cm2-tf-'));
  try {
    log(`fetching PyPI's ${KINDS[kind].wheel}==${TF_VERSION} wheel for TensorFlow's C library (once per machine)...`);
    run(py, ['-m', 'pip', 'download', '--quiet', '--disable-pip-version-check', '--no-deps', '--only-binary=:all:',
      '--python-version', '3.11', '--platform', 'manylinux2014_x86_64', '-d', tmp, `${KINDS[kind].wheel}==${TF_VERSION}`]);
    const whl = readdirSync(tmp).find((f) => f.endsWith('.whl'));
    if (!whl) throw new Error('pip download produced no wheel');
    const staging = path.join(tmp, 'x');
    const reqs = run(py, ['-c', EXTRACT_PY, path.join(tmp, whl), staging]).split('\n').map((s) => s.trim()).filter(Boolean);
    rmSync(path.join(tmp, whl), { force: true });
    const out = `${dir}.partial`;
    rmSync(out, { recursive: true, force: true });
    mkdirSync(path.join(out, 'lib'), { recursive: true });
    for (const lib of ['libtensorflow_cc.so.2', 'libtensorflow_framework.so.2']) renameSync(path.join(staging, 'tensorflow', lib), path.join(out, 'lib', lib));
    renameSync(path.join(staging, 'tensorflow', 'include'), path.join(out, 'include'));
    if (kind === 'gpu') {
      // CUDA, cuDNN, cuBLAS… as the wheel's `and-cuda` extra pins them; laid out as site-packages/nvidia/*/lib, where
      // the libraries' RUNPATH ($ORIGIN/../nvidia/...) and LD_LIBRARY_PATH (cm2 sets it for gpu workers) find them.
      if (reqs.length === 0) throw new Error(`the ${KINDS[kind].wheel} wheel names no and-cuda requirements`);
      log(`installing the CUDA libraries the wheel names (${reqs.length} pip packages, several GB, once per machine)...`);
      run(py, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-deps', '--target', path.join(out, 'site'), ...reqs]);
      writeFileSync(path.join(out, 'cuda-requirements.txt'), `${reqs.join('\n')}\n`);
    }
    writeFileSync(path.join(out, '.complete'), `${new Date().toISOString()}\n`);
    rmSync(dir, { recursive: true, force: true });
    renameSync(out, dir);
    return dir;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** Directories holding the pip CUDA libraries of a GPU install (for LD_LIBRARY_PATH). */
export function cudaLibraryDirs(libDir) {
  const site = path.join(libDir, 'site', 'nvidia');
  if (!existsSync(site)) return [];
  return readdirSync(site).map((d) => path.join(site, d, 'lib')).filter((d) => existsSync(d));
}

function link(target, at) {
  try {
    lstatSync(at);
    unlinkSync(at);
  } catch { /* absent */ }
  symlinkSync(target, at);
}

/** Points the package's deps/ at the cached libraries and puts a compiled addon in lib/napi-v8. */
function installInto(kind, libDir, log) {
  const pkgDir = path.join(root, 'node_modules', ...KINDS[kind].pkg.split('/'));
  if (!existsSync(path.join(pkgDir, 'package.json'))) throw new Error(`${KINDS[kind].pkg} is not installed (npm ci installs it as an optional dependency)`);
  const version = JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8')).version;
  const deps = path.join(pkgDir, 'deps');
  mkdirSync(path.join(deps, 'lib'), { recursive: true });
  const cc = path.join(libDir, 'lib', 'libtensorflow_cc.so.2');
  const fw = path.join(libDir, 'lib', 'libtensorflow_framework.so.2');
  // The names the binding links (-ltensorflow) and its install script checks (…2.9.1), and the libraries' sonames.
  for (const n of ['libtensorflow.so', 'libtensorflow.so.2', 'libtensorflow.so.2.9.1', 'libtensorflow_cc.so.2']) link(cc, path.join(deps, 'lib', n));
  for (const n of ['libtensorflow_framework.so', 'libtensorflow_framework.so.2', 'libtensorflow_framework.so.2.9.1']) link(fw, path.join(deps, 'lib', n));
  link(path.join(libDir, 'include'), path.join(deps, 'include'));
  if (existsSync(path.join(libDir, 'site', 'nvidia'))) link(path.join(libDir, 'site', 'nvidia'), path.join(deps, 'nvidia'));

  const addonDir = path.join(pkgDir, 'lib', `napi-v${NAPI}`);
  const addon = path.join(addonDir, 'tfjs_binding.node');
  const cached = path.join(libDir, `tfjs_binding-${KINDS[kind].backend}-${version}-napi${NAPI}.node`);
  if (!existsSync(cached)) {
    log(`compiling ${KINDS[kind].pkg}'s addon against TensorFlow ${TF_VERSION} (node-gyp, once per machine)...`);
    const gyp = nodeGyp();
    const args = [gyp, 'rebuild', `--module_name=tfjs_binding`, `--module_path=${addonDir}`, `--napi_build_version=${NAPI}`];
    if (existsSync('/usr/include/node/node_api.h') && !process.env.npm_config_nodedir) args.push('--nodedir=/usr');
    run(process.execPath, args, { cwd: pkgDir });
    const built = path.join(pkgDir, 'build', 'Release', 'tfjs_binding.node');
    if (!existsSync(built)) throw new Error('node-gyp finished without build/Release/tfjs_binding.node');
    copyFileSync(built, `${cached}.tmp`);
    renameSync(`${cached}.tmp`, cached);
    rmSync(path.join(pkgDir, 'build'), { recursive: true, force: true });
  }
  mkdirSync(addonDir, { recursive: true });
  copyFileSync(cached, addon);
  return version;
}

function nodeGyp() {
  const candidates = [process.env.npm_config_node_gyp];
  try {
    const npmCli = execFileSync(process.platform === 'win32' ? 'where' : 'which', ['npm'], { encoding: 'utf8' }).split('\n')[0]?.trim();
    if (npmCli) {
      const real = execFileSync('realpath', [npmCli], { encoding: 'utf8' }).trim();
      candidates.push(path.join(path.dirname(real), '..', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
    }
  } catch { /* no npm on PATH */ }
  candidates.push(path.join(path.dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
  const found = candidates.find((c) => c && existsSync(c));
  if (!found) throw new Error('node-gyp not found (it ships with npm)');
  return found;
}

/** Loads the package in a child process (a crash there must not take this one down) and reads the backend. */
function verify(kind, libDir) {
  const env = { ...process.env, TF_CPP_MIN_LOG_LEVEL: '2' };
  const cuda = cudaLibraryDirs(libDir);
  if (cuda.length) env.LD_LIBRARY_PATH = [...cuda, env.LD_LIBRARY_PATH].filter(Boolean).join(':');
  const code = `const tf = require(${JSON.stringify(KINDS[kind].pkg)});
    const a = tf.tensor2d([[1, 2], [3, 4]]); const s = tf.matMul(a, a).dataSync();
    process.stdout.write(JSON.stringify({ backend: tf.getBackend(), ok: s[0] === 7 && s[3] === 22 }));`;
  const r = spawnSync(process.execPath, ['-e', code], { cwd: root, env, encoding: 'utf8', timeout: 120_000 });
  let out;
  try {
    out = JSON.parse(r.stdout);
  } catch {
    throw new Error(`loading ${KINDS[kind].pkg} failed: ${(r.stderr || r.stdout || `exit ${r.status}`).trim().split('\n').filter((l) => /rror/.test(l))[0] ?? `exit ${r.status}`}`);
  }
  if (out.backend !== 'tensorflow' || !out.ok) throw new Error(`${KINDS[kind].pkg} loaded but reports backend ${out.backend}, matmul ok=${out.ok}`);
}

function readStatus() {
  try {
    return JSON.parse(readFileSync(statusFile, 'utf8'));
  } catch {
    return undefined;
  }
}

function writeStatus(status) {
  if (!existsSync(path.dirname(statusFile))) return status;
  writeFileSync(statusFile, `${JSON.stringify(status, null, 2)}\n`);
  return status;
}

/** Makes the native backend ready (or records why not); returns the status object written to node_modules/.cm2-native.json. */
export function ensureNative({ quiet = false, force = false } = {}) {
  const log = (line) => { if (!quiet) console.log(`native TensorFlow: ${line}`); };
  const want = (process.env.CM2_NATIVE || 'auto').toLowerCase();
  const base = { tensorflow: TF_VERSION, checkedAt: new Date().toISOString() };
  if (want === 'off' || want === 'wasm') return writeStatus({ ...base, ok: false, backend: null, reason: `CM2_NATIVE=${want}` });
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    const st = readStatus();
    if (!st || st.ok) log(`not available on ${process.platform}-${process.arch} (the PyPI wheels used here are Linux x86-64); using the WebAssembly backend`);
    return writeStatus({ ...base, ok: false, backend: null, reason: `no native build for ${process.platform}-${process.arch}` });
  }
  const kind = want === 'gpu' || want === 'cpu' ? want : gpuVisible() ? 'gpu' : 'cpu';
  const prev = readStatus();
  const pkgDir = path.join(root, 'node_modules', ...KINDS[kind].pkg.split('/'));
  const addon = path.join(pkgDir, 'lib', `napi-v${NAPI}`, 'tfjs_binding.node');
  if (!force && prev?.ok && prev.kind === kind && prev.tensorflow === TF_VERSION && existsSync(addon) && existsSync(prev.libDir ?? '/nonexistent')) return prev;
  if (!force && prev && !prev.ok && prev.kind === kind && prev.tensorflow === TF_VERSION && prev.want === want && Date.now() - Date.parse(prev.checkedAt) < 3600_000) return prev; // failed within the hour: don't retry every command
  try {
    const libDir = ensureLibraries(kind, log);
    const pkgVersion = installInto(kind, libDir, log);
    verify(kind, libDir);
    const status = { ...base, ok: true, want, kind, backend: KINDS[kind].backend, package: `${KINDS[kind].pkg}@${pkgVersion}`, libDir, cudaLibraryDirs: cudaLibraryDirs(libDir) };
    if (!prev?.ok) log(`${status.backend} ready (TensorFlow ${TF_VERSION} from PyPI's ${KINDS[kind].wheel} wheel, libraries in ${libDir})`);
    return writeStatus(status);
  } catch (e) {
    const reason = String(e?.message ?? e);
    log(`unavailable, falling back to the WebAssembly backend: ${reason}`);
    return writeStatus({ ...base, ok: false, want, kind, backend: null, reason });
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const st = ensureNative({ quiet: process.argv.includes('--quiet'), force: process.argv.includes('--force') });
  if (process.argv.includes('--print')) console.log(JSON.stringify(st, null, 2));
}
