/**
 * A worker's one loaded evaluation policy, kept between activities: the chunks of an evaluation come one after the
 * other to the same worker (one activity slot per gpu worker), and each would otherwise load the same weights again.
 * A chunk of another policy disposes of the held one before loading its own, so a worker holds at most one model
 * here; one unused for `idleMs` is disposed of too, so that the memory is free for the stage that comes next (SFT
 * training after the base policy's check, say).
 *
 * A chunk that arrives while another activity of this worker still uses the held model (a worker given more than one
 * slot) gets a model of its own, disposed of when it is done: the held one is never disposed of under a user.
 */
export interface Disposable {
  dispose(): void;
}

export class PolicySlot<T extends Disposable> {
  private held?: { key: string; value: Promise<T>; users: number };
  private timer?: NodeJS.Timeout;
  /** Loads so far (a bench and the tests read it: one per policy and worker when chunks share the slot). */
  loads = 0;

  constructor(private readonly idleMs = 60_000) {}

  /** Runs `use` with the value of `key`, loading it with `load` unless it is the one held. */
  async with<R>(key: string, load: () => Promise<T>, use: (value: T) => Promise<R>): Promise<R> {
    this.cancelIdle();
    const held = this.held;
    if (held && held.key === key) {
      held.users++;
      return this.run(held, use);
    }
    if (held && held.users > 0) {
      // Busy with another policy: a private copy, not kept.
      const own = await this.load(load);
      try {
        return await use(own);
      } finally {
        own.dispose();
      }
    }
    if (held) await this.drop();
    const entry = { key, value: this.load(load), users: 1 };
    this.held = entry;
    return this.run(entry, use);
  }

  /** Disposes of the held value (when no activity uses it). */
  async clear(): Promise<void> {
    this.cancelIdle();
    if (this.held && this.held.users === 0) await this.drop();
  }

  /** The key of the held value, if any. */
  get key(): string | undefined {
    return this.held?.key;
  }

  private load(load: () => Promise<T>): Promise<T> {
    this.loads++;
    return load();
  }

  private async run<R>(entry: NonNullable<PolicySlot<T>['held']>, use: (value: T) => Promise<R>): Promise<R> {
    try {
      let value: T;
      try {
        value = await entry.value;
      } catch (e) {
        if (this.held === entry) this.held = undefined; // a failed load is not kept
        throw e;
      }
      return await use(value);
    } finally {
      entry.users--;
      if (entry.users === 0 && this.held === entry) this.scheduleIdle();
    }
  }

  private async drop(): Promise<void> {
    const held = this.held;
    this.held = undefined;
    if (held) (await held.value.catch(() => undefined))?.dispose();
  }

  private scheduleIdle(): void {
    this.cancelIdle();
    this.timer = setTimeout(() => void this.clear(), this.idleMs);
    this.timer.unref();
  }

  private cancelIdle(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
