/**
 * A safetensors file over 2 GiB written and read back one tensor at a time (src/model/formats/safetensors.ts), against Python's
 * `safetensors` package (torch side: save_file of the same tensors, then safe_open + get_tensor one at a time), each in a
 * fresh process one after the other: seconds and peak RSS.
 *
 *   npx tsx bench/safetensors-io.ts [--tensors 9] [--mib 256] [--dtype F32|BF16] [--no-torch] [--tmp DIR]
 *
 * 9 tensors of 256 MiB (F32) make a 2.25 GiB file: `readFileSync` refuses it (ERR_FS_FILE_TOO_LARGE); the streaming
 * reader holds one tensor plus one 64 MiB chunk. Our write includes the sha256 of the file (computed as it is written,
 * for the S3 manifest). With --dtype BF16 the file is written by Python (torch bfloat16) and both sides read it, ours
 * decoding to float32 (as the model loader does); --tensors 18 makes that file 2.25 GiB too.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { SafetensorsReader } from '../src/model/formats/safetensors';

const RESULT = '@@RESULT ';
const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;
const mib = (b: number) => `${Math.round(b / 2 ** 20).toLocaleString('en-US')} MiB`;

interface Side { writeSeconds?: number; readSeconds: number; bytes: number; peakRssBytes: number; baseRssBytes: number; readFileSyncError?: string; checksum: number }

function fill(i: number, len: number): Float32Array {
  const a = new Float32Array(len);
  for (let j = 0; j < len; j += 1024) a[j] = (i + 1) * 0.5 + j / len;
  return a;
}

function child(file: string, tensors: number, len: number, write: boolean): Side {
  const baseRssBytes = process.memoryUsage().rss;
  let writeSeconds: number | undefined;
  if (write) {
    const t0 = performance.now();
    writeSafetensors(file, Array.from({ length: tensors }, (_, i) => ({ name: `t${String(i).padStart(2, '0')}`, shape: [len / 1024, 1024], data: () => fill(i, len) })));
    writeSeconds = (performance.now() - t0) / 1000;
  }
  // What the old code did (only tried on files over 2 GiB, where it fails at once; below, it would read the whole file).
  let readFileSyncError = 'not tried (file under 2 GiB)';
  if (statSync(file).size > 2 ** 31 - 1) {
    try {
      readFileSync(file);
      readFileSyncError = 'read it';
    } catch (e) {
      readFileSyncError = (e as NodeJS.ErrnoException).code ?? String(e);
    }
  }
  const t0 = performance.now();
  const r = SafetensorsReader.open(file);
  let checksum = 0;
  for (const name of r.names()) {
    const a = r.read(name);
    for (let j = 0; j < a.length; j += 1024) checksum += a[j]!;
  }
  r.close();
  const readSeconds = (performance.now() - t0) / 1000;
  return { ...(writeSeconds !== undefined ? { writeSeconds } : {}), readSeconds, bytes: statSync(file).size, peakRssBytes: process.resourceUsage().maxRSS * 1024, baseRssBytes, readFileSyncError, checksum };
}

const PY = String.raw`
import json, os, resource, sys, time
import torch
from safetensors import safe_open
from safetensors.torch import save_file
file, n, length, write, dtype = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
base = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
out = {"baseRssBytes": base}
if write:
    t0 = time.perf_counter()
    ts = {}
    for i in range(n):
        a = torch.zeros(length)
        a[::1024] = (i + 1) * 0.5 + torch.arange(0, length, 1024, dtype=torch.float64).float() / length
        ts[f"t{i:02d}"] = a.view(length // 1024, 1024).to(getattr(torch, dtype))
    save_file(ts, file)
    del ts
    out["writeSeconds"] = time.perf_counter() - t0
t0 = time.perf_counter()
checksum = 0.0
with safe_open(file, framework="pt") as f:
    for k in f.keys():
        a = f.get_tensor(k).float().reshape(-1).clone()  # clone: every byte read (get_tensor maps the file lazily)
        checksum += a[::1024].double().sum().item()
out.update(readSeconds=time.perf_counter() - t0, bytes=os.path.getsize(file), checksum=checksum,
           peakRssBytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
print("@@RESULT " + json.dumps(out))
`;
import { writeSafetensors } from '../src/model/formats/safetensorsWrite';

function run(cmd: string, args: string[]): Promise<Side | undefined> {
  return new Promise((resolve) => {
    let stdout = '';
    const c = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    c.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    c.on('error', () => resolve(undefined));
    c.on('close', () => {
      const line = stdout.split('\n').find((l) => l.startsWith(RESULT));
      resolve(line ? (JSON.parse(line.slice(RESULT.length)) as Side) : undefined);
    });
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: {
    child: { type: 'string' }, write: { type: 'boolean', default: false },
    tensors: { type: 'string', default: '9' }, mib: { type: 'string', default: '256' }, dtype: { type: 'string', default: 'F32' },
    'no-torch': { type: 'boolean', default: false }, tmp: { type: 'string' },
  } });
  const n = Number(values.tensors);
  const len = (Number(values.mib) * 2 ** 20) / 4;
  if (values.child) {
    process.stdout.write(`${RESULT}${JSON.stringify(child(values.child, n, len, values.write))}\n`);
    return;
  }
  const dtype = values.dtype === 'BF16' ? 'BF16' : 'F32';
  const tmp = values.tmp ? path.resolve(values.tmp) : mkdtempSync(path.join(os.tmpdir(), 'cm2-stio-'));
  const ours = path.join(tmp, 'ours.safetensors');
  const theirs = path.join(tmp, 'torch.safetensors');
  const py = process.env['PYTHON'] ?? 'python3';
  try {
    const rows: string[] = [];
    let o: Side | undefined;
    let t: Side | undefined;
    if (dtype === 'F32') {
      o = await run(process.execPath, [...process.execArgv, __filename, '--child', ours, '--write', '--tensors', String(n), '--mib', String(values.mib)]);
      rmSync(ours, { force: true });
      if (!values['no-torch']) t = await run(py, ['-c', PY, theirs, String(n), String(len), '1', 'float32']);
    } else {
      // Python writes the BF16 file; both read it.
      if (spawnSync(py, ['-c', PY, theirs, String(n), String(len), '1', 'bfloat16'], { stdio: 'ignore' }).status !== 0) throw new Error('python could not write the BF16 file');
      o = await run(process.execPath, [...process.execArgv, __filename, '--child', theirs, '--tensors', String(n), '--mib', String(values.mib)]);
      if (!values['no-torch']) t = await run(py, ['-c', PY, theirs, String(n), String(len), '0', 'bfloat16']);
    }
    if (!o) throw new Error('our run failed');
    rows.push(`${dtype} file of ${n} tensors × ${values.mib} MiB (as float32): ${gib(o.bytes)}; readFileSync: ${o.readFileSyncError}`);
    rows.push('');
    rows.push('| | write s | read s (one tensor at a time) | peak RSS | RSS at start |');
    rows.push('|---|---|---|---|---|');
    rows.push(`| ours (tfjs side, Node) | ${o.writeSeconds?.toFixed(1) ?? '– (Python wrote it)'} | ${o.readSeconds.toFixed(1)} | ${mib(o.peakRssBytes)} | ${mib(o.baseRssBytes)} |`);
    if (t) rows.push(`| Python safetensors + torch | ${t.writeSeconds?.toFixed(1) ?? '–'} | ${t.readSeconds.toFixed(1)} | ${mib(t.peakRssBytes)} | ${mib(t.baseRssBytes)} |`);
    else rows.push('| Python safetensors + torch | not available | | | |');
    if (t) rows.push(`\nchecksums agree: ${Math.abs(o.checksum - t.checksum) <= 1e-6 * Math.abs(t.checksum)}`);
    console.log(rows.join('\n'));
  } finally {
    if (!values.tmp) rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((e: Error) => {
  console.error(e.stack ?? e.message);
  process.exit(1);
});
