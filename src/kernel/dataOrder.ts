/**
 * A seeded PRNG whose whole state is one uint32, so a checkpoint can store it and a resumed run draws exactly the
 * numbers an uninterrupted run would (mulberry32: src/kernel/rng.ts). Pure.
 */
import { mulberry32Advance, mulberry32Value } from './rng';

export class Rng {
  private s: number;

  constructor(seed: number) {
    this.s = seed >>> 0;
  }

  /** The state to store in a checkpoint. */
  get state(): number {
    return this.s;
  }

  static fromState(state: number): Rng {
    return new Rng(state);
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.s = mulberry32Advance(this.s);
    return mulberry32Value(this.s);
  }

  /** Integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** Fisher–Yates shuffle of a copy. */
  shuffle<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [out[i], out[j]] = [out[j]!, out[i]!];
    }
    return out;
  }

  /** Standard normal (Box–Muller). */
  normal(): number {
    const u = Math.max(this.next(), 1e-12);
    const v = this.next();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
  }
}

/**
 * Position in the training data: epoch and index into that epoch's order. The order of epoch e is a shuffle seeded
 * by (seed, e), so it is recomputed on resume instead of stored.
 */
export interface DataCursor {
  epoch: number;
  /** Next position in the epoch's order. */
  index: number;
}

export function epochOrder(n: number, seed: number, epoch: number): number[] {
  return new Rng((seed ^ Math.imul(epoch + 1, 0x9e3779b1)) >>> 0).shuffle(Array.from({ length: n }, (_, i) => i));
}

/**
 * The next `count` example indices from the cursor, crossing into the next epoch when one ends, and the cursor
 * after them. Stops at `maxEpochs` (returns fewer, possibly none).
 */
export function takeBatch(cursor: DataCursor, count: number, n: number, seed: number, maxEpochs: number): { indices: number[]; next: DataCursor } {
  const indices: number[] = [];
  let { epoch, index } = cursor;
  let order = epochOrder(n, seed, epoch);
  while (indices.length < count && epoch < maxEpochs && n > 0) {
    if (index >= n) {
      epoch++;
      index = 0;
      if (epoch >= maxEpochs) break;
      order = epochOrder(n, seed, epoch);
    }
    indices.push(order[index]!);
    index++;
  }
  return { indices, next: { epoch, index } };
}
