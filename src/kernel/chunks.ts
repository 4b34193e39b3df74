/**
 * Work fanned out in chunks over the gpu workers (the SFT format check, BFCL evaluation): how many chunks, and what a
 * chunk activity reports about its run. Pure; workflow code uses it too.
 */
import { z } from 'zod';

/** Chunks of at most `size` items that cover `total` items (0 for none). */
export const chunkCount = (total: number, size: number): number => (total <= 0 ? 0 : Math.ceil(total / Math.max(1, size)));

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
