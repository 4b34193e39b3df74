/**
 * A real HTTP server on 127.0.0.1 that answers like the two AWS credential endpoints a machine in AWS has:
 * - the container endpoint (ECS, EKS Pod Identity): `GET /creds`, checking the `Authorization` token when one is set;
 * - the EC2 instance metadata service, IMDSv2 only: `PUT /latest/api/token`, then
 *   `GET /latest/meta-data/iam/security-credentials/` (the role) and `.../<role>` (the credentials), each with the
 *   `x-aws-ec2-metadata-token` it issued.
 * Each credentials request asks `next()` for what to serve (tests hand out real STS credentials of a MinIO, or dummies).
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ServedCredentials {
  AccessKeyId: string;
  SecretAccessKey: string;
  Token?: string;
  Expiration?: string;
}

export interface FakeCredentialServer {
  /** `http://127.0.0.1:PORT` */
  url: string;
  /** Credentials answers given, per endpoint. */
  hits: { container: number; instance: number };
  /** Requests refused (bad or missing token). */
  refused: number;
  close(): Promise<void>;
}

export async function startFakeCredentialServer(opts: {
  next: () => ServedCredentials | Promise<ServedCredentials>;
  /** Authorization token the container endpoint requires (none: any request is served). */
  containerToken?: string;
  /** Instance role name; null: no role attached (404). */
  role?: string | null;
}): Promise<FakeCredentialServer> {
  const imdsToken = randomBytes(12).toString('hex');
  const role = opts.role === undefined ? 'cm2-test-role' : opts.role;
  const state = { hits: { container: 0, instance: 0 }, refused: 0 };
  const send = (res: http.ServerResponse, status: number, body: string, type = 'text/plain') => {
    res.writeHead(status, { 'content-type': type });
    res.end(body);
  };
  const server = http.createServer((req, res) => {
    void (async () => {
      const url = req.url ?? '/';
      if (url === '/creds' && req.method === 'GET') {
        if (opts.containerToken && req.headers['authorization'] !== opts.containerToken) {
          state.refused++;
          return send(res, 401, '{"message":"bad token"}', 'application/json');
        }
        state.hits.container++;
        return send(res, 200, JSON.stringify({ RoleArn: 'arn:aws:iam::000000000000:role/test', ...(await opts.next()) }), 'application/json');
      }
      if (url === '/latest/api/token' && req.method === 'PUT') {
        if (!req.headers['x-aws-ec2-metadata-token-ttl-seconds']) return send(res, 400, 'missing ttl');
        return send(res, 200, imdsToken);
      }
      if (url.startsWith('/latest/meta-data/iam/security-credentials/') && req.method === 'GET') {
        if (req.headers['x-aws-ec2-metadata-token'] !== imdsToken) {
          state.refused++;
          return send(res, 401, 'unauthorized');
        }
        const name = decodeURIComponent(url.slice('/latest/meta-data/iam/security-credentials/'.length));
        if (!role || (name && name !== role)) return send(res, 404, 'not found');
        if (!name) return send(res, 200, `${role}\n`);
        state.hits.instance++;
        const creds = await opts.next();
        return send(res, 200, JSON.stringify({ Code: 'Success', LastUpdated: new Date().toISOString(), Type: 'AWS-HMAC', ...creds }), 'application/json');
      }
      send(res, 404, 'not found');
    })().catch((e: Error) => send(res, 500, e.message));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get hits() {
      return state.hits;
    },
    get refused() {
      return state.refused;
    },
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
