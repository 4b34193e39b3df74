/**
 * `cm2 codec-server`: the remote codec the Temporal Web UI (and `temporal workflow show --codec-endpoint`) calls to
 * show encrypted payloads in the clear, for people who may read them. POST `/decode` and `/encode` take and give
 * `{"payloads": [{"metadata": {name: base64}, "data": base64}]}` (the UI's JSON form of Payload), any path prefix
 * (`/<namespace>/decode`) included.
 *
 * - CORS: browsers may call it only from the allowed origins (the config's Web UI URL by default); a request from
 *   another origin is refused (403), one without an Origin header (CLI, curl) is served.
 * - An optional bearer token (`--token-env`, default `CM2_CODEC_SERVER_TOKEN`): when that variable is set, every
 *   request needs `Authorization: Bearer <token>`.
 * - Listens on 127.0.0.1 unless told otherwise. Never logs payloads or keys.
 */
import http from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { CODEC_KEY_ENV, codecFromEnv } from '../infra/codec';

export interface CodecServerOptions {
  codec: PayloadCodec;
  /** Origins a browser may call from, e.g. `http://127.0.0.1:8233`. */
  origins: readonly string[];
  /** When set, requests need `Authorization: Bearer <token>`. */
  token?: string | undefined;
  /** Largest request body in bytes (default 32 MiB). */
  maxBodyBytes?: number;
  /** One line per request (method, path, status, payload count): never payload content. */
  log?: (line: string) => void;
}

interface JsonPayload {
  metadata?: Record<string, string> | null;
  data?: string | null;
}

class HttpError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

const fromJson = (p: JsonPayload): Payload => ({
  metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, new Uint8Array(Buffer.from(String(v), 'base64'))])),
  data: new Uint8Array(Buffer.from(p.data ?? '', 'base64')),
});

const toJson = (p: Payload): JsonPayload => ({
  metadata: Object.fromEntries(Object.entries(p.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v ?? new Uint8Array()).toString('base64')])),
  data: Buffer.from(p.data ?? new Uint8Array()).toString('base64'),
});

function sameToken(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

async function readBody(req: http.IncomingMessage, max: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > max) throw new HttpError(413, `request body over ${max} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function parsePayloads(body: string): Payload[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw new HttpError(400, 'body is not JSON');
  }
  const payloads = (parsed as { payloads?: unknown } | null)?.payloads;
  if (!Array.isArray(payloads) || !payloads.every((p) => typeof p === 'object' && p !== null)) {
    throw new HttpError(400, 'expected {"payloads": [{"metadata": {...}, "data": "<base64>"}, ...]}');
  }
  return (payloads as JsonPayload[]).map(fromJson);
}

/** The codec server's request handler (exported for tests; `startCodecServer` listens with it). */
export function codecRequestHandler(opts: CodecServerOptions): http.RequestListener {
  const max = opts.maxBodyBytes ?? 32 * 1024 * 1024;
  const allowed = new Set(opts.origins.map((o) => o.replace(/\/+$/, '')));
  return (req, res) => {
    const origin = req.headers.origin;
    const send = (status: number, body?: unknown, count?: number) => {
      if (origin && allowed.has(origin)) {
        res.setHeader('Access-Control-Allow-Origin', origin);
        res.setHeader('Access-Control-Allow-Credentials', 'true');
        res.setHeader('Access-Control-Allow-Methods', 'POST, OPTIONS');
        res.setHeader('Access-Control-Allow-Headers', 'Content-Type, X-Namespace, Authorization');
        res.setHeader('Access-Control-Max-Age', '600');
      }
      res.setHeader('Vary', 'Origin');
      if (body === undefined) res.writeHead(status).end();
      else res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
      try {
        opts.log?.(`${req.method} ${req.url} ${status}${count !== undefined ? ` (${count} payloads)` : ''}`);
      } catch {
        // a log line never fails a request
      }
    };
    void (async () => {
      try {
        if (origin && !allowed.has(origin)) throw new HttpError(403, `origin ${origin} is not allowed (cm2 codec-server --origin)`);
        if (req.method === 'OPTIONS') return send(204);
        if (req.method !== 'POST') throw new HttpError(405, 'use POST /encode or POST /decode');
        const op = /\/(encode|decode)\/?$/.exec((req.url ?? '').split('?')[0]!)?.[1];
        if (!op) throw new HttpError(404, 'use POST /encode or POST /decode');
        if (opts.token !== undefined) {
          const auth = req.headers.authorization ?? '';
          if (!auth.startsWith('Bearer ') || !sameToken(auth.slice('Bearer '.length), opts.token)) throw new HttpError(401, 'a valid bearer token is required');
        }
        const payloads = parsePayloads(await readBody(req, max));
        let out: Payload[];
        try {
          out = op === 'encode' ? await opts.codec.encode(payloads) : await opts.codec.decode(payloads);
        } catch (e) {
          throw new HttpError(400, (e as Error).message);
        }
        send(200, { payloads: out.map(toJson) }, out.length);
      } catch (e) {
        const status = e instanceof HttpError ? e.status : 500;
        send(status, { error: e instanceof HttpError ? e.message : 'internal error' });
      }
    })();
  };
}

/** Starts the codec server; resolves once it listens (port 0: any free port, see `server.address()`). */
export async function startCodecServer(opts: CodecServerOptions & { host?: string; port: number }): Promise<http.Server> {
  const server = http.createServer(codecRequestHandler(opts));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}

/** `cm2 codec-server`: serves the codec of `CM2_CODEC_KEY` until Ctrl-C. */
export async function codecServerCommand(opts: { host: string; port: number; origins: string[]; tokenEnv: string }): Promise<void> {
  const codec = codecFromEnv();
  if (!codec) throw new Error(`${CODEC_KEY_ENV} is not set: the codec server decodes with the same key ring as the workers`);
  const token = process.env[opts.tokenEnv] || undefined;
  const server = await startCodecServer({ codec, origins: opts.origins, token, host: opts.host, port: opts.port, log: (l) => console.log(`codec-server: ${l}`) });
  const url = `http://${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${opts.port}`;
  console.log(`cm2 codec-server on ${url} (keys ${codec.keyIds.join(', ')}; origins ${opts.origins.join(', ')}; ${token ? `bearer token from ${opts.tokenEnv}` : 'no token'})`);
  console.log(`Web UI: set the codec endpoint to ${url} (Settings → Codec Server, or \`temporal server start-dev --ui-codec-endpoint ${url}\`)`);
  await new Promise<void>((resolve) => {
    const stop = () => server.close(() => resolve());
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}
