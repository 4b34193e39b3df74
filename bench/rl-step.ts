/**
 * One RL step, measured: time per phase (rollout, judge, advantages, train, checkpoint, orchestration overhead), and
 * the judge's cost per step (calls, tokens) with batching and the verdict cache on vs off, with the verdict
 * agreement between the two.
 *
 *   npx tsx bench/rl-step.ts [--from RUN] [--steps 3] [--phases-of RUN] [--judge-rollouts N]
 *
 * Part 1 runs `--steps` RL steps alone (workflows and api workers in this process, the gpu worker in a child
 * process, as `npm run demo`) from the SFT policy and checklists of run `--from` (default `demo`: run `npm run demo`
 * first), with config/demo.yaml, and prints the per-phase seconds of each step from the run's metrics. Pass
 * `--phases-of RUN` to print them for an existing run instead.
 *
 * Part 2 re-judges every (rollout, turn, step) of those steps through the LLM judge (src/stages/rl/judge/judge.ts) in two
 * configurations: the reference's (one item per call, no verdict cache) and this project's default (8 items per
 * call, verdict cache), then the default once more (a retried activity: served by the cache). The endpoint is
 * `CM2_BENCH_JUDGE_URL` + `CM2_BENCH_JUDGE_MODEL` when set (a real LLM: agreement is then a real measurement), else a
 * local fake OpenAI-compatible judge whose verdict is a hash of (item question, judged messages) — with it,
 * agreement only checks that batching maps verdicts to the right items, and tokens are the fake's ~4 chars/token.
 * `CM2_BENCH_JUDGE_CONCURRENCY` (default 16) bounds requests in flight: set it to the server's slots for a local
 * llama-server, whose queued requests would otherwise time out. `CM2_BENCH_JUDGE_MAX_TOKENS` caps each answer (a
 * 135M model can loop inside a JSON string for thousands of tokens; a cut answer is a failed verdict).
 */
import http from 'node:http';
import { createHash } from 'node:crypto';
import { parseArgs } from 'node:util';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { judgeViewAt } from '../src/stages/checklist/check';
import { AnnotatedExample } from '../src/stages/checklist/schema';
import { startGpuWorker } from '../src/cli/demo';
import { startRl } from '../src/cli/stages';
import { loadConfig } from '../src/run/config';
import { LlmClient } from '../src/llm/client';
import { LlmConfig } from '../src/llm/llmConfig';
import { infraEnv, startInfra } from '../src/infra/localInfra';
import { ObjectStore } from '../src/storage/store';
import { checklistKeys, rlKeys, sftKeys } from '../src/run/layout';
import { connectClient } from '../src/infra/temporal';
import { Judge, JudgeConfig, withJudgeDefaults } from '../src/stages/rl/judge/judge';
import { pendingJudgements } from '../src/stages/rl/judge/phase';
import { Rollout, type Verdict } from '../src/stages/rl/rolloutSchema';
import { startWorkers } from '../src/workers';
import { VERDICT_FIELDS } from '../src/stages/rl/judge/judgePrompt';

interface StepRow {
  kind: string;
  step: number;
  rollouts: number;
  seconds: Record<string, number>;
  tokens: { policy: number; generated: number };
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

/** The fake judge: verdict = hash(question, current messages) per item, in the one-item or batched schema. */
async function fakeJudge(): Promise<{ url: string; close: () => Promise<void> }> {
  const verdictOf = (question: string, current: string) => createHash('sha256').update(`${question}\n${current}`).digest()[0]! % 2 === 0;
  const fields = (answer: boolean) => Object.fromEntries(VERDICT_FIELDS.map((f) => [f, f === 'answer' ? answer : 'analysis']));
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const json = JSON.parse(body) as { messages: { content: string }[]; response_format?: { json_schema?: { schema?: { properties?: { verdicts?: unknown } } } } };
      const prompt = json.messages[json.messages.length - 1]!.content;
      const current = (/# Current Messages to Evaluate\n([\s\S]*?)(?=\n# (?!Turn)|$)/.exec(prompt)?.[1] ?? '').trim();
      let content: unknown;
      if (json.response_format?.json_schema?.schema?.properties?.verdicts) {
        const sections = prompt.split('## Criterion item_id: ').slice(1);
        content = {
          verdicts: sections.map((s) => {
            const id = JSON.parse(s.slice(0, s.indexOf('\n'))) as string;
            const q = /\*\*Question:\*\* (.*)/.exec(s)?.[1] ?? '';
            return { item_id: id, ...fields(verdictOf(q, current)) };
          }),
        };
      } else content = fields(verdictOf(/\*\*Question:\*\* (.*)/.exec(prompt)?.[1] ?? '', current));
      const text = JSON.stringify(content);
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({
        id: 'x', object: 'chat.completion', created: 0, model: 'fake-judge',
        choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }],
        usage: { prompt_tokens: Math.ceil(prompt.length / 4), completion_tokens: Math.ceil(text.length / 4), total_tokens: 0 },
      }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}/v1`, close: () => new Promise((r) => server.close(() => r())) };
}

async function main() {
  const { values } = parseArgs({ options: { from: { type: 'string', default: 'demo' }, steps: { type: 'string', default: '3' }, 'phases-of': { type: 'string' }, 'judge-rollouts': { type: 'string' } } });
  const state = await startInfra({ log: (l) => console.log(l) });
  for (const [k, v] of Object.entries(infraEnv(state))) process.env[k] ??= v;
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const from = values.from!;
  let runId = values['phases-of'];
  const base = loadConfig('config/demo.yaml');
  const store = ObjectStore.fromConfig(base.s3);
  if (!runId) {
    runId = `bench-rl-${Date.now().toString(36)}`;
    const cfg = loadConfig('config/demo.yaml', {
      overrides: {
        run: { id: runId },
        rl: { ...base.rl, steps: Number(values.steps), eval: { ...base.rl.eval, prompts: 0 }, sourceKey: checklistKeys.annotated(from), policyPrefix: sftKeys.final(from) },
      },
    });
    if (!(await store.exists(`${cfg.rl.policyPrefix}/model.safetensors`))) throw new Error(`no SFT policy at ${cfg.rl.policyPrefix}: run \`npm run demo\` first (or pass --from RUN)`);
    const { writeFileSync, mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const file = `${mkdtempSync(`${tmpdir()}/cm2-bench-`)}/config.yaml`;
    writeFileSync(file, JSON.stringify(cfg));
    const workers = await startWorkers(cfg, ['workflows', 'api']);
    const gpu = await startGpuWorker(file);
    try {
      console.log(`running ${values.steps} RL step(s) as ${runId} (${cfg.rl.promptsPerStep} prompts × ${cfg.rl.groupSize} rollouts per step)...`);
      await (await startRl(await connectClient(cfg), cfg)).result();
    } finally {
      await gpu.stop();
      await workers.shutdown();
    }
  }

  // Part 1: time per phase.
  const rows = (await store.getText(rlKeys.metrics(runId))).split('\n').filter(Boolean).map((l) => JSON.parse(l) as StepRow).filter((r) => r.kind === 'step');
  const phases = ['rollout', 'judge', 'advantages', 'train', 'checkpoint', 'orchestration', 'total'];
  console.log(`\nRL step time by phase, seconds (run ${runId})`);
  console.log(`| step | ${phases.join(' | ')} | rollouts | policy tokens | generated tokens |`);
  console.log(`|---|${phases.map(() => '---').join('|')}|---|---|---|`);
  for (const r of rows) console.log(`| ${r.step} | ${phases.map((p) => (r.seconds[p] ?? 0).toFixed(1)).join(' | ')} | ${r.rollouts} | ${r.tokens.policy} | ${r.tokens.generated} |`);
  console.log(`| mean | ${phases.map((p) => mean(rows.map((r) => r.seconds[p] ?? 0)).toFixed(1)).join(' | ')} | | | |`);

  // Part 2: judge cost, batching and cache on vs off.
  const examples = await store.getJsonl(rlKeys.folder(runId, 'data', 'examples.jsonl'), AnnotatedExample);
  const checklists = new Map(examples.map((e) => [e.uuid, e.checklists]));
  const fake = process.env['CM2_BENCH_JUDGE_URL'] ? undefined : await fakeJudge();
  const llm = withJudgeDefaults(LlmConfig.parse({ roles: { judge: { baseUrl: process.env['CM2_BENCH_JUDGE_URL'] ?? fake!.url, model: process.env['CM2_BENCH_JUDGE_MODEL'] ?? 'fake-judge', apiKeyEnv: process.env['CM2_BENCH_JUDGE_KEY_ENV'], concurrency: Number(process.env['CM2_BENCH_JUDGE_CONCURRENCY'] ?? 16), timeoutMs: 600_000, ...(process.env['CM2_BENCH_JUDGE_MAX_TOKENS'] ? { maxTokens: Number(process.env['CM2_BENCH_JUDGE_MAX_TOKENS']) } : {}) } } }));
  const steps: { step: number; rollouts: Rollout[] }[] = [];
  for (const r of rows) {
    const folder = rlKeys.step(runId, r.step);
    const phaseKeys = (await store.list(`${folder}/`)).filter((k) => /phase-\d{3}\.json$/.test(k)).sort();
    // Every judged turn: the judge phases' inputs are the rollout phases before them; re-judge each turn once.
    const judged: Rollout[] = [];
    for (const k of phaseKeys) {
      const { rollouts } = (await store.getJson(k)) as { rollouts: unknown[] };
      const parsed = rollouts.map((x) => Rollout.parse(x));
      if (parsed.some((x) => x.status === 'judge')) judged.push(...parsed.map((x) => ({ ...x, id: `${x.id}@${k}` })));
    }
    // --judge-rollouts N: re-judge only the first N rollouts of each step (a small real model judges ~1 pair a second).
    const keep = values['judge-rollouts'] ? new Set([...new Set(judged.map((x) => x.id.split('@')[0]))].slice(0, Number(values['judge-rollouts']))) : undefined;
    steps.push({ step: r.step, rollouts: keep ? judged.filter((x) => keep.has(x.id.split('@')[0]!)) : judged });
  }
  const configs = [
    { name: 'reference: 1 item/call, no cache', batchItems: 1, cache: false },
    { name: 'cm2: 8 items/call, verdict cache', batchItems: 8, cache: true },
    { name: 'cm2 again (retried activity)', batchItems: 8, cache: true, reuse: true },
  ];
  const cache = new Map<string, Verdict>();
  const verdictsOf: Verdict[][] = [];
  console.log(`\nJudge cost per RL step (${process.env['CM2_BENCH_JUDGE_URL'] ? `endpoint ${process.env['CM2_BENCH_JUDGE_URL']}` : 'local fake judge'})`);
  console.log('| configuration | judged (step, item) pairs | calls | prompt tokens | completion tokens | cache hits | agreement with reference |');
  console.log('|---|---|---|---|---|---|---|');
  for (const c of configs) {
    const client = new LlmClient(llm, { log: () => undefined });
    const judge = new Judge({ llm: client, ...(c.cache ? { cache: { get: async (k: string) => cache.get(k), put: async (k: string, v: Verdict) => void cache.set(k, v) } } : {}) }, JudgeConfig.parse({ batchItems: c.batchItems, offlineChecks: 'never' }));
    if (!c.cache && !c.reuse) cache.clear();
    const all: Verdict[] = [];
    let calls = 0, hits = 0, pt = 0, ct = 0, pairs = 0;
    for (const s of steps) {
      const tasks = pendingJudgements(s.rollouts, checklists);
      const results = await Promise.all(tasks.map((t) => judge.judgeStep(judgeViewAt(t.rollout.messages, t.turn, t.offset), t.items, { salt: `bench/${c.name}/${t.rollout.id}/${t.variant}/${t.step}` })));
      for (const r of results) {
        all.push(...r.verdicts);
        pairs += r.verdicts.length;
        calls += r.stats.calls;
        hits += r.stats.cacheHits;
        pt += r.stats.promptTokens;
        ct += r.stats.completionTokens;
      }
    }
    verdictsOf.push(all);
    const ref = verdictsOf[0]!;
    const agree = all.filter((v, i) => v.pass === ref[i]?.pass).length / Math.max(1, all.length);
    const n = Math.max(1, steps.length);
    console.log(`| ${c.name} | ${(pairs / n).toFixed(0)} | ${(calls / n).toFixed(1)} | ${(pt / n).toFixed(0)} | ${(ct / n).toFixed(0)} | ${(hits / n).toFixed(1)} | ${(agree * 100).toFixed(1)}% |`);
  }
  await fake?.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
