/**
 * The demo policy's tokenizer: a small byte-level BPE (Qwen2/GPT-2 style) trained here, in TypeScript, on rendered
 * demo-world dialogues, plus the chat special tokens as added tokens. Committed as
 * `assets/demo-tokenizer/{tokenizer.json,tokenizer_config.json}` by `scripts/make-demo-tokenizer.ts`.
 *
 * Why byte-level BPE: @huggingface/tokenizers has no WordLevel model, and a byte-level vocabulary contains all 256
 * bytes, so *any* text (including whatever a policy generates) encodes without unknown tokens and
 * decode(encode(x)) === x exactly — rollouts decode generated ids back into text that is parsed for tool calls.
 * The merges only make demo text short.
 *
 * Layout (the same as Qwen2/Qwen3's tokenizer.json, so HF `tokenizers` in Python loads it too):
 * - no normalizer (NFC would break the exact round trip on non-NFC input);
 * - pre-tokenizer: Split with Qwen's regex (words with one leading non-letter, single digits, punctuation runs,
 *   newline runs, spaces) then ByteLevel without its own regex; decoder: ByteLevel;
 * - model: BPE over the 256 byte symbols, ids 0–255 in byte order, then one id per merge in merge order;
 * - added tokens after the model vocabulary: `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` (special) and
 *   `<think>`, `</think>`, `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>` (not special, as in Qwen3).
 */
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { CHAT_TEMPLATE, renderChat } from '../chat/template';
import { ChatTokenizer, loadChatTokenizer } from '../chat/tokenize';
import { generateDemoDataset } from './generator';

/** Where the committed demo tokenizer lives. */
export const DEMO_TOKENIZER_DIR = path.resolve(__dirname, '..', '..', 'assets', 'demo-tokenizer');

/** Qwen2's pre-tokenizer regex (Oniguruma syntax, as stored in tokenizer.json). */
export const QWEN_SPLIT_REGEX = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

export interface DemoAddedToken {
  content: string;
  special: boolean;
}

/** Added tokens, in id order after the BPE vocabulary. */
export const DEMO_ADDED_TOKENS: readonly DemoAddedToken[] = [
  { content: '<|endoftext|>', special: true },
  { content: '<|im_start|>', special: true },
  { content: '<|im_end|>', special: true },
  { content: '<think>', special: false },
  { content: '</think>', special: false },
  { content: '<tool_call>', special: false },
  { content: '</tool_call>', special: false },
  { content: '<tool_response>', special: false },
  { content: '</tool_response>', special: false },
];

export interface DemoTokenizerSettings {
  vocabSize: number;
  corpusSeed: number;
  corpusCount: number;
}

/** Default build settings of the committed tokenizer (the script uses these). */
export const DEMO_TOKENIZER_DEFAULTS: Readonly<DemoTokenizerSettings> = {
  /** Total vocabulary including added tokens. */
  vocabSize: 1024,
  /** Dataset seed and count of the training corpus (a seed the demo runs do not use by default). */
  corpusSeed: 20240601,
  corpusCount: 1500,
};

/** GPT-2's reversible byte → printable character map (byte-level BPE symbols). */
export function bytesToUnicode(): string[] {
  const keep: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) keep.push(b);
  for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
  for (let b = 0xae; b <= 0xff; b++) keep.push(b);
  const map: string[] = new Array<string>(256);
  for (const b of keep) map[b] = String.fromCodePoint(b);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (map[b] === undefined) map[b] = String.fromCodePoint(256 + n++);
  }
  return map;
}

/** Rendered demo dialogues (full text through the chat template, broken examples included). */
export function demoCorpus(seed: number, count: number): string[] {
  return generateDemoDataset({ seed, count }).map((ex) => renderChat(ex.messages, ex.tools));
}

/** The tokenizer.json skeleton (everything but vocab/merges/added-token ids). */
function tokenizerJsonOf(vocab: Record<string, number>, merges: string[]): Record<string, unknown> {
  const base = Object.keys(vocab).length;
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: DEMO_ADDED_TOKENS.map((t, k) => ({
      id: base + k,
      content: t.content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: t.special,
    })),
    normalizer: null,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: QWEN_SPLIT_REGEX }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
      ],
    },
    post_processor: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: '',
      end_of_word_suffix: '',
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges,
    },
  };
}

export interface TrainedTokenizer {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
}

/**
 * Train a byte-level BPE on `texts` up to `vocabSize` ids in total (added tokens included). Deterministic: ties
 * between equally frequent pairs go to the lexicographically smaller pair.
 */
export function trainDemoTokenizer(texts: readonly string[], vocabSize: number): TrainedTokenizer {
  const byteSymbols = bytesToUnicode();
  const numMerges = vocabSize - 256 - DEMO_ADDED_TOKENS.length;
  if (numMerges < 0) throw new RangeError(`vocabSize ${vocabSize} is below 256 bytes + ${DEMO_ADDED_TOKENS.length} added tokens`);

  // Pre-tokenise with the library itself (byte-level pieces), so training and encoding split text identically.
  const vocab: Record<string, number> = {};
  byteSymbols.forEach((s, b) => (vocab[s] = b));
  const splitter = new Tokenizer(tokenizerJsonOf(vocab, []), {});
  const preTokenize = splitter.pre_tokenizer as unknown as (text: string) => string[];
  const specials = new RegExp(DEMO_ADDED_TOKENS.map((t) => t.content.replace(/[|/\\<>]/g, (c) => `\\${c}`)).join('|'), 'g');
  const counts = new Map<string, number>();
  for (const text of texts) {
    for (const piece of text.split(specials)) {
      if (piece.length === 0) continue;
      for (const word of preTokenize(piece)) counts.set(word, (counts.get(word) ?? 0) + 1);
    }
  }

  // Words as symbol arrays; pair statistics kept incrementally (pair → count, pair → words containing it).
  const words = [...counts.entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)).map(([w, c]) => ({ symbols: [...w], count: c }));
  const SEP = '\u0000';
  const pairCounts = new Map<string, number>();
  const pairWords = new Map<string, Set<number>>();
  const addPairs = (wi: number, sign: 1 | -1): void => {
    const w = words[wi];
    if (!w) return;
    for (let k = 0; k + 1 < w.symbols.length; k++) {
      const key = `${w.symbols[k]}${SEP}${w.symbols[k + 1]}`;
      pairCounts.set(key, (pairCounts.get(key) ?? 0) + sign * w.count);
      if (sign > 0) {
        let set = pairWords.get(key);
        if (!set) pairWords.set(key, (set = new Set()));
        set.add(wi);
      }
    }
  };
  words.forEach((_, wi) => addPairs(wi, 1));

  const merges: string[] = [];
  let nextId = 256;
  while (merges.length < numMerges) {
    let best: string | undefined;
    let bestCount = 0;
    for (const [key, c] of pairCounts) {
      if (c > bestCount || (c === bestCount && c > 0 && best !== undefined && key < best)) {
        best = key;
        bestCount = c;
      }
    }
    if (best === undefined || bestCount < 2) break;
    const [a, b] = best.split(SEP) as [string, string];
    const merged = a + b;
    merges.push(`${a} ${b}`);
    vocab[merged] = nextId++;
    for (const wi of [...(pairWords.get(best) ?? [])].sort((x, y) => x - y)) {
      const w = words[wi];
      if (!w) continue;
      addPairs(wi, -1);
      const out: string[] = [];
      for (let k = 0; k < w.symbols.length; k++) {
        if (k + 1 < w.symbols.length && w.symbols[k] === a && w.symbols[k + 1] === b) {
          out.push(merged);
          k++;
        } else out.push(w.symbols[k] as string);
      }
      w.symbols = out;
      addPairs(wi, 1);
    }
    pairCounts.delete(best);
    pairWords.delete(best);
    for (const [key, c] of pairCounts) if (c <= 0) pairCounts.delete(key);
  }

  const tokenizerJson = tokenizerJsonOf(vocab, merges);
  const addedTokensDecoder: Record<string, unknown> = {};
  for (const t of tokenizerJson['added_tokens'] as { id: number }[]) {
    const { id, ...rest } = t as { id: number } & Record<string, unknown>;
    addedTokensDecoder[String(id)] = rest;
  }
  const tokenizerConfig: Record<string, unknown> = {
    add_bos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: addedTokensDecoder,
    additional_special_tokens: DEMO_ADDED_TOKENS.filter((t) => t.special).map((t) => t.content),
    bos_token: null,
    eos_token: '<|im_end|>',
    pad_token: '<|endoftext|>',
    unk_token: null,
    clean_up_tokenization_spaces: false,
    errors: 'replace',
    model_max_length: 16384,
    split_special_tokens: false,
    tokenizer_class: 'Qwen2Tokenizer',
    chat_template: CHAT_TEMPLATE,
  };
  return { tokenizerJson, tokenizerConfig };
}

/** Build the demo tokenizer with the default settings (what the script writes). */
export function buildDemoTokenizer(opts: Partial<DemoTokenizerSettings> = {}): TrainedTokenizer {
  const o = { ...DEMO_TOKENIZER_DEFAULTS, ...opts };
  return trainDemoTokenizer(demoCorpus(o.corpusSeed, o.corpusCount), o.vocabSize);
}

let cached: ChatTokenizer | undefined;
/** The committed demo tokenizer (loaded once). */
export function loadDemoTokenizer(): ChatTokenizer {
  return (cached ??= loadChatTokenizer(DEMO_TOKENIZER_DIR));
}
