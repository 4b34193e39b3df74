/**
 * Test helpers for observability: a Prometheus text-format scrape with a small parser, and a local OTLP/HTTP trace
 * receiver (POST /v1/traces, JSON as @opentelemetry/exporter-trace-otlp-http sends it) that keeps the spans.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses Prometheus text exposition format (the lines that are samples; comments and blank lines are skipped). */
export function parsePrometheus(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line.trim() || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, '$1');
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

export async function scrape(address: string): Promise<Sample[]> {
  const res = await fetch(`http://${address}/metrics`);
  if (!res.ok) throw new Error(`GET http://${address}/metrics: ${res.status}`);
  return parsePrometheus(await res.text());
}

/** The samples named `name` whose labels include `labels`. */
export const select = (samples: readonly Sample[], name: string, labels: Record<string, string> = {}): Sample[] =>
  samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));

/** Sum of the selected samples (0 when none). */
export const total = (samples: readonly Sample[], name: string, labels: Record<string, string> = {}): number =>
  select(samples, name, labels).reduce((a, s) => a + s.value, 0);

export interface ReceivedSpan {
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  service?: string;
  attributes: Record<string, unknown>;
}

export interface OtlpReceiver {
  /** Base URL, as OTEL_EXPORTER_OTLP_ENDPOINT (`/v1/traces` is appended by the sender). */
  url: string;
  spans: ReceivedSpan[];
  /** Requests by content type (the exporter sends JSON). */
  contentTypes: string[];
  close(): Promise<void>;
}

type AnyValue = { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
const valueOf = (v: AnyValue | undefined): unknown => v?.stringValue ?? (v?.intValue !== undefined ? Number(v.intValue) : undefined) ?? v?.boolValue ?? v?.doubleValue;
const attrs = (list: { key: string; value: AnyValue }[] | undefined) => Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]));

/** Starts the receiver on 127.0.0.1 (a free port). */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const contentTypes: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      contentTypes.push(String(req.headers['content-type'] ?? ''));
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          resourceSpans?: { resource?: { attributes?: { key: string; value: AnyValue }[] }; scopeSpans?: { spans?: { name: string; traceId: string; spanId: string; parentSpanId?: string; attributes?: { key: string; value: AnyValue }[] }[] }[] }[];
        };
        for (const rs of body.resourceSpans ?? []) {
          const service = attrs(rs.resource?.attributes)['service.name'] as string | undefined;
          for (const ss of rs.scopeSpans ?? []) for (const s of ss.spans ?? []) {
            spans.push({ name: s.name, traceId: s.traceId, spanId: s.spanId, ...(s.parentSpanId ? { parentSpanId: s.parentSpanId } : {}), ...(service ? { service } : {}), attributes: attrs(s.attributes) });
          }
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } catch (e) {
        res.writeHead(400).end(String(e));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    contentTypes,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
