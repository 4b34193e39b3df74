/**
 * Encrypted payloads on the real Temporal server: with CM2_CODEC_KEY set, the server stores no plaintext of a run's
 * input, results or failure messages; the codec server decodes what the Web UI sends (its JSON protocol, CORS, the
 * bearer token) and what the real `temporal` CLI asks for; a run started under key A finishes after the workers
 * and client switch to the ring {B, A}.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { AddressInfo } from 'node:net';
import { Client, Connection, WorkflowFailedError } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { connectClient } from '../../src/infra/temporal';
import { requireBinary } from '../../src/infra/binaries';
import { codecFromEnv } from '../../src/infra/codec';
import { startCodecServer } from '../../src/cli/codecServer';
import { startPrepare } from '../../src/cli/stages';
import { stageWorkflowId } from '../../src/run/layout';
import { generateDemoDataset } from '../../src/demo/generator';
import { startWorkers } from '../../src/workers';
import type { Cm2Config } from '../../src/run/config';
import { testConfig, uniqueId } from '../helpers/env';

type History = temporal.api.history.v1.IHistory;
type RawPayload = temporal.api.common.v1.IPayload;

const keyA = `A:${randomBytes(32).toString('base64')}`;
const keyB = `B:${randomBytes(32).toString('base64')}`;
const marker = `PLAINTEXT-MARKER-${randomBytes(4).toString('hex')}`;

/** A JSONL of demo dialogues at a path that carries the marker (so the workflow input does too). */
function markedSource(count: number): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-codec-'));
  const file = path.join(dir, `${marker}.jsonl`);
  writeFileSync(file, generateDemoDataset({ seed: 11, count, brokenRate: 0 }).map((e) => JSON.stringify(e)).join('\n') + '\n');
  return file;
}

/** The history as the server stores it: read without any codec. */
async function rawHistory(workflowId: string): Promise<History> {
  const connection = await Connection.connect({ address: process.env['TEMPORAL_ADDRESS']! });
  try {
    return await new Client({ connection }).workflow.getHandle(workflowId).fetchHistory();
  } finally {
    await connection.close();
  }
}

/** Every payload in a history, except search attributes (plaintext by design: the server indexes them). */
function payloadsOf(node: unknown, out: RawPayload[] = []): RawPayload[] {
  if (!node || typeof node !== 'object' || ArrayBuffer.isView(node)) return out;
  if (Array.isArray(node)) {
    for (const n of node) payloadsOf(n, out);
    return out;
  }
  const o = node as Record<string, unknown>;
  if (o['data'] instanceof Uint8Array && o['metadata'] && typeof o['metadata'] === 'object') out.push(o as RawPayload);
  for (const [k, v] of Object.entries(o)) if (k !== 'searchAttributes') payloadsOf(v, out);
  return out;
}

const meta = (p: RawPayload, k: string) => Buffer.from(p.metadata?.[k] ?? new Uint8Array()).toString();
const historyBytes = (h: History) => Buffer.from(temporal.api.history.v1.History.encode(h).finish()).toString('latin1');

describe('encrypted payloads (CM2_CODEC_KEY)', () => {
  const saved = process.env['CM2_CODEC_KEY'];
  let cfg: Cm2Config;
  let workflowId: string;
  before(() => {
    process.env['CM2_CODEC_KEY'] = keyA;
  });
  after(() => {
    if (saved === undefined) delete process.env['CM2_CODEC_KEY'];
    else process.env['CM2_CODEC_KEY'] = saved;
  });

  test('the server stores no plaintext of the run\'s input, results or failure messages', async () => {
    cfg = testConfig(uniqueId('codec'), { data: { source: { kind: 'file', paths: [markedSource(30)] }, shardSize: 10 } });
    workflowId = stageWorkflowId(cfg.run.id, 'prepare');
    const workers = await startWorkers(cfg);
    try {
      const client = await connectClient(cfg);
      const report = await (await startPrepare(client, cfg)).result();
      assert.equal(report.total, 30, 'the client decodes the result');
      // A failing run: its error names the (marked) missing file.
      const failing = testConfig(uniqueId('codecfail'), { data: { source: { kind: 'file', paths: [`/nonexistent/${marker}.jsonl`] } } });
      const err = await (await startPrepare(client, { ...failing, temporal: cfg.temporal })).result().then(() => undefined, (e: unknown) => e);
      assert.ok(err instanceof WorkflowFailedError, `the run fails: ${String(err)}`);
      const messages: string[] = [];
      for (let e: unknown = err; e instanceof Error; e = e.cause) messages.push(e.message);
      assert.ok(messages.some((m) => m.includes(marker)), `the client decodes the failure message: ${messages.join(' | ')}`);
      await client.connection.close();

      for (const id of [workflowId, stageWorkflowId(failing.run.id, 'prepare')]) {
        const history = await rawHistory(id);
        const payloads = payloadsOf(history);
        assert.ok(payloads.length > 5, `${id}: payloads found`);
        const plain = payloads.filter((p) => meta(p, 'encoding') !== 'binary/encrypted').map((p) => `${meta(p, 'encoding')}: ${Buffer.from(p.data!).toString().slice(0, 80)}`);
        assert.deepEqual(plain, [], `${id}: every payload is encrypted`);
        assert.deepEqual([...new Set(payloads.map((p) => meta(p, 'encryption-key-id')))], ['A']);
        const bytes = historyBytes(history);
        for (const text of [marker, 'llmFilterPasses', 'shardSize', '"runId"', 'cold_start.jsonl']) {
          assert.ok(!bytes.includes(text), `${id}: "${text}" is not stored in plaintext`);
        }
      }
    } finally {
      await workers.shutdown();
    }
  });

  test('the codec server decodes what the Web UI sends (JSON payloads, X-Namespace, CORS, bearer token) and what the temporal CLI asks for', async () => {
    const codec = codecFromEnv()!;
    const origin = cfg.temporal.uiUrl;
    const server = await startCodecServer({ codec, origins: [origin], port: 0 });
    const secured = await startCodecServer({ codec, origins: [origin], port: 0, token: 'sesame' });
    const url = (s: typeof server) => `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
    try {
      const started = (await rawHistory(workflowId)).events![0]!.workflowExecutionStartedEventAttributes!;
      const asUiSends = {
        payloads: started.input!.payloads!.map((p) => ({
          metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v).toString('base64')])),
          data: Buffer.from(p.data!).toString('base64'),
        })),
      };
      const headers = { 'Content-Type': 'application/json', 'X-Namespace': 'default', Origin: origin };
      const preflight = await fetch(`${url(server)}/default/decode`, { method: 'OPTIONS', headers: { Origin: origin, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type,x-namespace' } });
      assert.equal(preflight.status, 204);
      assert.equal(preflight.headers.get('access-control-allow-origin'), origin);
      assert.match(preflight.headers.get('access-control-allow-headers') ?? '', /X-Namespace/i);

      const res = await fetch(`${url(server)}/default/decode`, { method: 'POST', headers, body: JSON.stringify(asUiSends) });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('access-control-allow-origin'), origin);
      const decoded = (await res.json()) as { payloads: { metadata: Record<string, string>; data: string }[] };
      assert.equal(Buffer.from(decoded.payloads[0]!.metadata['encoding']!, 'base64').toString(), 'json/plain');
      const input = JSON.parse(Buffer.from(decoded.payloads[0]!.data, 'base64').toString()) as { runId: string; data: unknown };
      assert.equal(input.runId, cfg.run.id);
      assert.ok(JSON.stringify(input.data).includes(marker));
      // /encode round-trips through /decode.
      const encoded = (await (await fetch(`${url(server)}/encode`, { method: 'POST', headers, body: JSON.stringify(decoded) })).json()) as typeof decoded;
      assert.equal(Buffer.from(encoded.payloads[0]!.metadata['encoding']!, 'base64').toString(), 'binary/encrypted');

      assert.equal((await fetch(`${url(server)}/decode`, { method: 'POST', headers: { ...headers, Origin: 'https://evil.example' }, body: JSON.stringify(asUiSends) })).status, 403);
      assert.equal((await fetch(`${url(server)}/decode`, { method: 'POST', headers, body: '{"payloads": 3}' })).status, 400);
      assert.equal((await fetch(`${url(secured)}/decode`, { method: 'POST', headers, body: JSON.stringify(asUiSends) })).status, 401);
      assert.equal((await fetch(`${url(secured)}/decode`, { method: 'POST', headers: { ...headers, Authorization: 'Bearer sesame' }, body: JSON.stringify(asUiSends) })).status, 200);

      // The real temporal CLI as a codec client: with the endpoint it shows the input in the clear, without it not.
      const show = (extra: string[]) => promisify(execFile)(requireBinary('temporal'), ['workflow', 'show', '-w', workflowId, '--output', 'json', '--address', process.env['TEMPORAL_ADDRESS']!, ...extra], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
      // (JSON output keeps payload data in base64; what matters is that it is the decoded json/plain payload.)
      const inputOf = (out: string) => {
        const first = (JSON.parse(out) as { events: { workflowExecutionStartedEventAttributes: { input: { payloads: { metadata: Record<string, string>; data: string }[] } } }[] }).events[0]!;
        const p = first.workflowExecutionStartedEventAttributes.input.payloads[0]!;
        return { encoding: Buffer.from(p.metadata['encoding']!, 'base64').toString(), data: Buffer.from(p.data, 'base64').toString('latin1') };
      };
      const viaCodec = inputOf((await show(['--codec-endpoint', url(server)])).stdout);
      assert.equal(viaCodec.encoding, 'json/plain');
      assert.ok(viaCodec.data.includes(marker));
      const stored = inputOf((await show([])).stdout);
      assert.equal(stored.encoding, 'binary/encrypted');
      assert.ok(!stored.data.includes(marker));
      assert.ok(inputOf((await show(['--codec-endpoint', url(secured), '--codec-auth', 'Bearer sesame'])).stdout).data.includes(marker));
    } finally {
      server.close();
      secured.close();
    }
  });

  test('a run started under key A finishes after the workers and the client switch to the ring {B, A}', async () => {
    const run = testConfig(uniqueId('rotate'), { data: { source: { kind: 'file', paths: [markedSource(60)] }, shardSize: 10 } });
    const id = stageWorkflowId(run.run.id, 'prepare');
    const workersA = await startWorkers(run);
    const clientA = await connectClient(run);
    await startPrepare(clientA, run);
    // Wait until work has been done under A, then stop A's workers mid-run.
    for (let i = 0; i < 600; i++) {
      const events = (await rawHistory(id)).events ?? [];
      if (events.some((e) => e.activityTaskCompletedEventAttributes)) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    await workersA.shutdown();
    await clientA.connection.close();
    const beforeSwitch = await rawHistory(id);
    assert.ok(!beforeSwitch.events!.some((e) => e.workflowExecutionCompletedEventAttributes), 'the run is still open at the switch');

    process.env['CM2_CODEC_KEY'] = `${keyB},${keyA}`;
    const workersBA = await startWorkers(run);
    try {
      const clientBA = await connectClient(run);
      const report = await (await startPrepare(clientBA, run)).result(); // attaches to the open run
      assert.equal(report.total, 60);
      await clientBA.connection.close();
    } finally {
      await workersBA.shutdown();
      process.env['CM2_CODEC_KEY'] = keyA;
    }
    const ids = new Set(payloadsOf(await rawHistory(id)).map((p) => meta(p, 'encryption-key-id')));
    assert.deepEqual([...ids].sort(), ['A', 'B'], 'written under A before the switch and under B after it');
  });
});
