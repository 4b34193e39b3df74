/**
 * BFCL-V4 multi-turn (issue 34) against the real bfcl-eval (PyPI, scripts/ensure-bfcl.mjs: made here when missing):
 * its backends execute the episodes' calls and its checker scores them, through the bridge process
 * (src/infra/bfclBridge.ts); the cross-check compares cm2's verdicts with bfcl-eval's own file-level runner in a
 * process of its own (python/bfcl_bridge/crosscheck.py) on a sample of every category and every perturbation kind
 * (bench/bfcl-multi-turn-crosscheck.ts runs the whole set).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { BfclBridge, BfclBridgeError, bfclPythonPath } from '../../src/infra/bfclBridge';
import { MULTI_TURN_CATEGORIES, evaluateMultiTurnEpisodes, ReferenceMultiTurnPolicy, runEpisode, scoreMultiTurnAnswers, type MultiTurnEntry, type MultiTurnPolicy } from '../../src/stages/eval/bfcl/multiTurn';
import { bridgeBackend, bridgeFormatter, bridgeInfo, loadMultiTurnCategory } from '../../src/stages/eval/bfcl/multiTurnBridge';
import { ModelMultiTurnPolicy } from '../../src/stages/eval/bfcl/multiTurnPolicies';
import { parsePyJson, stringifyPyJson, type PyValue } from '../../src/stages/eval/bfcl/pyValue';
import { loadChatTokenizer } from '../../src/chat/tokenize';
import type { EngineRequest, TokenEngine } from '../../src/llm/engine';
import { BfclResults } from '../../src/stages/eval/bfcl/score';
import { bfclVerdicts, crossCheckRows, perturb, PERTURBATIONS } from '../helpers/multiTurnCrossCheck';
import { REPO } from '../helpers/paths';
import { bfclDataDir } from '../../src/infra/binaries';
import { loadCategory } from '../../src/stages/eval/bfcl/runner';
import { referenceCalls } from '../../src/stages/eval/bfcl/reference';
import { scoreExample } from '../../src/stages/eval/bfcl/score';

const exec = promisify(execFile);
let python: string;
let bridge: BfclBridge;
const entries = new Map<string, MultiTurnEntry[]>();

before(async () => {
  python = bfclPythonPath();
  bridge = new BfclBridge({ python });
  for (const c of MULTI_TURN_CATEGORIES) entries.set(c, await loadMultiTurnCategory(bridge, c));
});

after(async () => {
  await bridge?.close();
});

const cli = (args: string[]) => exec(process.execPath, [path.join(REPO, 'bin', 'cm2.js'), 'eval', 'bfcl', ...args], { cwd: REPO, maxBuffer: 64 * 1024 * 1024, env: { ...process.env, CM2_BFCL_PYTHON: python } });

test('the data is bfcl-eval\'s own: 200 entries per category, miss_func turns offer held-back functions', async () => {
  const info = await bridgeInfo(bridge);
  assert.match(info.bfclEval, /^\d{4}\.\d+\.\d+$/);
  for (const c of MULTI_TURN_CATEGORIES) assert.equal(entries.get(c)!.length, 200, c);
  const missFunc = entries.get('multi_turn_miss_func')!;
  for (const e of missFunc) {
    const turns = Object.keys(e.missedFunctions);
    assert.ok(turns.length > 0, e.id);
    for (const t of turns) {
      assert.equal(e.question[Number(t)]!.length, 0, `${e.id}: the data's turn ${t} is empty (the harness writes it)`);
      for (const f of e.missedFunctions[t]!) assert.ok(!e.functions.some((g) => g.name === f.name), `${e.id}: ${f.name} is held back`);
    }
  }
});

test('cm2 eval bfcl --policy reference plays every multi-turn entry through BFCL\'s backends and scores it ≥ 98%', async () => {
  const out = path.join(mkdtempSync(path.join(tmpdir(), 'cm2-mt-')), 'ref.json');
  const { stdout } = await cli(['--policy', 'reference', '--category', 'multi_turn', '--out', out]);
  const results = BfclResults.parse(JSON.parse(readFileSync(out, 'utf8')));
  assert.deepEqual(Object.keys(results.categories), [...MULTI_TURN_CATEGORIES]);
  for (const c of MULTI_TURN_CATEGORIES) assert.ok(results.categories[c]!.accuracy >= 0.98, `${c}: ${results.categories[c]!.accuracy}`);
  assert.equal(results.overall.total, 800);
  assert.ok(results.multiTurn?.bfclEval);
  assert.match(stdout, /multi_turn_long_context\s+100\.0%/);
});

test('--ids: only the named multi-turn entries (their categories from the ids, in BFCL\'s order); a missing id is an error naming the category', async () => {
  const out = path.join(mkdtempSync(path.join(tmpdir(), 'cm2-mt-')), 'ids.json');
  await cli(['--policy', 'reference', '--ids', 'multi_turn_miss_param_7,multi_turn_base_3,multi_turn_base_1', '--out', out]);
  const results = BfclResults.parse(JSON.parse(readFileSync(out, 'utf8')));
  assert.deepEqual(results.examples.map((e) => e.id), ['multi_turn_miss_param_7', 'multi_turn_base_1', 'multi_turn_base_3']);
  assert.deepEqual(Object.keys(results.categories), ['multi_turn_miss_param', 'multi_turn_base']);
  assert.deepEqual(results.ids, ['multi_turn_miss_param_7', 'multi_turn_base_3', 'multi_turn_base_1']);
  await assert.rejects(cli(['--policy', 'reference', '--ids', 'multi_turn_base_3,multi_turn_base_999']), /bfcl-eval's multi_turn_base has no example multi_turn_base_999/);
});

test('cross-check: cm2\'s verdicts equal bfcl-eval\'s own runner on ground truth and every perturbation kind (a sample of each category)', async () => {
  const sample = MULTI_TURN_CATEGORIES.flatMap((c) => entries.get(c)!.filter((_, i) => i % 20 === 0)); // 10 per category
  const backend = bridgeBackend(bridge);
  let compared = 0;
  const failedKinds = new Set<string>();
  for (const kind of PERTURBATIONS) {
    const rows = crossCheckRows(sample, [kind]);
    if (rows.length === 0) continue;
    const theirs = bfclVerdicts(python, rows);
    const byId = new Map(sample.map((e) => [e.id, e]));
    const ours = await scoreMultiTurnAnswers(rows.map((r) => byId.get(r.id)!), new Map(rows.map((r) => [r.id, r.result])), backend);
    for (const r of ours) {
      compared++;
      assert.equal(r.valid, theirs[r.id]!.valid, `${kind} ${r.id}: cm2 ${r.valid ? 'valid' : r.bfcl}, bfcl-eval ${theirs[r.id]!.valid ? 'valid' : theirs[r.id]!.error_type}`);
      if (!r.valid) {
        assert.equal(r.bfcl, theirs[r.id]!.error_type, `${kind} ${r.id}`);
        failedKinds.add(kind);
      }
    }
    if (kind === 'truth') assert.ok(ours.every((r) => r.valid), 'ground truth passes');
  }
  assert.ok(compared > 250, `${compared} rows compared`);
  for (const kind of ['drop_last_call', 'empty_turn', 'fewer_turns', 'changed_argument']) assert.ok(failedKinds.has(kind), `${kind} fails some entries`);
});

test('a long-lived bridge keeps entries apart: the same entry checked again after a failing answer, and episodes interleaved, give fresh verdicts', async () => {
  const backend = bridgeBackend(bridge);
  const e = entries.get('multi_turn_base')![3]!;
  const truth = perturb(e, 'truth')!;
  const wrong = perturb(e, 'drop_last_call')!;
  assert.equal((await backend.check(e.id, truth)).valid, true);
  assert.equal((await backend.check(e.id, wrong)).valid, false);
  assert.equal((await backend.check(e.id, truth)).valid, true);
  // two episodes of the same entry at once (two sessions): each executes against its own backends
  const policy = new ReferenceMultiTurnPolicy();
  const [a, b] = await Promise.all([runEpisode(e, policy, backend, 'iso-a'), runEpisode(e, policy, backend, 'iso-b')]);
  assert.deepEqual(a.result, b.result);
  const toolsA = a.messages.filter((m) => m.role === 'tool').map((m) => m.content);
  const toolsB = b.messages.filter((m) => m.role === 'tool').map((m) => m.content);
  assert.deepEqual(toolsA, toolsB, 'the same results: neither session saw the other\'s state');
  assert.ok(!toolsA.some((t) => t.startsWith('Error during execution')), toolsA.join('\n'));
});

test('an episode follows BFCL\'s loop: a step without calls ends the turn, more than 20 steps force-terminate the entry', async () => {
  const backend = bridgeBackend(bridge);
  const e = entries.get('multi_turn_base')![0]!;
  const looping: MultiTurnPolicy = {
    description: { kind: 'loop' },
    turnMessages: (_v, data) => [...data],
    answer: async () => ({ text: 'ls()', calls: ['ls()'] }),
  };
  const [r] = await evaluateMultiTurnEpisodes([e], looping, backend);
  assert.equal(r!.valid, false);
  assert.equal(r!.bfcl, 'multi_turn:force_terminated');
  assert.equal((r!.calls as unknown[]).length, 1, 'the episode ended in its first turn');
  assert.equal(((r!.calls as unknown[][])[0]!).length, 21, '21 steps, then the force-quit');
  const silent: MultiTurnPolicy = { description: { kind: 'silent' }, turnMessages: (_v, d) => [...d], answer: async () => ({ text: 'I cannot.', calls: null, decodeError: 'no calls' }) };
  const [s] = await evaluateMultiTurnEpisodes([e], silent, backend);
  assert.equal(s!.bfcl, 'multi_turn:empty_turn_model_response');
  assert.deepEqual(s!.calls, e.question.map(() => [[]]));
});

test('a bridge that dies is started again on the next request; the request it was serving fails with the reason', async () => {
  const own = new BfclBridge({ python });
  try {
    await bridgeInfo(own);
    const gen = own.generation;
    const pending = own.request('load', { category: 'multi_turn_long_context' });
    (own as unknown as { child: { kill: (s: string) => void } }).child.kill('SIGKILL');
    await assert.rejects(pending, (e: Error) => e instanceof BfclBridgeError && /exited/.test(e.message));
    const info = await bridgeInfo(own);
    assert.ok(info.bfclEval);
    assert.equal(own.generation, gen + 1);
    // a request the bridge refuses is an error answer, and the process lives on
    await assert.rejects(own.request('execute', { session: 'nope', calls: ['ls()'] }), /no open session/);
    assert.ok((await bridgeInfo(own)).bfclEval);
  } finally {
    await own.close();
  }
});

test('--answers: BFCL\'s decoded multi-turn rows are scored; a malformed row names file, line and field; a missing id is no_answer', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-mt-answers-'));
  const base = entries.get('multi_turn_base')!;
  const rows = [
    { id: base[0]!.id, result: perturb(base[0]!, 'truth') },
    { id: base[1]!.id, result: perturb(base[1]!, 'drop_last_call') },
  ];
  const good = path.join(dir, 'good.jsonl');
  writeFileSync(good, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  const out = path.join(dir, 'scored.json');
  await cli(['--answers', good, '--category', 'multi_turn_base', '--limit', '3', '--out', out]);
  const results = BfclResults.parse(JSON.parse(readFileSync(out, 'utf8')));
  assert.deepEqual(results.examples.map((x) => [x.id, x.valid, x.reason]), [
    [base[0]!.id, true, undefined],
    [base[1]!.id, false, results.examples[1]!.reason],
    [base[2]!.id, false, 'no_answer'],
  ]);
  assert.match(results.examples[1]!.bfcl!, /^multi_turn:/);
  const bad = path.join(dir, 'bad.jsonl');
  writeFileSync(bad, `${JSON.stringify(rows[0])}\n${JSON.stringify({ id: base[1]!.id, result: [[['ls()']], [[3]]] })}\n`);
  await assert.rejects(cli(['--answers', bad, '--category', 'multi_turn_base', '--limit', '2']), (e: { stderr: string; code: number }) => {
    assert.equal(e.code, 2);
    assert.match(e.stderr, new RegExp(`${bad.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}:2: result\\[1\\]\\[0\\]\\[0\\]: a call is a string`));
    return true;
  });
});

test('the checkpoint path: a model that writes the ground truth\'s calls as <tool_call> blocks scores as the reference does (template, decoding, BFCL\'s call strings, shared batches)', async () => {
  const tok = loadChatTokenizer(path.join(REPO, 'assets', 'demo-tokenizer'));
  // The categories share conversations (base_0 and miss_param_0 begin alike): one category at a time, entries known by their first user message.
  const byFirstUser = new Map<string, MultiTurnEntry>();
  // The ground truth's calls as JSON tool calls (positional arguments named by the function's parameter order).
  const callsJson = async (entry: MultiTurnEntry, calls: readonly string[]): Promise<string> => {
    const parsed = (await bridge.request<{ calls: { name: string; kwargs_json: string; positional_json: string }[] }>('parse_calls', { calls })).calls;
    const docs = [...entry.functions, ...Object.values(entry.missedFunctions).flat()];
    return parsed.map((c) => {
      const args = parsePyJson(c.kwargs_json) as Record<string, PyValue>;
      const names = Object.keys(docs.find((d) => d.name === c.name)?.parameters.properties ?? {});
      (parsePyJson(c.positional_json) as PyValue[]).forEach((v, k) => (args[names[k]!] = v));
      return `<tool_call>\n{"name": "${c.name}", "arguments": ${stringifyPyJson(args)}}\n</tool_call>`;
    }).join('\n');
  };
  const batches: number[] = [];
  const imEnd = tok.encode('<|im_end|>');
  const engine: TokenEngine = {
    counts: { prefilled: 0, reused: 0, shared: 0, decoded: 0 },
    dispose: () => undefined,
    decode: async (reqs: readonly EngineRequest[]) => {
      batches.push(reqs.length);
      const tokens = await Promise.all(reqs.map(async (r) => {
        const text = tok.decode(r.tokens);
        // which entry: its first user message; which turn: user messages that are not tool responses; answered yet: a tool response after the last of them
        const users = [...text.matchAll(/<\|im_start\|>user\n([\s\S]*?)<\|im_end\|>/g)].map((m) => m[1]!);
        const turnUsers = users.filter((u) => !u.startsWith('<tool_response>'));
        const entry = byFirstUser.get(turnUsers[0]!)!;
        const answered = !users[users.length - 1]!.startsWith('<tool_response>') ? false : true;
        const calls = entry.groundTruth[turnUsers.length - 1] ?? [];
        const out = answered || calls.length === 0 ? 'Done.' : await callsJson(entry, calls);
        return [...tok.encode(out), ...imEnd];
      }));
      return { tokens, finished: tokens.map(() => true), logprobs: tokens.map((t) => t.map(() => 0)) };
    },
  };
  const policy = new ModelMultiTurnPolicy(engine, tok, { kind: 'scripted' }, bridgeFormatter(bridge), { maxNewTokens: 512, batchSize: 8, maxPromptTokens: 1_000_000 });
  const results = [];
  for (const c of MULTI_TURN_CATEGORIES) {
    const sample = entries.get(c)!.slice(0, 6);
    byFirstUser.clear();
    for (const e of sample) byFirstUser.set(e.question[0]!.find((m) => m.role === 'user')!.content, e);
    assert.equal(byFirstUser.size, sample.length);
    results.push(...(await evaluateMultiTurnEpisodes(sample, policy, bridgeBackend(bridge), { concurrency: 8, sessionPrefix: 'scripted' })));
  }
  const failed = results.filter((r) => !r.valid);
  assert.ok(failed.length <= 1, failed.map((r) => `${r.id}: ${r.bfcl} ${r.detail?.slice(0, 300)}`).join('\n'));
  assert.ok(Math.max(...batches) > 1, `episodes shared generation batches (${batches.join(',')})`);
});

test('prompting mode, single-turn: every reference answer written as BFCL\'s call text, parsed by bfcl-eval\'s decoder, scores correct in cm2\'s checker', async () => {
  const formatter = bridgeFormatter(bridge);
  for (const category of ['simple_python', 'multiple', 'parallel', 'parallel_multiple']) {
    const examples = loadCategory(bfclDataDir(), category, 40);
    for (const example of examples) {
      const calls = await formatter.toCalls(referenceCalls(example));
      const text = `[${calls.join(', ')}]`;
      const decoded = await formatter.decodeAst(text, 'python');
      const verdict = scoreExample(example, decoded);
      assert.ok(verdict.valid, `${example.id}: ${text} → ${JSON.stringify(decoded)}: ${verdict.reason} ${verdict.detail}`);
    }
    // BFCL's own system prompt, with the function docs as bfcl-eval loads them
    const messages = await formatter.promptMessages(examples[0]!.id);
    assert.equal(messages[0]!.role, 'system');
    assert.match(messages[0]!.content, /You are an expert in composing functions/);
    assert.ok(messages[0]!.content.includes(examples[0]!.functions[0]!.name));
  }
  const bad = await formatter.decodeAst('I would call the weather tool.', 'python');
  assert.ok(bad.error, 'a text that is not a call list does not decode');
});
