/**
 * Decoding that computes each context token once (issue 29): what a serving engine's prefix cache and per-request KV
 * cache do for multi-turn rollouts, in one process.
 *
 * A `DecodeSession` keeps the KV cache of the sequences it decoded last, one row per key (an episode id), and the
 * tokens each row holds. `decodeSteps(session, requests)` generates a continuation for each request:
 * - a request whose key has a row holding a prefix of its tokens feeds only the tokens after that prefix (the tool
 *   results or the next user message, after the policy's own tokens): the conversation is not prefilled again;
 * - requests without a usable row are prefilled from scratch, and requests with the same tokens (a group's G samples
 *   of one prompt) share one prefill: its row is copied to each of them;
 * - after the round the session holds the rows of this round's requests only (an ended episode's row is dropped).
 * A row that does not match (another worker generated the previous turn, a restart, a retried activity) is simply
 * prefilled again, so the result never depends on what the session held: the same tokens as `generate` on the whole
 * contexts, up to float rounding of differently shaped matmuls.
 *
 * Log-probabilities are of softmax(logits / T) at the sampling temperature T (no top-p): what the trainer computes
 * for the same tokens, so the two can be compared (`logprobGap`); greedy decoding (T = 0) gives the raw ones.
 *
 * Sampling is `generate`'s: per-request seeds, or one shared PRNG drawn in request order; stop ids; `maxNewTokens`
 * per request (a sequence stops there, so its row holds exactly what it generated). The last generated token of a
 * row is not fed (nothing needed its logits); the next round feeds it with the rest of the new tokens.
 *
 * Slots: each row keeps its slots where they were when rows from several sources are put together
 * (./kvCache.ts `assembleCache`), with a per-row mask over the slots (`keyMask`), so pads and the slots of other
 * rows' longer prompts are masked out; RoPE positions count each row's own tokens.
 */
import { assembleCache, cacheBytes, copyCacheRows, type CachePart } from './kvCache';
import { isNative } from './native';
import type { QwenModel } from './qwen';
import type { KVCache } from './forwardTypes';
import { driveSteps, PREFILL_CHUNK_TOKENS, sampleToken, logProbOf, type GenerateResult, type StepDriverOptions } from './generate';
import { Rng } from './random';

export interface DecodeRequest {
  /** The row's identity across rounds (an episode id). Unique within a call. */
  key: string;
  /** The whole context; the continuation follows its last token. */
  tokens: readonly number[];
  maxNewTokens: number;
  /** This request's own PRNG seed (otherwise the shared PRNG of `seed`). */
  seed?: number;
}

export interface DecodeOptions {
  /** 0 = greedy (default 1) */
  temperature?: number;
  topP?: number;
  stopTokens?: readonly number[];
  /** the shared PRNG's seed, for requests without their own */
  seed?: number;
  padId?: number;
  /** tokens (whole batch) per prefill forward call (default PREFILL_CHUNK_TOKENS) */
  prefillChunkTokens?: number;
}

/** Tokens through the model in the last calls: `prefilled` were computed, `reused` came from the session's rows, `shared` were saved by sharing a prompt. */
export interface DecodeCounts {
  prefilled: number;
  reused: number;
  shared: number;
  decoded: number;
}

interface Row {
  key: string;
  /** the tokens whose keys and values the row holds, in order */
  held: number[];
  /** per slot of the cache: 1 = one of `held`, 0 = empty (a pad, another row's slot) */
  mask: number[];
}

export class DecodeSession {
  private cache?: KVCache;
  private rows: Row[] = [];
  readonly counts: DecodeCounts = { prefilled: 0, reused: 0, shared: 0, decoded: 0 };

  constructor(readonly model: QwenModel) {}

  /** Bytes the cache holds (its allocated slots × rows × the bytes of a slot). */
  get bytes(): number {
    return cacheBytes(this.model.dims, this.cache, this.rows.length);
  }

  /** Slots of the cache (the longest row's, with the pads and the other rows' slots before it). */
  get slots(): number {
    return this.cache?.length ?? 0;
  }

  /** The keys held and how many tokens each holds (for tests and diagnostics). */
  held(): Map<string, number> {
    return new Map(this.rows.map((r) => [r.key, r.held.length]));
  }

  /** Drops every row. */
  clear(): void {
    if (this.cache) this.model.disposeCache(this.cache);
    this.cache = undefined;
    this.rows = [];
  }

  dispose(): void {
    this.clear();
  }

  /** @internal decodeSteps' access. */
  swap(cache: KVCache | undefined, rows: Row[]): void {
    if (this.cache && this.cache !== cache) this.model.disposeCache(this.cache);
    this.cache = cache;
    this.rows = rows;
  }

  /** @internal */
  state(): { cache?: KVCache; rows: readonly Row[] } {
    return { cache: this.cache, rows: this.rows };
  }
}

/** A round compacts its decoding cache only while more steps than this may remain (a copy of the live rows costs about a step). */
const COMPACT_MIN_STEPS = 4;

const isPrefix = (a: readonly number[], b: readonly number[]): boolean => a.length <= b.length && a.every((x, i) => x === b[i]);

/**
 * Feeds `pending[b]` (left-padded to the longest, pads masked) through the cache in pieces of about
 * `chunkTokens` tokens; yields −1 after each piece. Appends to `masks`, `held`.
 */
function* feed(model: QwenModel, cache: KVCache, pending: number[][], masks: number[][], held: number[][], padId: number, chunkTokens: number): Generator<number, void, void> {
  const B = pending.length;
  const T = Math.max(0, ...pending.map((p) => p.length));
  if (T === 0) return;
  const piece = Math.max(16, Math.floor(chunkTokens / B));
  const padded = pending.map((p) => [...Array<number>(T - p.length).fill(padId), ...p]);
  const real = pending.map((p) => [...Array<number>(T - p.length).fill(0), ...Array<number>(p.length).fill(1)]);
  for (let a = 0; a < T; a += piece) {
    const e = Math.min(T, a + piece);
    const positions = padded.map((_, b) => {
      let next = held[b]!.length;
      return real[b]!.slice(a, e).map((on) => (on ? next++ : 0));
    });
    masks.forEach((m, b) => m.push(...real[b]!.slice(a, e)));
    const logits = model.forward(padded.map((r) => r.slice(a, e)), { positions, keyMask: masks, cache, lastOnly: true });
    logits.dispose();
    padded.forEach((r, b) => real[b]!.slice(a, e).forEach((on, t) => on && held[b]!.push(r[a + t]!)));
    if (e < T) yield -1;
  }
}

/** The decoding loop of one round as a generator: yields after every decoding step (its index) and prefill piece (−1). */
export function* decodeSteps(session: DecodeSession, requests: readonly DecodeRequest[], opts: DecodeOptions = {}): Generator<number, GenerateResult, void> {
  const model = session.model;
  const B = requests.length;
  const V = model.dims.vocab;
  if (B === 0) {
    session.clear();
    return { tokens: [], finished: [], logprobs: [] };
  }
  if (requests.some((r) => r.tokens.length === 0)) throw new Error('decode: empty context');
  if (new Set(requests.map((r) => r.key)).size !== B) throw new Error('decode: request keys must be unique');
  const temperature = opts.temperature ?? 1;
  const topP = opts.topP ?? 1;
  const stop = new Set(opts.stopTokens ?? []);
  const padId = opts.padId ?? 0;
  const chunk = opts.prefillChunkTokens ?? PREFILL_CHUNK_TOKENS;
  const shared = new Rng(opts.seed ?? 0);
  const rngs = requests.map((r) => (r.seed !== undefined ? new Rng(r.seed) : shared));
  const maxNew = Math.max(...requests.map((r) => r.maxNewTokens));

  // Which rows go on: a row holding a proper prefix of the request's context.
  const prev = session.state();
  const byKey = new Map(prev.rows.map((r, i) => [r.key, i]));
  const from = requests.map((q) => {
    const i = byKey.get(q.key);
    return i !== undefined && prev.cache && prev.rows[i]!.held.length < q.tokens.length && isPrefix(prev.rows[i]!.held, q.tokens) ? i : undefined;
  });

  // New contexts: one prefill (all tokens but the last) per distinct context, shared by the requests that have it.
  const fresh = new Map<string, number[]>();
  requests.forEach((q, b) => {
    if (from[b] !== undefined) return;
    const k = q.tokens.join(',');
    fresh.set(k, [...(fresh.get(k) ?? []), b]);
  });
  const uniques = [...fresh.values()];
  const prefill = model.emptyCache(Math.max(0, ...uniques.map((bs) => requests[bs[0]!]!.tokens.length)));
  const pMasks = uniques.map(() => [] as number[]);
  const pHeld = uniques.map(() => [] as number[]);
  let cache: KVCache | undefined;
  // Caches of rows that finished while others went on (see the decoding loop): each with its rows and their requests.
  const parked: { cache: KVCache; rows: number[]; requests: number[] }[] = [];
  try {
    yield* feed(model, prefill, uniques.map((bs) => requests[bs[0]!]!.tokens.slice(0, -1)), pMasks, pHeld, padId, chunk);
    session.counts.prefilled += pHeld.reduce((n, h) => n + h.length, 0);
    session.counts.shared += uniques.reduce((n, bs) => n + (bs.length - 1) * (requests[bs[0]!]!.tokens.length - 1), 0);

    // This round's cache, in request order: the rows that go on and the new rows (a part per source).
    const goOn = requests.map((_, b) => b).filter((b) => from[b] !== undefined);
    const isNew = requests.map((_, b) => b).filter((b) => from[b] === undefined);
    const uniqueOf = new Map<number, number>();
    uniques.forEach((bs, u) => bs.forEach((b) => uniqueOf.set(b, u)));
    const slots = Math.max(goOn.length && prev.cache ? prev.cache.length : 0, prefill.length);
    const parts: CachePart[] = [];
    if (goOn.length && prev.cache) parts.push({ cache: prev.cache, rows: goOn.map((b) => from[b]!), at: goOn });
    if (isNew.length) parts.push({ cache: prefill, rows: isNew.map((b) => uniqueOf.get(b)!), at: isNew });
    // Room for what is still to be fed and generated, so decoding never grows the cache.
    const toFeed = Math.max(...requests.map((q, b) => q.tokens.length - (from[b] !== undefined ? prev.rows[from[b]!]!.held.length : pHeld[uniqueOf.get(b)!]!.length)));
    cache = assembleCache(model.dims, parts, slots, toFeed + maxNew);
    const pad = (m: readonly number[]) => [...m, ...Array<number>(slots - m.length).fill(0)];
    const masks = requests.map((_, b) => pad(from[b] !== undefined ? prev.rows[from[b]!]!.mask : pMasks[uniqueOf.get(b)!]!));
    const held = requests.map((_, b) => [...(from[b] !== undefined ? prev.rows[from[b]!]!.held : pHeld[uniqueOf.get(b)!]!)]);
    session.counts.reused += goOn.reduce((n, b) => n + prev.rows[from[b]!]!.held.length, 0);
    session.swap(undefined, []);
    model.disposeCache(prefill);

    // What each row still needs before it can sample: the context after what it holds, but the last token.
    const pending = requests.map((q, b) => q.tokens.slice(held[b]!.length, -1));
    const before = held.reduce((n, h) => n + h.length, 0);
    yield* feed(model, cache, pending, masks, held, padId, chunk);
    session.counts.prefilled += held.reduce((n, h) => n + h.length, 0) - before;

    // Decoding: the last context token first, then each sampled token.
    const tokens: number[][] = requests.map(() => []);
    const logprobs: number[][] = requests.map(() => []);
    const finished = requests.map(() => false);
    const onDevice = temperature <= 0 && isNative();
    const input = requests.map((q) => [q.tokens[q.tokens.length - 1]!]);
    // The requests whose rows the decoding cache holds, in its row order (request order). When half of them or more
    // have finished, the live ones move to a cache of their own and the old one is parked with the finished rows
    // (continuous batching: a step computes live rows only); the parked rows rejoin at the end of the round.
    let active = requests.map((_, b) => b);
    for (let step = 0; step < maxNew; step++) {
      const live = active.map((b) => !finished[b]);
      const positions = active.map((b, j) => [live[j] ? held[b]!.length : 0]);
      active.forEach((b, j) => masks[b]!.push(live[j] ? 1 : 0));
      active.forEach((b, j) => live[j] && held[b]!.push(input[b]![0]!));
      const ids = active.map((b) => input[b]!);
      const keyMask = active.map((b) => masks[b]!);
      let pick: (j: number) => { tok: number; logprob: number };
      if (onDevice) {
        const picked = model.greedyStep(ids, { positions, keyMask, cache });
        pick = (j) => ({ tok: picked.ids[j]!, logprob: picked.logprobs[j]! });
      } else {
        const logitsT = model.forward(ids, { positions, keyMask, cache, lastOnly: true });
        const logits = logitsT.dataSync();
        logitsT.dispose();
        pick = (j) => {
          const row = logits.subarray(j * V, (j + 1) * V);
          const tok = sampleToken(row, temperature, topP, rngs[active[j]!]!);
          return { tok, logprob: logProbOf(row, tok, temperature) };
        };
      }
      const nLive = live.filter(Boolean).length;
      session.counts.decoded += nLive;
      // In request order, so a shared PRNG is drawn as `generate` draws it.
      active.forEach((b, j) => {
        if (finished[b]) return void (input[b] = [padId]);
        const { tok, logprob } = pick(j);
        tokens[b]!.push(tok);
        logprobs[b]!.push(logprob);
        if (stop.has(tok) || tokens[b]!.length >= requests[b]!.maxNewTokens) finished[b] = true;
        input[b] = [tok];
      });
      if (finished.every(Boolean)) break;
      const going = active.filter((b) => !finished[b]);
      if (going.length <= active.length / 2 && maxNew - step > COMPACT_MIN_STEPS) {
        const rowOf = new Map(active.map((b, j) => [b, j]));
        const next = assembleCache(model.dims, [{ cache: cache!, rows: going.map((b) => rowOf.get(b)!) }], cache!.length, maxNew - step);
        const done = active.filter((b) => finished[b]);
        parked.push({ cache: cache!, rows: done.map((b) => rowOf.get(b)!), requests: done });
        cache = next;
        active = going;
      }
      yield step;
    }
    if (parked.length) {
      cache = rejoin(model, cache!, active, parked);
      for (const m of masks) while (m.length < cache.length) m.push(0);
    }
    session.swap(cache, requests.map((q, b) => ({ key: q.key, held: held[b]!, mask: masks[b]! })));
    cache = undefined;
    return { tokens, finished: tokens.map((t) => t.length > 0 && stop.has(t[t.length - 1]!)), logprobs };
  } finally {
    // A round that did not finish (an error, a cancellation) leaves an empty session: the next one prefills again.
    model.disposeCache(prefill);
    for (const p of parked) model.disposeCache(p.cache);
    if (cache) {
      model.disposeCache(cache);
      session.swap(undefined, []);
    }
  }
}

/**
 * The parked rows back beside the active ones, in request order, with the active cache's slots. On native they are
 * written into the first parked cache (the round's cache before any compaction: every request's row, in request
 * order, with room for the whole round), so no new cache is allocated; elsewhere they are assembled into a new one.
 * Disposes what it does not return and empties `parked`.
 */
function rejoin(model: QwenModel, cache: KVCache, active: readonly number[], parked: { cache: KVCache; rows: number[]; requests: number[] }[]): KVCache {
  const d = model.dims;
  const slots = cache.length;
  const first = parked[0]!.cache;
  const later = [...parked.slice(1), { cache, rows: active.map((_, j) => j), requests: [...active] }];
  if (first.native && later.every((p) => p.cache.native) && first.native.capacity >= slots) {
    for (const p of later) copyCacheRows(d, p.cache.native!, p.rows, first.native, p.requests, p.cache.length);
    for (const p of later) model.disposeCache(p.cache);
    parked.length = 0;
    first.length = slots;
    return first;
  }
  const joined = assembleCache(d, [{ cache, rows: active.map((_, j) => j), at: active }, ...parked.map((p) => ({ cache: p.cache, rows: p.rows, at: p.requests }))], slots, 0);
  model.disposeCache(cache);
  for (const p of parked) model.disposeCache(p.cache);
  parked.length = 0;
  return joined;
}

/** `decodeSteps` that gives the event loop a turn every `yieldEvery` decoding steps and after each prefill piece. */
export function decodeAsync(session: DecodeSession, requests: readonly DecodeRequest[], opts: DecodeOptions & StepDriverOptions = {}): Promise<GenerateResult> {
  return driveSteps(decodeSteps(session, requests, opts), opts);
}
