/**
 * The object store: a thin layer over the `minio` client for any S3-compatible server.
 *
 * Large data never travels through Temporal payloads: activities write it here and pass `ObjectRef`s
 * (claim checks: key + content hash + size). Keys of a run live under `runs/<runId>/`; writes are
 * whole-object and therefore atomic, which is what makes "output exists ⇒ step done" a safe idempotency test.
 * Large objects (checkpoints of any size) go to and from local files as streams (`putFile`, `getFile`,
 * `getVerifiedFile`), hashed on the way, never whole in memory.
 *
 * The client (endpoint, addressing, TLS trust, credential sources, server-side encryption) is built from the config by
 * `makeS3Client` (s3Client.ts); every write carries the encryption headers of `s3.sse`.
 */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { rename, rm, stat } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { inspect } from 'node:util';
import type { Client } from 'minio';
import { z } from 'zod';
import type { S3Config } from '../run/config';
import { makeS3Client, explainS3Error } from './s3Client';

export const ObjectRef = z.object({
  key: z.string().min(1),
  sha256: z.string().length(64),
  bytes: z.number().int().nonnegative(),
});
export type ObjectRef = z.infer<typeof ObjectRef>;


export const sha256 = (data: Uint8Array | string): string => createHash('sha256').update(data).digest('hex');

/** Thrown when a key does not exist. */
export class NotFoundError extends Error {
  constructor(readonly key: string) {
    super(`object not found: ${key}`);
    this.name = 'NotFoundError';
  }
}

function isNotFound(err: unknown): boolean {
  const code = (err as { code?: string }).code;
  return code === 'NoSuchKey' || code === 'NotFound' || code === 'NoSuchObject';
}

/** sha256 and size of a stream's bytes, consumed as they come. */
async function hashStream(stream: NodeJS.ReadableStream): Promise<{ sha256: string; bytes: number }> {
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of stream) {
    const b = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
    hash.update(b);
    bytes += b.length;
  }
  return { sha256: hash.digest('hex'), bytes };
}

/** sha256 and size of a local file, read as a stream. */
export function sha256File(path: string): Promise<{ sha256: string; bytes: number }> {
  return hashStream(createReadStream(path));
}

async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : Buffer.from(chunk));
  return Buffer.concat(chunks);
}

export interface ObjectStoreOptions {
  /** Headers of every write (server-side encryption). */
  writeHeaders?: Record<string, string>;
  /** Region a missing bucket is created in (AWS wants it in the request outside us-east-1). */
  region?: string;
  /** Turns the failure of the first request into a clear error (TLS trust, credentials). */
  explainError?: (e: unknown) => unknown;
  /** Where the store is, for `util.inspect` and JSON (never the credentials the client holds). */
  endpoint?: string;
}

export class ObjectStore {
  private bucketChecked = false;

  constructor(readonly client: Client, readonly bucket: string, private readonly opts: ObjectStoreOptions = {}) {}

  /** The store of a config; `partSize` (bytes, >= 5 MiB) sets the part size of multipart uploads. */
  static fromConfig(cfg: S3Config, env: NodeJS.ProcessEnv = process.env, opts: { partSize?: number } = {}): ObjectStore {
    const conn = makeS3Client(cfg, env, opts);
    return new ObjectStore(conn.client, cfg.bucket, {
      writeHeaders: conn.writeHeaders,
      region: cfg.region,
      endpoint: cfg.endpoint,
      explainError: (e) => explainS3Error(e, conn),
    });
  }

  /** Creates the bucket if it is missing (idempotent, cached per instance). */
  async ensureBucket(): Promise<void> {
    if (this.bucketChecked) return;
    try {
      const exists = await this.client.bucketExists(this.bucket);
      if (!exists) {
        try {
          await this.client.makeBucket(this.bucket, this.opts.region ?? '');
        } catch (e) {
          // Another worker may have created it between our check and our call.
          const code = (e as { code?: string }).code;
          if (code !== 'BucketAlreadyOwnedByYou' && code !== 'BucketAlreadyExists') throw e;
        }
      }
    } catch (e) {
      throw this.opts.explainError?.(e) ?? e;
    }
    this.bucketChecked = true;
  }

  /** Bucket and endpoint only: the client holds credentials, which must not reach a log line. */
  toJSON(): { bucket: string; endpoint?: string } {
    return { bucket: this.bucket, ...(this.opts.endpoint ? { endpoint: this.opts.endpoint } : {}) };
  }

  [inspect.custom](): string {
    return `ObjectStore ${inspect(this.toJSON())}`;
  }

  /** `headers`: more request headers (a condition such as `If-None-Match`). */
  async putBytes(key: string, data: Uint8Array, contentType = 'application/octet-stream', headers: Record<string, string> = {}): Promise<ObjectRef> {
    await this.ensureBucket();
    const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    const hash = sha256(buf);
    await this.client.putObject(this.bucket, key, buf, buf.length, { ...this.opts.writeHeaders, 'Content-Type': contentType, 'x-amz-meta-sha256': hash, ...headers });
    return { key, sha256: hash, bytes: buf.length };
  }

  /**
   * Writes `data` at `key` only when no object is there (S3's conditional write, `If-None-Match: *`): false when one
   * was. Two writers of one key (an attempt that outlived its heartbeat timeout and its retry) cannot both land.
   */
  async putBytesIfAbsent(key: string, data: Uint8Array, contentType = 'application/octet-stream'): Promise<boolean> {
    try {
      await this.putBytes(key, data, contentType, { 'If-None-Match': '*' });
      return true;
    } catch (e) {
      const code = (e as { code?: string }).code;
      if (code === 'PreconditionFailed' || code === 'ConditionalRequestConflict') return false;
      throw e;
    }
  }

  /** `putBytesIfAbsent` of a value as JSON. */
  async putJsonIfAbsent(key: string, value: unknown): Promise<boolean> {
    return this.putBytesIfAbsent(key, Buffer.from(`${JSON.stringify(value, null, 1)}\n`), 'application/json');
  }

  async getBytes(key: string): Promise<Buffer> {
    await this.ensureBucket();
    try {
      return await readAll(await this.client.getObject(this.bucket, key));
    } catch (e) {
      if (isNotFound(e)) throw new NotFoundError(key);
      throw e;
    }
  }

  /** Reads an object and checks it against its reference's hash (detects torn or replaced objects). */
  async getVerified(ref: ObjectRef): Promise<Buffer> {
    const data = await this.getBytes(ref.key);
    const actual = sha256(data);
    if (actual !== ref.sha256) throw new Error(`hash mismatch for ${ref.key}: expected ${ref.sha256}, got ${actual}`);
    return data;
  }

  /**
   * Uploads a local file as a stream (multipart for large files). Its sha256 goes into the object's metadata and the
   * returned reference; pass `sha256` when the writer already computed it (else the file is hashed first).
   */
  async putFile(key: string, path: string, opts: { contentType?: string; sha256?: string } = {}): Promise<ObjectRef> {
    await this.ensureBucket();
    const { size } = await stat(path);
    const hash = opts.sha256 ?? (await sha256File(path)).sha256;
    await this.client.putObject(this.bucket, key, createReadStream(path), size, {
      ...this.opts.writeHeaders,
      'Content-Type': opts.contentType ?? 'application/octet-stream',
      'x-amz-meta-sha256': hash,
    });
    return { key, sha256: hash, bytes: size };
  }

  /**
   * Downloads an object into a local file as a stream, hashing it on the way (written to `<path>.partial`, then
   * renamed). Returns the object's sha256 and size.
   */
  async getFile(key: string, path: string): Promise<{ sha256: string; bytes: number }> {
    await this.ensureBucket();
    const partial = `${path}.partial`;
    const hash = createHash('sha256');
    let bytes = 0;
    try {
      const body = await this.client.getObject(this.bucket, key);
      await pipeline(
        body,
        async function* (source: AsyncIterable<Buffer>) {
          for await (const chunk of source) {
            hash.update(chunk);
            bytes += chunk.length;
            yield chunk;
          }
        },
        createWriteStream(partial),
      );
      await rename(partial, path);
    } catch (e) {
      await rm(partial, { force: true });
      if (isNotFound(e)) throw new NotFoundError(key);
      throw e;
    }
    return { sha256: hash.digest('hex'), bytes };
  }

  /** Downloads an object into a local file and checks it against its reference (the file is removed when it differs). */
  async getVerifiedFile(ref: ObjectRef, path: string): Promise<void> {
    const got = await this.getFile(ref.key, path);
    if (got.sha256 !== ref.sha256 || got.bytes !== ref.bytes) {
      await rm(path, { force: true });
      throw new Error(`hash mismatch for ${ref.key}: expected ${ref.sha256} (${ref.bytes} bytes), got ${got.sha256} (${got.bytes} bytes)`);
    }
  }

  putText(key: string, text: string, contentType = 'text/plain; charset=utf-8'): Promise<ObjectRef> {
    return this.putBytes(key, Buffer.from(text, 'utf8'), contentType);
  }

  async getText(key: string): Promise<string> {
    return (await this.getBytes(key)).toString('utf8');
  }

  putJson(key: string, value: unknown): Promise<ObjectRef> {
    return this.putText(key, JSON.stringify(value, null, 1) + '\n', 'application/json');
  }

  async getJson<T = unknown>(key: string, schema?: z.ZodType<T>): Promise<T> {
    const value: unknown = JSON.parse(await this.getText(key));
    if (!schema) return value as T;
    const parsed = schema.safeParse(value);
    if (!parsed.success) throw new Error(`s3://${this.bucket}/${key}: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    return parsed.data;
  }

  /** JSON Lines: one value per line. */
  putJsonl(key: string, rows: readonly unknown[]): Promise<ObjectRef> {
    return this.putText(key, rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : ''), 'application/x-ndjson');
  }

  async getJsonl<T = unknown>(key: string, schema?: z.ZodType<T>): Promise<T[]> {
    const text = await this.getText(key);
    const rows: T[] = [];
    for (const [i, line] of text.split('\n').entries()) {
      if (!line.trim()) continue;
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch (e) {
        throw new Error(`s3://${this.bucket}/${key} line ${i + 1}: not valid JSON: ${(e as Error).message}`);
      }
      if (schema) {
        const parsed = schema.safeParse(value);
        if (!parsed.success) {
          const issue = parsed.error.issues[0];
          throw new Error(`s3://${this.bucket}/${key} line ${i + 1}: ${issue?.path.join('.')}: ${issue?.message}`);
        }
        rows.push(parsed.data);
      } else rows.push(value as T);
    }
    return rows;
  }

  async exists(key: string): Promise<boolean> {
    await this.ensureBucket();
    try {
      await this.client.statObject(this.bucket, key);
      return true;
    } catch (e) {
      if (isNotFound(e)) return false;
      throw e;
    }
  }

  /** Stat of an existing object as a reference (hash from our metadata, else recomputed). */
  async ref(key: string): Promise<ObjectRef | undefined> {
    await this.ensureBucket();
    try {
      const stat = await this.client.statObject(this.bucket, key);
      const meta = stat.metaData as Record<string, string> | undefined;
      const hash = meta?.['sha256'] ?? meta?.['x-amz-meta-sha256'];
      if (hash && hash.length === 64) return { key, sha256: hash, bytes: stat.size };
      const computed = await hashStream(await this.client.getObject(this.bucket, key));
      return { key, ...computed };
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  /** Keys under a prefix, sorted. */
  async list(prefix: string): Promise<string[]> {
    await this.ensureBucket();
    const keys: string[] = [];
    const stream = this.client.listObjectsV2(this.bucket, prefix, true);
    for await (const item of stream as AsyncIterable<{ name?: string }>) if (item.name) keys.push(item.name);
    return keys.sort();
  }

  async remove(key: string): Promise<void> {
    await this.ensureBucket();
    await this.client.removeObject(this.bucket, key);
  }
}

/** The value of `read`, or undefined when the object it reads does not exist (other errors are thrown). */
export async function ifExists<T>(read: () => Promise<T>): Promise<T | undefined> {
  try {
    return await read();
  } catch (e) {
    if (e instanceof NotFoundError) return undefined;
    throw e;
  }
}

/** How often and how patiently `retryTransient` asks again. */
export interface RetryOptions {
  /** Tries in all (>= 1). */
  attempts?: number;
  /** Wait before the second try; doubled for each further one. */
  delayMs?: number;
}

/**
 * The value of `op`, asked again after errors that say nothing about the object (network errors, 5xx, timeouts):
 * up to `attempts` tries with doubling waits, then the last error is thrown. A NotFoundError is an answer, not a
 * failure to ask: it is thrown at once (so is a missing object's `undefined` returned at once).
 */
export async function retryTransient<T>(op: () => Promise<T>, opts: RetryOptions = {}): Promise<T> {
  const attempts = Math.max(1, opts.attempts ?? 4);
  const delayMs = opts.delayMs ?? 250;
  for (let i = 1; ; i++) {
    try {
      return await op();
    } catch (e) {
      if (e instanceof NotFoundError || i >= attempts) throw e;
      await new Promise((r) => setTimeout(r, delayMs * 2 ** (i - 1)));
    }
  }
}

/** The response-cache interface of the LLM client, backed by the store (`cache/llm/<hash>.json`). */
export function storeCache(store: ObjectStore, prefix = 'cache/llm') {
  return {
    get: (key: string): Promise<string | undefined> => ifExists(() => store.getText(`${prefix}/${key}.json`)),
    async put(key: string, value: string): Promise<void> {
      await store.putText(`${prefix}/${key}.json`, value, 'application/json');
    },
  };
}

/** The RL judge's verdict cache in the bucket (`cache/judge/<key>.json`), content-addressed by the judge. */
export function storeVerdictCache(store: ObjectStore) {
  const prefix = 'cache/judge';
  return {
    get: (key: string) => ifExists(() => store.getJson(`${prefix}/${key}.json`, z.object({ pass: z.boolean(), ok: z.boolean() }))),
    async put(key: string, v: { pass: boolean; ok: boolean }) {
      await store.putJson(`${prefix}/${key}.json`, v);
    },
  };
}
