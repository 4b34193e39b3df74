/**
 * CM2's chat format on an imported model (`cm2 model import --format cm2`, the default; issue 13 item 3,
 * docs/decisions.md "CM2's chat format on a pretrained model").
 *
 * The pipeline renders every dialogue with CM2's template (src/chat/template.ts) and needs `<|im_start|>`,
 * `<|im_end|>`, `<think>`, `</think>`, `<tool_call>`, `</tool_call>` as single tokens (src/chat/tokenize.ts);
 * `<tool_response>`/`</tool_response>` are single tokens too in Qwen's vocabularies, which the reference trains. A
 * model whose vocabulary lacks some of them gets them as the reference's `init_tag.py` adds missing targets:
 * - non-special added tokens (`special: false`, matched whole in text, kept on decode — as Qwen3's `<think>`), with
 *   the ids after the tokenizer's last (transformers' `add_tokens`); a tag that is an entry of the BPE vocabulary but
 *   not an added token keeps its id and becomes an added token (else text would never encode to it);
 * - embed_tokens, and lm_head when untied, grow by one row per new id past the matrix (a matrix with unused rows past
 *   the tokenizer, as Qwen's, is not resized: those rows are used); each new row is initialised by §4.1
 *   (src/model/net/specialTokens.ts): the mean of its source words' subtoken rows + N(0, 0.005²) noise, rescaled to their
 *   mean L2 norm, each matrix from its own rows (noise seeds `seed` and `seed + 1`, as the SFT stage's init);
 * - config.json `vocab_size` and `eos_token_id` (`<|im_end|>`, which ends every assistant message);
 * - tokenizer_config.json: CM2's chat template (the model's own kept under `chat_template_original`), eos
 *   `<|im_end|>`, pad the model's own (else `<|endoftext|>`, else eos), `added_tokens_decoder` entries.
 * Rows of tokens the model already has are never touched here: overwriting existing targets in place, as `init_tag.py`
 * does, is the SFT stage's `sft.base.initSpecialTokens`.
 */
import { Tokenizer } from '@huggingface/tokenizers';
import { CHAT_TEMPLATE, IM_END } from '../../chat/template';
import type { TensorSource } from './safetensors';
import { CM2_TOKEN_SOURCES, specialTokenVectors } from '../net/specialTokens';

/** The tags CM2's format needs as single tokens, in the order they are added. */
export const CM2_FORMAT_TOKENS: readonly string[] = Object.keys(CM2_TOKEN_SOURCES);

export type ChatFormat = 'cm2' | 'own';

export interface Cm2Token {
  token: string;
  id: number;
  /** present: an added token already; registered: a BPE vocabulary entry made an added token (same id); added: a new id */
  how: 'present' | 'registered' | 'added';
}

export interface Cm2InitRow {
  token: string;
  id: number;
  words: readonly string[];
  /** subtoken ids of each source word */
  wordIds: number[][];
  /** subtoken ids of the source words, pooled */
  sourceIds: number[];
}

export interface Cm2FormatPlan {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  tokens: Cm2Token[];
  /** rows of embed_tokens (and an untied lm_head) before and after */
  rows: { from: number; to: number };
  /** the rows §4.1 initialises: every added token */
  init: Cm2InitRow[];
  eos: { token: string; id: number };
  pad: { token: string; id: number };
  /** the model had a chat template of its own (kept as chat_template_original) */
  originalTemplate: boolean;
}

interface AddedTokenEntry {
  id: number;
  content: string;
  special?: boolean;
  [k: string]: unknown;
}

const configToken = (t: unknown): string | undefined => (typeof t === 'string' ? t : t && typeof t === 'object' && typeof (t as { content?: unknown }).content === 'string' ? (t as { content: string }).content : undefined);

/** Which CM2 tags the tokenizer lacks as single, whole-matched tokens. */
export function missingCm2Tokens(tokenizerJson: Record<string, unknown>): string[] {
  const added = new Set(((tokenizerJson['added_tokens'] ?? []) as AddedTokenEntry[]).map((a) => a.content));
  return CM2_FORMAT_TOKENS.filter((t) => !added.has(t));
}

/**
 * The tokenizer files and row plan that give a model CM2's format. `modelRows` is the number of rows of its
 * embedding; `where` names the source in errors. The inputs are not modified.
 */
export function planCm2Format(tokenizerJson: Record<string, unknown>, tokenizerConfig: Record<string, unknown>, modelRows: number, where: string): Cm2FormatPlan {
  const tok = new Tokenizer(tokenizerJson, { ...tokenizerConfig, clean_up_tokenization_spaces: false });
  const vocab = tok.get_vocab(true);
  let size = 0;
  for (const id of vocab.values()) size = Math.max(size, id + 1);
  if (size > modelRows) throw new Error(`${where}: the tokenizer has ids up to ${size - 1}, past the model's ${modelRows} embedding rows`);
  const addedTokens = [...((tokenizerJson['added_tokens'] ?? []) as AddedTokenEntry[])];
  const isAdded = new Set(addedTokens.map((a) => a.content));
  const encodeWord = (word: string): number[] => {
    const ids: number[] = tok.encode(word, { add_special_tokens: false }).ids;
    if (ids.length === 0 || ids.some((id) => !Number.isInteger(id) || id < 0 || id >= modelRows)) {
      throw new Error(`${where}: the source word ${JSON.stringify(word)} does not encode to ids of the model (${JSON.stringify(ids)})`);
    }
    return ids;
  };

  const tokens: Cm2Token[] = [];
  const init: Cm2InitRow[] = [];
  const newEntries: AddedTokenEntry[] = [];
  let next = size;
  for (const token of CM2_FORMAT_TOKENS) {
    const existing = tok.token_to_id(token);
    if (existing !== undefined && isAdded.has(token)) {
      tokens.push({ token, id: existing, how: 'present' });
      continue;
    }
    const how = existing !== undefined ? 'registered' : 'added';
    const id = existing ?? next++;
    newEntries.push({ id, content: token, single_word: false, lstrip: false, rstrip: false, normalized: false, special: false });
    tokens.push({ token, id, how });
    if (how === 'added') {
      const words = CM2_TOKEN_SOURCES[token]!;
      const wordIds = words.map(encodeWord);
      init.push({ token, id, words, wordIds, sourceIds: wordIds.flat() });
    }
  }
  const idOf = (t: string) => tokens.find((x) => x.token === t)?.id ?? tok.token_to_id(t);

  const eos = { token: IM_END, id: idOf(IM_END)! };
  const padName = configToken(tokenizerConfig['pad_token']);
  const padId = padName !== undefined ? tok.token_to_id(padName) : undefined;
  const endOfText = tok.token_to_id('<|endoftext|>');
  const pad = padName !== undefined && padId !== undefined ? { token: padName, id: padId } : endOfText !== undefined ? { token: '<|endoftext|>', id: endOfText } : eos;

  const decoder = { ...((tokenizerConfig['added_tokens_decoder'] ?? {}) as Record<string, unknown>) };
  for (const e of newEntries) {
    const { id, ...rest } = e;
    decoder[String(id)] = rest;
  }
  const original = tokenizerConfig['chat_template'];
  const keepOriginal = original !== undefined && original !== null && original !== CHAT_TEMPLATE;
  const { chat_template: _t, chat_template_original: _o, ...restConfig } = tokenizerConfig;
  return {
    tokenizerJson: { ...tokenizerJson, added_tokens: [...addedTokens, ...newEntries] },
    tokenizerConfig: {
      ...restConfig,
      added_tokens_decoder: decoder,
      eos_token: eos.token,
      pad_token: pad.token,
      chat_template: CHAT_TEMPLATE,
      ...(keepOriginal ? { chat_template_original: original } : {}),
    },
    tokens,
    rows: { from: modelRows, to: Math.max(modelRows, next) },
    init,
    eos,
    pad,
    originalTemplate: keepOriginal,
  };
}

/** The norm each initialised row was scaled to, per matrix (HF name → token → norm). */
export type Cm2RowNorms = Record<string, Record<string, number>>;

/**
 * `data` ([plan.rows.from, cols], owned by the caller and reused when no row is added) with the plan's rows
 * initialised by §4.1 from this matrix's own rows, grown to [plan.rows.to, cols].
 */
export function cm2Rows(data: Float32Array, cols: number, plan: Cm2FormatPlan, seed: number, alignNorm = true): { data: Float32Array; norms: Record<string, number> } {
  const rows = plan.rows.from;
  if (data.length !== rows * cols) throw new Error(`cm2Rows: ${data.length} values are not [${rows}, ${cols}]`);
  const wordIds = new Map<string, number[]>();
  for (const r of plan.init) r.words.forEach((w, k) => wordIds.set(w, r.wordIds[k]!));
  const { vectors } = specialTokenVectors({ data, rows, cols }, {
    tokenToId: new Map(plan.init.map((r) => [r.token, r.id])),
    sources: Object.fromEntries(plan.init.map((r) => [r.token, r.words])),
    tokenize: (word) => wordIds.get(word)!,
    seed,
    alignNorm,
  });
  let out = data;
  if (plan.rows.to > rows) {
    out = new Float32Array(plan.rows.to * cols);
    out.set(data);
  }
  const norms: Record<string, number> = {};
  for (const v of vectors) {
    out.set(v.vector, v.id * cols);
    norms[v.token] = v.norm;
  }
  return { data: out, norms };
}

/**
 * The checkpoint's tensors with embed_tokens (noise seed `seed`) and an untied lm_head (`seed + 1`) given the plan's
 * rows: shapes grown, rows computed when the writer reads the tensor (one matrix at a time). `norms` fills in as they
 * are written.
 */
export function withCm2Rows(sources: readonly TensorSource[], plan: Cm2FormatPlan, seed: number, alignNorm = true): { sources: TensorSource[]; norms: Cm2RowNorms } {
  const norms: Cm2RowNorms = {};
  const seeds: Record<string, number> = { 'model.embed_tokens.weight': seed, 'lm_head.weight': seed + 1 };
  return {
    norms,
    sources: sources.map((s) => {
      const matrixSeed = seeds[s.name];
      if (matrixSeed === undefined) return s;
      const [rows, cols] = s.shape as [number, number];
      if (rows !== plan.rows.from) throw new Error(`${s.name} has ${rows} rows, the plan ${plan.rows.from}`);
      return {
        name: s.name,
        shape: [plan.rows.to, cols],
        data: () => {
          const r = cm2Rows(s.data(), cols, plan, matrixSeed, alignNorm);
          norms[s.name] = r.norms;
          return r.data;
        },
      };
    }),
  };
}

/** What the import reports about the format. */
export interface Cm2FormatSummary {
  rows: { from: number; to: number };
  tokens: Cm2Token[];
  init: (Cm2InitRow & { norms: Record<string, number> })[];
  eos: string;
  pad: string;
  originalTemplate: boolean;
  seed: number;
  alignNorm: boolean;
}

export function cm2FormatSummary(plan: Cm2FormatPlan, norms: Cm2RowNorms, seed: number, alignNorm = true): Cm2FormatSummary {
  return {
    rows: plan.rows,
    tokens: plan.tokens,
    init: plan.init.map((r) => ({ ...r, norms: Object.fromEntries(Object.entries(norms).map(([m, n]) => [m, n[r.token]!])) })),
    eos: plan.eos.token,
    pad: plan.pad.token,
    originalTemplate: plan.originalTemplate,
    seed,
    alignNorm,
  };
}

/** The lines `cm2 model import` prints about the format. */
export function formatCm2Summary(s: Cm2FormatSummary): string[] {
  const short = (m: string) => (m === 'model.embed_tokens.weight' ? 'embed' : m === 'lm_head.weight' ? 'lm_head' : m);
  const lines = [
    `  CM2 format: vocab ${s.rows.from}${s.rows.to !== s.rows.from ? ` → ${s.rows.to}` : ' (no rows added)'}, chat template CM2's${s.originalTemplate ? " (the model's own kept as chat_template_original)" : ''}, eos ${s.eos}, pad ${s.pad}`,
  ];
  const present = s.tokens.filter((t) => t.how === 'present');
  if (present.length > 0) lines.push(`    kept: ${present.map((t) => `${t.token} ${t.id}`).join(', ')}`);
  for (const t of s.tokens.filter((x) => x.how === 'registered')) lines.push(`    made an added token (row kept): ${t.token} ${t.id}`);
  for (const r of s.init) {
    const norms = Object.entries(r.norms).map(([m, n]) => `${short(m)} ${n.toFixed(3)}`).join(', ');
    lines.push(`    added ${r.token} ${r.id} ← ${r.words.join(' + ')} (subtokens ${r.sourceIds.join(',')}; §4.1 row norm ${norms || '?'}${s.alignNorm ? '' : ', not aligned'})`);
  }
  return lines;
}
