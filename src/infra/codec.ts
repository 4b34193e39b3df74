/**
 * Encrypted payloads: a Temporal PayloadCodec with AES-256-GCM, on when `CM2_CODEC_KEY` is set.
 *
 * `CM2_CODEC_KEY` is a key ring: comma-separated entries `[id:]base64`, each 32 bytes of key. The first entry
 * encrypts; every entry decrypts, so keys rotate by putting the new key first (`CM2_CODEC_KEY=new:…,old:…`) and
 * dropping the old one once no open run needs it. An entry without an id gets one derived from the key (a hash,
 * never the key).
 *
 * An encrypted payload is the original Payload (protobuf bytes) as `iv(12) ‖ ciphertext ‖ tag(16)`, with metadata
 * `encoding: binary/encrypted`, `encryption-cipher: AES256-GCM`, `encryption-key-id: <id>`; the key id is also the
 * cipher's associated data, so a payload cannot be passed off under another key's id. Payloads without that
 * encoding (written before the codec was on) pass through decoding unchanged. Errors name key ids and entry
 * positions, never key material.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { ValueError, type DataConverter, type Payload, type PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';

export const CODEC_KEY_ENV = 'CM2_CODEC_KEY';
export const ENCRYPTED_ENCODING = 'binary/encrypted';
const CIPHER = 'AES256-GCM';
const IV_BYTES = 12;
const TAG_BYTES = 16;

export interface CodecKey {
  id: string;
  key: Buffer;
}

/** A bad `CM2_CODEC_KEY`: says which entry and why, without its content. */
export class CodecKeyError extends Error {
  constructor(message: string) {
    super(`${CODEC_KEY_ENV}: ${message}`);
    this.name = 'CodecKeyError';
  }
}

const utf8 = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array | null | undefined) => (b ? Buffer.from(b).toString('utf8') : '');

/** The id of a key given without one: a short hash of the key. */
export const derivedKeyId = (key: Buffer): string => `k${createHash('sha256').update('cm2-codec-key-id\0').update(key).digest('hex').slice(0, 12)}`;

/** Parses a key ring (`[id:]base64` entries, comma-separated); the first entry encrypts. */
export function parseKeyRing(value: string): CodecKey[] {
  const entries = value.split(',').map((e) => e.trim()).filter((e) => e !== '');
  if (entries.length === 0) throw new CodecKeyError('no key given');
  const ring: CodecKey[] = [];
  entries.forEach((entry, i) => {
    const colon = entry.indexOf(':');
    const id = colon >= 0 ? entry.slice(0, colon).trim() : undefined;
    const b64 = (colon >= 0 ? entry.slice(colon + 1) : entry).trim();
    const where = `entry ${i + 1}${id ? ` (id ${JSON.stringify(id)})` : ''}`;
    if (id !== undefined && !/^[A-Za-z0-9._-]{1,64}$/.test(id)) throw new CodecKeyError(`${where}: a key id is 1-64 letters, digits, '.', '_' or '-'`);
    if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(b64)) throw new CodecKeyError(`${where}: the key is not base64`);
    const key = Buffer.from(b64, 'base64');
    if (key.length !== 32) throw new CodecKeyError(`${where}: the key is ${key.length} bytes, AES-256 needs 32 (e.g. \`openssl rand -base64 32\`)`);
    const k = { id: id ?? derivedKeyId(key), key };
    if (ring.some((r) => r.id === k.id)) throw new CodecKeyError(`${where}: key id ${k.id} appears twice`);
    ring.push(k);
  });
  return ring;
}

/** AES-256-GCM payload codec over a key ring (the first key encrypts, all decrypt). */
export class AesGcmCodec implements PayloadCodec {
  private readonly byId: Map<string, Buffer>;
  readonly encryptingKeyId: string;

  constructor(private readonly ring: readonly CodecKey[]) {
    if (ring.length === 0) throw new CodecKeyError('no key given');
    this.byId = new Map(ring.map((k) => [k.id, k.key]));
    this.encryptingKeyId = ring[0]!.id;
  }

  get keyIds(): string[] {
    return this.ring.map((k) => k.id);
  }

  async encode(payloads: Payload[]): Promise<Payload[]> {
    const { id, key } = this.ring[0]!;
    return payloads.map((payload) => {
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      cipher.setAAD(utf8(id));
      const plain = temporal.api.common.v1.Payload.encode(payload).finish();
      const data = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
      return {
        metadata: { encoding: utf8(ENCRYPTED_ENCODING), 'encryption-cipher': utf8(CIPHER), 'encryption-key-id': utf8(id) },
        data: new Uint8Array(data),
      };
    });
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      if (text(payload.metadata?.['encoding']) !== ENCRYPTED_ENCODING) return payload;
      const id = text(payload.metadata?.['encryption-key-id']);
      const cipherName = text(payload.metadata?.['encryption-cipher']);
      if (cipherName !== CIPHER) throw new ValueError(`encrypted payload with cipher ${JSON.stringify(cipherName)}: this codec reads ${CIPHER}`);
      const key = this.byId.get(id);
      if (!key) {
        throw new ValueError(`payload encrypted with key id ${JSON.stringify(id)}, which is not in ${CODEC_KEY_ENV} (ids: ${this.keyIds.join(', ')}); add that key to the ring`);
      }
      const data = Buffer.from(payload.data ?? new Uint8Array());
      if (data.length < IV_BYTES + TAG_BYTES) throw new ValueError(`encrypted payload (key id ${id}) is too short: ${data.length} bytes`);
      const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES));
      decipher.setAAD(utf8(id));
      decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
      let plain: Buffer;
      try {
        plain = Buffer.concat([decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)), decipher.final()]);
      } catch {
        throw new ValueError(`encrypted payload (key id ${id}) does not authenticate: altered, or encrypted under another key with that id`);
      }
      return temporal.api.common.v1.Payload.decode(plain) as Payload;
    });
  }
}

/** The codec of an environment, or undefined when `CM2_CODEC_KEY` is not set. */
export function codecFromEnv(env: NodeJS.ProcessEnv = process.env): AesGcmCodec | undefined {
  const value = env[CODEC_KEY_ENV];
  return value ? new AesGcmCodec(parseKeyRing(value)) : undefined;
}

/**
 * The data converter of clients and workers when `CM2_CODEC_KEY` is set: the codec over every payload, and failure
 * messages and stack traces encoded as payloads (so they are encrypted too). Undefined when it is not set.
 */
export function codecDataConverter(env: NodeJS.ProcessEnv = process.env): DataConverter | undefined {
  const codec = codecFromEnv(env);
  if (!codec) return undefined;
  return { payloadCodecs: [codec], failureConverterPath: require.resolve('./failureConverter') };
}
