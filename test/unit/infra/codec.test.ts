import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { AesGcmCodec, codecDataConverter, CodecKeyError, derivedKeyId, ENCRYPTED_ENCODING, parseKeyRing } from '../../../src/infra/codec';

const b64 = () => randomBytes(32).toString('base64');
const payload = (v: unknown): Payload => defaultPayloadConverter.toPayload(v);
const value = (p: Payload): unknown => defaultPayloadConverter.fromPayload(p);
const meta = (p: Payload, k: string) => Buffer.from(p.metadata?.[k] ?? new Uint8Array()).toString();

describe('payload codec (AES-256-GCM)', () => {
  test('round-trips any payload; the ciphertext holds no plaintext; each encoding uses a fresh IV', async () => {
    const codec = new AesGcmCodec(parseKeyRing(`a:${b64()}`));
    const input = [payload({ prompt: 'PLAINTEXT-MARKER', n: 3 }), payload(null), payload('x'.repeat(10_000))];
    const enc = await codec.encode(input);
    for (const p of enc) {
      assert.equal(meta(p, 'encoding'), ENCRYPTED_ENCODING);
      assert.equal(meta(p, 'encryption-key-id'), 'a');
      assert.ok(!Buffer.from(p.data!).toString('latin1').includes('PLAINTEXT-MARKER'));
      assert.ok(!Object.values(p.metadata ?? {}).some((m) => Buffer.from(m).toString().includes('json/plain')), 'the inner encoding is hidden too');
    }
    assert.deepEqual((await codec.decode(enc)).map(value), input.map(value));
    const again = await codec.encode([input[0]!]);
    assert.notDeepEqual(Buffer.from(again[0]!.data!), Buffer.from(enc[0]!.data!));
  });

  test('a ring decrypts with every key and encrypts with the first (rotation A → {B, A})', async () => {
    const a = b64();
    const b = b64();
    const underA = await new AesGcmCodec(parseKeyRing(`A:${a}`)).encode([payload({ step: 1 })]);
    const rotated = new AesGcmCodec(parseKeyRing(`B:${b},A:${a}`));
    assert.deepEqual(value((await rotated.decode(underA))[0]!), { step: 1 });
    assert.equal(meta((await rotated.encode([payload(2)]))[0]!, 'encryption-key-id'), 'B');
    // A worker that only has B cannot read A's payloads, and says which key is missing.
    await assert.rejects(new AesGcmCodec(parseKeyRing(`B:${b}`)).decode(underA), /key id "A", which is not in CM2_CODEC_KEY \(ids: B\)/);
  });

  test('unencrypted payloads (written before the codec was on) pass through decoding', async () => {
    const codec = new AesGcmCodec(parseKeyRing(b64()));
    const plain = payload({ old: true });
    assert.deepEqual(await codec.decode([plain]), [plain]);
  });

  test('a changed byte, a swapped key id or another key under the same id fails authentication', async () => {
    const k = b64();
    const codec = new AesGcmCodec(parseKeyRing(`a:${k},b:${b64()}`));
    const [p] = await codec.encode([payload('secret')]);
    const flipped = Buffer.from(p!.data!);
    flipped[20] = flipped[20]! ^ 1;
    await assert.rejects(codec.decode([{ ...p!, data: flipped }]), /does not authenticate/);
    await assert.rejects(codec.decode([{ ...p!, metadata: { ...p!.metadata, 'encryption-key-id': Buffer.from('b') } }]), /does not authenticate/);
    await assert.rejects(new AesGcmCodec(parseKeyRing(`a:${b64()}`)).decode([p!]), /does not authenticate/);
  });

  test('key ring: ids derived from the key when not given; clear errors that never show the key', () => {
    const k = b64();
    const [derived] = parseKeyRing(` ${k} `);
    assert.equal(derived!.id, derivedKeyId(Buffer.from(k, 'base64')));
    assert.match(derived!.id, /^k[0-9a-f]{12}$/);
    const short = randomBytes(16).toString('base64');
    const cases: [string, RegExp][] = [
      ['', /no key given/],
      [`a:${short}`, /entry 1 \(id "a"\): the key is 16 bytes, AES-256 needs 32/],
      [`a:${k},a:${b64()}`, /entry 2 \(id "a"\): key id a appears twice/],
      [`a:${k},b:not base64!`, /entry 2 \(id "b"\): the key is not base64/],
      [`bad id:${k}`, /entry 1 .*a key id is 1-64 letters/],
    ];
    for (const [ring, re] of cases) {
      assert.throws(() => parseKeyRing(ring), (e: unknown) => {
        assert.ok(e instanceof CodecKeyError);
        assert.match(e.message, re);
        assert.ok(!e.message.includes(k) && !e.message.includes(short), 'no key material in the message');
        return true;
      });
    }
  });

  test('the data converter is on only with CM2_CODEC_KEY, and encodes failure messages too', () => {
    assert.equal(codecDataConverter({}), undefined);
    const dc = codecDataConverter({ CM2_CODEC_KEY: b64() })!;
    assert.equal(dc.payloadCodecs?.length, 1);
    const { failureConverter } = require(dc.failureConverterPath!) as typeof import('../../../src/infra/failureConverter');
    assert.equal(failureConverter.options.encodeCommonAttributes, true);
  });
});
