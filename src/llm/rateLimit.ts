/**
 * Client-side pacing of one role's requests when its endpoint rate-limits (429): an AIMD rate estimate (the idea
 * of TCP congestion control), per client and role, i.e. per worker process.
 *
 * - No 429 seen yet: no pacing at all (`rate` is unbounded); the client behaves as without a limiter.
 * - The first 429 starts a measurement: for `cooldownMs` requests go on unpaced (the endpoint refuses what is too
 *   much), then the next 429 sets the rate to what the endpoint accepted since the first one (requests started minus
 *   those refused: an LLM answers seconds later, a 429 at once). Right after the first 429 there is nothing to
 *   measure: a fan-out's first requests arrive together, the burst is accepted and the rest refused at once.
 * - Every later 429 cuts the rate by `decrease`, at most once per `cooldownMs` (the 429s of one overshoot arrive
 *   together and are one congestion signal, not several).
 * - Every success raises it by `growth` requests/s, i.e. by `growth` × rate per second: ~`growth` × 100 % a second,
 *   whatever the limit. It never grows past twice the recently accepted rate (a concurrency-bound client cannot
 *   accumulate a licence to burst).
 * - After `releaseAfterMs` without a 429 the pacing stops (a limit that was lifted, a burst of traffic long over).
 * - Requests start at most `rate` per second, spaced evenly (`reserve` hands out start times); a 429'd request waits
 *   its Retry-After (with jitter, so that retries do not arrive as a herd) and then takes a new start time.
 *
 * Without it, a fan-out of N concurrent requests against a limit of R/s retries in synchronised waves: with
 * `retry-after-ms` a herd of N requests every few ms, almost all of them 429s (the endpoint and our CPU spend their
 * time refusing); with a whole-second `Retry-After`, bursts that a small token bucket cuts to its burst size.
 * Pure (no I/O); the clock is injectable for tests.
 */

export interface AdaptiveRateOptions {
  /** Factor applied to the rate on a 429. */
  decrease: number;
  /** Requests/s added per success (relative growth per second). */
  growth: number;
  /** Floor of the rate, requests/s. */
  minRate: number;
  /** At most one decrease per this many ms. */
  cooldownMs: number;
  /** Window over which the success rate is measured, ms. */
  windowMs: number;
  /** Pacing stops (back to unbounded) after this long without a 429. */
  releaseAfterMs: number;
}

export const DEFAULT_ADAPTIVE_RATE: AdaptiveRateOptions = { decrease: 0.85, growth: 0.1, minRate: 0.5, cooldownMs: 1_000, windowMs: 2_000, releaseAfterMs: 60_000 };

export class AdaptiveRateLimiter {
  private rateValue = Number.POSITIVE_INFINITY;
  private nextAt = 0;
  private lastDecreaseAt = Number.NEGATIVE_INFINITY;
  private firstAt: number | undefined;
  /** First 429 of a measurement (see the module comment), while not pacing. */
  private limitedSince: number | undefined;
  /** Start times of recent requests and times of recent 429s (within `windowMs`), oldest first. */
  private readonly sends: number[] = [];
  private readonly refusals: number[] = [];
  private readonly opts: AdaptiveRateOptions;

  constructor(
    opts: Partial<AdaptiveRateOptions> = {},
    private readonly now: () => number = Date.now,
  ) {
    this.opts = { ...DEFAULT_ADAPTIVE_RATE, ...opts };
  }

  /** Current pace in requests/s (Infinity: not pacing). */
  get rate(): number {
    return this.rateValue;
  }

  /** Milliseconds to wait before starting the next request; reserves that start time. */
  reserve(): number {
    const t = this.now();
    this.firstAt ??= t;
    if (Number.isFinite(this.rateValue) && t - this.lastDecreaseAt > this.opts.releaseAfterMs) {
      this.rateValue = Number.POSITIVE_INFINITY;
      this.limitedSince = undefined;
    }
    this.prune(t);
    if (!Number.isFinite(this.rateValue)) {
      this.sends.push(t);
      return 0;
    }
    const start = Math.max(t, this.nextAt);
    this.nextAt = start + 1000 / this.rateValue;
    this.sends.push(start);
    return start - t;
  }

  onSuccess(): void {
    const t = this.now();
    this.prune(t);
    if (!Number.isFinite(this.rateValue)) return;
    const cap = Math.max(this.opts.minRate, 2 * this.recentRate(t));
    if (this.rateValue < cap) this.rateValue = Math.min(cap, this.rateValue + this.opts.growth);
  }

  /** A 429 of the request started at `sentAt`: slow down (at most once per cooldown). */
  onRateLimited(sentAt: number = this.now()): void {
    const t = this.now();
    // Filed under its start time: the refusal cancels that start in the "accepted" count.
    this.refusals.push(sentAt);
    this.prune(t);
    if (!Number.isFinite(this.rateValue)) {
      // Not pacing yet: measure what the endpoint grants while it refuses the rest.
      if (this.limitedSince === undefined || t - this.limitedSince > this.opts.windowMs) {
        this.limitedSince = Math.min(sentAt, t);
        return;
      }
      if (t - this.limitedSince < this.opts.cooldownMs) return;
      const from = this.limitedSince;
      this.rateValue = Math.max(this.opts.minRate, this.acceptedPerSecond(from, t));
      this.limitedSince = undefined;
      this.lastDecreaseAt = t;
      this.nextAt = Math.max(this.nextAt, t);
      return;
    }
    if (t - this.lastDecreaseAt < this.opts.cooldownMs) return;
    this.lastDecreaseAt = t;
    this.rateValue = Math.max(this.opts.minRate, this.rateValue * this.opts.decrease);
    // The new pace applies from now: a slot reserved at the old pace further out is kept, not moved.
    this.nextAt = Math.max(this.nextAt, t);
  }

  /**
   * Requests per second the endpoint accepted in [from, t]: started minus refused. Not the answers that came back:
   * an LLM answers seconds later, a 429 at once, so "started and not refused" is what the endpoint let through.
   */
  private acceptedPerSecond(from: number, t: number): number {
    const started = this.sends.filter((s) => s >= from && s <= t).length;
    const refused = this.refusals.filter((s) => s >= from && s <= t).length;
    return (Math.max(0, started - refused) * 1000) / Math.max(250, t - from);
  }

  /** Accepted requests per second over the window (shorter while the limiter is young). */
  private recentRate(t: number): number {
    return this.acceptedPerSecond(Math.max(this.firstAt ?? t, t - this.opts.windowMs), t);
  }

  private prune(t: number): void {
    while (this.sends.length > 0 && this.sends[0]! < t - this.opts.windowMs) this.sends.shift();
    // Refusals come back in about their start order; one out of order only lingers a little longer.
    while (this.refusals.length > 0 && this.refusals[0]! < t - this.opts.windowMs) this.refusals.shift();
  }
}
