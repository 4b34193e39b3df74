/**
 * Work fanned out in chunks over the gpu workers (RL rollouts, the SFT format check, BFCL evaluation): how many
 * chunks, which items each holds, and what a chunk activity reports about its run. Pure; workflow code uses it too.
 */
import { z } from 'zod';

/** Chunks of at most `size` items that cover `total` items (0 for none). */
export const chunkCount = (total: number, size: number): number => (total <= 0 ? 0 : Math.ceil(total / Math.max(1, size)));

/** [start, end) ranges cutting `n` items into consecutive chunks of `size` (the last may be shorter). */
export function chunkRanges(n: number, size: number): [number, number][] {
  if (!(size > 0)) throw new Error(`chunk size must be positive, got ${size}`);
  const out: [number, number][] = [];
  for (let a = 0; a < n; a += size) out.push([a, Math.min(n, a + size)]);
  return out;
}

/** Where and how long a chunk ran: a bench reads it from the stage's result. */
export const ChunkTiming = z.object({
  index: z.number().int().nonnegative(),
  /** Items (prompts, examples) evaluated in the chunk. */
  items: z.number().int().nonnegative(),
  seconds: z.number().nonnegative(),
  /** Epoch milliseconds. */
  startedAt: z.number(),
  finishedAt: z.number(),
  /** `host:pid` of the worker that ran it. */
  worker: z.string(),
});
export type ChunkTiming = z.infer<typeof ChunkTiming>;
