/**
 * The LLM roles against a real OpenAI-compatible server: llama.cpp's `llama-server` (built from source, cached per
 * machine) serving SmolLM2-135M-Instruct, not the fake of test/helpers/fakeOpenAI.ts. What is checked is the
 * protocol, not the quality of a 135M model's answers: strict structured output (the server compiles the JSON
 * schema into a grammar), `json_object`, tool definitions, native `tool_calls` (through a ChatML template with
 * `<tool_call>` blocks, test/fixtures/llama-server/; SmolLM2's own template has none), token accounting, how a
 * too-long prompt and a timeout are classified, and that every role's failures are recorded with a reason while the
 * stages go on — the filter and compressor (prepare), the annotator (checklist), the judge (RL, every item sent to
 * the LLM) and the tool simulator.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { LlmConfig } from '../../src/llm/llmConfig';
import { LlmClient } from '../../src/llm/client';
import { FILTER_JSON_SCHEMA } from '../../src/stages/prepare/llmFilter';
import { ToolEnvironment } from '../../src/stages/rl/env/toolEnv';
import { parseSimulation, SIMULATOR_SAMPLING } from '../../src/stages/rl/env/simulator';
import { generateDemoDataset } from '../../src/demo/generator';
import { connectClient } from '../../src/infra/temporal';
import { startChecklist, startPrepare, startRl } from '../../src/cli/stages';
import { FailedAnnotation } from '../../src/stages/checklist/shapes';
import { checklistKeys, runKey } from '../../src/run/layout';
import { startWorkers } from '../../src/workers';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { cm2 } from '../helpers/pipelineFixture';
import { tinyRl, writeRlFixture } from '../helpers/rlFixture';
import { EndpointConfig, EndpointPolicy, evaluateBfcl } from '../../src/stages/eval/bfcl/runner';
import type { BfclExample } from '../../src/stages/eval/bfcl/data';
import { llamaServerUnavailable, startLlamaServer, type LlamaServer } from '../helpers/llamaServer';
import { bfclDataDir } from '../../src/infra/binaries';
import { isContextLengthError, LlmFatalError, LlmRetryableError } from '../../src/llm/errors';

let server: LlamaServer | undefined;
let skip: string | undefined;

before(async () => {
  skip = await llamaServerUnavailable();
  if (!skip) server = await startLlamaServer({ ctxSize: 4096, parallel: 2 });
});
after(async () => {
  await server?.close();
});

/** The server, or a skip with the reason (never a skip in CI: CM2_REQUIRE_REAL_LLM=1 makes `before` throw). */
function real(t: { skip: (msg: string) => void }): LlamaServer | undefined {
  if (!server) t.skip(skip ?? 'llama-server did not start');
  return server;
}

const role = (s: LlamaServer, over: Record<string, unknown> = {}) => ({ baseUrl: s.url, model: s.model, maxTokens: 96, temperature: 0, timeoutMs: 300_000, ...over });

test('real server: strict json_schema output, json_object, tool definitions, token accounting; a too-long prompt is fatal, a timeout retryable', async (t) => {
  const s = real(t);
  if (!s) return;
  const logs: string[] = [];
  const client = new LlmClient(LlmConfig.parse({ roles: { filter: role(s), compressor: role(s, { structuredOutput: 'json_object' }) } }), { log: (m) => logs.push(m), env: {} });

  // json_schema: the server turns the schema into a grammar, so even a 135M model answers with exactly its shape.
  const verdict = await client.chat({
    role: 'filter',
    messages: [
      { role: 'system', content: 'You check dialogues for errors. Answer in JSON.' },
      { role: 'user', content: 'User: What is 2+2?\nAssistant: 4.\nDoes the dialogue contain an error?' },
    ],
    jsonSchema: FILTER_JSON_SCHEMA,
  });
  const parsed = z.object({ Reasoning: z.string(), NoError: z.boolean() }).strict().parse(JSON.parse(verdict.text));
  assert.equal(typeof parsed.NoError, 'boolean');
  assert.ok(verdict.usage.promptTokens > 20 && verdict.usage.completionTokens > 0, JSON.stringify(verdict.usage));
  assert.equal(verdict.usage.calls, 1);
  assert.deepEqual(logs, [], 'no parameter was rejected by the server');

  // json_object: any JSON object.
  const obj = await client.chat({ role: 'compressor', messages: [{ role: 'user', content: 'Reply with a JSON object with a key "a" set to 1.' }], jsonSchema: FILTER_JSON_SCHEMA });
  assert.equal(typeof JSON.parse(obj.text), 'object');
  const totals = client.usageTotals();
  assert.equal(totals.filter.calls, 1);
  assert.equal(totals.compressor.calls, 1);
  assert.equal(totals.filter.promptTokens, verdict.usage.promptTokens);

  // Tool definitions are accepted (200, an OpenAI chat.completion). SmolLM2's GGUF chat template has no tool-call
  // format, so llama-server answers in content even with tool_choice "required"; `tool_calls` parsing on a real
  // server needs a tool-capable template or model (BFCL below shows `no_call`). Tried: a ChatML template of our own
  // with `<tool_call>{"name", "arguments"}</tool_call>` blocks (`--chat-template-file`) makes llama-server's
  // autoparser find the format (JSON_NATIVE) and constrain tool_choice "required" with a grammar, but that grammar
  // lets free text precede the calls, and the 135M model talks on without reaching one, with or without a few-shot
  // call earlier in the dialogue.
  const wire = await fetch(`${s.url}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: s.model, temperature: 0, max_tokens: 48, tool_choice: 'required',
      messages: [{ role: 'user', content: 'What is the weather in Oslo?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', description: 'Current weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }],
    }),
  });
  assert.equal(wire.status, 200, await wire.clone().text());
  const answer = z.object({
    object: z.literal('chat.completion'),
    choices: z.array(z.object({ message: z.object({ role: z.literal('assistant'), content: z.string().nullable().optional(), tool_calls: z.array(z.object({ function: z.object({ name: z.string(), arguments: z.string() }) })).optional() }) })).min(1),
    usage: z.object({ prompt_tokens: z.number().positive(), completion_tokens: z.number().positive() }),
  }).parse(await wire.json());
  t.diagnostic(`tools: ${answer.choices[0]!.message.tool_calls ? `tool_calls ${JSON.stringify(answer.choices[0]!.message.tool_calls)}` : 'answered in content'}`);

  // A prompt longer than the slot's context: the server answers 400, which no retry can fix.
  const long = 'word '.repeat(9000);
  await assert.rejects(client.chat({ role: 'filter', messages: [{ role: 'user', content: long }] }), (e: unknown) => {
    assert.ok(e instanceof LlmFatalError, String(e));
    assert.equal(e.status, 400);
    assert.match(e.message, /context/i);
    assert.ok(isContextLengthError(e), `an evaluation records this as prompt_too_long: ${e.message}`);
    return true;
  });

  // A timeout shorter than any generation: retryable (Temporal retries the activity), classified as such.
  const hurried = new LlmClient(LlmConfig.parse({ roles: { filter: role(s, { timeoutMs: 5, maxTransportRetries: 0, maxTokens: 200 }) } }), { log: () => undefined, env: {} });
  await assert.rejects(hurried.chat({ role: 'filter', messages: [{ role: 'user', content: 'Write a long story about a cat.' }] }), (e: unknown) => {
    assert.ok(e instanceof LlmRetryableError, String(e));
    assert.equal(e.kind, 'timeout');
    return true;
  });
});

test('real server: the tool simulator answers a call that is neither replayed nor executable, with its usage', async (t) => {
  const s = real(t);
  if (!s) return;
  const [ex] = generateDemoDataset({ seed: 5, count: 1, brokenRate: 0 });
  // The request is schema-constrained (json_schema: llama-server compiles SIMULATION_JSON_SCHEMA into a grammar), so an
  // answer that ends is JSON of that shape. Two ways a 135M model still gives an answer parseSimulation refuses: an
  // analysis that runs past max_tokens (cut JSON), and `"execution_result": {}` (the grammar has no minProperties).
  // Hence room for the answer and the production path's bounded parse retries at the reference simulator's sampling
  // temperature (at temperature 0 a retry would repeat the same answer). What is checked: the answer came from the
  // server and parsed, within those attempts — a failed simulation fails the test. Three attempts were not enough: on
  // 2026-11-27 one CI run of two got three unparseable answers (a cut analysis twice, an empty execution_result once).
  const attempts = 6;
  const llm = new LlmClient(LlmConfig.parse({ roles: { simulator: role(s, { maxTokens: 400, temperature: SIMULATOR_SAMPLING.temperature, maxParseAttempts: attempts }) } }), { log: () => undefined, env: {} });
  const answers: string[] = [];
  const ask = llm.chat.bind(llm);
  llm.chat = async (req) => {
    const res = await ask(req);
    answers.push(res.text);
    return res;
  };
  const env = new ToolEnvironment([ex!], { llm });
  const tool = (ex!.tools[0] as { function: { name: string; parameters?: { required?: string[]; properties?: Record<string, { type?: string }> } } }).function;
  const required = tool.parameters?.required ?? [];
  const props = tool.parameters?.properties ?? {};
  const args = Object.fromEntries(required.map((k) => [k, props[k]?.type === 'integer' || props[k]?.type === 'number' ? 7 : 'zz-unrecorded']));
  const result = await env.execute(ex!.uuid, tool.name, args, { salt: 'real-sim-1' });
  t.diagnostic(`simulator: ${result.source} after ${answers.length} answer(s): ${result.text.slice(0, 160)}`);
  const seen = answers.map((a, i) => `answer ${i + 1}: ${a.slice(0, 400)}`).join('\n');
  assert.equal(result.source, 'simulated', `the simulator's answer was obtained and parsed: ${result.text}\n${seen}`);
  assert.equal(result.success, true);
  // The tool text is the answer's execution_result: a non-empty object or an array, taken from the last answer.
  const value: unknown = JSON.parse(result.text);
  assert.ok(Array.isArray(value) || (typeof value === 'object' && value !== null && Object.keys(value).length > 0), result.text);
  assert.ok(answers.length >= 1 && answers.length <= attempts, seen);
  const last = parseSimulation(answers[answers.length - 1]!);
  assert.ok(last.ok && last.value === result.text, `the result is the server's last answer: ${seen}`);
  assert.equal(result.usage?.calls, answers.length, JSON.stringify(result.usage));
  assert.ok((result.usage?.promptTokens ?? 0) > 0 && (result.usage?.completionTokens ?? 0) > 0, JSON.stringify(result.usage));
});

test('real server: prepare (filter, compressor) and checklist (annotator) stages on Temporal + MinIO record every failure with its reason', async (t) => {
  const s = real(t);
  if (!s) return;
  const cfg = testConfig(uniqueId('realllm'), {
    // 3 examples in 2 shards; one parse attempt per call (the 135M filter's answers mostly fail to parse: with the
    // default 3 attempts and 6 examples this test took ~8 minutes of CI's 2 cores). Retries of unparseable answers are
    // tested on the fake endpoint (llmClient.test.ts); here the protocol and the failure records.
    data: { source: { kind: 'demo', count: 3, seed: 31, brokenRate: 0 }, shardSize: 2, llmFilter: { enabled: true, cascade: { passes: [{ effort: 'low' }] } }, split: { seed: 42, coldStart: 0.5 } },
    // minAnnotated 0: a 135M annotator may fail every example; this test is about each failure recorded with its reason
    // (the floor that stops a real run with nothing annotated is tested in floors.test.ts).
    checklist: { variants: 1, shardSize: 2, maxAttempts: 1, minAnnotated: 0 },
    llm: { roles: { filter: role(s, { maxTokens: 128, maxParseAttempts: 1 }), compressor: role(s, { maxTokens: 128, maxParseAttempts: 1 }), annotator: role(s, { maxTokens: 256, maxParseAttempts: 1 }) } },
  });
  const store = testStore(cfg);
  const workers = await startWorkers(cfg);
  try {
    const client = await connectClient(cfg);
    const prepared = await (await startPrepare(client, cfg)).result();
    const filterStep = prepared.steps.find((x) => /llm/i.test(x.name));
    assert.ok(filterStep, `an LLM filter step: ${prepared.steps.map((x) => x.name).join(', ')}`);
    assert.ok(filterStep.usage.calls >= 1 && filterStep.usage.promptTokens > 0, JSON.stringify(filterStep.usage));
    // Every example accounted for; an example whose LLM call failed for good counts as dropped, its reason recorded.
    for (const st of prepared.steps) {
      assert.equal(st.in, st.kept + st.dropped, `${st.name}: ${JSON.stringify(st)}`);
      assert.ok(st.failed <= st.dropped, `${st.name}: ${JSON.stringify(st)}`);
      if (st.failed > 0) assert.ok(Object.keys(st.reasons).length > 0, `${st.name}: failures have reasons`);
    }
    assert.ok(prepared.usage.calls >= filterStep.usage.calls);
    t.diagnostic(`prepare: ${prepared.steps.map((x) => `${x.name} in ${x.in} kept ${x.kept} failed ${x.failed} ${JSON.stringify(x.reasons)}`).join('; ')}`);

    // The annotator on examples of its own (the 135M filter may have dropped every example above).
    await store.putJsonl(runKey(cfg.run.id, 'data', 'rl.jsonl'), generateDemoDataset({ seed: 32, count: 2, brokenRate: 0 }));
    const report = await (await startChecklist(client, cfg)).result();
    assert.equal(report.total, 2);
    t.diagnostic(`checklist: ${report.annotated}/${report.total} annotated, reasons ${JSON.stringify(report.failureReasons)}, usage ${JSON.stringify(report.usage)}`);
    assert.equal(report.annotated + report.failed, report.total);
    assert.ok(report.usage.calls >= report.total && report.usage.promptTokens > 0, JSON.stringify(report.usage));
    const reasons = Object.keys(report.failureReasons);
    assert.equal(reasons.length > 0, report.failed > 0);
    const rl = await store.getJsonl(runKey(cfg.run.id, 'data', 'rl.jsonl'));
    for (const ex of rl as { uuid: string }[]) {
      if (await store.exists(checklistKeys.failedExample(cfg.run.id, ex.uuid))) {
        const rec = await store.getJson(checklistKeys.failedExample(cfg.run.id, ex.uuid), FailedAnnotation);
        assert.ok(rec.reason.length > 0 && rec.usage.calls >= 1, 'a failed example keeps its reason and what it cost');
      }
    }
  } finally {
    await workers.shutdown();
  }
});

test('real server: RL with every checklist item judged by the LLM — the judge is called, tokens counted, the step recorded', async (t) => {
  const s = real(t);
  if (!s) return;
  const cfg = testConfig(uniqueId('realjudge'), {
    rl: tinyRl({ steps: 1, promptsPerStep: 1, groupSize: 2, eval: { prompts: 0 }, judge: { offlineChecks: 'never', batchItems: 4, concurrency: 2 } }),
    llm: { roles: { judge: role(s, { maxTokens: 200, maxParseAttempts: 1 }) } },
    temporal: { activity: { heartbeatTimeout: '60s', maxRetryInterval: '1s' } },
  });
  const store = testStore(cfg);
  await writeRlFixture(cfg, store, 4);
  const workers = await startWorkers(cfg);
  try {
    const result = await (await startRl(await connectClient(cfg), cfg)).result();
    assert.equal(result.steps, 1);
    const rows = (await store.getJsonl(runKey(cfg.run.id, 'rl', 'metrics.jsonl'))) as { kind: string; judge: { calls: number; failed: number; promptTokens: number; completionTokens: number } }[];
    const step = rows.find((r) => r.kind === 'step');
    assert.ok(step, 'step 1 recorded');
    t.diagnostic(`judge: ${JSON.stringify(step.judge)}`);
    assert.ok(step.judge.calls >= 1, JSON.stringify(step.judge));
    assert.ok(step.judge.promptTokens > 0 && step.judge.completionTokens > 0, JSON.stringify(step.judge));
  } finally {
    await workers.shutdown();
  }
});

test('real server: `cm2 eval bfcl --endpoint` sends tool definitions and scores what comes back', async (t) => {
  const s = real(t);
  if (!s) return;
  const out = path.join(mkdtempSync(path.join(tmpdir(), 'cm2-bfcl-real-')), 'bfcl.json');
  const r = await cm2(['eval', 'bfcl', '--endpoint', s.url, '--model', s.model, '--category', 'simple_python,irrelevance', '--limit', '3', '--out', out,
    // Two requests at a time for the server's two slots, each bounded (a 135M model may talk to the end of its context).
    '--concurrency', '2', '--max-new-tokens', '160', '--timeout-ms', '300000']);
  assert.equal(r.code, 0, r.out);
  const res = JSON.parse(readFileSync(out, 'utf8')) as { categories: Record<string, { total: number; correct: number }>; examples?: unknown[] };
  assert.deepEqual(Object.keys(res.categories).sort(), ['irrelevance', 'simple_python']);
  t.diagnostic(`bfcl: ${JSON.stringify(res.categories)}`);
  for (const c of Object.values(res.categories)) assert.equal(c.total, 3);
  assert.match(r.out, /simple_python/);
});

test('real server: native tool_calls from a tool-call chat template are decoded and scored by the BFCL endpoint policy', async (t) => {
  if (!server) {
    t.skip(skip ?? 'llama-server did not start');
    return;
  }
  // A second server with a ChatML template that renders tools and <tool_call>{"name", "arguments"}</tool_call>
  // blocks: llama-server's autoparser then recognises the format, constrains tool_choice "required" with a grammar
  // and returns what the model wrote as OpenAI `tool_calls`. That grammar still lets text come first, and a 135M
  // model talks on, so the request also starts the assistant's answer with "<tool_call>" (a prefilled assistant
  // message, which llama-server continues). Everything after the request — the SDK's response, EndpointPolicy's
  // reading of `tool_calls`, argument decoding and the BFCL checker — is the production path.
  const templateFile = path.join(__dirname, '..', 'fixtures', 'llama-server', 'chatml-tool-calls.jinja');
  const tools = await startLlamaServer({ ctxSize: 4096, parallel: 1, chatTemplateFile: templateFile });
  try {
    class ForcedCalls extends EndpointPolicy {
      override requestOf(example: BfclExample): ReturnType<EndpointPolicy['requestOf']> {
        const body = super.requestOf(example);
        return { ...body, tool_choice: 'required', messages: [...body.messages, { role: 'assistant', content: '<tool_call>' }] };
      }
    }
    const policy = new ForcedCalls(EndpointConfig.parse({ baseUrl: tools.url, model: tools.model, maxTokens: 160, timeoutMs: 120_000, maxTransportRetries: 1, concurrency: 1 }));
    const res = await evaluateBfcl(policy, { categories: ['simple_python'], limit: 3, dataDir: bfclDataDir() });
    const examples = res.examples;
    t.diagnostic(`tool_calls: ${JSON.stringify(examples.map((e) => ({ id: e.id, calls: e.calls, valid: e.valid, reason: e.reason })))}`);
    assert.equal(examples.length, 3);
    // Every answer came back as native calls of a tool the example offered, with arguments that decode as a JSON
    // object (the BFCL checker then judges them: a 135M model's correctness is not the point; measured here, it
    // calls the right function with the right arguments, twice, which BFCL's simple category scores wrong_count).
    for (const e of examples) {
      const calls = (e.calls ?? []) as Record<string, unknown>[];
      assert.ok(calls.length >= 1, `${e.id}: no tool_calls decoded (${JSON.stringify(e)})`);
      for (const call of calls) {
        const [name, args] = Object.entries(call)[0]!;
        assert.ok(name.length > 0 && typeof args === 'object' && args !== null && !Array.isArray(args), `${e.id}: ${JSON.stringify(call)}`);
      }
      assert.notEqual(e.reason, 'decode_error', `${e.id}: ${JSON.stringify(e)}`);
    }
    assert.equal(res.categories['simple_python']!.total, 3);
  } finally {
    await tools.close();
  }
});
