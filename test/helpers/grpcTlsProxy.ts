/**
 * A TLS-terminating gRPC proxy in front of the plaintext Temporal dev server, standing in for a production frontend
 * (self-hosted with mTLS, or Temporal Cloud's API-key check): HTTP/2 over TLS (ALPN h2) with the test PKI's server
 * certificate; optionally a client certificate of the test CA is required (mTLS) and/or `authorization: Bearer
 * <apiKey>` on every call (answered `UNAUTHENTICATED` otherwise, as Cloud does). Each accepted call is forwarded
 * as is to the dev server over h2c; the proxy counts what it saw.
 */
import http2 from 'node:http2';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { FIXTURES } from './paths';

export const TLS_DIR = path.join(FIXTURES, 'tls');
export const tlsFile = (name: string) => path.join(TLS_DIR, name);

export interface GrpcTlsProxy {
  address: string;
  port: number;
  /** Calls forwarded, by gRPC method (`/temporal.api.workflowservice.v1.WorkflowService/StartWorkflowExecution`). */
  forwarded: Map<string, number>;
  /** Calls refused for a missing or wrong API key. */
  refused: number;
  /** TLS handshakes that failed (no or untrusted client certificate, a client that does not trust the server). */
  tlsErrors: string[];
  close(): Promise<void>;
}

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'host']);

function forwardable(headers: http2.IncomingHttpHeaders): http2.OutgoingHttpHeaders {
  const out: http2.OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined || HOP_BY_HOP.has(k) || (k.startsWith(':') && k !== ':method' && k !== ':path')) continue;
    out[k] = v;
  }
  return out;
}

export async function startGrpcTlsProxy(opts: { upstream: string; mtls?: boolean; apiKey?: string }): Promise<GrpcTlsProxy> {
  const upstream = http2.connect(`http://${opts.upstream}`);
  upstream.on('error', () => undefined);
  const forwarded = new Map<string, number>();
  const tlsErrors: string[] = [];
  let refused = 0;
  const server = http2.createSecureServer({
    key: readFileSync(tlsFile('server.key')),
    cert: readFileSync(tlsFile('server.pem')),
    ca: readFileSync(tlsFile('ca.pem')),
    requestCert: opts.mtls ?? false,
    rejectUnauthorized: opts.mtls ?? false,
    allowHTTP1: false,
  });
  server.on('tlsClientError', (e) => tlsErrors.push(e.message));
  server.on('sessionError', () => undefined);
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (session) => {
    sessions.add(session);
    session.on('close', () => sessions.delete(session));
  });
  server.on('stream', (stream, headers) => {
    stream.on('error', () => undefined);
    const method = String(headers[':path'] ?? '');
    if (opts.apiKey !== undefined && headers['authorization'] !== `Bearer ${opts.apiKey}`) {
      refused++;
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '16', 'grpc-message': 'missing or invalid API key' }, { endStream: true });
      return;
    }
    forwarded.set(method, (forwarded.get(method) ?? 0) + 1);
    const req = upstream.request(forwardable(headers));
    req.on('error', () => stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
    stream.pipe(req);
    let trailers: http2.IncomingHttpHeaders = {};
    req.on('trailers', (t) => {
      trailers = t;
    });
    req.on('response', (h) => {
      const out = forwardable(h);
      out[':status'] = h[':status'];
      if (h['grpc-status'] !== undefined) {
        // A trailers-only answer (an error status at once): passed on as one.
        stream.respond(out, { endStream: true });
        req.close();
        return;
      }
      stream.respond(out, { waitForTrailers: true });
      stream.on('wantTrailers', () => stream.sendTrailers(forwardable(trailers)));
      req.pipe(stream);
    });
    stream.on('close', () => {
      if (!req.closed) req.close(http2.constants.NGHTTP2_CANCEL);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    address: `127.0.0.1:${port}`,
    port,
    forwarded,
    get refused() {
      return refused;
    },
    tlsErrors,
    async close() {
      upstream.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const session of sessions) session.destroy(); // long polls would keep them open
      });
    },
  };
}
