/**
 * Telemetry set-up (src/infra/telemetry.ts): where traces go (environment over config, OTel's variable semantics),
 * which metrics addresses are accepted, and the Temporal runtime's Prometheus endpoint: a taken port is a reported
 * outcome after which the process can still install its runtime; tracing off loads nothing.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { applyEnvOverrides, ConfigError, parseConfig } from '../../../src/run/config';
import { MetricsBindAddress } from '../../../src/run/telemetryConfig';
import { describeMetrics, installMetricsRuntime, processTracing, tracesUrl } from '../../../src/infra/telemetry';

test('tracesUrl: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, else OTEL_EXPORTER_OTLP_ENDPOINT or the config + /v1/traces; OTEL_SDK_DISABLED turns it off', () => {
  const cfg = { otlpEndpoint: 'http://collector:4318/' };
  assert.equal(tracesUrl(undefined, {}), undefined);
  assert.equal(tracesUrl({}, {}), undefined);
  assert.equal(tracesUrl(cfg, {}), 'http://collector:4318/v1/traces');
  assert.equal(tracesUrl(cfg, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://other:4318' }), 'http://other:4318/v1/traces');
  assert.equal(tracesUrl(cfg, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://other:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://t:9/custom' }), 'http://t:9/custom');
  assert.equal(tracesUrl(cfg, { OTEL_SDK_DISABLED: 'TRUE' }), undefined);
  assert.equal(tracesUrl(cfg, { OTEL_EXPORTER_OTLP_ENDPOINT: '' }), 'http://collector:4318/v1/traces', 'an empty variable is unset');
  assert.throws(() => tracesUrl(cfg, { OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }), (e: unknown) => e instanceof ConfigError && /OTEL_EXPORTER_OTLP_ENDPOINT: expected an http\(s\) URL/.test(e.message));
  assert.throws(() => tracesUrl(undefined, { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'not a url' }), ConfigError);
});

test('metrics addresses: IP:PORT or localhost:PORT; CM2_METRICS_ADDR sets temporal.metrics.prometheus and is validated like the file', () => {
  for (const ok of ['127.0.0.1:9464', '0.0.0.0:1', '[::]:9464', '[::1]:65535', 'localhost:9464']) assert.ok(MetricsBindAddress.safeParse(ok).success, ok);
  for (const bad of ['9464', ':9464', 'localhost', 'example.com:9464', '127.0.0.1:0', '127.0.0.1:70000', 'http://127.0.0.1:9464']) assert.ok(!MetricsBindAddress.safeParse(bad).success, bad);
  const raw = applyEnvOverrides({ run: { id: 'r' } }, { CM2_METRICS_ADDR: '0.0.0.0:9464' });
  assert.equal(parseConfig(raw).temporal.metrics.prometheus, '0.0.0.0:9464');
  assert.equal(parseConfig({ run: { id: 'r' } }).temporal.metrics.prometheus, undefined, 'off by default');
  assert.throws(() => parseConfig(applyEnvOverrides({ run: { id: 'r' } }, { CM2_METRICS_ADDR: '9464' })), (e: unknown) => e instanceof ConfigError && /temporal\.metrics\.prometheus: IP:PORT or localhost:PORT/.test(e.message));
});

test('tracing off: nothing is set up and no OpenTelemetry module is loaded', () => {
  const cfg = parseConfig({ run: { id: 'r' } });
  assert.equal(processTracing(cfg, 'cm2-test', {}), undefined);
  assert.deepEqual(Object.keys(require.cache).filter((k) => k.includes('@opentelemetry') || k.includes('interceptors-opentelemetry')), []);
});

test('installMetricsRuntime: no address leaves the default runtime; a taken port is reported, and the runtime can still be installed on a free one', async () => {
  assert.deepEqual(installMetricsRuntime(undefined), { state: 'off' });
  assert.equal(describeMetrics({ state: 'off' }), undefined);
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const taken = (blocker.address() as net.AddressInfo).port;
  try {
    const failed = installMetricsRuntime(`127.0.0.1:${taken}`);
    assert.equal(failed.state, 'failed');
    assert.match(describeMetrics(failed)!, new RegExp(`cannot serve Prometheus metrics on 127\\.0\\.0\\.1:${taken} \\(.*Address already in use.*\\); this worker runs without metrics`));
  } finally {
    blocker.close();
  }
  const free = await new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
  const serving = installMetricsRuntime(`localhost:${free}`);
  assert.deepEqual(serving, { state: 'serving', address: `localhost:${free}`, url: `http://localhost:${free}/metrics` });
  const res = await fetch(`http://127.0.0.1:${free}/metrics`);
  assert.equal(res.status, 200);
  // Installed once per process: a second install is a programming error, said as such.
  assert.throws(() => installMetricsRuntime('127.0.0.1:1'), /runtime of this process already exists.*before the first worker or connection/);
});
