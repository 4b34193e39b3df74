/**
 * Seeded randomness for the demo tool world.
 *
 * Two kinds of randomness are used, on purpose:
 *  - *stateless* draws (`hash32`, `unitHash`): the world's facts (a city's temperature, a product's price) are a
 *    pure function of (world seed, key). Tools can therefore be executed in any order, any number of times, in any
 *    process, and always return the same result; no world object has to be built or shipped around.
 *  - a *stream* (`Rng`, mulberry32): the dialogue generator draws its choices (which scenario, which city, which
 *    phrasing) one after the other. Each example gets its own stream seeded from (dataset seed, index), so example
 *    `i` does not depend on how many examples are generated (a dataset of 10 is a prefix of a dataset of 1,000).
 *
 * The stream is cm2's one mulberry32 (src/kernel/rng.ts).
 */
import { fmix32, mulberry32 } from '../kernel/rng';

export { mulberry32 };

/**
 * Hash any list of strings/numbers to an unsigned 32-bit integer: FNV-1a over the joined text, then the
 * murmur3 finaliser so that neighbouring keys ("day 1", "day 2") give unrelated values.
 */
export function hash32(...parts: readonly (string | number)[]): number {
  const text = parts.join('\u001f');
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return fmix32(h);
}

/** A uniform number in [0, 1) that depends only on the key. */
export const unitHash = (...parts: readonly (string | number)[]): number => hash32(...parts) / 4294967296;

/** An integer in [min, max] (inclusive) that depends only on the key. */
export const intHash = (min: number, max: number, ...parts: readonly (string | number)[]): number =>
  min + Math.floor(unitHash(...parts) * (max - min + 1));

/** A stream of seeded random choices (mulberry32) with the helpers the generator needs. */
export class Rng {
  private readonly next: () => number;

  constructor(seed: number) {
    this.next = mulberry32(seed);
  }

  /** Uniform in [0, 1). */
  float(): number {
    return this.next();
  }

  /** Integer in [min, max], inclusive. */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError('pick from an empty list');
    return items[Math.floor(this.next() * items.length)] as T;
  }

  /** Pick by weight; weights need not sum to 1. */
  weighted<T>(items: readonly (readonly [T, number])[]): T {
    const total = items.reduce((s, [, w]) => s + w, 0);
    let r = this.next() * total;
    for (const [item, w] of items) {
      r -= w;
      if (r < 0) return item;
    }
    const last = items[items.length - 1];
    if (!last) throw new RangeError('weighted pick from an empty list');
    return last[0];
  }

  /** A shuffled copy (Fisher–Yates). */
  shuffle<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [out[i], out[j]] = [out[j] as T, out[i] as T];
    }
    return out;
  }

  /** `k` distinct items in random order. */
  sample<T>(items: readonly T[], k: number): T[] {
    return this.shuffle(items).slice(0, k);
  }
}

/**
 * A deterministic RFC 9562 version-8 ("custom") uuid from a key: 128 bits of `hash32` output with the version and
 * variant bits set. Stable ids keep caches, storage keys and resumption valid when the demo set is regenerated.
 */
export function deterministicUuid(...parts: readonly (string | number)[]): string {
  const hex = [0, 1, 2, 3].map((k) => hash32(k, ...parts).toString(16).padStart(8, '0')).join('');
  const chars = hex.split('');
  chars[12] = '8'; // version 8
  chars[16] = ((parseInt(chars[16] ?? '0', 16) & 0x3) | 0x8).toString(16); // variant 10xx
  const h = chars.join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}
