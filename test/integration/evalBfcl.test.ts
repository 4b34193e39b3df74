/**
 * BFCL evaluation end to end, against the real MinIO of the test run:
 * - an OpenAI-compatible endpoint with native tool calls (a local fake) through the `evalBfcl` activity: requests
 *   carry the tools as JSON schema and the key from the environment, answers are scored, results land in S3, a
 *   transient 503 is retried, a repeated activity is not evaluated twice, the key is never recorded;
 * - a text-only endpoint (test/helpers/fakeOpenAI.ts): no calls → irrelevance correct, AST categories `no_call`;
 * - the project's model: a tiny checkpoint through `cm2 eval bfcl --policy DIR` and `--policy s3://…`, and through
 *   the activity as an SFT folder and as an RL checkpoint. The score of a random tiny model is whatever it is; the
 *   run must complete and produce the results document.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createEvalActivities } from '../../src/stages/eval/activities';
import { type EvalBfclInput, type EvalBfclSummary } from '../../src/stages/eval/shapes';
import { loadChatTokenizer } from '../../src/chat/tokenize';
import { stringifyPyJson } from '../../src/stages/eval/bfcl/pyValue';
import { referenceCalls } from '../../src/stages/eval/bfcl/reference';
import { loadCategory } from '../../src/stages/eval/bfcl/runner';
import { BfclResults } from '../../src/stages/eval/bfcl/score';
import { writeCheckpoint } from '../../src/storage/checkpoints';
import { runKey } from '../../src/run/layout';
import { saveHfCheckpoint } from '../../src/model/formats/checkpoint';
import { parseQwenConfig } from '../../src/model/net/qwenConfig';
import { QwenModel } from '../../src/model/net/qwen';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { replies, startFakeOpenAI } from '../helpers/fakeOpenAI';
import { writeConfigFile } from '../helpers/processes';
import { TINY_POLICY } from '../helpers/rlFixture';
import { serializeSafetensors } from '../../src/model/formats/safetensorsWrite';
import { bfclDataDir } from '../../src/infra/binaries';

const root = path.resolve(__dirname, '..', '..');
const run = promisify(execFile);
const quiet = () => undefined;

interface ToolCallRequest {
  body: { model: string; messages: { role: string; content: string }[]; tools?: { type: string; function: { name: string; parameters: { type: string } } }[]; temperature?: number };
  authorization: string | undefined;
}

/** An OpenAI-compatible endpoint answering with native tool calls chosen by `answer` (null → a text answer). */
async function startToolCallingEndpoint(answer: (req: ToolCallRequest, n: number) => { status?: number; calls?: { name: string; arguments: string }[] | null }) {
  const requests: ToolCallRequest[] = [];
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString()));
    req.on('end', () => {
      const r: ToolCallRequest = { body: JSON.parse(raw) as ToolCallRequest['body'], authorization: req.headers.authorization };
      requests.push(r);
      const a = answer(r, requests.length);
      if (a.status) {
        res.writeHead(a.status, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'overloaded', type: 'server_error', param: null, code: null } }));
        return;
      }
      const toolCalls = a.calls?.map((c, i) => ({ id: `call_${i}`, type: 'function', function: c }));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({
        id: `chatcmpl-${requests.length}`, object: 'chat.completion', created: 0, model: r.body.model,
        choices: [{ index: 0, message: { role: 'assistant', content: toolCalls ? null : 'None of the functions fits.', ...(toolCalls ? { tool_calls: toolCalls } : {}), refusal: null }, finish_reason: toolCalls ? 'tool_calls' : 'stop', logprobs: null }],
        usage: { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120 },
      }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/v1`, requests, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

/** A tiny random Qwen3 policy sized to the demo tokenizer. */
function tinyModel(): QwenModel {
  const tok = loadChatTokenizer(path.join(root, 'assets', 'demo-tokenizer'));
  return QwenModel.init(parseQwenConfig({ vocab_size: tok.vocabSize, eos_token_id: tok.special.imEnd, ...TINY_POLICY }), 3);
}

describe('evalBfcl', () => {
  const cfg = testConfig(uniqueId('bfcl'));
  const store = testStore(cfg);
  const activities = createEvalActivities({ store, log: quiet });
  const dataDir = bfclDataDir();
  /** Runs the activity in an activity context (heartbeats go to `env`). */
  const evalBfcl = (input: EvalBfclInput, env = new MockActivityEnvironment()): Promise<EvalBfclSummary> =>
    env.run(activities.evalBfcl as (i: EvalBfclInput) => Promise<EvalBfclSummary>, input);
  const key = 'BFCL_EVAL_TEST_KEY';
  const secret = `sk-test-${uniqueId('secret')}`;
  before(() => {
    process.env[key] = secret;
  });
  after(() => {
    delete process.env[key];
  });

  test('an OpenAI-compatible endpoint with native tool calls, through the activity; results in S3', async () => {
    const categories = ['simple_python', 'simple_java', 'multiple', 'parallel', 'irrelevance'];
    // The endpoint answers each question with the example's reference calls (tool names as it was sent them),
    // except simple_python_1, answered with a wrong value, and the very first request, answered with a 503.
    const byQuestion = new Map<string, { name: string; arguments: string }[] | null>();
    for (const c of categories) {
      for (const ex of loadCategory(dataDir, c, 3)) {
        const calls = referenceCalls(ex).map((call) => {
          const [name, args] = Object.entries(call)[0]!;
          return { name: name.replace(/\./g, '_'), arguments: stringifyPyJson(ex.id === 'simple_python_1' ? { ...args, number: 99 } : args) };
        });
        byQuestion.set(ex.question[0]!.at(-1)!.content, calls.length ? calls : null);
      }
    }
    const endpoint = await startToolCallingEndpoint((req, n) => (n === 1 ? { status: 503 } : { calls: byQuestion.get(req.body.messages.at(-1)!.content) ?? null }));
    try {
      const input: EvalBfclInput = {
        runId: cfg.run.id,
        policy: { kind: 'endpoint', endpoint: { baseUrl: endpoint.url, model: 'fake-fc', apiKeyEnv: key, concurrency: 4 } },
        categories,
        limit: 3,
        dataDir,
      };
      const env = new MockActivityEnvironment();
      const heartbeats: unknown[] = [];
      env.on('heartbeat', (d: unknown) => heartbeats.push(d));
      const summary = await evalBfcl(input, env);
      assert.equal(summary.key, runKey(cfg.run.id, 'eval', 'bfcl', 'endpoint-fake-fc.json'));
      assert.deepEqual(summary.overall, { accuracy: 14 / 15, correct: 14, total: 15 });
      assert.deepEqual(summary.categories['simple_python'], { accuracy: 2 / 3, correct: 2, total: 3 });
      for (const c of ['simple_java', 'multiple', 'parallel', 'irrelevance']) assert.equal(summary.categories[c]!.accuracy, 1, c);
      assert.ok(heartbeats.length >= categories.length, 'progress heartbeats');

      // What the endpoint saw: tools as JSON schema with OpenAI-safe names, temperature 0, the key from the environment.
      assert.equal(endpoint.requests.length, 16, '15 examples + one retried 503');
      const first = endpoint.requests.find((r) => r.body.messages.at(-1)!.content.includes('area of a triangle'))!;
      assert.equal(first.body.temperature, 0);
      assert.equal(first.body.tools![0]!.type, 'function');
      assert.equal(first.body.tools![0]!.function.parameters.type, 'object');
      assert.ok(endpoint.requests.every((r) => r.authorization === `Bearer ${secret}`));
      assert.ok(endpoint.requests.some((r) => r.body.tools!.some((t) => t.function.name === 'math_factorial')), 'a.b sent as a_b');

      // The full results in S3.
      const text = await store.getText(summary.key);
      assert.ok(!text.includes(secret), 'the API key is never recorded');
      const results = BfclResults.parse(JSON.parse(text));
      assert.deepEqual(results.overall, summary.overall);
      const wrong = results.examples.find((e) => e.id === 'simple_python_1')!;
      assert.equal(wrong.valid, false);
      assert.equal(wrong.reason, 'value_error:number');
      assert.deepEqual(results.categories['simple_python']!.reasons, { 'value_error:number': 1 });
      assert.deepEqual(results.policy, { kind: 'endpoint', baseUrl: endpoint.url, model: 'fake-fc', temperature: 0 });

      // The same activity again is not evaluated again; another label re-scores from the S3 answer cache.
      assert.deepEqual(await evalBfcl(input), summary);
      const again = await evalBfcl({ ...input, label: 'cached' });
      assert.deepEqual(again.overall, summary.overall);
      assert.equal(endpoint.requests.length, 16, 'no new requests');
    } finally {
      await endpoint.close();
    }
  });

  test('a text-only endpoint (fakeOpenAI): irrelevance correct, AST categories no_call', async () => {
    const fake = await startFakeOpenAI({ behaviour: () => replies.text('I would rather not call a function.') });
    try {
      const summary = await evalBfcl({
        runId: cfg.run.id,
        policy: { kind: 'endpoint', endpoint: { baseUrl: fake.url, model: 'chatty' } },
        categories: ['simple_javascript', 'irrelevance'],
        limit: 2,
        dataDir,
      });
      assert.deepEqual(summary.categories, { simple_javascript: { accuracy: 0, correct: 0, total: 2 }, irrelevance: { accuracy: 1, correct: 2, total: 2 } });
      const results = BfclResults.parse(JSON.parse(await store.getText(summary.key)));
      assert.deepEqual(results.categories['simple_javascript']!.reasons, { no_call: 2 });
      assert.equal(fake.requests.length, 4);
      assert.ok(Array.isArray(fake.requests[0]!.body['tools']));
    } finally {
      await fake.close();
    }
  });

  test('bad requests fail without retry: unknown category', async () => {
    await assert.rejects(
      evalBfcl({ runId: cfg.run.id, policy: { kind: 'endpoint', endpoint: { baseUrl: 'http://127.0.0.1:9/v1', model: 'x' } }, categories: ['simple_cobol'], dataDir }),
      (e: Error & { nonRetryable?: boolean }) => e.nonRetryable === true && /no BFCL category 'simple_cobol'/.test(e.message),
    );
  });

  test('the project\'s model: an SFT policy folder and an RL checkpoint in S3, through the activity', async () => {
    const model = tinyModel();
    const prefix = runKey(cfg.run.id, 'sft', 'final');
    const weights = serializeSafetensors(model.namedWeights(), { format: 'pt' });
    await store.putJson(`${prefix}/config.json`, model.config);
    await store.putBytes(`${prefix}/model.safetensors`, weights);
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) await store.putBytes(`${prefix}/${f}`, readFileSync(path.join(root, 'assets', 'demo-tokenizer', f)));
    const { manifestKey } = await writeCheckpoint(store, runKey(cfg.run.id, 'rl', 'checkpoints'), 2, { 'config.json': Buffer.from(JSON.stringify(model.config)), 'model.safetensors': weights }, {});
    model.dispose();
    const generation = { maxNewTokens: 8, batchSize: 2, backend: 'auto' as const };
    const sft = await evalBfcl({ runId: cfg.run.id, policy: { kind: 'hf', prefix }, categories: ['simple_python', 'irrelevance'], limit: 2, dataDir, generation });
    assert.equal(sft.key, runKey(cfg.run.id, 'eval', 'bfcl', 'sft.json'));
    assert.equal(sft.overall.total, 4);
    const rl = await evalBfcl({
      runId: cfg.run.id, policy: { kind: 'ckpt', manifestKey, step: 2 }, tokenizerDir: 'assets/demo-tokenizer', categories: ['simple_python', 'irrelevance'], limit: 2, dataDir, generation,
    });
    assert.equal(rl.key, runKey(cfg.run.id, 'eval', 'bfcl', 'rl-step-2.json'));
    assert.deepEqual(rl.overall, sft.overall, 'same weights, same greedy outputs');
    const results = BfclResults.parse(JSON.parse(await store.getText(rl.key)));
    assert.equal(results.examples.length, 4);
    assert.ok(results.examples.every((e) => typeof e.text === 'string' && (e.tokens ?? 0) > 0), 'generated text recorded');
    assert.ok(results.examples.filter((e) => !e.valid).every((e) => typeof e.reason === 'string'));
  });

  test('`cm2 eval bfcl --endpoint`: --max-new-tokens is sent as max_tokens, --timeout-ms bounds each request', async () => {
    const fake = await startFakeOpenAI({ behaviour: () => replies.text('No function fits.') });
    const dir = mkdtempSync(path.join(tmpdir(), 'cm2-bfcl-endpoint-'));
    try {
      const cli = ['bin/cm2.js', 'eval', 'bfcl', '--endpoint', fake.url, '--model', 'chatty', '--category', 'irrelevance', '--limit', '2'];
      await run(process.execPath, [...cli, '--max-new-tokens', '77', '--timeout-ms', '5000', '--out', path.join(dir, 'a.json')], { cwd: root, timeout: 120_000 });
      assert.equal(fake.requests.length, 2);
      assert.ok(fake.requests.every((r) => r.body['max_tokens'] === 77), JSON.stringify(fake.requests.map((r) => r.body['max_tokens'])));
      // Unset by default: the server decides.
      await run(process.execPath, [...cli, '--out', path.join(dir, 'b.json')], { cwd: root, timeout: 120_000 });
      assert.equal(fake.requests.length, 4);
      assert.ok(fake.requests.slice(2).every((r) => !('max_tokens' in r.body)));
      // A request slower than --timeout-ms fails (after the transport retries) with the timeout named.
      const slow = await startFakeOpenAI({ behaviour: () => replies.text('late', { delayMs: 3000 }) });
      try {
        await assert.rejects(run(process.execPath, ['bin/cm2.js', 'eval', 'bfcl', '--endpoint', slow.url, '--model', 'slow', '--category', 'irrelevance', '--limit', '1', '--timeout-ms', '200'], { cwd: root, timeout: 120_000 }), /timed out/i);
      } finally {
        await slow.close();
      }
    } finally {
      await fake.close();
    }
  });

  test('the project\'s model through `cm2 eval bfcl --policy DIR` and `--policy s3://…`', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'cm2-bfcl-policy-'));
    const model = tinyModel();
    saveHfCheckpoint(dir, model);
    model.dispose();
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(path.join(root, 'assets', 'demo-tokenizer', f), path.join(dir, f));
    const out = path.join(dir, 'results.json');
    const cli = ['bin/cm2.js', 'eval', 'bfcl', '--category', 'simple_python,simple_java,irrelevance', '--limit', '2', '--max-new-tokens', '8', '--backend', 'auto'];
    const { stdout } = await run(process.execPath, [...cli, '--policy', dir, '--out', out], { cwd: root, timeout: 300_000 });
    assert.match(stdout, /overall +\d+\.\d%/);
    const results = BfclResults.parse(JSON.parse(readFileSync(out, 'utf8')));
    assert.deepEqual(Object.keys(results.categories), ['simple_python', 'simple_java', 'irrelevance']);
    assert.equal(results.overall.total, 6);
    assert.ok(results.overall.accuracy >= 0 && results.overall.accuracy <= 1);
    assert.deepEqual(results.policy, { kind: 'checkpoint', dir });

    // The same policy from S3 (the SFT folder written by the previous test), addresses from a config file.
    const file = writeConfigFile(cfg);
    const out2 = path.join(dir, 'results-s3.json');
    await run(process.execPath, [...cli, '--policy', `s3://${cfg.s3.bucket}/${runKey(cfg.run.id, 'sft', 'final')}`, '--config', file, '--out', out2, '--json'], { cwd: root, timeout: 300_000 });
    const fromS3 = BfclResults.parse(JSON.parse(readFileSync(out2, 'utf8')));
    assert.equal(fromS3.overall.total, 6);
    assert.equal(fromS3.policy['kind'], 'hf');

    // An RL checkpoint folder (written by the previous test); its tokenizer is the config's sft.tokenizerDir.
    const out3 = path.join(dir, 'results-rl.json');
    const rlFolder = `s3://${cfg.s3.bucket}/${runKey(cfg.run.id, 'rl', 'checkpoints', 'step-00000002')}`;
    await run(process.execPath, [...cli.slice(0, 4), 'irrelevance', '--limit', '1', '--max-new-tokens', '4', '--policy', rlFolder, '--config', file, '--out', out3], { cwd: root, timeout: 300_000 });
    const fromCkpt = BfclResults.parse(JSON.parse(readFileSync(out3, 'utf8')));
    assert.deepEqual(fromCkpt.policy, { kind: 'ckpt', manifestKey: `${runKey(cfg.run.id, 'rl', 'checkpoints', 'step-00000002')}/manifest.json`, step: 2, bucket: cfg.s3.bucket });
  });
});
