/**
 * Generation batches shared by episodes that run at once (BFCL multi-turn, τ²-Bench): each episode asks for one
 * generation at a time; the batcher generates when every running episode waits (or a batch is full), so a model
 * decodes the episodes' steps side by side instead of one after the other.
 */
interface Waiting {
  prompt: number[];
  resolve: (tokens: number[]) => void;
  reject: (e: unknown) => void;
}

export class EpisodeBatcher {
  private active = 0;
  private waiting: Waiting[] = [];
  private generating = false;

  constructor(private readonly generate: (prompts: number[][]) => Promise<number[][]>, private readonly batchSize: number) {}

  episodeStart(): void {
    this.active++;
  }

  episodeDone(): void {
    this.active--;
    this.flush();
  }

  /** The generated tokens of one prompt, once its batch has been generated. */
  next(prompt: number[]): Promise<number[]> {
    return new Promise<number[]>((resolve, reject) => {
      this.waiting.push({ prompt, resolve, reject });
      this.flush();
    });
  }

  private flush(): void {
    if (this.generating || this.waiting.length === 0) return;
    if (this.waiting.length < Math.min(Math.max(1, this.active), this.batchSize)) return;
    const batch = this.waiting.splice(0, this.batchSize);
    this.generating = true;
    void this.generate(batch.map((w) => w.prompt)).then(
      (out) => batch.forEach((w, k) => w.resolve(out[k] ?? [])),
      (e) => batch.forEach((w) => w.reject(e)),
    ).finally(() => {
      this.generating = false;
      this.flush();
    });
  }
}
