/**
 * An HF tokenizer (tokenizer.json + tokenizer_config.json) from a GGUF file's tokenizer metadata.
 *
 * GGUF keeps the vocabulary (`tokenizer.ggml.tokens`, ids by position), the kind of each token
 * (`tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte), the BPE merges
 * ("a b" strings), the special-token ids, the chat template, and the *name* of the pre-tokenizer
 * (`tokenizer.ggml.pre`), whose splitting rules live in llama.cpp's code. Built here: byte-level BPE
 * (`tokenizer.ggml.model` "gpt2", which Qwen, Llama 3, SmolLM and GPT-2 style vocabularies use) with
 * - the pre-tokenizer each known `pre` name stands for (PRE_TOKENIZERS below; an unknown name is refused);
 * - control tokens as special added tokens and user-defined tokens (e.g. `<think>`) as non-special added tokens,
 *   both matched whole in text;
 * - tokenizer_config.json with bos/eos/unk/pad, add_bos_token/add_eos_token, the chat template and
 *   added_tokens_decoder.
 * Differences from transformers' own GGUF conversion (`AutoTokenizer.from_pretrained(dir, gguf_file=…)`) are
 * deliberate and follow the model's original tokenizer.json and llama.cpp: "smollm"/"starcoder" split digits one by
 * one before the GPT-2 rules (transformers keeps GPT-2's rules only, which differs on e.g. "a  1"), and the Llama 3
 * family uses `ignore_merges` (a piece that is itself a token is not split).
 */
import type { GgufValue } from './gguf';

/** GPT-2's byte → printable character table (every byte-level BPE vocabulary spells tokens in it). */
export function bytesToUnicode(): Map<number, string> {
  const direct: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) direct.push(b);
  for (let b = 0xa1; b <= 0xac; b++) direct.push(b);
  for (let b = 0xae; b <= 0xff; b++) direct.push(b);
  const map = new Map<number, string>();
  for (const b of direct) map.set(b, String.fromCharCode(b));
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!map.has(b)) map.set(b, String.fromCharCode(256 + n++));
  }
  return new Map([...map].sort((a, b) => a[0] - b[0]));
}

const GPT2_SPLIT = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };

/** Llama 3's split (also Falcon 3, DBRX, Smaug): case-insensitive contractions, letters, numbers of up to 3 digits. */
const LLAMA3_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/** Qwen2/Qwen3's split: as Llama 3 but every digit alone. */
const QWEN2_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const split = (regex: string) => ({ type: 'Split', pattern: { Regex: regex }, behavior: 'Isolated', invert: false });
const regexThenBytes = (regex: string) => ({
  type: 'Sequence',
  pretokenizers: [split(regex), { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }],
});

interface PreTokenizerSpec {
  preTokenizer: Record<string, unknown>;
  /** BPE `ignore_merges`: a pre-token that is a vocabulary entry is taken whole (Llama 3's tokenizer.json, llama.cpp). */
  ignoreMerges: boolean;
}

/** `tokenizer.ggml.pre` → the pre-tokenizer (llama.cpp's splitting for that name, as the models' tokenizer.json write it). */
export const PRE_TOKENIZERS: Readonly<Record<string, PreTokenizerSpec>> = (() => {
  const gpt2: PreTokenizerSpec = { preTokenizer: GPT2_SPLIT, ignoreMerges: false };
  // StarCoder / SmolLM: each digit alone (\p{N}, as llama.cpp and the Rust `Digits` pre-tokenizer), then GPT-2's rules.
  const digits: PreTokenizerSpec = { preTokenizer: { type: 'Sequence', pretokenizers: [split('\\p{N}'), GPT2_SPLIT] }, ignoreMerges: false };
  const llama3: PreTokenizerSpec = { preTokenizer: regexThenBytes(LLAMA3_REGEX), ignoreMerges: true };
  const qwen2: PreTokenizerSpec = { preTokenizer: regexThenBytes(QWEN2_REGEX), ignoreMerges: false };
  return {
    default: gpt2, 'gpt-2': gpt2, gpt2,
    smollm: digits, starcoder: digits,
    llama3, 'llama-v3': llama3, 'llama-bpe': llama3, 'falcon3': llama3, 'smaug-bpe': llama3, dbrx: llama3,
    qwen2, 'deepseek-r1-qwen': qwen2,
  };
})();

const TOKEN_CONTROL = 3;
const TOKEN_USER_DEFINED = 4;

export interface GgufTokenizer {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  summary: {
    model: string;
    pre: string;
    vocab: number;
    merges: number;
    /** control tokens, added as special */
    special: number;
    /** user-defined tokens, added as non-special */
    userDefined: number;
    bos?: string;
    eos?: string;
    chatTemplate: boolean;
  };
  warnings: string[];
}

function stringArray(meta: ReadonlyMap<string, GgufValue>, key: string, where: string): string[] | undefined {
  const v = meta.get(key);
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string')) throw new Error(`${where}: ${key} must be an array of strings`);
  return v as string[];
}

function optional<T extends GgufValue>(meta: ReadonlyMap<string, GgufValue>, key: string, type: 'number' | 'boolean' | 'string', where: string): T | undefined {
  const v = meta.get(key);
  if (v === undefined) return undefined;
  if (typeof v !== type) throw new Error(`${where}: ${key} must be a ${type}, got ${Array.isArray(v) ? 'an array' : typeof v}`);
  return v as T;
}

/**
 * tokenizer.json and tokenizer_config.json for the tokenizer a GGUF file's metadata describes. `where` names the file
 * in errors; `contextLength` becomes model_max_length.
 */
export function tokenizerFromGguf(meta: ReadonlyMap<string, GgufValue>, where: string, opts: { contextLength?: number } = {}): GgufTokenizer {
  const model = optional<string>(meta, 'tokenizer.ggml.model', 'string', where);
  if (model === undefined) throw new Error(`${where}: no tokenizer.ggml.model (the file carries no tokenizer)`);
  if (model !== 'gpt2') {
    throw new Error(`${where}: tokenizer.ggml.model '${model}' is not supported (only 'gpt2', byte-level BPE${model === 'llama' ? '; SentencePiece vocabularies are not converted' : ''})`);
  }
  const pre = optional<string>(meta, 'tokenizer.ggml.pre', 'string', where) ?? 'default';
  const spec = PRE_TOKENIZERS[pre];
  if (!spec) throw new Error(`${where}: tokenizer.ggml.pre '${pre}' is not known here (known: ${Object.keys(PRE_TOKENIZERS).join(', ')})`);
  const tokens = stringArray(meta, 'tokenizer.ggml.tokens', where);
  if (!tokens || tokens.length === 0) throw new Error(`${where}: no tokenizer.ggml.tokens`);
  const merges = stringArray(meta, 'tokenizer.ggml.merges', where);
  if (!merges) throw new Error(`${where}: no tokenizer.ggml.merges (a byte-level BPE vocabulary needs its merges)`);
  const typesRaw = meta.get('tokenizer.ggml.token_type');
  if (typesRaw !== undefined && (!Array.isArray(typesRaw) || typesRaw.length !== tokens.length || typesRaw.some((t) => typeof t !== 'number'))) {
    throw new Error(`${where}: tokenizer.ggml.token_type must be an array of ${tokens.length} integers (one per token)`);
  }
  const types = (typesRaw ?? []) as number[];
  const warnings: string[] = [];

  // Vocabulary in the byte alphabet: a token with other characters (a raw space, say) is spelled by its UTF-8 bytes.
  const spelling = bytesToUnicode();
  const alphabet = new Set(spelling.values());
  const encoder = new TextEncoder();
  const inAlphabet = (t: string) => [...t].every((ch) => alphabet.has(ch));
  // No prototype: a vocabulary may well contain "__proto__".
  const vocab = Object.create(null) as Record<string, number>;
  let respelled = 0;
  tokens.forEach((t, id) => {
    let key = t;
    if (!inAlphabet(t)) {
      key = Array.from(encoder.encode(t), (b) => spelling.get(b)!).join('');
      respelled++;
    }
    if (Object.hasOwn(vocab, key)) warnings.push(`token ${id} ${JSON.stringify(t)} repeats token ${vocab[key]}; the later id is kept`);
    vocab[key] = id;
  });
  if (respelled > 0) warnings.push(`${respelled} tokens outside the byte alphabet were spelled by their UTF-8 bytes`);

  const mergePairs = merges.map((m, i) => {
    const parts = m.split(' ');
    if (parts.length !== 2 || !parts[0] || !parts[1]) throw new Error(`${where}: tokenizer.ggml.merges[${i}] ${JSON.stringify(m)} is not two tokens separated by one space`);
    return parts as [string, string];
  });

  // Added tokens: control (special) and user-defined (not special), matched whole before BPE.
  const added: { id: number; content: string; special: boolean }[] = [];
  types.forEach((type, id) => {
    const t = tokens[id]!;
    if (type === TOKEN_CONTROL) {
      // A control token spelled outside the alphabet is a mislabelled vocabulary entry (as transformers decides).
      if (inAlphabet(t)) added.push({ id, content: t, special: true });
    } else if (type === TOKEN_USER_DEFINED) {
      if (inAlphabet(t)) added.push({ id, content: t, special: false });
    }
  });
  const addedEntry = (a: { id: number; content: string; special: boolean }) => ({ id: a.id, content: a.content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: a.special });

  const idOf = (key: string): number | undefined => {
    const id = optional<number>(meta, key, 'number', where);
    if (id !== undefined && (!Number.isInteger(id) || id < 0 || id >= tokens.length)) throw new Error(`${where}: ${key} ${id} is outside the vocabulary (${tokens.length} tokens)`);
    return id;
  };
  const bosId = idOf('tokenizer.ggml.bos_token_id');
  const eosId = idOf('tokenizer.ggml.eos_token_id');
  const at = (id: number | undefined) => (id === undefined ? undefined : tokens[id]);
  const bos = at(bosId);
  const eos = at(eosId);
  const unk = at(idOf('tokenizer.ggml.unknown_token_id'));
  const pad = at(idOf('tokenizer.ggml.padding_token_id'));
  const addBos = optional<boolean>(meta, 'tokenizer.ggml.add_bos_token', 'boolean', where) ?? false;
  const addEos = optional<boolean>(meta, 'tokenizer.ggml.add_eos_token', 'boolean', where) ?? false;
  const addPrefixSpace = optional<boolean>(meta, 'tokenizer.ggml.add_space_prefix', 'boolean', where) ?? false;
  const chatTemplate = optional<string>(meta, 'tokenizer.chat_template', 'string', where);
  const named = [...meta.keys()].filter((k) => k.startsWith('tokenizer.chat_template.'));
  if (named.length > 0) warnings.push(`named chat templates not carried over: ${named.join(', ')}`);

  let preTokenizer = spec.preTokenizer;
  if (addPrefixSpace) preTokenizer = JSON.parse(JSON.stringify(preTokenizer).replace(/"add_prefix_space":false/g, '"add_prefix_space":true')) as Record<string, unknown>;

  // BOS/EOS added by the post-processor when the file asks for them (add_special_tokens: true).
  const template = (withBos: boolean, withEos: boolean) => {
    if (withBos && bosId === undefined) throw new Error(`${where}: tokenizer.ggml.add_bos_token is set but tokenizer.ggml.bos_token_id is missing`);
    if (withEos && eosId === undefined) throw new Error(`${where}: tokenizer.ggml.add_eos_token is set but tokenizer.ggml.eos_token_id is missing`);
    const seq = (id: 'A' | 'B') => ({ Sequence: { id, type_id: 0 } });
    const sp = (t: string) => ({ SpecialToken: { id: t, type_id: 0 } });
    const one = (id: 'A' | 'B') => [...(withBos ? [sp(bos!)] : []), seq(id), ...(withEos ? [sp(eos!)] : [])];
    const specials: Record<string, unknown> = {};
    if (withBos) specials[bos!] = { id: bos, ids: [bosId], tokens: [bos] };
    if (withEos) specials[eos!] = { id: eos, ids: [eosId], tokens: [eos] };
    return { type: 'TemplateProcessing', single: one('A'), pair: [...one('A'), ...one('B')], special_tokens: specials };
  };
  const postProcessor = addBos || addEos ? template(addBos, addEos) : { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true };

  const tokenizerJson: Record<string, unknown> = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added.map(addedEntry),
    normalizer: null,
    pre_tokenizer: preTokenizer,
    post_processor: postProcessor,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: spec.ignoreMerges,
      vocab,
      merges: mergePairs,
    },
  };

  const addedDecoder: Record<string, unknown> = {};
  for (const a of added) {
    const { id: _id, ...rest } = addedEntry(a);
    addedDecoder[String(a.id)] = rest;
  }
  const tokenizerConfig: Record<string, unknown> = {
    add_bos_token: addBos,
    add_eos_token: addEos,
    add_prefix_space: addPrefixSpace,
    added_tokens_decoder: addedDecoder,
    bos_token: bos ?? null,
    eos_token: eos ?? null,
    unk_token: unk ?? null,
    pad_token: pad ?? null,
    ...(chatTemplate !== undefined ? { chat_template: chatTemplate } : {}),
    clean_up_tokenization_spaces: false,
    ...(opts.contextLength !== undefined ? { model_max_length: opts.contextLength } : {}),
    tokenizer_class: 'GPT2Tokenizer',
  };
  return {
    tokenizerJson,
    tokenizerConfig,
    summary: {
      model: 'BPE (byte-level)',
      pre,
      vocab: tokens.length,
      merges: mergePairs.length,
      special: added.filter((a) => a.special).length,
      userDefined: added.filter((a) => !a.special).length,
      ...(bos !== undefined ? { bos } : {}),
      ...(eos !== undefined ? { eos } : {}),
      chatTemplate: chatTemplate !== undefined,
    },
    warnings,
  };
}
