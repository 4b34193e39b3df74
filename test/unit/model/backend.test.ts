import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  ADDON_REV, andCudaRequirements, bindingPatch, createdGpuDevices, cudaLibraryDirs, ensureLibraries, libraryDir, parseWant, readStatus, resolveKind, RETRY_AFTER_MS,
  reusableStatus, TF_VERSION, writeStatus, type NativeInstallStatus,
} from '../../../scripts/ensure-native.mjs';
import { FIXTURES, REPO } from '../../helpers/paths';

const fixture = (name: string): string => readFileSync(path.join(FIXTURES, name), 'utf8');

function tempDir(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-native-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

describe('andCudaRequirements', () => {
  test("reads the pins of tensorflow 2.16.2's and-cuda extra from its METADATA (single quotes, spaces)", () => {
    assert.deepEqual(andCudaRequirements(fixture('tensorflow-2.16.2.METADATA')), [
      'nvidia-cublas-cu12==12.3.4.1',
      'nvidia-cuda-cupti-cu12==12.3.101',
      'nvidia-cuda-nvcc-cu12==12.3.107',
      'nvidia-cuda-nvrtc-cu12==12.3.107',
      'nvidia-cuda-runtime-cu12==12.3.101',
      'nvidia-cudnn-cu12==8.9.7.29',
      'nvidia-cufft-cu12==11.0.12.1',
      'nvidia-curand-cu12==10.3.4.107',
      'nvidia-cusolver-cu12==11.5.4.101',
      'nvidia-cusparse-cu12==12.2.0.103',
      'nvidia-nccl-cu12==2.19.3',
      'nvidia-nvjitlink-cu12==12.3.101',
    ]);
  });

  test('accepts double quotes, PEP 685 spellings of the extra, other markers and CRLF; skips other extras and the description', () => {
    const metadata = [
      'Metadata-Version: 2.3',
      'Requires-Dist: numpy<2.0.0,>=1.26.0; python_version >= "3.12"',
      'Requires-Dist: nvidia-cublas-cu12==12.5.3.2; extra == "and-cuda"',
      'Requires-Dist: nvidia-cudnn-cu12 (==9.3.0.75) ; extra == "and_cuda"',
      'Requires-Dist: nvidia-nccl-cu12==2.21.5; platform_system == "Linux" and extra == \'and.cuda\'',
      'Requires-Dist: tensorflow-io==0.37.1; extra == "and-cuda-io"',
      'Requires-Dist: pytest; extra == "test"',
      '',
      'Requires-Dist: in-the-description; extra == "and-cuda"',
    ].join('\r\n');
    assert.deepEqual(andCudaRequirements(metadata), ['nvidia-cublas-cu12==12.5.3.2', 'nvidia-cudnn-cu12==9.3.0.75', 'nvidia-nccl-cu12==2.21.5']);
  });

  test('a wheel without the extra (tensorflow-cpu) gives none', () => {
    assert.deepEqual(andCudaRequirements('Metadata-Version: 2.1\nName: tensorflow-cpu\nRequires-Dist: absl-py >=1.0.0\n'), []);
    assert.deepEqual(andCudaRequirements(''), []);
  });
});

describe('parseWant (CM2_NATIVE)', () => {
  test('unset or empty is auto; case and spaces do not matter; wasm means off', () => {
    assert.deepEqual(parseWant(undefined), { want: 'auto' });
    assert.deepEqual(parseWant(''), { want: 'auto' });
    assert.deepEqual(parseWant(' GPU '), { want: 'gpu' });
    assert.deepEqual(parseWant('cpu'), { want: 'cpu' });
    assert.deepEqual(parseWant('off'), { want: 'off' });
    assert.deepEqual(parseWant('wasm'), { want: 'off' });
  });

  test('anything else is an error that names the variable and the allowed values', () => {
    const r = parseWant('cuda');
    assert.equal(r.want, undefined);
    assert.match(r.error ?? '', /CM2_NATIVE=cuda is not one of auto, cpu, gpu, off/);
  });
});

describe('resolveKind', () => {
  const noProbe = (): boolean => assert.fail('gpuVisible must not be called');
  const linux = { platform: 'linux', arch: 'x64' };

  test('auto follows the GPU probe', () => {
    assert.deepEqual(resolveKind({ want: 'auto', ...linux, gpuVisible: () => true }), { kind: 'gpu' });
    assert.deepEqual(resolveKind({ want: 'auto', ...linux, gpuVisible: () => false }), { kind: 'cpu' });
  });

  test('cpu and gpu are taken as asked, without probing', () => {
    assert.deepEqual(resolveKind({ want: 'gpu', ...linux, gpuVisible: noProbe }), { kind: 'gpu' });
    assert.deepEqual(resolveKind({ want: 'cpu', ...linux, gpuVisible: noProbe }), { kind: 'cpu' });
  });

  test('off, another OS or another architecture install nothing and say why', () => {
    assert.deepEqual(resolveKind({ want: 'off', ...linux, gpuVisible: noProbe }), { kind: null, reason: 'CM2_NATIVE=off' });
    const mac = resolveKind({ want: 'gpu', platform: 'darwin', arch: 'arm64', gpuVisible: noProbe });
    assert.equal(mac.kind, null);
    assert.match(mac.reason ?? '', /no native build for darwin-arm64/);
    assert.match(resolveKind({ want: 'auto', platform: 'linux', arch: 'arm64', gpuVisible: noProbe }).reason ?? '', /linux-arm64/);
  });
});

describe('reusableStatus', () => {
  const libDir = '/cache/tensorflow/gpu-2.16.2';
  const now = Date.parse('2026-11-24T12:00:00Z');
  const ok: NativeInstallStatus = {
    ok: true, backend: 'tfjs-node-gpu', tensorflow: TF_VERSION, checkedAt: '2026-11-20T00:00:00Z', want: 'auto', kind: 'gpu', libDir,
    addon: ADDON_REV,
  };
  const present = { addonExists: true, libDirComplete: true };

  test('a working install of the same build from the same cache is reused, whatever asked for it', () => {
    assert.equal(reusableStatus(ok, { kind: 'gpu', want: 'gpu', libDir, now, ...present }), 'ready');
  });

  test('an addon compiled without the current patch revision is compiled again', () => {
    assert.equal(reusableStatus({ ...ok, addon: undefined }, { kind: 'gpu', want: 'auto', libDir, now, ...present }), undefined);
    assert.equal(reusableStatus({ ...ok, addon: 'cm2p0' }, { kind: 'gpu', want: 'auto', libDir, now, ...present }), undefined);
  });

  test('anything changed means install or check again', () => {
    assert.equal(reusableStatus(undefined, { kind: 'gpu', want: 'auto', libDir, now, ...present }), undefined);
    assert.equal(reusableStatus(ok, { kind: 'cpu', want: 'auto', libDir, now, ...present }), undefined);
    assert.equal(reusableStatus({ ...ok, tensorflow: '2.15.0' }, { kind: 'gpu', want: 'auto', libDir, now, ...present }), undefined);
    assert.equal(reusableStatus(ok, { kind: 'gpu', want: 'auto', libDir: '/elsewhere/gpu-2.16.2', now, ...present }), undefined);
    assert.equal(reusableStatus(ok, { kind: 'gpu', want: 'auto', libDir, now, addonExists: false, libDirComplete: true }), undefined);
    assert.equal(reusableStatus(ok, { kind: 'gpu', want: 'auto', libDir, now, addonExists: true, libDirComplete: false }), undefined);
  });

  test('a failure is not retried within RETRY_AFTER_MS for the same request, and is after it', () => {
    const failed: NativeInstallStatus = { ok: false, backend: null, tensorflow: TF_VERSION, checkedAt: new Date(now - 60_000).toISOString(), want: 'auto', kind: 'gpu', reason: 'pip download … exited 1' };
    assert.equal(reusableStatus(failed, { kind: 'gpu', want: 'auto', libDir, now, ...present }), 'failed-recently');
    assert.equal(reusableStatus(failed, { kind: 'gpu', want: 'auto', libDir, now: now + RETRY_AFTER_MS, ...present }), undefined);
    assert.equal(reusableStatus(failed, { kind: 'gpu', want: 'gpu', libDir, now, ...present }), undefined, 'another request retries');
    assert.equal(reusableStatus({ ...failed, checkedAt: 'garbled' }, { kind: 'gpu', want: 'auto', libDir, now, ...present }), undefined);
  });
});

describe('status file', () => {
  test('round trip; a missing or corrupt file reads as undefined', (t) => {
    const dir = tempDir(t);
    const file = path.join(dir, '.cm2-native.json');
    assert.equal(readStatus(file), undefined);
    const status: NativeInstallStatus = { ok: false, backend: null, tensorflow: TF_VERSION, checkedAt: new Date().toISOString(), reason: 'CM2_NATIVE=off' };
    assert.equal(writeStatus(status, file), status);
    assert.deepEqual(readStatus(file), status);
    writeFileSync(file, '{"ok": tr');
    assert.equal(readStatus(file), undefined);
  });

  test('is not written before node_modules exists (the status is still returned)', (t) => {
    const file = path.join(tempDir(t), 'node_modules', '.cm2-native.json');
    const status: NativeInstallStatus = { ok: false, backend: null, tensorflow: TF_VERSION, checkedAt: new Date().toISOString() };
    assert.equal(writeStatus(status, file), status);
    assert.equal(readStatus(file), undefined);
  });
});

test('createdGpuDevices reads the devices from TensorFlow INFO lines', () => {
  const log = [
    '2026-11-24 06:38:53.258782: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on.',
    '2026-11-24 07:01:02.000001: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1928] Created device /job:localhost/replica:0/task:0/device:GPU:0 with 78917 MB memory:  -> device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:19:00.0, compute capability: 9.0',
    '2026-11-24 07:01:02.000002: I tensorflow/core/common_runtime/gpu/gpu_device.cc:1928] Created device /job:localhost/replica:0/task:0/device:GPU:1 with 78917 MB memory:  -> device: 1, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0',
  ].join('\n');
  assert.deepEqual(createdGpuDevices(log), [
    '/job:localhost/replica:0/task:0/device:GPU:0 (78917 MB, device: 0, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:19:00.0, compute capability: 9.0)',
    '/job:localhost/replica:0/task:0/device:GPU:1 (78917 MB, device: 1, name: NVIDIA H100 80GB HBM3, pci bus id: 0000:3b:00.0, compute capability: 9.0)',
  ]);
  assert.deepEqual(createdGpuDevices(log.split('\n')[0]!), []);
});

test('cudaLibraryDirs lists nvidia/<part>/lib folders of a GPU install, once each, not the nvrtc alias', (t) => {
  const dir = tempDir(t);
  for (const part of ['cuda_runtime', 'cublas', 'cuda_nvrtc']) mkdirSync(path.join(dir, 'nvidia', part, 'lib'), { recursive: true });
  mkdirSync(path.join(dir, 'nvidia', '__pycache__'));
  writeFileSync(path.join(dir, 'nvidia', '__init__.py'), '');
  symlinkSync('cuda_nvrtc', path.join(dir, 'nvidia', 'nvrtc'));
  assert.deepEqual(cudaLibraryDirs(dir), ['cublas', 'cuda_nvrtc', 'cuda_runtime'].map((p) => path.join(dir, 'nvidia', p, 'lib')));
  assert.deepEqual(cudaLibraryDirs(path.join(dir, 'cpu-install')), []);
});

test('libraryDir: one folder per kind and TensorFlow version under CM2_CACHE_DIR (default ~/.cache/cm2)', () => {
  assert.equal(libraryDir('gpu', { CM2_CACHE_DIR: '/tmp/c' }), path.join('/tmp/c', 'tensorflow', `gpu-${TF_VERSION}`));
  assert.match(libraryDir('cpu', {}), new RegExp(`\\.cache/cm2/tensorflow/cpu-${TF_VERSION.replace(/\./g, '\\.')}$`));
});

describe('bindingPatch', () => {
  // The lines of tfjs-node 4.22.0's LoadSavedModel around the anchor.
  const source = [
    '  std::string tags;',
    '  nstatus = GetStringParam(env, tags_value, tags);',
    '  ENSURE_NAPI_OK_RETVAL(env, nstatus, nullptr);',
    '',
    '  std::vector<const char *> tags_ptrs = splitStringByComma(tags);',
    '',
    '  TF_Graph *graph = TF_NewGraph();',
    '',
  ].join('\n');

  test('inserts the session-config tag handling right after the tags are split, once', () => {
    const out = bindingPatch(source);
    const at = out.indexOf('splitStringByComma(tags);');
    const patch = out.indexOf('cm2:intra_op_threads=');
    assert.ok(patch > at && patch < out.indexOf('TF_NewGraph'));
    assert.match(out, /TF_SetConfig\(session_options, cm2_config, sizeof\(cm2_config\), cm2_status\.status\)/);
    assert.match(out, /\{0x10, static_cast<unsigned char>\(cm2_threads\)\}/); // ConfigProto field 2, varint
    assert.equal(bindingPatch(out), out, 'an already patched source is left as it is');
  });

  test('another source (no anchor) is refused with the reason', () => {
    assert.throws(() => bindingPatch('int main() {}'), /tags line not found/);
    assert.throws(() => bindingPatch(source + source), /not found once/);
  });

  test("the installed tfjs-node's own source takes the patch", (t) => {
    // The package whose addon is in use (tfjs-node or tfjs-node-gpu), or tfjs-node when none is.
    const status = readStatus(path.join(REPO, 'node_modules', '.cm2-native.json'));
    const pkg = status?.ok && status.package ? status.package.replace(/@[^@/]+$/, '') : '@tensorflow/tfjs-node';
    const file = path.join(REPO, 'node_modules', ...pkg.split('/'), 'binding', 'tfjs_backend.cc');
    if (!existsSync(file)) {
      // Missing is a skip only where no native backend is expected: an optional dependency npm could not install
      // (another OS or architecture). Where the native addon is in use, it was compiled from this very file; and CI on
      // Linux x86-64 requires the native backend (.ci/run) unless CM2_NATIVE=off.
      if (status?.ok) assert.fail(`native TensorFlow is in use (${status.package}, addon ${status.addon}) but its source ${file} is missing`);
      const want = parseWant(process.env.CM2_NATIVE).want;
      if (process.env.CI && process.platform === 'linux' && process.arch === 'x64' && want !== 'off') {
        assert.fail(`CI on Linux x86-64 runs on native TensorFlow (CM2_NATIVE=${process.env.CM2_NATIVE ?? 'auto'}), but ${file} is missing`);
      }
      t.skip(`${pkg} is not installed (${file} missing; native backend: ${status?.reason ?? 'no install status'})`);
      return;
    }
    const text = readFileSync(file, 'utf8');
    const patched = bindingPatch(text);
    assert.ok(patched.includes('cm2 patch: session config'));
    assert.equal(bindingPatch(patched), patched, 'the patch applies once');
  });
});

test('`cm2 backend` names the active backend and, on native TensorFlow, whether the addon carries cm2\'s patch', () => {
  const root = REPO;
  const env = { ...process.env };
  delete env.CM2_BACKEND;
  const out = execFileSync(process.execPath, [path.join(root, 'bin', 'cm2.js'), 'backend'], { cwd: root, encoding: 'utf8', env });
  assert.match(out, /^backend: \S+ \(/m);
  const status = readStatus(path.join(root, 'node_modules', '.cm2-native.json'));
  if (status?.ok) assert.match(out, new RegExp(`addon with cm2's patch ${ADDON_REV} \\(per-session thread pools\\)`));
  else assert.match(out, /native TensorFlow: not in use: /);
});

test('a fresh machine: the C library and headers are fetched with pip, kept, the rest dropped, the folder completed atomically', (t) => {
  // A stand-in for `python -m pip download` (the real one fetches 214 MB): it writes a wheel with the layout of
  // tensorflow-cpu 2.16.2's; anything else goes to the real python3 (the extraction script runs for real).
  const dir = tempDir(t);
  const stub = path.join(dir, 'python-stub');
  writeFileSync(stub, `#!/usr/bin/env python3
import os, sys, zipfile
args = sys.argv[1:]
if args[:2] == ['-m', 'pip'] and 'download' in args:
    d = args[args.index('-d') + 1]
    with zipfile.ZipFile(os.path.join(d, 'tensorflow_cpu-2.16.2-cp311-cp311-manylinux_2_17_x86_64.whl'), 'w') as z:
        for n in ['tensorflow/libtensorflow_cc.so.2', 'tensorflow/libtensorflow_framework.so.2', 'tensorflow/include/tensorflow/c/c_api.h',
                  'tensorflow/include/tsl/c/tsl_status.h', 'tensorflow/include/tsl/platform/ctstring_internal.h', 'tensorflow/python/big.so',
                  'tensorflow/include/tensorflow/core/framework/op.h']:
            z.writestr(n, 'x')
        z.writestr('tensorflow_cpu-2.16.2.dist-info/METADATA', "Name: tensorflow-cpu\\nRequires-Dist: nvidia-cublas-cu12 ==12.3.4.1 ; extra == 'and-cuda'\\n")
    sys.exit(0)
os.execvp('python3', ['python3'] + args)
`, { mode: 0o755 });
  const saved = { cache: process.env.CM2_CACHE_DIR, py: process.env.PYTHON };
  t.after(() => {
    for (const [k, v] of [['CM2_CACHE_DIR', saved.cache], ['PYTHON', saved.py]] as const) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  });
  process.env.CM2_CACHE_DIR = path.join(dir, 'cache');
  process.env.PYTHON = stub;
  const lines: string[] = [];
  const lib = ensureLibraries('cpu', (l: string) => lines.push(l));
  assert.equal(lib, libraryDir('cpu'));
  const files = (sub: string): string[] => readdirSync(path.join(lib, sub), { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => path.relative(path.join(lib, sub), path.join(e.parentPath, e.name))).sort();
  assert.deepEqual(files('lib'), ['libtensorflow_cc.so.2', 'libtensorflow_framework.so.2']);
  assert.deepEqual(files('include'), ['tensorflow/c/c_api.h', 'tsl/c/tsl_status.h', 'tsl/platform/ctstring_internal.h']);
  assert.ok(existsSync(path.join(lib, '.complete')));
  assert.ok(!existsSync(`${lib}.partial`), 'no partial folder is left');
  assert.match(lines.join('\n'), /fetching PyPI's tensorflow-cpu==2\.16\.2 wheel/);
  // a second call finds the completed folder and fetches nothing
  process.env.PYTHON = path.join(dir, 'no-such-python');
  assert.equal(ensureLibraries('cpu', () => assert.fail('fetched again')), lib);
});
