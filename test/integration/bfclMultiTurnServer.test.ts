/**
 * BFCL multi-turn episodes of an endpoint against a real OpenAI-compatible server (llama.cpp's `llama-server` serving
 * SmolLM2-135M-Instruct, test/helpers/llamaServer.ts), executed and scored by the real bfcl-eval (issue 34): in
 * function-calling mode (tools in the request, `tool_calls` back, each result sent as a `tool` message with its
 * call's id, as BFCL's OpenAI handler does) and in BFCL's prompting mode (its system prompt, its text decoder, one
 * user message with a step's results). What is checked is the protocol and the loop, not a 135M model's skill.
 * Skipped without llama-server unless CM2_REQUIRE_REAL_LLM=1 (CI).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { ChatCompletionCreateParamsNonStreaming } from 'openai/resources/chat/completions';
import { BfclBridge, bfclPythonPath } from '../../src/infra/bfclBridge';
import { evaluateMultiTurnEpisodes, type MultiTurnEntry } from '../../src/stages/eval/bfcl/multiTurn';
import { bridgeBackend, bridgeFormatter, loadMultiTurnCategory } from '../../src/stages/eval/bfcl/multiTurnBridge';
import { EndpointMultiTurnPolicy } from '../../src/stages/eval/bfcl/multiTurnPolicies';
import { EndpointConfig, EndpointPolicy } from '../../src/stages/eval/bfcl/runner';
import { BfclResults } from '../../src/stages/eval/bfcl/score';
import { cm2 } from '../helpers/pipelineFixture';
import { llamaServerUnavailable, startLlamaServer, type LlamaServer } from '../helpers/llamaServer';

let server: LlamaServer | undefined;
let skip: string | undefined;
let bridge: BfclBridge;
let base: MultiTurnEntry[] = [];
// Entries with one class's functions (the file system's): a prompt of ~3.1k tokens with the functions as tools and
// ~4.5k in BFCL's prompting mode. multi_turn_base_0 (the posting API's functions too) took ~4.9k and ~8k: the
// prompting-mode episode ran out of context at its third turn, and those prefills were most of this file's time.
// The forced calls: multi_turn_base_1 (four turns), whose forced first call SmolLM2 writes as valid JSON (for
// multi_turn_base_3 and _38 it does not, and llama-server answers 500). The command: multi_turn_base_3 (two turns).
const FORCED = 'multi_turn_base_1';
const ENTRY = 'multi_turn_base_3';

before(async () => {
  skip = await llamaServerUnavailable();
  if (skip) return;
  // The ChatML template with tools and <tool_call> blocks (SmolLM2's own has none). The slot's context is capped at
  // the model's 8,192 tokens whatever is asked.
  server = await startLlamaServer({ ctxSize: 8192, parallel: 2, chatTemplateFile: path.join(__dirname, '..', 'fixtures', 'llama-server', 'chatml-tool-calls.jinja') });
  bridge = new BfclBridge({ python: bfclPythonPath() });
  base = await loadMultiTurnCategory(bridge, 'multi_turn_base', undefined, [FORCED, ENTRY]);
});

after(async () => {
  await server?.close();
  await bridge?.close();
});

const endpoint = (s: LlamaServer) => EndpointConfig.parse({ baseUrl: s.url, model: s.model, maxTokens: 96, timeoutMs: 300_000, maxTransportRetries: 1, concurrency: 2 });

test('real server, function calling: forced tool calls are executed by BFCL\'s backends and their results go back as tool messages with the calls\' ids', async (t) => {
  if (!server) return t.skip(skip ?? 'llama-server did not start');
  // As the single-turn test does: tool_choice "required" and an assistant answer begun with "<tool_call>", so that a
  // 135M model calls at all; everything else (the conversation with tool messages, decoding, BFCL's execution and
  // checker) is the production path.
  const bodies: ChatCompletionCreateParamsNonStreaming[] = [];
  class Forced extends EndpointPolicy {
    override complete(body: ChatCompletionCreateParamsNonStreaming, signal?: AbortSignal) {
      bodies.push(body);
      // Forced for the first three requests only; after them `tool_choice: "none"`, so each later request answers in
      // text and ends its turn: a 135M model left to call loops to BFCL's 20-step limit, ~20 requests of ~5k tokens
      // (4 minutes of CI's 2 cores) that check nothing more.
      if (bodies.length > 3) return super.complete({ ...body, tool_choice: 'none' }, signal);
      return super.complete({ ...body, tool_choice: 'required', messages: [...body.messages, { role: 'assistant', content: '<tool_call>' }] }, signal);
    }
  }
  const policy = new EndpointMultiTurnPolicy(new Forced(endpoint(server)), bridgeFormatter(bridge), 'fc');
  const [r] = await evaluateMultiTurnEpisodes(base.filter((e) => e.id === FORCED), policy, bridgeBackend(bridge), { sessionPrefix: 'real-fc' });
  t.diagnostic(`verdict ${r!.valid ? 'valid' : r!.bfcl}; first steps ${JSON.stringify((r!.calls as string[][][])[0]?.slice(0, 3))}`);
  const executed = (r!.calls as string[][][]).flat().filter((s) => s.length > 0);
  assert.ok(executed.length > 0, 'the model\'s calls were decoded and executed');
  const followUp = bodies.find((b) => b.messages.some((m) => m.role === 'tool'));
  assert.ok(followUp, 'a request carried tool results');
  const assistant = followUp!.messages.find((m) => m.role === 'assistant' && 'tool_calls' in m && m.tool_calls?.length) as { tool_calls: { id: string }[] };
  const toolMessage = followUp!.messages.find((m) => m.role === 'tool') as { tool_call_id: string; content: string };
  assert.equal(toolMessage.tool_call_id, assistant.tool_calls[0]!.id);
  assert.ok(toolMessage.content.length > 0);
  assert.ok(bodies.every((b) => (b.tools?.length ?? 0) === base.find((e) => e.id === FORCED)!.functions.length), 'every request offered the entry\'s functions as tools');
});

test('real server: `cm2 eval bfcl --endpoint … --ids multi_turn_base_3,simple_python_0` in both modes plays and scores every entry', async (t) => {
  if (!server) return t.skip(skip ?? 'llama-server did not start');
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-mt-real-'));
  for (const mode of ['fc', 'prompt']) {
    const out = path.join(dir, `${mode}.json`);
    const r = await cm2(['eval', 'bfcl', '--endpoint', server.url, '--model', server.model, '--ids', `${ENTRY},simple_python_0`, '--mode', mode,
      '--concurrency', '2', '--max-new-tokens', '96', '--timeout-ms', '300000', '--out', out]);
    assert.equal(r.code, 0, r.out);
    const res = BfclResults.parse(JSON.parse(readFileSync(out, 'utf8')));
    t.diagnostic(`${mode}: ${JSON.stringify(res.categories)} ${JSON.stringify(res.examples.map((e) => [e.id, e.valid, e.reason, (e.calls as unknown[]).length]))}`);
    assert.equal(res.categories['multi_turn_base']!.total, 1);
    assert.equal(res.categories['simple_python']!.total, 1);
    assert.equal(res.policy['mode'] ?? 'fc', mode, 'the results say how the endpoint was asked (fc is the default, unnamed)');
    // every turn of every entry was played (or the episode was force-terminated): nothing was skipped silently
    for (const e of res.examples.filter((x) => x.category === 'multi_turn_base')) {
      const entry = base.find((b) => b.id === e.id)!;
      assert.ok((e.calls as unknown[]).length === entry.question.length || e.bfcl === 'multi_turn:force_terminated', JSON.stringify(e));
    }
  }
});
