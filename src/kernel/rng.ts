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
