/**
 * Configuration of the workers' observability (zod, part of `temporal` in the run config): Prometheus metrics and
 * OpenTelemetry traces. What they turn on: src/infra/telemetry.ts, docs/observability.md.
 */
import { z } from 'zod';

/** `host:port` a Prometheus endpoint binds: an IP address (IPv4, or IPv6 in brackets) or `localhost`, and a port. */
export const MetricsBindAddress = z.string().refine((a) => {
  const m = /^(localhost|\d{1,3}(\.\d{1,3}){3}|\[[0-9A-Fa-f:.]+\]):(\d{1,5})$/.exec(a);
  return m !== null && Number(m[3]) >= 1 && Number(m[3]) <= 65535;
}, 'IP:PORT or localhost:PORT, port 1–65535 (e.g. 127.0.0.1:9464, 0.0.0.0:9464, [::]:9464)');

/** Worker observability: Prometheus metrics and OpenTelemetry traces (docs/observability.md). */
export const TelemetryMetricsConfig = z.object({
  prometheus: MetricsBindAddress.optional()
    .describe('Address `cm2 worker` serves Prometheus metrics on (`http://ADDR/metrics`): the SDK\'s worker metrics and the run\'s (`cm2_*`); unset = none. `--metrics` and `CM2_METRICS_ADDR` override it.'),
});
export const TelemetryTracingConfig = z.object({
  otlpEndpoint: z.string().url().refine((u) => /^https?:\/\//i.test(u), 'an http(s) URL: OTLP over HTTP, e.g. http://collector:4318').optional()
    .describe('OTLP/HTTP base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT`, spans go to `<url>/v1/traces`) that workers and the CLI send workflow and activity spans to; unset = no tracing. `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT` override it.'),
  serviceName: z.string().min(1).optional()
    .describe('`service.name` of the spans; default `OTEL_SERVICE_NAME`, else `cm2-worker` (workers) or `cm2` (the CLI).'),
});
