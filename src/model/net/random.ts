import { mulberry32Advance, mulberry32Value } from '../../kernel/rng';

/** A small seeded PRNG (mulberry32) with Gaussian draws, so initialisation and sampling are reproducible anywhere. */
export class Rng {
  private state: number;
  private spare: number | null = null;

  constructor(seed: number) {
    this.state = (Math.floor(seed) ^ 0x9e3779b9) >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.state = mulberry32Advance(this.state);
    return mulberry32Value(this.state);
  }

  /** Standard normal (Box–Muller). */
  normal(): number {
    if (this.spare !== null) {
      const s = this.spare;
      this.spare = null;
      return s;
    }
    let u = 0;
    while (u === 0) u = this.next();
    const v = this.next();
    const r = Math.sqrt(-2 * Math.log(u));
    this.spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }
}
