/**
 * Special-token embedding initialisation (method spec §4.1, `model_assets/init_tag.py`): each target token's row
 * becomes the mean of the rows of its semantic source words' subtokens (all subtoken ids of all source words pooled)
 * plus Gaussian noise (σ = 0.005, seeded), rescaled to the mean L2 norm of those source rows. The input embedding and
 * an untied lm_head are treated separately, each from its own rows. Tokens already in the vocabulary are overwritten in
 * place; tokens missing from it are reported (adding them and resizing the matrices is the caller's job).
 */
import type { QwenModel } from './qwen';
import { Rng } from './random';

export const SPECIAL_TOKEN_SOURCES: Readonly<Record<string, readonly string[]>> = {
  '<think>': ['think', 'begin'],
  '</think>': ['think', 'finish'],
  '<tool_call>': ['tool', 'call', 'start'],
  '</tool_call>': ['tool', 'call', 'end'],
  '<|im_start|>': ['role', 'enter'],
  '<|im_end|>': ['role', 'exit'],
};

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
}

export interface SpecialTokenInitEntry {
  token: string;
  id: number;
  sourceIds: number[];
  /** the norm the new row was scaled to (mean L2 norm of the source rows) */
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

/** Returns a copy of `matrix.data` with the target rows re-initialised. */
export function initSpecialTokenRows(matrix: EmbeddingMatrix, opts: SpecialTokenInitOptions): SpecialTokenInitResult {
  const { rows, cols } = matrix;
  const sigma = opts.sigma ?? 0.005;
  const rng = new Rng(opts.seed ?? 0);
  const data = Float32Array.from(matrix.data);
  const initialised: SpecialTokenInitEntry[] = [];
  const missing: string[] = [];
  for (const [token, words] of Object.entries(opts.sources ?? SPECIAL_TOKEN_SOURCES)) {
    const id = lookup(opts.tokenToId, token);
    if (id === undefined) {
      missing.push(token);
      continue;
    }
    if (id < 0 || id >= rows) throw new Error(`special token ${token}: id ${id} is outside the matrix (${rows} rows)`);
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
    const targetNorm = normSum / sourceIds.length;
    const v = mean.map((m) => m + sigma * rng.normal());
    const norm = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
    for (let j = 0; j < cols; j++) data[id * cols + j] = norm > 0 ? (v[j]! * targetNorm) / norm : 0;
    initialised.push({ token, id, sourceIds, norm: targetNorm });
  }
  return { data, initialised, missing };
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
