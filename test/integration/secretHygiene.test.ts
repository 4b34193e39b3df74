/**
 * Secret hygiene of a whole pipeline, driven through the `cm2` CLI as a user would, with recognisable secrets in
 * every place a secret lives: an LLM role's API key (a fake OpenAI-compatible endpoint that checks it), a Temporal
 * Cloud-style API key (a TLS gRPC proxy in front of the dev server that checks it), the payload codec's key ring and
 * the S3 secret key. Afterwards every workflow history of the run (as stored, and decoded), every log line of the
 * CLI and the worker, the report and every S3 object of the run and the caches are searched: none holds a secret.
 * Also: the local servers listen on the loopback interface only.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import net from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { AesGcmCodec, parseKeyRing } from '../../src/infra/codec';
import { runKey } from '../../src/run/layout';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { replies, startFakeOpenAI } from '../helpers/fakeOpenAI';
import { cm2, tinyPipeline } from '../helpers/pipelineFixture';
import { startGrpcTlsProxy, tlsFile } from '../helpers/grpcTlsProxy';
import { startChildWorker, writeConfigFile } from '../helpers/processes';

const tag = uniqueId('s').replace(/[^a-z0-9]/gi, '');
const llmKey = `sk-cm2-SECRET-llm-${tag}`;
const temporalKey = `tmprl-cm2-SECRET-${tag}`;
const codecKey = Buffer.from(`cm2-SECRET-codec-${tag}`.padEnd(32, '!').slice(0, 32));

/** Every form in which a secret could show up: as is, base64 (standard and url-safe), hex. */
function forms(name: string, secret: Buffer | string): [string, Buffer][] {
  const b = Buffer.isBuffer(secret) ? secret : Buffer.from(secret);
  return [
    [`${name}`, b],
    [`${name} (base64)`, Buffer.from(b.toString('base64').replace(/=+$/, ''))],
    [`${name} (base64url)`, Buffer.from(b.toString('base64url'))],
    [`${name} (hex)`, Buffer.from(b.toString('hex'))],
  ];
}

test('no API key, S3 secret or codec key appears in any history, log line, report or S3 object of a pipeline run', async () => {
  const fake = await startFakeOpenAI({
    behaviour: (req) => (req.headers['authorization'] === `Bearer ${llmKey}` ? replies.json({ Reasoning: 'fine', NoError: true }) : replies.status(401, { message: 'bad key' })),
  });
  const proxy = await startGrpcTlsProxy({ upstream: process.env['TEMPORAL_ADDRESS']!, apiKey: temporalKey });
  const base = tinyPipeline({ rlSteps: 2 });
  const cfg = testConfig(uniqueId('secrets'), {
    ...base,
    temporal: { ...base.temporal, address: proxy.address, tls: { caFile: tlsFile('ca.pem') } },
    llm: { roles: { filter: { baseUrl: fake.url, model: 'fake-filter', apiKeyEnv: 'CM2_TEST_LLM_KEY', concurrency: 2 } } },
  });
  const runId = cfg.run.id;
  const env = { CM2_TEST_LLM_KEY: llmKey, TEMPORAL_API_KEY: temporalKey, TEMPORAL_ADDRESS: proxy.address, CM2_CODEC_KEY: `ring1:${codecKey.toString('base64')}` };
  const s3Secret = process.env['CM2_S3_SECRET_KEY']!;
  assert.ok(s3Secret && s3Secret.length >= 16);
  const secrets = [...forms('LLM API key', llmKey), ...forms('Temporal API key', temporalKey), ...forms('codec key', codecKey), ...forms('S3 secret key', s3Secret)];
  const file = writeConfigFile(cfg);
  const logs: string[] = [];
  const worker = await startChildWorker(file, 'workflows,api,gpu', env);
  try {
    const run = await cm2(['run', '--config', file], env);
    logs.push(run.out);
    assert.equal(run.code, 0, run.out);
    const out = path.join(mkdtempSync(path.join(tmpdir(), 'cm2-secrets-')), 'report.html');
    for (const args of [['status', runId, '--config', file], ['status', '--config', file], ['logs', runId, '--config', file], ['report', runId, '--config', file, '--out', out]]) {
      const r = await cm2(args, env);
      assert.equal(r.code, 0, r.out);
      logs.push(r.out);
    }
    assert.ok(fake.requests.length > 0 && fake.requests.every((r) => r.headers['authorization'] === `Bearer ${llmKey}`), 'the LLM role used its key');
    assert.ok(proxy.forwarded.size > 0 && proxy.refused === 0, 'every Temporal call carried the API key');

    const found: string[] = [];
    const search = (where: string, bytes: Buffer) => {
      for (const [name, needle] of secrets) if (bytes.includes(needle)) found.push(`${name} in ${where}`);
    };
    // Every workflow of the run, as stored and decoded.
    const codec = new AesGcmCodec(parseKeyRing(env.CM2_CODEC_KEY));
    const connection = await Connection.connect({ address: process.env['TEMPORAL_ADDRESS']! });
    const client = new Client({ connection, dataConverter: { payloadCodecs: [codec] } }); // (list() decodes memos; fetchHistory() does not)
    let workflows = 0;
    for await (const w of client.workflow.list({ query: `Cm2RunId = "${runId}"` })) {
      const history = await client.workflow.getHandle(w.workflowId, w.runId).fetchHistory();
      search(`history of ${w.workflowId} (stored)`, Buffer.from(temporal.api.history.v1.History.encode(history).finish()));
      const payloads: temporal.api.common.v1.IPayload[] = [];
      const walk = (n: unknown): void => {
        if (!n || typeof n !== 'object' || ArrayBuffer.isView(n)) return;
        if (Array.isArray(n)) return n.forEach(walk);
        const o = n as Record<string, unknown>;
        if (o['data'] instanceof Uint8Array && o['metadata']) payloads.push(o as temporal.api.common.v1.IPayload);
        Object.values(o).forEach(walk);
      };
      walk(history);
      for (const p of await codec.decode(payloads as never)) search(`history of ${w.workflowId} (decoded)`, Buffer.from(p.data ?? new Uint8Array()));
      workflows++;
    }
    await connection.close();
    assert.ok(workflows >= 6, `the pipeline and its stages (${workflows} workflows)`);
    // Logs, the report, every S3 object of the run and of the caches.
    search('the CLI output', Buffer.from(logs.join('\n')));
    search('the worker output', Buffer.from(worker.output()));
    search('the report', readFileSync(out));
    search('the report data', readFileSync(out.replace(/\.html$/, '.json')));
    const store = testStore(cfg);
    const keys = [...(await store.list(runKey(runId, ''))), ...(await store.list('cache/'))];
    assert.ok(keys.length > 20, `${keys.length} objects`);
    for (const key of keys) search(`s3://${cfg.s3.bucket}/${key}`, await store.getBytes(key));
    assert.deepEqual(found, []);
  } finally {
    await worker.kill('SIGTERM');
    await proxy.close();
    await fake.close();
  }
});

test('the local servers listen on the loopback interface only', async (t) => {
  const external = Object.values(networkInterfaces()).flat().find((i) => i && i.family === 'IPv4' && !i.internal)?.address;
  if (!external) return t.skip('no non-loopback IPv4 interface on this machine');
  const ports = [process.env['TEMPORAL_ADDRESS']!, new URL(process.env['CM2_S3_ENDPOINT']!).host, new URL(process.env['CM2_TEMPORAL_UI_URL']!).host].map((a) => Number(a.split(':').pop()));
  for (const port of ports) {
    const reachable = await new Promise<boolean>((resolve) => {
      const s = net.connect({ host: external, port, timeout: 2000 }, () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
      s.on('timeout', () => {
        s.destroy();
        resolve(false);
      });
    });
    assert.equal(reachable, false, `port ${port} is not reachable on ${external}`);
    const local = await new Promise<boolean>((resolve) => {
      const s = net.connect({ host: '127.0.0.1', port }, () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    assert.equal(local, true, `port ${port} is reachable on 127.0.0.1`);
  }
});
