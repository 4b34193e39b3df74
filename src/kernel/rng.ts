/**
 * mulberry32, the one seeded 32-bit PRNG of cm2 (data split and selection, the demo world's generator, model
 * initialisation and sampling, the training data order). Its whole state is one uint32, so a checkpoint can store it
 * and a resumed run draws what an uninterrupted one would. Pure; importable by workflow code.
 */

/** The state after one step. */
export function mulberry32Advance(state: number): number {
  return (state + 0x6d2b79f5) >>> 0;
}

/** The uniform draw in [0, 1) of an advanced state. */
export function mulberry32Value(state: number): number {
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}

/** A stream of uniform draws in [0, 1) from `seed` (reduced to an unsigned 32-bit integer). */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = mulberry32Advance(state);
    return mulberry32Value(state);
  };
}

/**
 * The xorshift–multiply finaliser that murmur3 and "lowbias32" share: `x ^= x >>> 16; x *= m1; x ^= x >>> s;
 * x *= m2; x ^= x >>> 16` (32-bit), a bijection that spreads every input bit over the output.
 */
function finalise32(x: number, m1: number, s: number, m2: number): number {
  let h = x >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, m1);
  h ^= h >>> s;
  h = Math.imul(h, m2);
  h ^= h >>> 16;
  return h >>> 0;
}

/** murmur3's 32-bit finaliser (`fmix32`). */
export const fmix32 = (x: number): number => finalise32(x, 0x85ebca6b, 13, 0xc2b2ae35);

/** The "lowbias32" integer hash (Chris Wellons), a finaliser with lower bias than murmur3's. */
export const lowbias32 = (x: number): number => finalise32(x, 0x7feb352d, 15, 0x846ca68b);
