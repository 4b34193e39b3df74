/**
 * Special-token embedding initialisation (method spec §4.1, `model_assets/init_tag.py`): each target token's row
 * becomes the mean of the rows of its semantic source words' subtokens (all subtoken ids of all source words pooled)
 * plus Gaussian noise (σ = 0.005, seeded), rescaled to the mean L2 norm of those source rows. The input embedding and
 * an untied lm_head are treated separately, each from its own rows. `initSpecialTokenRows` overwrites tokens already
 * in the vocabulary in place (the SFT stage's `initSpecialTokens`); `specialTokenVectors` computes the rows only, for
 * tokens that get new rows (`cm2 model import` adds the missing ones and resizes the matrices, src/model/formats/cm2Format.ts).
 */
import type { QwenModel } from './qwen';
import { Rng } from './random';

/** The reference's six targets and their source words (`init_tag.py`, paper Appendix .2). */
export const SPECIAL_TOKEN_SOURCES: Readonly<Record<string, readonly string[]>> = {
  '<think>': ['think', 'begin'],
  '</think>': ['think', 'finish'],
  '<tool_call>': ['tool', 'call', 'start'],
  '</tool_call>': ['tool', 'call', 'end'],
  '<|im_start|>': ['role', 'enter'],
  '<|im_end|>': ['role', 'exit'],
};

/**
 * Source words of the tool-response tags. The reference has none (Qwen3's vocabulary already holds these tokens, so
 * `init_tag.py` leaves them alone); a vocabulary without them gets them by analogy with `<tool_call>`: the tag's own
 * words plus start/end. Used only for rows that are created (never to overwrite a model's existing tags).
 */
export const TOOL_RESPONSE_SOURCES: Readonly<Record<string, readonly string[]>> = {
  '<tool_response>': ['tool', 'response', 'start'],
  '</tool_response>': ['tool', 'response', 'end'],
};

/** Every tag of CM2's chat format with its source words: the reference's six, then the tool-response tags. */
export const CM2_TOKEN_SOURCES: Readonly<Record<string, readonly string[]>> = { ...SPECIAL_TOKEN_SOURCES, ...TOOL_RESPONSE_SOURCES };

/** A row-major [rows, cols] matrix (HF layout of embed_tokens / lm_head: one row per token). */
export interface EmbeddingMatrix {
  data: Float32Array;
  rows: number;
  cols: number;
}

export interface SpecialTokenInitOptions {
  /** token string → id (e.g. the tokenizer's vocabulary incl. added tokens) */
  tokenToId: ReadonlyMap<string, number> | Readonly<Record<string, number>>;
  /** ids of one source word, without special tokens */
  tokenize: (word: string) => number[];
  sources?: Readonly<Record<string, readonly string[]>>;
  sigma?: number;
  seed?: number;
  /**
   * Rescale each new row to the mean L2 norm of its source rows (default true, the reference's
   * `align_norm_with_source_subtokens`); false keeps mean + noise as it is.
   */
  alignNorm?: boolean;
}

export interface SpecialTokenInitEntry {
  token: string;
  id: number;
  sourceIds: number[];
  /** the new row's L2 norm (with alignNorm, the mean L2 norm of the source rows) */
  norm: number;
}

export interface SpecialTokenInitResult {
  data: Float32Array;
  initialised: SpecialTokenInitEntry[];
  /** target tokens not in tokenToId */
  missing: string[];
}

function lookup(map: SpecialTokenInitOptions['tokenToId'], token: string): number | undefined {
  return map instanceof Map ? map.get(token) : (map as Record<string, number>)[token];
}

export interface SpecialTokenVector extends SpecialTokenInitEntry {
  /** the new row (`cols` values) */
  vector: Float32Array;
}

/**
 * The §4.1 row of every target in `tokenToId` (targets in `sources` order; one noise draw per target from one seeded
 * generator). Only the source rows must lie in the matrix: the targets' ids may be past its end (rows to be added).
 */
export function specialTokenVectors(matrix: EmbeddingMatrix, opts: SpecialTokenInitOptions): { vectors: SpecialTokenVector[]; missing: string[] } {
  const { rows, cols } = matrix;
  const sigma = opts.sigma ?? 0.005;
  const rng = new Rng(opts.seed ?? 0);
  const vectors: SpecialTokenVector[] = [];
  const missing: string[] = [];
  for (const [token, words] of Object.entries(opts.sources ?? SPECIAL_TOKEN_SOURCES)) {
    const id = lookup(opts.tokenToId, token);
    if (id === undefined) {
      missing.push(token);
      continue;
    }
    const sourceIds = words.flatMap((w) => opts.tokenize(w));
    if (sourceIds.length === 0) throw new Error(`special token ${token}: its source words have no subtokens`);
    const mean = new Float64Array(cols);
    let normSum = 0;
    for (const s of sourceIds) {
      if (s < 0 || s >= rows) throw new Error(`special token ${token}: source id ${s} is outside the matrix`);
      let sq = 0;
      for (let j = 0; j < cols; j++) {
        const x = matrix.data[s * cols + j]!;
        mean[j]! += x / sourceIds.length;
        sq += x * x;
      }
      normSum += Math.sqrt(sq);
    }
    const v = mean.map((m) => m + sigma * rng.normal());
    const norm = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
    const align = opts.alignNorm !== false;
    const targetNorm = align ? normSum / sourceIds.length : norm;
    const vector = new Float32Array(cols);
    for (let j = 0; j < cols; j++) vector[j] = !align ? v[j]! : norm > 0 ? (v[j]! * targetNorm) / norm : 0;
    vectors.push({ token, id, sourceIds, norm: targetNorm, vector });
  }
  return { vectors, missing };
}

/** Returns a copy of `matrix.data` with the target rows re-initialised (targets must be rows of the matrix). */
export function initSpecialTokenRows(matrix: EmbeddingMatrix, opts: SpecialTokenInitOptions): SpecialTokenInitResult {
  const { rows, cols } = matrix;
  for (const token of Object.keys(opts.sources ?? SPECIAL_TOKEN_SOURCES)) {
    const id = lookup(opts.tokenToId, token);
    if (id !== undefined && (id < 0 || id >= rows)) throw new Error(`special token ${token}: id ${id} is outside the matrix (${rows} rows)`);
  }
  const { vectors, missing } = specialTokenVectors(matrix, opts);
  const data = Float32Array.from(matrix.data);
  for (const v of vectors) data.set(v.vector, v.id * cols);
  return { data, initialised: vectors.map(({ vector: _v, ...entry }) => entry), missing };
}

/** Applies §4.1 to a model's input embedding and, when untied, its lm_head (noise seeds `seed` and `seed + 1`). */
export function applySpecialTokenInit(model: QwenModel, opts: SpecialTokenInitOptions): { embed: SpecialTokenInitResult; lmHead?: SpecialTokenInitResult } {
  const weights = model.namedWeights();
  const seed = opts.seed ?? 0;
  const run = (name: string, s: number): SpecialTokenInitResult => {
    const w = weights.get(name)!;
    return initSpecialTokenRows({ data: w.data, rows: w.shape[0]!, cols: w.shape[1]! }, { ...opts, seed: s });
  };
  const embed = run('model.embed_tokens.weight', seed);
  const update = new Map([['model.embed_tokens.weight', embed.data]]);
  let lmHead: SpecialTokenInitResult | undefined;
  if (!model.dims.tied) {
    lmHead = run('lm_head.weight', seed + 1);
    update.set('lm_head.weight', lmHead.data);
  }
  model.assignWeights(update);
  return lmHead ? { embed, lmHead } : { embed };
}
