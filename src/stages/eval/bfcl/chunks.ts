/**
 * BFCL evaluation in chunks (pure): what one chunk activity evaluates, and how the chunks' results become the one
 * results document (./score.ts `BfclResults`) that an evaluation in one piece writes.
 *
 * A chunk is a run of at most `chunkSize` examples in evaluation order (categories in the given order, each category's
 * examples in file order), cut into segments at category boundaries: a function of the data and the config only, never
 * of the number of workers, so the same generation batches are formed however many workers share the chunks. With
 * `chunkSize` at least the number of examples there is one chunk and every category is generated in one piece, as an
 * evaluation without chunks does (same batches, same outputs).
 */
import { z } from 'zod';
import { ChunkTiming } from '../../../kernel/chunks';
import { VERSION_PREFIX } from './categories';
import { aggregate, ExampleResult, type BfclResults } from './score';

/** Examples `start .. start+count-1` of one category (file order). */
export const ChunkSegment = z.object({
  category: z.string().min(1),
  start: z.number().int().nonnegative(),
  count: z.number().int().positive(),
});
export type ChunkSegment = z.infer<typeof ChunkSegment>;

export const BfclChunk = z.object({
  index: z.number().int().nonnegative(),
  segments: z.array(ChunkSegment).min(1),
});
export type BfclChunk = z.infer<typeof BfclChunk>;

/** What a chunk activity stores: the scored examples of its segments, in order. */
export const BfclChunkFile = ChunkTiming.extend({
  chunk: BfclChunk,
  results: z.array(ExampleResult),
});
export type BfclChunkFile = z.infer<typeof BfclChunkFile>;

/** Cuts the examples of `counts` (categories in evaluation order) into chunks of at most `chunkSize` examples. */
export function planChunks(counts: readonly { category: string; count: number }[], chunkSize: number): BfclChunk[] {
  if (!Number.isInteger(chunkSize) || chunkSize < 1) throw new Error(`chunkSize must be a positive integer, got ${chunkSize}`);
  const chunks: BfclChunk[] = [];
  let current: ChunkSegment[] = [];
  let room = chunkSize;
  const close = () => {
    if (current.length > 0) chunks.push({ index: chunks.length, segments: current });
    current = [];
    room = chunkSize;
  };
  for (const { category, count } of counts) {
    for (let start = 0; start < count; ) {
      const n = Math.min(room, count - start);
      current.push({ category, start, count: n });
      start += n;
      room -= n;
      if (room === 0) close();
    }
  }
  close();
  return chunks;
}

/** Examples in a chunk. */
export const chunkExamples = (chunk: BfclChunk): number => chunk.segments.reduce((n, s) => n + s.count, 0);

export interface MergeOptions {
  /** The categories in evaluation order (the keys of `categories`, in this order). */
  categories: readonly string[];
  policy: Record<string, unknown>;
  /** The data folder the examples came from (as the workers name it). */
  dataDir: string;
  limit?: number;
  createdAt: string;
}

/**
 * The results document of an evaluation from its chunks' files (any order in, chunk order out). `seconds` is the
 * wall time from the first chunk's start to the last one's end (0 without chunks: no examples). Throws when the
 * chunks are not 0..n-1 exactly once or a chunk's results do not match its segments: a merge never papers over
 * missing work.
 */
export function mergeChunkFiles(files: readonly BfclChunkFile[], opts: MergeOptions): BfclResults {
  const sorted = [...files].sort((a, b) => a.chunk.index - b.chunk.index);
  sorted.forEach((f, i) => {
    if (f.chunk.index !== i) throw new Error(`chunk ${i} is missing (have ${sorted.map((x) => x.chunk.index).join(', ')})`);
    let k = 0;
    for (const s of f.chunk.segments) {
      for (let j = 0; j < s.count; j++, k++) {
        const r = f.results[k];
        if (r?.category !== s.category) throw new Error(`chunk ${i}: result ${k} is ${r ? `of ${r.category}` : 'missing'}, expected ${s.category} #${s.start + j}`);
      }
    }
    if (k !== f.results.length) throw new Error(`chunk ${i}: ${f.results.length} results for ${k} examples`);
  });
  const results = sorted.flatMap((f) => f.results);
  const { categories, overall } = aggregate(opts.categories, results);
  const started = Math.min(...sorted.map((f) => f.startedAt));
  const finished = Math.max(...sorted.map((f) => f.finishedAt));
  const seconds = sorted.length === 0 ? 0 : Math.max(0, finished - started) / 1000;
  return {
    benchmark: VERSION_PREFIX,
    policy: opts.policy,
    dataDir: opts.dataDir,
    ...(opts.limit !== undefined ? { limit: opts.limit } : {}),
    createdAt: opts.createdAt,
    seconds,
    categories,
    overall,
    examples: results,
  };
}
