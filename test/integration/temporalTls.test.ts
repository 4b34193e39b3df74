/**
 * Connection security against a real Temporal server behind TLS: a TLS-terminating gRPC proxy (test PKI) in front
 * of the dev server requires a client certificate of its CA (mTLS) and a bearer API key, as a self-hosted mTLS
 * frontend or Temporal Cloud does. The CLI's client and the workers connect through it from config and from the
 * `temporal` CLI's environment variables, and a stage runs end to end; wrong credentials are refused with a clear
 * error.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { requireBinary } from '../../src/infra/binaries';
import { connectClient } from '../../src/infra/temporal';
import { startPrepare } from '../../src/cli/stages';
import { startWorkers } from '../../src/workers';
import { testConfig, uniqueId } from '../helpers/env';
import { startGrpcTlsProxy, tlsFile, type GrpcTlsProxy } from '../helpers/grpcTlsProxy';
import { startTorchWorker, writeConfigFile } from '../helpers/processes';
import { torchPython } from '../../scripts/ensure-torch.mjs';

const py = torchPython();
const torchWhy = py ? undefined : 'no PyTorch environment (node scripts/ensure-torch.mjs makes it)';
import { applyEnvOverrides, parseConfig } from '../../src/run/config';

const API_KEY_ENV = 'CM2_TEST_TEMPORAL_API_KEY';
const apiKey = `test-api-key-${uniqueId('k')}`;

describe('Temporal behind TLS (mTLS + API key)', () => {
  let proxy: GrpcTlsProxy;
  before(async () => {
    proxy = await startGrpcTlsProxy({ upstream: process.env['TEMPORAL_ADDRESS']!, mtls: true, apiKey });
    process.env[API_KEY_ENV] = apiKey;
  });
  after(async () => {
    delete process.env[API_KEY_ENV];
    await proxy?.close();
  });

  const secured = (runId: string, tls: Record<string, unknown> = {}) =>
    testConfig(runId, {
      temporal: { address: proxy.address, apiKeyEnv: API_KEY_ENV, tls: { caFile: tlsFile('ca.pem'), certFile: tlsFile('client.pem'), keyFile: tlsFile('client.key'), ...tls } },
      data: { source: { kind: 'demo', count: 24, seed: 5 }, shardSize: 12 },
    });

  test('workers and the client connect through mTLS with an API key; a stage runs end to end', async () => {
    const cfg = secured(uniqueId('tls'));
    const workers = await startWorkers(cfg);
    try {
      const client = await connectClient(cfg);
      const report = await (await startPrepare(client, cfg)).result();
      assert.equal(report.total, 24);
      await client.connection.close();
    } finally {
      await workers.shutdown();
    }
    const methods = [...proxy.forwarded.keys()].map((m) => m.split('/').pop());
    for (const m of ['StartWorkflowExecution', 'PollWorkflowTaskQueue', 'PollActivityTaskQueue', 'RespondActivityTaskCompleted']) {
      assert.ok(methods.includes(m), `${m} went through the TLS proxy (saw ${methods.join(', ')})`);
    }
    assert.equal(proxy.refused, 0);
  });

  test('the temporal CLI\'s environment variables set the same connection, and the real CLI gets through the proxy with them', async () => {
    const env = {
      TEMPORAL_ADDRESS: proxy.address,
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: tlsFile('ca.pem'),
      TEMPORAL_TLS_CLIENT_CERT_DATA: readFileSync(tlsFile('client.pem'), 'utf8'),
      TEMPORAL_TLS_CLIENT_KEY_DATA: readFileSync(tlsFile('client.key'), 'utf8'),
      TEMPORAL_TLS_SERVER_NAME: 'localhost',
      TEMPORAL_API_KEY: apiKey,
    };
    const cfg = parseConfig(applyEnvOverrides({ run: { id: 'env' } }, env));
    assert.equal(cfg.temporal.address, proxy.address);
    assert.equal(cfg.temporal.tls.caFile, tlsFile('ca.pem'));
    const client = await connectClient(cfg, env);
    try {
      await client.workflowService.getSystemInfo({});
    } finally {
      await client.connection.close();
    }
    // The older short names still work.
    const old = parseConfig(applyEnvOverrides({ run: { id: 'old' } }, { TEMPORAL_TLS_CA: 'a.pem', TEMPORAL_TLS_CERT: 'c.pem', TEMPORAL_TLS_KEY: 'k.pem', TEMPORAL_TLS: 'true' }));
    assert.deepEqual(old.temporal.tls, { enabled: true, caFile: 'a.pem', certFile: 'c.pem', keyFile: 'k.pem' });
    // The `temporal` CLI with the very same variables: the proxy is a real TLS frontend, and the names are the CLI's.
    // (Asynchronously: the proxy answers from this process's event loop.)
    const cli = (extra: Record<string, string>) => promisify(execFile)(requireBinary('temporal'), ['operator', 'namespace', 'describe', '--namespace', 'default', '--output', 'json'], {
      env: { PATH: process.env['PATH'], HOME: process.env['HOME'], ...env, ...extra },
      encoding: 'utf8',
    });
    assert.match((await cli({})).stdout, /"name":\s*"default"/);
    await assert.rejects(cli({ TEMPORAL_API_KEY: 'wrong' }), /authentication failed|API key/);
  });

  test('refused: no API key, a wrong one, an untrusted client certificate, no client certificate, a server not trusted', async () => {
    const refusedBefore = proxy.refused;
    const withoutKey = secured('x');
    const cases: [string, () => Promise<unknown>, RegExp][] = [
      ['no API key', async () => {
        const c = await connectClient({ ...withoutKey, temporal: { ...withoutKey.temporal, apiKeyEnv: 'CM2_TEST_NO_SUCH_VAR' } });
        try {
          await c.workflowService.getSystemInfo({});
        } finally {
          await c.connection.close();
        }
      }, /refused the credentials \(TLS \(mTLS\)\): .*missing or invalid API key/],
      ['wrong API key', async () => {
        const c = await connectClient(withoutKey, { [API_KEY_ENV]: 'wrong' });
        try {
          await c.workflowService.getSystemInfo({});
        } finally {
          await c.connection.close();
        }
      }, /refused the credentials \(TLS \(mTLS, API key\)\): .*missing or invalid API key/],
      ['untrusted client certificate', () => connectClient(secured('x', { certFile: tlsFile('untrusted-client.pem'), keyFile: tlsFile('untrusted-client.key') })), /not reachable at .*over TLS \(mTLS, API key\)\).*check temporal.tls/s],
      ['no client certificate', () => connectClient(secured('x', { certFile: undefined, keyFile: undefined })), /not reachable at .*over TLS \(API key\)\)/],
      ['server CA not trusted (system roots)', () => connectClient(secured('x', { caFile: undefined })), /not reachable/],
      ['wrong server name', () => connectClient(secured('x', { serverName: 'wrong.example' })), /not reachable/],
    ];
    for (const [what, attempt, re] of cases) {
      await assert.rejects(attempt(), (e: Error) => {
        assert.match(e.message, re, what);
        assert.ok(!e.message.includes(apiKey), `${what}: the API key is not in the error`);
        return true;
      }, what);
    }
    assert.equal(proxy.refused - refusedBefore >= 2, true, 'the proxy refused the calls without a valid key');
    assert.ok(proxy.tlsErrors.length > 0, 'failed handshakes were seen by the server');
  });

  test('the PyTorch worker connects through mTLS with an API key (config files, or the CLI\'s *_DATA variables); refused without its client certificate', { skip: torchWhy, timeout: 5 * 60_000 }, async () => {
    const cfg = secured(uniqueId('tls-pt'));
    cfg.temporal.taskQueues.train = `train-${cfg.run.id.replace(/[^a-z0-9]/gi, '').slice(-12)}`;
    const polls = () => proxy.forwarded.get('/temporal.api.workflowservice.v1.WorkflowService/PollActivityTaskQueue') ?? 0;
    const before = polls();
    // (TEMPORAL_ADDRESS, set for the tests to the server itself, would override the config's address)
    const w = await startTorchWorker(py!, writeConfigFile(cfg), { TEMPORAL_ADDRESS: proxy.address });
    try {
      assert.match(w.output(), /over TLS \(mTLS, API key\)|TLS \(mTLS, API key\), device/);
      // its activity polls go through the proxy (the only way to the server it has)
      for (let i = 0; i < 100 && polls() === before; i++) await new Promise((r) => setTimeout(r, 100));
      assert.ok(polls() > before, 'the torch worker polls through the TLS proxy');
    } finally {
      await w.kill('SIGTERM');
    }
    // the same from the `temporal` CLI's variables, PEM data inline
    const bare = testConfig(uniqueId('tls-pt-env'));
    const w2 = await startTorchWorker(py!, writeConfigFile(bare), {
      TEMPORAL_ADDRESS: proxy.address, TEMPORAL_TLS_SERVER_CA_CERT_DATA: readFileSync(tlsFile('ca.pem'), 'utf8'),
      TEMPORAL_TLS_CLIENT_CERT_DATA: readFileSync(tlsFile('client.pem'), 'utf8'), TEMPORAL_TLS_CLIENT_KEY_DATA: readFileSync(tlsFile('client.key'), 'utf8'),
      TEMPORAL_TLS_SERVER_NAME: 'localhost', TEMPORAL_API_KEY: apiKey,
    });
    await w2.kill('SIGTERM');
    // no client certificate: the proxy refuses the handshake; the worker stops, naming how it connected and no secret
    const noCert = secured(uniqueId('tls-pt-no'), { certFile: undefined, keyFile: undefined });
    await assert.rejects(startTorchWorker(py!, writeConfigFile(noCert), { TEMPORAL_ADDRESS: proxy.address }), (e: Error) => {
      assert.match(e.message, /worker exited with 3 during start/);
      assert.match(e.message, /Temporal not reachable at .* over TLS \(API key\)/);
      assert.ok(!e.message.includes(apiKey), 'the API key is not in the message');
      return true;
    });
  });

  test('a client certificate without its key is a config error that says so', async () => {
    await assert.rejects(connectClient(secured('x', { keyFile: undefined })), /a client certificate needs its key/);
    await assert.rejects(connectClient(secured('x', { caFile: '/nonexistent/ca.pem' })), /cannot read the CA certificate \(caFile\) \/nonexistent\/ca.pem: ENOENT/);
  });
});
