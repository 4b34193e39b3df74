/**
 * Batched sampling with a KV cache.
 *
 * Prompts of different lengths are left-padded to the longest; pad keys are masked out and every sequence gets its own
 * RoPE positions (0 at its first real token), so each sequence decodes exactly as it would alone. Each step feeds one
 * token per sequence and reuses the cached keys/values (or, with useCache = false, re-runs the whole sequence: slower,
 * same result). Temperature 0 is greedy (argmax, lowest id on ties): on native TensorFlow the argmax and its
 * log-probability are computed on the device and only those 2·B numbers are read back; elsewhere, and for
 * temperature > 0, the logits are read and sampled on the host: softmax of logits / temperature, restricted to the
 * smallest set of most likely tokens whose probability reaches topP, drawn with a seeded PRNG (same seed, same tokens).
 */
import { isNative } from './native';
import type { QwenModel } from './qwen';
import { Rng } from './random';

export interface GenerateOptions {
  maxNewTokens: number;
  /** 0 = greedy (default 1) */
  temperature?: number;
  /** nucleus sampling mass, (0, 1] (default 1) */
  topP?: number;
  /** a sequence finishes after emitting one of these (it is included in its tokens) */
  stopTokens?: number[];
  seed?: number;
  /**
   * One seed per prompt: each sequence samples from its own PRNG, so its tokens do not depend on which other
   * sequences share the batch (only float rounding of the batched matmuls does). Overrides `seed`.
   */
  seeds?: readonly number[];
  useCache?: boolean;
  /** id used for left padding (masked out, so any valid id; default 0) */
  padId?: number;
  /** prompt tokens (whole batch) per prefill call with the cache (default PREFILL_CHUNK_TOKENS) */
  prefillChunkTokens?: number;
}

export interface GenerateResult {
  /** new tokens per prompt, the stop token included */
  tokens: number[][];
  /** true where a stop token ended the sequence */
  finished: boolean[];
  /** log-probability of each new token under the model's raw distribution (temperature 1, no top-p) */
  logprobs: number[][];
}

/** One token from a row of logits. `rng` is only used when temperature > 0. */
export function sampleToken(logits: ArrayLike<number>, temperature: number, topP: number, rng: Rng): number {
  const V = logits.length;
  if (temperature <= 0) {
    let best = 0;
    for (let i = 1; i < V; i++) if (logits[i]! > logits[best]!) best = i;
    return best;
  }
  let max = -Infinity;
  for (let i = 0; i < V; i++) max = Math.max(max, logits[i]!);
  const p = new Float64Array(V);
  let total = 0;
  for (let i = 0; i < V; i++) total += p[i] = Math.exp((logits[i]! - max) / temperature);
  let candidates = Array.from({ length: V }, (_, i) => i);
  if (topP < 1) {
    candidates.sort((a, b) => p[b]! - p[a]! || a - b);
    let cum = 0;
    let keep = 0;
    while (keep < V && cum < topP * total) cum += p[candidates[keep++]!]!;
    candidates = candidates.slice(0, Math.max(keep, 1));
    total = cum;
  }
  let u = rng.next() * total;
  for (const i of candidates) {
    u -= p[i]!;
    if (u < 0) return i;
  }
  return candidates[candidates.length - 1]!;
}

export function generate(model: QwenModel, prompts: number[][], opts: GenerateOptions): GenerateResult {
  const it = generateSteps(model, prompts, opts);
  for (;;) {
    const r = it.next();
    if (r.done) return r.value;
  }
}

/**
 * `generate` that gives the event loop a turn every `yieldEvery` decoding steps (heartbeats, cancellation), and
 * reports progress. Same tokens as `generate`.
 */
export function generateAsync(model: QwenModel, prompts: number[][], opts: GenerateOptions & StepDriverOptions): Promise<GenerateResult> {
  return driveSteps(generateSteps(model, prompts, opts), opts);
}

export interface StepDriverOptions {
  yieldEvery?: number;
  onStep?: (step: number) => void;
}

/**
 * Runs a decoding loop (a generator that yields each decoding step's index, and −1 after each prefill piece), giving
 * the event loop a turn every `yieldEvery` steps and after each prefill piece (a piece of a long prefill can take
 * seconds). Shared by `generateAsync` and the decoding session's `decodeAsync`.
 */
export async function driveSteps(it: Generator<number, GenerateResult, void>, opts: StepDriverOptions): Promise<GenerateResult> {
  const every = Math.max(1, opts.yieldEvery ?? 8);
  try {
    for (let step = 1; ; ) {
      const r = it.next();
      if (r.done) return r.value;
      const prefill = r.value < 0;
      if (prefill || step % every === 0) {
        opts.onStep?.(prefill ? 0 : step);
        await new Promise((res) => setImmediate(res));
      }
      if (!prefill) step++;
    }
  } finally {
    // A step that threw (cancellation) closes the loop: its finally frees the KV cache now, not at garbage collection.
    it.return(undefined as never);
  }
}

/**
 * Prompt tokens (summed over the batch) per forward call of the prefill with a KV cache: longer prompts are fed in
 * pieces along time, each continuing the cache, so that no single call blocks for long (a 30-layer model prefills
 * ~500 tokens/s on 2 cores: 16 prompts of 1,000 tokens in one call held the event loop past a 60 s heartbeat timeout
 * on a busy machine). Same keys and values as one call, up to float rounding.
 */
export const PREFILL_CHUNK_TOKENS = 2048;

/** The decoding loop as a generator: yields after every decoding step (its index) and prefill piece (−1), returns the result. */
function* generateSteps(model: QwenModel, prompts: number[][], opts: GenerateOptions): Generator<number, GenerateResult, void> {
  const B = prompts.length;
  const V = model.dims.vocab;
  if (B === 0) return { tokens: [], finished: [], logprobs: [] };
  if (prompts.some((p) => p.length === 0)) throw new Error('generate: empty prompt');
  const temperature = opts.temperature ?? 1;
  const topP = opts.topP ?? 1;
  const stop = new Set(opts.stopTokens ?? []);
  const useCache = opts.useCache ?? true;
  const padId = opts.padId ?? 0;
  if (opts.seeds && opts.seeds.length !== B) throw new Error(`generate: ${opts.seeds.length} seeds for ${B} prompts`);
  const shared = new Rng(opts.seed ?? 0);
  const rngs = opts.seeds ? opts.seeds.map((s) => new Rng(s)) : undefined;

  // Left padding: pad keys masked, positions counted from each sequence's first real token.
  const L = Math.max(...prompts.map((p) => p.length));
  const ids = prompts.map((p) => [...Array<number>(L - p.length).fill(padId), ...p]);
  const keyMask = prompts.map((p) => [...Array<number>(L - p.length).fill(0), ...Array<number>(p.length).fill(1)]);
  const positions = prompts.map((p) => Array.from({ length: L }, (_, t) => Math.max(0, t - (L - p.length))));
  const nextPos = prompts.map((p) => p.length);

  const tokens: number[][] = prompts.map(() => []);
  const logprobs: number[][] = prompts.map(() => []);
  const finished = prompts.map(() => false);
  const cache = useCache ? model.emptyCache(L + opts.maxNewTokens) : undefined;
  const onDevice = temperature <= 0 && isNative();
  try {
    let input = ids;
    let inputPositions = positions;
    if (cache) {
      // A long prefill in pieces of ~PREFILL_CHUNK_TOKENS (at least 16 positions each); the last piece is the first step.
      const piece = Math.max(16, Math.floor((opts.prefillChunkTokens ?? PREFILL_CHUNK_TOKENS) / B));
      for (let a = 0; L - a > piece; a += piece) {
        const logits = model.forward(ids.map((r) => r.slice(a, a + piece)), {
          positions: positions.map((r) => r.slice(a, a + piece)), keyMask: keyMask.map((r) => r.slice(0, a + piece)), cache, lastOnly: true,
        });
        logits.dispose();
        input = ids.map((r) => r.slice(a + piece));
        inputPositions = positions.map((r) => r.slice(a + piece));
        yield -1;
      }
    }
    for (let step = 0; step < opts.maxNewTokens; step++) {
      let pick: (b: number) => { tok: number; logprob: number };
      if (onDevice) {
        const picked = model.greedyStep(input, { positions: inputPositions, keyMask, cache });
        pick = (b) => ({ tok: picked.ids[b]!, logprob: picked.logprobs[b]! });
      } else {
        const logitsT = model.forward(input, { positions: inputPositions, keyMask, cache, lastOnly: true });
        const logits = logitsT.dataSync();
        logitsT.dispose();
        pick = (b) => {
          const row = logits.subarray(b * V, (b + 1) * V);
          const tok = sampleToken(row, temperature, topP, rngs ? rngs[b]! : shared);
          return { tok, logprob: logProbOf(row, tok) };
        };
      }
      const next: number[] = [];
      for (let b = 0; b < B; b++) {
        if (finished[b]) {
          next.push(padId);
          continue;
        }
        const { tok, logprob } = pick(b);
        tokens[b]!.push(tok);
        logprobs[b]!.push(logprob);
        if (stop.has(tok)) finished[b] = true;
        next.push(tok);
      }
      if (finished.every(Boolean) || step === opts.maxNewTokens - 1) break;
      yield step;
      // The new token of each sequence becomes the next input.
      keyMask.forEach((row) => row.push(1));
      const stepPositions = nextPos.map((p) => [p]);
      nextPos.forEach((_, b) => nextPos[b]!++);
      if (cache) {
        input = next.map((t) => [t]);
        inputPositions = stepPositions;
      } else {
        input = input.map((row, b) => [...row, next[b]!]);
        inputPositions = inputPositions.map((row, b) => [...row, stepPositions[b]![0]!]);
      }
    }
  } finally {
    if (cache) model.disposeCache(cache);
  }
  return { tokens, finished, logprobs };
}

/** log softmax(row / temperature)[tok] (temperature ≤ 0 or absent: 1), computed stably in float64. */
export function logProbOf(row: ArrayLike<number>, tok: number, temperature = 1): number {
  const t = temperature > 0 ? temperature : 1;
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) max = Math.max(max, row[i]!);
  let total = 0;
  for (let i = 0; i < row.length; i++) total += Math.exp((row[i]! - max) / t);
  return (row[tok]! - max) / t - Math.log(total);
}
