// Installs TensorFlow's native runtime for @tensorflow/tfjs-node (CPU) or @tensorflow/tfjs-node-gpu (CUDA) without
// the packages' own install script, whose download of libtensorflow 2.9.1 comes from a host outside the package
// registries. Instead (docs/native.md has the whole story):
//   1. pip downloads PyPI's `tensorflow-cpu` (or, for the GPU, `tensorflow`) wheel, whose
//      `tensorflow/libtensorflow_cc.so.2` exports TensorFlow's C API; only the two shared libraries and the C API
//      headers are kept, in the cache (CM2_CACHE_DIR, default ~/.cache/cm2) under tensorflow/<kind>-<version>/;
//      for the GPU the CUDA/cuDNN pip packages that the wheel's `and-cuda` extra pins are installed there too, as
//      nvidia/<part>/lib beside lib/, where the libraries' own RUNPATH ($ORIGIN/../nvidia/<part>/lib) finds them;
//   2. the package's deps/ points at that cache (links under the names the addon links against, and deps/nvidia);
//   3. the addon (tfjs_binding.node) is compiled once with node-gyp and cached beside the libraries, then copied in;
//   4. a child process loads the package and checks tf.getBackend() === 'tensorflow' and a matmul.
// The outcome is written to node_modules/.cm2-native.json, which the `auto` backend choice reads (src/model/net/backend.ts)
// and `cm2 backend` prints. Any failure leaves the WebAssembly fallback in place and says why, once; this script
// never fails the command that called it.
//
//   node scripts/ensure-native.mjs [--force] [--quiet] [--print]
//   CM2_NATIVE=auto (default: gpu when an NVIDIA GPU is visible, else cpu) | cpu | gpu | off
//
// Plain Node, no npm dependencies. Importable: `ensureNative({ quiet, force })` returns the status object; the pure
// pieces (andCudaRequirements, parseWant, resolveKind, reusableStatus, createdGpuDevices) are unit-tested in test/unit/model/backend.test.ts.
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, statSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cacheRoot, python, run } from './setup-util.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const TF_VERSION = '2.16.2';
const NAPI = 8; // the highest N-API version in tfjs-node's package.json; node-pre-gyp's find() picks it on Node ≥ 15
export const statusFile = path.join(root, 'node_modules', '.cm2-native.json');
/** A failed install is not retried by every command for this long (`--force` retries at once). */
export const RETRY_AFTER_MS = 3600_000;
/**
 * The revision of cm2's patch to the addon's source (bindingPatch below); part of the cached addon's name and of the
 * status, so an addon compiled without it is compiled again.
 */
export const ADDON_REV = 'cm2p1';

export const KINDS = {
  cpu: { pkg: '@tensorflow/tfjs-node', wheel: 'tensorflow-cpu', backend: 'tfjs-node' },
  gpu: { pkg: '@tensorflow/tfjs-node-gpu', wheel: 'tensorflow', backend: 'tfjs-node-gpu' },
};
export const WANTS = ['auto', 'cpu', 'gpu', 'off'];

export { cacheRoot };

/** The cache folder of one build: <cache>/tensorflow/<kind>-<version>. */
export function libraryDir(kind, env = process.env) {
  return path.join(cacheRoot(env), 'tensorflow', `${kind}-${TF_VERSION}`);
}

// ---- pure pieces --------------------------------------------------------------------------------------------------

/**
 * The requirements a wheel's METADATA lists under its `and-cuda` extra, as pip arguments ("nvidia-cublas-cu12==12.3.4.1").
 * Reads the header fields (up to the first blank line, where the description starts); accepts both quote styles and
 * the spellings PEP 685 treats as one name (and-cuda, and_cuda, and.cuda); other markers on the same line (e.g. a
 * platform) are not evaluated: the wheel is installed on Linux x86-64 only.
 */
export function andCudaRequirements(metadata) {
  const reqs = [];
  for (const line of metadata.split(/\r?\n/)) {
    if (line === '') break;
    const m = /^Requires-Dist:\s*([^;]+?)\s*;\s*(.+)$/.exec(line);
    if (!m || !/\bextra\s*==\s*(['"])and[-_.]+cuda\1/i.test(m[2])) continue;
    reqs.push(m[1].replace(/[\s()]/g, ''));
  }
  return reqs;
}

/** CM2_NATIVE's value: `{ want }` (auto when unset; `wasm` is a synonym of off) or `{ error }` naming the allowed values. */
export function parseWant(value) {
  const v = (value ?? '').trim().toLowerCase() || 'auto';
  if (v === 'wasm') return { want: 'off' };
  if (WANTS.includes(v)) return { want: v };
  return { error: `CM2_NATIVE=${value} is not one of ${WANTS.join(', ')}` };
}

/**
 * Which build to install: `{ kind: 'cpu' | 'gpu' }`, or `{ kind: null, reason }` when none is to be installed.
 * `gpuVisible` is called only for `auto` (it may run nvidia-smi).
 */
export function resolveKind({ want, platform, arch, gpuVisible }) {
  if (want === 'off') return { kind: null, reason: 'CM2_NATIVE=off' };
  if (platform !== 'linux' || arch !== 'x64') return { kind: null, reason: `no native build for ${platform}-${arch} (the PyPI wheels used here are Linux x86-64)` };
  if (want === 'cpu' || want === 'gpu') return { kind: want };
  return { kind: gpuVisible() ? 'gpu' : 'cpu' };
}

/**
 * Whether the recorded status answers this call without installing: 'ready' (the same build from the same cache
 * folder is in place), 'failed-recently' (the same request failed less than RETRY_AFTER_MS ago), or undefined
 * (install or check again). `addonExists` and `libDirComplete` tell whether the files the status names are still there.
 */
export function reusableStatus(prev, { kind, want, libDir, now = Date.now(), addonExists, libDirComplete }) {
  if (!prev || prev.kind !== kind || prev.tensorflow !== TF_VERSION) return undefined;
  if (prev.ok) return prev.libDir === libDir && prev.addon === ADDON_REV && addonExists && libDirComplete ? 'ready' : undefined;
  const at = Date.parse(prev.checkedAt ?? '');
  return prev.want === want && Number.isFinite(at) && now - at < RETRY_AFTER_MS ? 'failed-recently' : undefined;
}

/** The GPU devices TensorFlow reports creating in its log ("Created device /job:…/device:GPU:0 with … MB memory: -> …"). */
export function createdGpuDevices(log) {
  return [...log.matchAll(/Created device (\S*device:GPU:\d+) with (\d+) MB memory:?\s*->\s*(.*)$/gm)].map((m) => `${m[1]} (${m[2]} MB, ${m[3].trim()})`);
}

const PATCH_ANCHOR = '  std::vector<const char *> tags_ptrs = splitStringByComma(tags);\n';
const PATCH_MARK = 'cm2 patch: session config';

/**
 * The addon's tfjs_backend.cc with cm2's patch: in LoadSavedModel (TF_LoadSessionFromSavedModel), a tag
 * "cm2:intra_op_threads=N" is taken out of the tags and becomes the session's ConfigProto (intra_op_parallelism_threads
 * = N, field 2). With TF_OVERRIDE_GLOBAL_THREADPOOL=1 (src/model/net/backend.ts sets it) every session then has its own
 * intra-op pool of that size, so the KV-cached decoding graph can run its many tiny kernels on one thread while
 * training keeps every core (docs/native.md). Unchanged source already patched; throws when the anchor is missing
 * (another tfjs-node version: the caller compiles without the patch and the runtime falls back).
 */
export function bindingPatch(source) {
  if (source.includes(PATCH_MARK)) return source;
  const at = source.indexOf(PATCH_ANCHOR);
  if (at < 0 || source.indexOf(PATCH_ANCHOR, at + 1) >= 0) throw new Error('tfjs_backend.cc: LoadSavedModel\'s tags line not found once');
  const insert = `
  // ${PATCH_MARK} (scripts/ensure-native.mjs): a tag "cm2:intra_op_threads=N" is this session's intra-op thread count.
  for (size_t cm2_i = 0; cm2_i < tags_ptrs.size();) {
    const char *cm2_prefix = "cm2:intra_op_threads=";
    if (std::strncmp(tags_ptrs[cm2_i], cm2_prefix, std::strlen(cm2_prefix)) == 0) {
      int cm2_threads = std::atoi(tags_ptrs[cm2_i] + std::strlen(cm2_prefix));
      if (cm2_threads > 0 && cm2_threads < 128) {
        const unsigned char cm2_config[2] = {0x10, static_cast<unsigned char>(cm2_threads)};
        TF_AutoStatus cm2_status;
        TF_SetConfig(session_options, cm2_config, sizeof(cm2_config), cm2_status.status);
      }
      delete[] tags_ptrs[cm2_i];
      tags_ptrs.erase(tags_ptrs.begin() + cm2_i);
    } else {
      cm2_i++;
    }
  }
`;
  const end = at + PATCH_ANCHOR.length;
  return source.slice(0, end) + insert + source.slice(end);
}

// ---- installing ---------------------------------------------------------------------------------------------------

/** True when an NVIDIA GPU is visible to this process. */
export function gpuVisible() {
  if (existsSync('/dev/nvidia0')) return true;
  const r = spawnSync('nvidia-smi', ['-L'], { encoding: 'utf8', timeout: 10_000 });
  return r.status === 0 && /GPU \d/.test(r.stdout ?? '');
}

const PIP = ['-m', 'pip', '--disable-pip-version-check', '--no-cache-dir']; // no second copy of GBs in pip's cache

// Python, run with the wheel's path: keeps the two libraries and the C API headers, prints the wheel's METADATA.
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
meta = [n for n in z.namelist() if n.endswith('.dist-info/METADATA')]
sys.stdout.write(z.read(meta[0]).decode() if meta else '')
`;

/** TensorFlow's C library and headers for `kind` in the project cache (fetched from PyPI once); returns the folder. */
export function ensureLibraries(kind, log) {
  const dir = libraryDir(kind);
  if (existsSync(path.join(dir, '.complete'))) return dir;
  const py = python('fetches the TensorFlow wheel that carries the C library');
  const tmp = mkdtempSync(path.join(tmpdir(), 'cm2-tf-'));
  const out = `${dir}.partial`;
  try {
    log(`fetching PyPI's ${KINDS[kind].wheel}==${TF_VERSION} wheel for TensorFlow's C library (once per machine; a download of some hundreds of MB)...`);
    const t = Date.now();
    run(py, [...PIP, 'download', '--quiet', '--no-deps', '--only-binary=:all:',
      '--python-version', '3.11', '--platform', 'manylinux2014_x86_64', '-d', tmp, `${KINDS[kind].wheel}==${TF_VERSION}`]);
    const whl = readdirSync(tmp).find((f) => f.endsWith('.whl'));
    if (!whl) throw new Error('pip download produced no wheel');
    log(`fetched ${whl} (${(statSync(path.join(tmp, whl)).size / 1e6).toFixed(0)} MB) in ${((Date.now() - t) / 1000).toFixed(0)}s`);
    const staging = path.join(tmp, 'x');
    const reqs = andCudaRequirements(run(py, ['-c', EXTRACT_PY, path.join(tmp, whl), staging]));
    rmSync(path.join(tmp, whl), { force: true });
    rmSync(out, { recursive: true, force: true });
    mkdirSync(path.join(out, 'lib'), { recursive: true });
    for (const lib of ['libtensorflow_cc.so.2', 'libtensorflow_framework.so.2']) renameSync(path.join(staging, 'tensorflow', lib), path.join(out, 'lib', lib));
    renameSync(path.join(staging, 'tensorflow', 'include'), path.join(out, 'include'));
    if (kind === 'gpu') installCuda(py, reqs, out, log);
    writeFileSync(path.join(out, '.complete'), `${new Date().toISOString()}\n`);
    rmSync(dir, { recursive: true, force: true });
    renameSync(out, dir);
    return dir;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
    rmSync(out, { recursive: true, force: true }); // a failed attempt leaves no GBs behind
  }
}

/**
 * CUDA, cuDNN, cuBLAS… as the wheel's `and-cuda` extra pins them, laid out as <out>/nvidia/<part>/lib, so that no
 * LD_LIBRARY_PATH is needed: the TensorFlow libraries' RUNPATH has $ORIGIN/../nvidia/<part>/lib for the parts they
 * dlopen (cudart, cublas, cudnn, cufft, cusolver, cusparse, cupti), where $ORIGIN is lib/ here and deps/lib in the
 * package (glibc does not resolve the link), and the parts' own RUNPATHs ($ORIGIN/../../nvjitlink/lib…) find each other.
 * Only the driver (libcuda.so.1) comes from the system.
 */
function installCuda(py, reqs, out, log) {
  if (reqs.length === 0) throw new Error(`the ${KINDS.gpu.wheel} wheel's METADATA names no and-cuda requirements`);
  log(`installing the CUDA libraries the wheel pins (${reqs.length} pip packages, about 3 GB, once per machine)...`);
  const site = path.join(out, 'site');
  run(py, [...PIP, 'install', '--quiet', '--no-deps', '--only-binary=:all:', '--target', site, ...reqs]);
  if (!existsSync(path.join(site, 'nvidia'))) throw new Error('pip installed the and-cuda requirements but no nvidia/ folder');
  renameSync(path.join(site, 'nvidia'), path.join(out, 'nvidia'));
  rmSync(site, { recursive: true, force: true }); // the dist-info folders
  // cuDNN's RUNPATH looks for nvrtc (its runtime-compiled kernels) in nvidia/nvrtc/lib, the package is cuda_nvrtc.
  if (existsSync(path.join(out, 'nvidia', 'cuda_nvrtc')) && !existsSync(path.join(out, 'nvidia', 'nvrtc'))) symlinkSync('cuda_nvrtc', path.join(out, 'nvidia', 'nvrtc'));
  writeFileSync(path.join(out, 'cuda-requirements.txt'), `${reqs.join('\n')}\n`);
}

/** Directories holding the pip CUDA libraries of a GPU install. */
export function cudaLibraryDirs(libDir) {
  const nvidia = path.join(libDir, 'nvidia');
  if (!existsSync(nvidia)) return [];
  return readdirSync(nvidia, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => path.join(nvidia, d.name, 'lib')).filter((d) => existsSync(d)).sort();
}

function link(target, at) {
  try {
    lstatSync(at);
    unlinkSync(at);
  } catch { /* absent */ }
  symlinkSync(target, at);
}

function packageDir(kind) {
  return path.join(root, 'node_modules', ...KINDS[kind].pkg.split('/'));
}

/** Points the package's deps/ at the cached libraries and puts a compiled addon in lib/napi-v8. */
function installInto(kind, libDir, log) {
  const pkgDir = packageDir(kind);
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
  // $ORIGIN/../nvidia/<part>/lib of the libraries, seen through deps/lib (where the addon's RUNPATH finds them).
  if (existsSync(path.join(libDir, 'nvidia'))) link(path.join(libDir, 'nvidia'), path.join(deps, 'nvidia'));

  const addonDir = path.join(pkgDir, 'lib', `napi-v${NAPI}`);
  const addon = path.join(addonDir, 'tfjs_binding.node');
  const cached = path.join(libDir, `tfjs_binding-${KINDS[kind].backend}-${version}-napi${NAPI}-${ADDON_REV}.node`);
  if (!existsSync(cached)) {
    log(`compiling ${KINDS[kind].pkg}'s addon against TensorFlow ${TF_VERSION} (node-gyp, once per machine)...`);
    const src = path.join(pkgDir, 'binding', 'tfjs_backend.cc');
    try {
      writeFileSync(src, bindingPatch(readFileSync(src, 'utf8')));
    } catch (e) {
      log(`compiling without cm2's session-config patch (${e?.message ?? e}): decoding shares the training thread pool`);
    }
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
  // A new file renamed into place: a process that has the old addon loaded keeps its mapping intact.
  copyFileSync(cached, `${addon}.tmp`);
  renameSync(`${addon}.tmp`, addon);
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

/**
 * Loads the package in a child process (a crash there must not take this one down), checks the backend and a matmul,
 * and returns the GPU devices TensorFlow created (from its INFO log; none on a machine without a GPU, where
 * TensorFlow's CUDA build runs on the CPU).
 */
function verify(kind) {
  // The GPU build's device lines are INFO; the CPU build's INFO lines are noise. Without allow-growth TensorFlow
  // reserves nearly all GPU memory, which fails while a worker already holds it.
  const env = { ...process.env, TF_CPP_MIN_LOG_LEVEL: kind === 'gpu' ? '0' : '2', TF_FORCE_GPU_ALLOW_GROWTH: process.env.TF_FORCE_GPU_ALLOW_GROWTH ?? 'true' };
  const code = `const tf = require(${JSON.stringify(KINDS[kind].pkg)});
    const a = tf.tensor2d([[1, 2], [3, 4]]); const s = tf.matMul(a, a).dataSync();
    process.stdout.write(JSON.stringify({ backend: tf.getBackend(), ok: s[0] === 7 && s[3] === 22 }));`;
  const r = spawnSync(process.execPath, ['-e', code], { cwd: root, env, encoding: 'utf8', timeout: 300_000 });
  let out;
  try {
    out = JSON.parse(r.stdout);
  } catch {
    const lines = (r.stderr || r.stdout || '').trim().split('\n');
    throw new Error(`loading ${KINDS[kind].pkg} failed: ${lines.find((l) => /rror/.test(l)) ?? (lines.at(-1) || `exit ${r.status ?? r.signal}`)}`);
  }
  if (out.backend !== 'tensorflow' || !out.ok) throw new Error(`${KINDS[kind].pkg} loaded but reports backend ${out.backend}, matmul ok=${out.ok}`);
  return createdGpuDevices(r.stderr ?? '');
}

export function readStatus(file = statusFile) {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
}

/** Writes the status into node_modules (skipped when there is no node_modules yet; a failure is reported, not thrown); returns it. */
export function writeStatus(status, file = statusFile) {
  if (!existsSync(path.dirname(file))) return status;
  try {
    writeFileSync(`${file}.tmp`, `${JSON.stringify(status, null, 2)}\n`);
    renameSync(`${file}.tmp`, file);
  } catch (e) {
    console.error(`native TensorFlow: could not record the status in ${file}: ${e?.message ?? e}`);
  }
  return status;
}

/** Makes the native backend ready (or records why not); returns the status object written to node_modules/.cm2-native.json. */
export function ensureNative({ quiet = false, force = false } = {}) {
  const log = (line) => { if (!quiet) console.log(`native TensorFlow: ${line}`); };
  const base = { tensorflow: TF_VERSION, checkedAt: new Date().toISOString() };
  const prev = readStatus();
  // Said once: a reason that the recorded status already gives is not printed again.
  const fallBack = (fields) => {
    if (prev?.ok !== false || prev.reason !== fields.reason) log(`unavailable, using the WebAssembly backend: ${fields.reason}`);
    return writeStatus({ ...base, ok: false, backend: null, ...fields });
  };
  const parsed = parseWant(process.env.CM2_NATIVE);
  if (parsed.error) return fallBack({ reason: parsed.error });
  const { want } = parsed;
  const { kind, reason } = resolveKind({ want, platform: process.platform, arch: process.arch, gpuVisible });
  if (!kind) return fallBack({ want, kind: null, reason });
  const libDir = libraryDir(kind);
  const reuse = force ? undefined : reusableStatus(prev, {
    kind, want, libDir, addonExists: existsSync(path.join(packageDir(kind), 'lib', `napi-v${NAPI}`, 'tfjs_binding.node')),
    libDirComplete: existsSync(path.join(libDir, '.complete')),
  });
  if (reuse) return prev; // ready, or failed within the hour: don't retry every command
  try {
    ensureLibraries(kind, log);
    const pkgVersion = installInto(kind, libDir, log);
    const gpuDevices = verify(kind);
    const status = {
      ...base, ok: true, want, kind, backend: KINDS[kind].backend, package: `${KINDS[kind].pkg}@${pkgVersion}`, addon: ADDON_REV, libDir,
      cudaLibraryDirs: cudaLibraryDirs(libDir), ...(kind === 'gpu' ? { gpuDevices } : {}),
    };
    if (!prev?.ok || prev.kind !== kind) log(`${status.backend} ready (TensorFlow ${TF_VERSION} from PyPI's ${KINDS[kind].wheel} wheel, libraries in ${libDir})`);
    if (kind === 'gpu' && gpuDevices.length === 0) log('TensorFlow found no usable GPU (driver, device or CUDA libraries): tfjs-node-gpu runs on the CPU here');
    return writeStatus(status);
  } catch (e) {
    const reason = String(e?.message ?? e);
    log(`unavailable, using the WebAssembly backend: ${reason}`);
    return writeStatus({ ...base, ok: false, backend: null, want, kind, reason });
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const st = ensureNative({ quiet: process.argv.includes('--quiet'), force: process.argv.includes('--force') });
  if (process.argv.includes('--print')) console.log(JSON.stringify(st, null, 2));
}
