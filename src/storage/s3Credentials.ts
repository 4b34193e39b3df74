/**
 * S3 credentials, from the sources the AWS SDKs read, at the moment the store needs them (never from a config file).
 *
 * `s3.credentials: auto` takes the first source that has credentials, in the SDKs' order:
 * 1. the variables the config names (`s3.accessKeyEnv` / `s3.secretKeyEnv`: CM2_S3_ACCESS_KEY / CM2_S3_SECRET_KEY);
 * 2. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, with AWS_SESSION_TOKEN;
 * 3. the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials), profile `s3.profile`,
 *    else AWS_PROFILE, else `default`;
 * 4. container credentials (ECS, EKS Pod Identity): AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI, with
 *    AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or AWS_CONTAINER_AUTHORIZATION_TOKEN;
 * 5. the EC2 instance role through IMDSv2 (AWS_EC2_METADATA_SERVICE_ENDPOINT, AWS_EC2_METADATA_DISABLED).
 * `env`, `profile`, `container` and `instance` pin one source (`env` = 1 then 2). When none has credentials the error
 * lists every source tried and why it had none.
 *
 * Credentials with an expiry (sources 4 and 5) are fetched again ahead of it: 5 minutes before, or half-way through
 * their lifetime when that is shorter; minio-js asks the provider before every request, so a refresh needs no
 * restart. Keys from variables or the file are read once (a session token there lasts as long as the process should). Secrets live in private fields only: they reach
 * no error message, no log line and no `util.inspect` output.
 */
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { CredentialProvider } from 'minio/dist/main/CredentialProvider.js';
import { Credentials } from 'minio/dist/main/Credentials.js';
import { z } from 'zod';
import { ConfigError, type S3Config } from '../run/config';

export type CredentialsConfig = Pick<S3Config, 'credentials' | 'profile' | 'accessKeyEnv' | 'secretKeyEnv'>;
type SourceKind = Exclude<S3Config['credentials'], 'auto'>;

/** Credentials, or why a source has none (`missing`); `source` names where they came from, never what they are. */
type Attempt =
  | { source: string; accessKey: string; secretKey: string; sessionToken?: string; expiration?: Date }
  | { source: string; missing: string };
type Found = Extract<Attempt, { accessKey: string }>;

/** No credentials (or none that could be refreshed). A ConfigError: the CLI prints it as a configuration problem. */
export class S3CredentialsError extends ConfigError {
  constructor(message: string) {
    super('s3.credentials', []);
    this.message = message;
    this.name = 'S3CredentialsError';
  }
}

// ---------------------------------------------------------------------------------------------------
// The sources

function fromVariables(env: NodeJS.ProcessEnv, accessName: string, secretName: string, tokenName?: string): Attempt {
  const source = `${accessName} / ${secretName}`;
  const accessKey = env[accessName];
  const secretKey = env[secretName];
  if (accessKey && secretKey) return { source, accessKey, secretKey, sessionToken: (tokenName && env[tokenName]) || undefined };
  const unset = [accessName, secretName].filter((n) => !env[n]);
  return { source, missing: unset.length === 2 ? 'not set' : `${unset[0]} is not set` };
}

function fromEnv(cfg: CredentialsConfig, env: NodeJS.ProcessEnv): Attempt[] {
  return [
    fromVariables(env, cfg.accessKeyEnv, cfg.secretKeyEnv),
    fromVariables(env, 'AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN'),
  ];
}

/** An INI file as the AWS CLI writes it: `[section]` headers, `key = value` lines, `#` and `;` comments. */
export function parseIni(text: string): Map<string, Record<string, string>> {
  const sections = new Map<string, Record<string, string>>();
  let current: Record<string, string> | undefined;
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith('#') || line.startsWith(';')) continue;
    const header = /^\[\s*([^\]]+?)\s*\]$/.exec(line);
    if (header) {
      current = sections.get(header[1]!) ?? {};
      sections.set(header[1]!, current);
      continue;
    }
    const eq = line.indexOf('=');
    if (current && eq > 0) current[line.slice(0, eq).trim().toLowerCase()] = line.slice(eq + 1).trim();
  }
  return sections;
}

const expandHome = (p: string, env: NodeJS.ProcessEnv) => (p.startsWith('~/') ? path.join(env['HOME'] || homedir(), p.slice(2)) : p);

/** The shared credentials file and profile the config and environment select. */
export function sharedCredentialsFile(cfg: Pick<S3Config, 'profile'>, env: NodeJS.ProcessEnv): { file: string; profile: string } {
  const file = expandHome(env['AWS_SHARED_CREDENTIALS_FILE'] || '~/.aws/credentials', env);
  return { file, profile: cfg.profile ?? (env['AWS_PROFILE'] || 'default') };
}

function fromSharedFile(cfg: CredentialsConfig, env: NodeJS.ProcessEnv): Attempt {
  const { file, profile } = sharedCredentialsFile(cfg, env);
  const source = `shared credentials file ${file}, profile "${profile}"`;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return { source, missing: code === 'ENOENT' ? 'no such file' : `cannot read it (${code ?? (e as Error).message})` };
  }
  const sections = parseIni(text);
  const p = sections.get(profile);
  if (!p) return { source, missing: `no [${profile}] section (profiles in the file: ${[...sections.keys()].join(', ') || 'none'})` };
  const accessKey = p['aws_access_key_id'];
  const secretKey = p['aws_secret_access_key'];
  if (accessKey && secretKey) return { source, accessKey, secretKey, sessionToken: p['aws_session_token'] || undefined };
  const unsupported = ['role_arn', 'credential_process', 'sso_session', 'sso_start_url', 'web_identity_token_file'].filter((k) => k in p);
  return {
    source,
    missing: unsupported.length
      ? `the profile uses ${unsupported.join(', ')}, which cm2 does not read: export its temporary keys instead (\`aws configure export-credentials --profile ${profile} --format env\`)`
      : 'the profile has no aws_access_key_id / aws_secret_access_key',
  };
}

/** The JSON of the container and instance credential endpoints (the instance one adds `Code`). */
const RemoteCredentials = z.object({
  Code: z.string().optional(),
  AccessKeyId: z.string().min(1),
  SecretAccessKey: z.string().min(1),
  Token: z.string().optional(),
  Expiration: z.string().optional(),
});

/** An HTTP exchange that fails with a short reason (status, timeout, connection error), never with the body. */
async function request(url: URL, init: RequestInit, timeoutMs: number): Promise<string> {
  let res: Response;
  try {
    res = await fetch(url, { ...init, redirect: 'error', signal: AbortSignal.timeout(timeoutMs) });
  } catch (e) {
    const err = e as Error & { cause?: { code?: string; message?: string } };
    if (err.name === 'TimeoutError' || err.name === 'AbortError') throw new Error(`no answer within ${timeoutMs / 1000}s`);
    throw new Error(`not reachable (${err.cause?.code ?? err.cause?.message ?? err.message})`);
  }
  const body = await res.text();
  const sentToken = Object.keys(init.headers ?? {}).some((h) => /^(authorization|x-aws-ec2-metadata-token)$/i.test(h));
  if (!res.ok) throw new Error(`HTTP ${res.status}${sentToken && (res.status === 401 || res.status === 403) ? ' (token refused)' : ''}`);
  return body;
}

function parseRemote(source: string, body: string): Attempt {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return { source, missing: 'the answer is not JSON' };
  }
  const parsed = RemoteCredentials.safeParse(json);
  if (!parsed.success) return { source, missing: 'the answer has no AccessKeyId / SecretAccessKey' };
  const c = parsed.data;
  if (c.Code !== undefined && c.Code !== 'Success') return { source, missing: `the answer says Code ${c.Code}` };
  const expiration = c.Expiration ? new Date(c.Expiration) : undefined;
  if (expiration && Number.isNaN(expiration.getTime())) return { source, missing: `Expiration is not a date` };
  return { source, accessKey: c.AccessKeyId, secretKey: c.SecretAccessKey, sessionToken: c.Token || undefined, ...(expiration ? { expiration } : {}) };
}

const ECS_HOST = 'http://169.254.170.2';
/** Hosts the SDKs accept a plain-http FULL_URI for: loopback, the ECS and EKS Pod Identity link-local addresses. */
const isAllowedHttpHost = (host: string) =>
  host === 'localhost' || /^127\.\d+\.\d+\.\d+$/.test(host) || ['[::1]', '169.254.170.2', '169.254.170.23', '[fd00:ec2::23]'].includes(host);

async function fromContainer(env: NodeJS.ProcessEnv, timeoutMs: number): Promise<Attempt> {
  const relative = env['AWS_CONTAINER_CREDENTIALS_RELATIVE_URI'];
  const full = env['AWS_CONTAINER_CREDENTIALS_FULL_URI'];
  if (!relative && !full) return { source: 'container credentials', missing: 'AWS_CONTAINER_CREDENTIALS_RELATIVE_URI / AWS_CONTAINER_CREDENTIALS_FULL_URI not set' };
  const url = relative ? new URL(relative, ECS_HOST) : URL.canParse(full!) ? new URL(full!) : undefined;
  if (!url) return { source: 'container credentials', missing: 'AWS_CONTAINER_CREDENTIALS_FULL_URI is not a URL' };
  const source = `container credentials at ${url.origin}`;
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && isAllowedHttpHost(url.hostname))) {
    return { source, missing: 'AWS_CONTAINER_CREDENTIALS_FULL_URI must be https://, or http:// to a loopback or the ECS/EKS link-local address' };
  }
  let token = env['AWS_CONTAINER_AUTHORIZATION_TOKEN'];
  const tokenFile = env['AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE'];
  try {
    if (tokenFile) token = readFileSync(tokenFile, 'utf8').trim();
  } catch (e) {
    return { source, missing: `cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE ${tokenFile} (${(e as NodeJS.ErrnoException).code})` };
  }
  if (token && /[\r\n]/.test(token)) return { source, missing: 'the authorization token contains a line break' };
  try {
    return parseRemote(source, await request(url, { headers: token ? { Authorization: token } : {} }, timeoutMs));
  } catch (e) {
    return { source, missing: (e as Error).message };
  }
}

async function fromInstance(env: NodeJS.ProcessEnv, timeoutMs: number): Promise<Attempt> {
  const base = (env['AWS_EC2_METADATA_SERVICE_ENDPOINT'] || 'http://169.254.169.254').replace(/\/+$/, '');
  const source = `EC2 instance role (IMDSv2 at ${base})`;
  if (env['AWS_EC2_METADATA_DISABLED']?.toLowerCase() === 'true') return { source, missing: 'AWS_EC2_METADATA_DISABLED is true' };
  try {
    const token = await request(new URL(`${base}/latest/api/token`), { method: 'PUT', headers: { 'x-aws-ec2-metadata-token-ttl-seconds': '21600' } }, timeoutMs);
    const headers = { 'x-aws-ec2-metadata-token': token };
    const listUrl = `${base}/latest/meta-data/iam/security-credentials/`;
    const roles = await request(new URL(listUrl), { headers }, timeoutMs).catch((e: Error) => {
      throw /HTTP 404/.test(e.message) ? new Error('no IAM role is attached to the instance') : e;
    });
    const role = roles.split(/\r?\n/).map((r) => r.trim()).find(Boolean);
    if (!role) return { source, missing: 'no IAM role is attached to the instance' };
    return parseRemote(`${source}, role ${role}`, await request(new URL(listUrl + encodeURIComponent(role)), { headers }, timeoutMs));
  } catch (e) {
    return { source, missing: (e as Error).message };
  }
}

// ---------------------------------------------------------------------------------------------------
// The chain

const REFRESH_AHEAD_MS = 5 * 60_000;

export interface ChainOptions {
  /** Clock (tests). */
  now?: () => number;
  /** Per HTTP request to a container or instance endpoint. */
  timeoutMs?: number;
}

/**
 * The minio-js credential provider of the store: resolves the configured source on first use, keeps what it found and
 * fetches temporary credentials again ahead of their expiry (concurrent requests share one fetch; a failed refresh
 * keeps credentials that are still valid and tries again on the next request).
 */
export class S3CredentialChain extends CredentialProvider {
  readonly #cfg: CredentialsConfig;
  readonly #env: NodeJS.ProcessEnv;
  readonly #now: () => number;
  readonly #timeoutMs: number;
  #current?: Found;
  #kind?: SourceKind;
  #refreshAt = -Infinity;
  #pending?: Promise<Found>;

  constructor(cfg: CredentialsConfig, env: NodeJS.ProcessEnv = process.env, opts: ChainOptions = {}) {
    super({ accessKey: '', secretKey: '' });
    this.#cfg = { credentials: cfg.credentials, profile: cfg.profile, accessKeyEnv: cfg.accessKeyEnv, secretKeyEnv: cfg.secretKeyEnv };
    this.#env = { ...env };
    this.#now = opts.now ?? Date.now;
    this.#timeoutMs = opts.timeoutMs ?? 2000;
  }

  /** Where the credentials in use came from (for messages), once resolved. */
  get source(): string | undefined {
    return this.#current?.source;
  }

  override async getCredentials(): Promise<Credentials> {
    const now = this.#now();
    if (!this.#current || now >= this.#refreshAt) {
      this.#pending ??= this.#resolve().finally(() => (this.#pending = undefined));
      try {
        await this.#pending;
      } catch (e) {
        const stillValid = this.#current && (!this.#current.expiration || now < this.#current.expiration.getTime());
        if (!stillValid) throw e;
      }
    }
    const c = this.#current!;
    return new Credentials({ accessKey: c.accessKey, secretKey: c.secretKey, sessionToken: c.sessionToken });
  }

  async #resolve(): Promise<Found> {
    const kinds: SourceKind[] = this.#kind ? [this.#kind] : this.#cfg.credentials === 'auto' ? ['env', 'profile', 'container', 'instance'] : [this.#cfg.credentials];
    const tried: Extract<Attempt, { missing: string }>[] = [];
    for (const kind of kinds) {
      for (const attempt of await this.#attempt(kind)) {
        if ('missing' in attempt) {
          tried.push(attempt);
          continue;
        }
        const fetchedAt = this.#now();
        const lifetime = attempt.expiration ? attempt.expiration.getTime() - fetchedAt : Infinity;
        this.#current = attempt;
        this.#kind = kind;
        this.#refreshAt = attempt.expiration ? attempt.expiration.getTime() - Math.min(REFRESH_AHEAD_MS, Math.max(0, lifetime) / 2) : Infinity;
        return attempt;
      }
    }
    const lines = tried.map((t, i) => `  ${i + 1}. ${t.source}: ${t.missing}`);
    if (this.#current) {
      throw new S3CredentialsError(`the S3 credentials from ${this.#current.source} expire at ${this.#current.expiration?.toISOString()} and could not be refreshed:\n${lines.join('\n')}`);
    }
    throw new S3CredentialsError(
      `no S3 credentials found (s3.credentials: ${this.#cfg.credentials}); tried, in order:\n${lines.join('\n')}\n` +
        `Export ${this.#cfg.accessKeyEnv} / ${this.#cfg.secretKeyEnv} (\`cm2 infra up\` writes them for its local MinIO), ` +
        'or provide AWS credentials in one of the other ways (docs/production-s3.md).',
    );
  }

  async #attempt(kind: SourceKind): Promise<Attempt[]> {
    switch (kind) {
      case 'env':
        return fromEnv(this.#cfg, this.#env);
      case 'profile':
        return [fromSharedFile(this.#cfg, this.#env)];
      case 'container':
        return [await fromContainer(this.#env, this.#timeoutMs)];
      case 'instance':
        return [await fromInstance(this.#env, this.#timeoutMs)];
    }
  }
}
