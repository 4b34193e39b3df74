/**
 * Decoding sessions sized by KV memory (issue 29): the live sequences of a round are decoded in as few loops as the
 * budget allows (one, usually), and a sequence stays in the session that holds its cache from the round before, so
 * what it holds is reused. Blocks run one after the other; a sequence that fits in no block with a cache goes to
 * the first block with room (and is prefilled again).
 */
import { DecodeSession, decodeAsync, type DecodeOptions, type DecodeRequest } from './decodeSession';
import type { GenerateResult } from './generate';
import { kvBytesPerSlot } from './kvCache';
import type { QwenModel } from './qwen';

/** Slots a session ends up with per slot of its longest sequence: each round left-pads its new tokens to the longest. */
const SLOT_SLACK = 1.5;

export class DecodePool {
  private sessions: DecodeSession[] = [];

  /** `budgetBytes`: KV cache bytes per block (each block's cache fits in it, estimated before it is decoded). */
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

  /** Estimated cache bytes of a block of these requests. */
  estimate(requests: readonly DecodeRequest[]): number {
    const longest = Math.max(0, ...requests.map((q) => q.tokens.length + q.maxNewTokens));
    return requests.length * longest * SLOT_SLACK * kvBytesPerSlot(this.model.dims);
  }

  /** Generates every request (results in request order), block by block; `onBlock` before each. */
  async decode(requests: readonly DecodeRequest[], opts: DecodeOptions & { yieldEvery?: number; onStep?: (step: number) => void; onBlock?: (block: number, rows: number) => void } = {}): Promise<GenerateResult> {
    const blocks: number[][] = this.sessions.map(() => []);
    const holder = new Map<string, number>();
    this.sessions.forEach((s, i) => s.held().forEach((_, key) => holder.set(key, i)));
    const fits = (i: number, b: number) => blocks[i]!.length === 0 || this.estimate([...blocks[i]!, b].map((k) => requests[k]!)) <= this.budgetBytes;
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
    const out: GenerateResult = { tokens: requests.map(() => []), finished: requests.map(() => false), logprobs: requests.map(() => []) };
    for (const [i, rows] of blocks.entries()) {
      // A block without rows this round empties its session (its sequences ended).
      if (rows.length) opts.onBlock?.(i, rows.length);
      // Each block's shared PRNG its own stream (block 0 keeps the seed: one block samples as one loop always did).
      const seed = i === 0 ? opts.seed : (((opts.seed ?? 0) ^ Math.imul(i, 0x9e3779b1)) >>> 0);
      const got = await decodeAsync(this.sessions[i]!, rows.map((b) => requests[b]!), { ...opts, ...(seed !== undefined ? { seed } : {}) });
      rows.forEach((b, k) => {
        out.tokens[b] = got.tokens[k]!;
        out.finished[b] = got.finished[k]!;
        out.logprobs[b] = got.logprobs[k]!;
      });
    }
    return out;
  }

  dispose(): void {
    for (const s of this.sessions) s.dispose();
    this.sessions = [];
  }
}
