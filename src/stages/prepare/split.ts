/**
 * Seeded dataset shaping: the cold-start / RL split (spec §3.1) and the harder-sample selection of the RL pool
 * (spec §5.1). The structured `{thinking, reply}` form of cold-start items (§1.3) lives with the CoT compression
 * stage (cotCompression.ts: `toStructuredColdStart`).
 *
 * Randomness is seeded and reproducible: the split shuffles with a small documented PRNG (mulberry32); the selection
 * uses a counter-based draw `uniformAt(seed, stream, position)` so that an example's draw depends only on where it
 * sits (e.g. shard index and index within the shard), never on the order in which shards are processed or retried,
 * nor on other examples. The reference uses Python's
 * `random` (Mersenne Twister) for the split and NumPy's `RandomState` for the selection; we do not reproduce those
 * streams bit for bit, so the same seed selects a *different* but identically distributed subset (recorded in
 * docs/decisions-data.md).
 */
import { z } from 'zod';
import type { DropReason, Example } from '../../kernel/schema';
import { computeStats, STAT_NAMES, type ExampleStats, type StatName } from './stats';
import { lowbias32, mulberry32 } from '../../kernel/rng';

export { mulberry32 };

/** The reference's seed for both the split and the selection. */
export const DEFAULT_SEED = 42;



/**
 * Counter-based uniform draw in [0, 1): a pure function of (seed, stream, position). For a fixed seed and stream,
 * distinct positions give distinct 32-bit values (each step is a bijection), so draws never collide within a stream.
 */
export function uniformAt(seed: number, stream: number, position: number): number {
  const h = lowbias32(lowbias32(lowbias32(seed ^ 0x9e3779b9) ^ stream) ^ position);
  return h / 4294967296;
}

/** Fisher–Yates (Durstenfeld) shuffle into a new array; the input is left untouched. */
export function shuffle<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// §3.1 cold-start / RL split

export interface ColdStartSplit<T> {
  coldStart: T[];
  rl: T[];
}

/**
 * Shuffle with the seed and cut: the first `nColdStart` items go to cold-start SFT, the rest form the RL pool.
 * Asking for more cold-start items than exist is a usage error (the reference raises too).
 */
export function splitColdStart<T>(items: readonly T[], nColdStart: number, seed: number = DEFAULT_SEED): ColdStartSplit<T> {
  if (!Number.isInteger(nColdStart) || nColdStart < 0) throw new RangeError(`nColdStart must be a non-negative integer, got ${nColdStart}`);
  if (nColdStart > items.length) throw new RangeError(`cannot take ${nColdStart} cold-start items from a dataset of ${items.length}`);
  const shuffled = shuffle(items, mulberry32(seed));
  return { coldStart: shuffled.slice(0, nColdStart), rl: shuffled.slice(nColdStart) };
}

/** `splitColdStart` with named options (the shape the pipeline activity uses). */
export function seededSplit<T>(items: readonly T[], opts: { coldStart: number; seed?: number }): ColdStartSplit<T> {
  return splitColdStart(items, opts.coldStart, opts.seed ?? DEFAULT_SEED);
}

// ---------------------------------------------------------------------------------------------------------------
// §5.1 harder-sample selection

/** Drop probability per statistic value: `{ num_turns: { 1: 0.4 } }` drops single-turn dialogues with p = 0.4. */
export const DropTable = z.partialRecord(z.enum(STAT_NAMES), z.record(z.string().regex(/^\d+$/), z.number().min(0).max(1)));
export type DropTable = z.infer<typeof DropTable>;

/** The reference table (`filter_by_stats.py`, repeated in `ratio.txt`); the zero entries are kept for fidelity. */
export const REFERENCE_DROP_TABLE: DropTable = {
  tool_calls_total: { 1: 0.3, 2: 0.3, 3: 0 },
  max_parallel_tool_calls: { 1: 0 },
  max_assistant_steps: { 1: 0.3, 2: 0 },
  num_turns: { 1: 0.4, 3: 0 },
  num_selected_tools: { 1: 0.4 },
  num_candidate_tools: { 1: 0.7, 2: 0.4, 3: 0, 6: 0, 10: 0 },
  num_assistant_messages: { 1: 0.2, 2: 0.3 },
};

/** The ratios that apply to one example's statistics, by metric. */
export function matchingDropRatios(stats: ExampleStats, table: DropTable = REFERENCE_DROP_TABLE): Partial<Record<StatName, number>> {
  const matched: Partial<Record<StatName, number>> = {};
  for (const metric of STAT_NAMES) {
    const ratio = table[metric]?.[String(stats[metric])];
    if (ratio !== undefined) matched[metric] = ratio;
  }
  return matched;
}

/** Combined drop probability `1 − Π(1 − r_i)` over all matching metrics (each ratio clamped to [0, 1]). */
export function dropProbability(stats: ExampleStats, table: DropTable = REFERENCE_DROP_TABLE): number {
  const keep = Object.values(matchingDropRatios(stats, table)).reduce((acc, r) => acc * (1 - Math.min(1, Math.max(0, r))), 1);
  return Math.min(1, Math.max(0, 1 - keep));
}

/** Reason code of examples dropped by the harder-sample selection. */
export const HARDER_SELECTION_CODE = 'harder_selection';

/** The selection's verdict on one example. */
export interface DropDecision {
  drop: boolean;
  /** Combined drop probability. */
  probability: number;
  /** The uniform draw compared against `probability` (dropped iff `draw < probability`). */
  draw: number;
  /** Human-readable account: the matching metrics, the probability and the draw. */
  detail: string;
}

/**
 * Decide one example (spec §5.1): drop iff `uniformAt(seed, stream, position) < 1 − Π(1 − r_i)`. `stream` and
 * `position` identify the example (e.g. shard index and index within the shard; or 0 and the dataset index). The
 * draw is made whatever the probability, so it never depends on other examples.
 */
export function harderSampleDrop(
  stats: ExampleStats,
  opts: { seed?: number; stream?: number; position: number; table?: DropTable },
): DropDecision {
  const table = opts.table ?? REFERENCE_DROP_TABLE;
  const probability = dropProbability(stats, table);
  const draw = uniformAt(opts.seed ?? DEFAULT_SEED, opts.stream ?? 0, opts.position);
  const matched = Object.entries(matchingDropRatios(stats, table))
    .filter(([, r]) => r > 0)
    .map(([metric, r]) => `${metric}=${stats[metric as StatName]}→${r}`)
    .join(', ');
  const detail = `drop probability ${probability.toFixed(4)}${matched ? ` (${matched})` : ''}; draw ${draw.toFixed(4)}`;
  return { drop: draw < probability, probability, draw, detail };
}

export interface SelectionDecision extends DropDecision {
  uuid: string;
  stats: ExampleStats;
  /** Present on dropped examples, for the stage's dropped-records file. */
  reason?: DropReason;
}

export interface HarderSampleSelection {
  kept: Example[];
  decisions: SelectionDecision[];
}

/**
 * Harder-sample selection over a whole in-memory dataset: example `i` gets the draw `uniformAt(seed, 0, i)` (one
 * draw per example in dataset order), so this agrees with `harderSampleDrop` applied with stream 0.
 */
export function selectHarderSamples(
  examples: readonly Example[],
  opts: { seed?: number; table?: DropTable } = {},
): HarderSampleSelection {
  const kept: Example[] = [];
  const decisions = examples.map((example, position): SelectionDecision => {
    const stats = computeStats(example);
    const decision = harderSampleDrop(stats, { seed: opts.seed, stream: 0, position, table: opts.table });
    if (!decision.drop) {
      kept.push(example);
      return { uuid: example.uuid, stats, ...decision };
    }
    return { uuid: example.uuid, stats, ...decision, reason: { code: HARDER_SELECTION_CODE, detail: decision.detail } };
  });
  return { kept, decisions };
}
