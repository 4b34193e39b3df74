/**
 * `cm2 model import` on the real SmolLM2-135M-Instruct Q4_1 GGUF, and the speed of its 49,152-token tokenizer.
 *
 *   npx tsx bench/model-import.ts [--no-python] [--json FILE]
 *
 * Measures: the import (read + dequantize + unpermute 272 tensors, write 538 MB of F32 safetensors and the tokenizer
 * files), loading the imported checkpoint into the model, building the tokenizer from tokenizer.json, and encoding a
 * corpus of varied text (this repository's README, docs and TypeScript sources: prose, code, tables; nothing repeated)
 * with @huggingface/tokenizers — a fresh tokenizer (cold BPE cache), then the same text again (warm). With Python
 * (transformers + tokenizers installed), the same corpus through HF's Rust tokenizer loaded from the imported
 * tokenizer.json, single-threaded, for comparison. The GGUF is found as the tests find it (scripts/ensure-smollm2.mjs).
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import * as tf from '@tensorflow/tfjs';
import { selectBackend } from '../src/model/net/backend';
import { loadHfCheckpoint } from '../src/model/formats/checkpoint';
import { importGguf } from '../src/model/formats/modelImport';
import { smollm2Path } from '../scripts/ensure-smollm2.mjs';

const args = process.argv.slice(2);
const root = join(__dirname, '..');

function corpus(): string {
  const files: string[] = [join(root, 'README.md')];
  for (const d of ['docs', 'bench']) for (const f of readdirSync(join(root, d))) if (f.endsWith('.md')) files.push(join(root, d, f));
  const walk = (dir: string) => {
    for (const f of readdirSync(dir).sort()) {
      const p = join(dir, f);
      if (statSync(p).isDirectory()) walk(p);
      else if (f.endsWith('.ts')) files.push(p);
    }
  };
  walk(join(root, 'src'));
  return files.map((f) => readFileSync(f, 'utf8')).join('\n');
}

const PY = `
import sys, time, json, hashlib
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
text = open(sys.argv[2], encoding='utf-8').read()
t = time.perf_counter(); ids = tok.encode(text, add_special_tokens=False).ids; s = time.perf_counter() - t
print(json.dumps({"tokens": len(ids), "seconds": s, "sha256": hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()}))
`;

async function main(): Promise<void> {
  const gguf = smollm2Path();
  if (!existsSync(gguf)) throw new Error(`${gguf} is absent: node scripts/ensure-smollm2.mjs`);
  const out = mkdtempSync(join(tmpdir(), 'cm2-bench-import-'));
  const result: Record<string, unknown> = {};
  try {
    const s = importGguf(gguf, out, { force: true });
    result.import = { seconds: s.seconds, parameters: s.parameters, bytesWritten: s.files.reduce((n, f) => n + f.bytes, 0) };
    console.log(`import: ${s.seconds.toFixed(2)} s (${(s.parameters / 1e6).toFixed(1)}M parameters, ${(statSync(gguf).size / 1e6).toFixed(0)} MB GGUF → ${((result.import as { bytesWritten: number }).bytesWritten / 1e6).toFixed(0)} MB)`);

    const backend = await selectBackend('auto');
    let t = performance.now();
    const model = loadHfCheckpoint(out);
    const loadS = (performance.now() - t) / 1000;
    model.dispose();
    result.load = { seconds: loadS, backend };
    console.log(`load imported checkpoint (${backend}): ${loadS.toFixed(2)} s`);

    const text = corpus();
    t = performance.now();
    const tokJson = JSON.parse(readFileSync(join(out, 'tokenizer.json'), 'utf8')) as object;
    const tokConfig = JSON.parse(readFileSync(join(out, 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
    const tok = new Tokenizer(tokJson, tokConfig);
    const buildS = (performance.now() - t) / 1000;
    t = performance.now();
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    const cold = (performance.now() - t) / 1000;
    const n = ids.length;
    const idsSha = createHash('sha256').update(ids.join(',')).digest('hex');
    t = performance.now();
    tok.encode(text, { add_special_tokens: false });
    const warm = (performance.now() - t) / 1000;
    result.tokenizer = { buildSeconds: buildS, chars: text.length, tokens: n, coldSeconds: cold, warmSeconds: warm, coldTokensPerS: n / cold, warmTokensPerS: n / warm };
    console.log(`tokenizer: built in ${buildS.toFixed(2)} s; ${n} tokens (${(text.length / 1e6).toFixed(2)} M chars): cold ${Math.round(n / cold)} tokens/s, warm ${Math.round(n / warm)} tokens/s`);

    if (!args.includes('--no-python')) {
      const textFile = join(out, 'corpus.txt');
      writeFileSync(textFile, text);
      const r = spawnSync(process.env.PYTHON ?? 'python3', ['-c', PY, join(out, 'tokenizer.json'), textFile], { encoding: 'utf8', env: { ...process.env, RAYON_NUM_THREADS: '1', TOKENIZERS_PARALLELISM: 'false' } });
      if (r.status === 0) {
        const py = JSON.parse(r.stdout) as { tokens: number; seconds: number; sha256: string };
        result.python = { tokens: py.tokens, seconds: py.seconds, tokensPerS: py.tokens / py.seconds, sameIds: py.sha256 === idsSha };
        console.log(`HF tokenizers (Rust, Python, 1 thread) on the same tokenizer.json: ${py.tokens} tokens, ${Math.round(py.tokens / py.seconds)} tokens/s; ${py.sha256 === idsSha ? 'the same ids' : 'DIFFERENT ids'}`);
      } else console.log(`python comparison skipped: ${r.stderr.trim().split('\n').slice(-1)[0]}`);
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
  const json = args.indexOf('--json');
  if (json >= 0 && args[json + 1]) writeFileSync(args[json + 1]!, `${JSON.stringify(result, null, 2)}\n`);
  tf.disposeVariables();
}

void main();
