/**
 * A tiny HTTP proxy in front of the test MinIO that answers chosen requests with an S3 error (e.g. 503 SlowDown) and
 * forwards the rest untouched (the Host header too, so MinIO checks the signature the client made for the proxy).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface S3FaultProxy {
  /** `http://127.0.0.1:<port>`: the endpoint of a store that goes through the proxy. */
  url: string;
  /** Requests answered with the fault so far, by `METHOD path`. */
  faults: string[];
  close(): Promise<void>;
}

/**
 * `fail(method, path)` true: the request is answered `status` with an S3 error body of `code`. The path is the
 * request's, e.g. `/cm2-test/runs/<id>/sft/checkpoints/step-00000020/manifest.json` (path-style addressing).
 */
export async function startS3FaultProxy(target: string, fail: (method: string, path: string) => boolean, opts: { status?: number; code?: string } = {}): Promise<S3FaultProxy> {
  const upstream = new URL(target);
  const faults: string[] = [];
  const server = http.createServer((req, res) => {
    const path = decodeURIComponent((req.url ?? '/').split('?')[0]!);
    if (fail(req.method ?? 'GET', path)) {
      faults.push(`${req.method} ${path}`);
      req.resume();
      const code = opts.code ?? 'SlowDown';
      res.writeHead(opts.status ?? 503, { 'content-type': 'application/xml' });
      res.end(`<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>injected by the test proxy</Message><Resource>${path}</Resource></Error>`);
      return;
    }
    const forward = http.request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    forward.on('error', (e) => {
      res.writeHead(502);
      res.end(String(e));
    });
    req.pipe(forward);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    faults,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

/** A port on 127.0.0.1 that nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}
