/**
 * Decoding sessions sized by KV memory (issue 29): the live sequences of a round are decoded in as few loops as the
 * budget allows (one, usually), and a sequence stays in the session that holds its cache from the round before, so
 * what it holds is reused. Blocks run one after the other; a sequence that fits in no block with a cache goes to
 * the first block with room (and is prefilled again). The budget bounds the pool, not one block (issue 30: three
 * blocks of 2 GB each kept their caches from round to round, beside the one being built): when the blocks' caches do
 * not fit together, the ones decoded earlier in the round let theirs go and are prefilled again next round.
 */
import { DecodeSession, decodeAsync, type DecodeOptions, type DecodeRequest } from './decodeSession';
import type { GenerateResult } from './generate';
import { kvBytesPerSlot } from './kvCache';
import { CACHE_CHUNK } from './nativeInference';
import type { QwenModel } from './qwen';

export class DecodePool {
  private sessions: DecodeSession[] = [];
  /** Sequences whose cache was let go to keep within the budget (they are prefilled again when they go on). */
  spilled = 0;

  /**
   * `budgetBytes`: KV cache bytes of the pool: a block's cache fits in it (estimated before it is decoded), and the
   * caches the other blocks keep for the next round are let go as needed so that they and the block's fit together.
   * For a moment while a block's cache is put together, its last round's cache and the prefill of its new contexts
   * exist beside it.
   */
  constructor(readonly model: QwenModel, readonly budgetBytes: number) {}

  /** Summed counts of every session. */
  get counts(): DecodeSession['counts'] {
    const c = { prefilled: 0, reused: 0, shared: 0, decoded: 0 };
    for (const s of this.sessions) for (const k of Object.keys(c) as (keyof typeof c)[]) c[k] += s.counts[k];
    return c;
  }

  get bytes(): number {
    return this.sessions.reduce((n, s) => n + s.bytes, 0);
  }

  /**
   * Cache bytes of a block of these requests decoded in `session` (none: a new one), as decodeSteps lays it out: rows
   * the session holds keep their slots (its cache's length), new contexts are prefilled side by side (the longest of
   * them), then every row gets room for the longest still-unfed part and the longest continuation, in chunks of
   * CACHE_CHUNK slots. Exact when each held row goes on; a row that does not (another context) is counted as held,
   * which can only overestimate.
   */
  estimate(requests: readonly DecodeRequest[], session?: DecodeSession): number {
    if (requests.length === 0) return 0;
    const held = session?.held() ?? new Map<string, number>();
    let base = 0;
    let feed = 0;
    for (const q of requests) {
      const h = held.get(q.key);
      if (h !== undefined && h < q.tokens.length) {
        base = Math.max(base, session!.slots);
        feed = Math.max(feed, q.tokens.length - h);
      } else base = Math.max(base, q.tokens.length);
    }
    const maxNew = Math.max(...requests.map((q) => q.maxNewTokens));
    const slots = Math.ceil((base + feed + maxNew) / CACHE_CHUNK) * CACHE_CHUNK;
    return requests.length * slots * kvBytesPerSlot(this.model.dims);
  }

  /** Generates every request (results in request order), block by block; `onBlock` before each. */
  async decode(requests: readonly DecodeRequest[], opts: DecodeOptions & { yieldEvery?: number; onStep?: (step: number) => void; onBlock?: (block: number, rows: number) => void } = {}): Promise<GenerateResult> {
    const blocks: number[][] = this.sessions.map(() => []);
    const holder = new Map<string, number>();
    this.sessions.forEach((s, i) => s.held().forEach((_, key) => holder.set(key, i)));
    const fits = (i: number, b: number) => blocks[i]!.length === 0 || this.estimate([...blocks[i]!, b].map((k) => requests[k]!), this.sessions[i]) <= this.budgetBytes;
    const homeless: number[] = [];
    requests.forEach((q, b) => {
      const i = holder.get(q.key);
      if (i !== undefined && fits(i, b)) blocks[i]!.push(b);
      else homeless.push(b);
    });
    for (const b of homeless) {
      let i = blocks.findIndex((_, j) => fits(j, b));
      if (i < 0) {
        blocks.push([]);
        i = blocks.length - 1;
      }
      blocks[i]!.push(b);
    }
    while (this.sessions.length < blocks.length) this.sessions.push(new DecodeSession(this.model));
    // A session without rows this round lets its cache go now (its sequences ended).
    blocks.forEach((rows, i) => rows.length === 0 && this.sessions[i]!.clear());
    const out: GenerateResult = { tokens: requests.map(() => []), finished: requests.map(() => false), logprobs: requests.map(() => []) };
    // The blocks that hold most first: when the budget cannot keep every block's cache to the next round, the ones
    // kept are those decoded last, and they go first next round, before anything else is allocated.
    const order = blocks.map((_, i) => i).filter((i) => blocks[i]!.length > 0).sort((a, b) => this.sessions[b]!.bytes - this.sessions[a]!.bytes || a - b);
    const done = new Set<number>();
    for (const i of order) {
      const rows = blocks[i]!;
      this.spill(i, this.estimate(rows.map((b) => requests[b]!), this.sessions[i]), done);
      opts.onBlock?.(i, rows.length);
      // Each block's shared PRNG its own stream (block 0 keeps the seed: one block samples as one loop always did).
      const seed = i === 0 ? opts.seed : (((opts.seed ?? 0) ^ Math.imul(i, 0x9e3779b1)) >>> 0);
      const got = await decodeAsync(this.sessions[i]!, rows.map((b) => requests[b]!), { ...opts, ...(seed !== undefined ? { seed } : {}) });
      rows.forEach((b, k) => {
        out.tokens[b] = got.tokens[k]!;
        out.finished[b] = got.finished[k]!;
        out.logprobs[b] = got.logprobs[k]!;
      });
      done.add(i);
    }
    return out;
  }

  /**
   * Lets other sessions' caches go until what they hold and block `i`'s cache (`need` bytes) fit the budget: first
   * those decoded this round (their rows may not go on), the last decoded first, then those still to come (their rows
   * are prefilled again when their turn comes). Their sequences are prefilled again when they go on.
   */
  private spill(i: number, need: number, done: ReadonlySet<number>): void {
    const decoded = [...done].reverse();
    const waiting = this.sessions.map((_, j) => j).filter((j) => j !== i && !done.has(j));
    for (const j of [...decoded, ...waiting]) {
      const held = this.sessions.reduce((n, s, k) => n + (k === i ? 0 : s.bytes), 0);
      if (held + need <= this.budgetBytes) return;
      if (this.sessions[j]!.bytes > 0) {
        this.spilled += this.sessions[j]!.held().size;
        this.sessions[j]!.clear();
      }
    }
  }

  dispose(): void {
    for (const s of this.sessions) s.dispose();
    this.sessions = [];
  }
}
