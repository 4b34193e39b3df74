/**
 * The S3 settings beyond the local MinIO (src/storage/s3Client.ts, the `s3` section of src/run/config.ts): addressing
 * style, encryption headers, the CA file, the checks of the config, and the errors a first request turns into.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { inspect } from 'node:util';
import { applyEnvOverrides, ConfigError, parseConfig, S3Config } from '../../../src/run/config';
import { makeS3Client, explainS3Error, readCaFile, sseHeaders, usesPathStyle } from '../../../src/storage/s3Client';
import { S3CredentialsError } from '../../../src/storage/s3Credentials';
import { ObjectStore } from '../../../src/storage/store';
import { REPO } from '../../helpers/paths';

const CA = path.join(REPO, 'test', 'fixtures', 'tls', 'ca.pem');
const s3 = (over: Record<string, unknown>) => parseConfig({ run: { id: 'r' }, s3: over }).s3;
const issuesOf = (over: Record<string, unknown>): string[] => {
  try {
    s3(over);
  } catch (e) {
    assert.ok(e instanceof ConfigError);
    return e.issues.map((i) => `${i.path}: ${i.message}`);
  }
  return [];
};

/** The host and path minio-js would send a request for `key` to (its own request builder). */
function requestTarget(cfg: S3Config, key: string): { host: string; path: string } {
  const { client } = makeS3Client(cfg, {});
  const opts = (client as unknown as { getRequestOptions(o: object): { host: string; path: string } }).getRequestOptions({ method: 'GET', bucketName: cfg.bucket, objectName: key, region: cfg.region });
  return { host: opts.host, path: opts.path };
}

describe('addressing style', () => {
  test('path style by default, virtual-hosted for AWS endpoints; s3.pathStyle overrides either', () => {
    assert.equal(usesPathStyle(S3Config.parse({})), true);
    assert.equal(usesPathStyle(s3({ endpoint: 'https://minio.internal:9000' })), true);
    assert.equal(usesPathStyle(s3({ endpoint: 'https://s3.eu-west-1.amazonaws.com', region: 'eu-west-1' })), false);
    assert.equal(usesPathStyle(s3({ endpoint: 'https://s3.cn-north-1.amazonaws.com.cn', region: 'cn-north-1' })), false);
    assert.equal(usesPathStyle(s3({ endpoint: 'https://s3.eu-west-1.amazonaws.com', region: 'eu-west-1', pathStyle: true })), true);
    assert.equal(usesPathStyle(s3({ endpoint: 'https://storage.internal', pathStyle: false })), false);
  });
  test('the requests go to bucket.host/key (virtual-hosted) or host/bucket/key (path style)', () => {
    assert.deepEqual(requestTarget(s3({ endpoint: 'https://s3.eu-west-1.amazonaws.com', region: 'eu-west-1', bucket: 'my-runs' }), 'runs/a.json'),
      { host: 'my-runs.s3.eu-west-1.amazonaws.com', path: '/runs/a.json' });
    assert.deepEqual(requestTarget(s3({ endpoint: 'https://minio.internal:9443', bucket: 'my-runs' }), 'runs/a.json'),
      { host: 'minio.internal', path: '/my-runs/runs/a.json' });
  });
});

test('server-side encryption headers: none, AES256, aws:kms with and without a key', () => {
  assert.deepEqual(sseHeaders(S3Config.parse({})), {});
  assert.deepEqual(sseHeaders(S3Config.parse({ sse: 'AES256' })), { 'x-amz-server-side-encryption': 'AES256' });
  assert.deepEqual(sseHeaders(S3Config.parse({ sse: 'aws:kms' })), { 'x-amz-server-side-encryption': 'aws:kms' });
  assert.deepEqual(sseHeaders(S3Config.parse({ sse: 'aws:kms', kmsKeyId: 'alias/cm2' })),
    { 'x-amz-server-side-encryption': 'aws:kms', 'x-amz-server-side-encryption-aws-kms-key-id': 'alias/cm2' });
});

describe('config checks', () => {
  test('defaults keep the local MinIO working as before', () => {
    const d = S3Config.parse({});
    assert.deepEqual({ credentials: d.credentials, sse: d.sse, pathStyle: d.pathStyle, caFile: d.caFile, profile: d.profile },
      { credentials: 'auto', sse: 'none', pathStyle: undefined, caFile: undefined, profile: undefined });
  });
  test('contradictions and mistakes name the field', () => {
    assert.deepEqual(issuesOf({ kmsKeyId: 'k' }), ['s3.kmsKeyId: is only used with sse: aws:kms (sse is none)']);
    assert.deepEqual(issuesOf({ caFile: CA }), ['s3.caFile: is set but the endpoint http://127.0.0.1:9000 is not https://']);
    assert.deepEqual(issuesOf({ endpoint: 'https://s3.eu-west-1.amazonaws.com' }),
      ['s3.region: us-east-1 differs from the region of the endpoint s3.eu-west-1.amazonaws.com (eu-west-1): set s3.region: eu-west-1']);
    assert.match(issuesOf({ endpoint: 'https://minio.internal/cm2' }).join(), /s3\.endpoint: .*without a path/);
    assert.match(issuesOf({ endpoint: 'ftp://minio.internal' }).join(), /s3\.endpoint: .*http:\/\/ or https:\/\//);
    assert.match(issuesOf({ credentials: 'sso' }).join(), /s3\.credentials: /);
    assert.match(issuesOf({ sse: 'aes256' }).join(), /s3\.sse: /);
  });
  test('CM2_S3_CA_FILE sets s3.caFile', () => {
    const raw = applyEnvOverrides({ run: { id: 'r' }, s3: { endpoint: 'https://minio.internal' } }, { CM2_S3_CA_FILE: CA });
    assert.equal(parseConfig(raw).s3.caFile, CA);
  });
});

describe('the CA file', () => {
  const tmp = mkdtempSync(path.join(tmpdir(), 'cm2-ca-'));
  test('is read and checked when the client is made', () => {
    assert.equal(readCaFile(CA, 's3.caFile').length, 1);
    const conn = makeS3Client(s3({ endpoint: 'https://127.0.0.1:9443', caFile: CA }), {});
    assert.deepEqual(conn.ca, { file: CA, from: 's3.caFile' });
  });
  test('AWS_CA_BUNDLE is used when s3.caFile is unset, and only for https', () => {
    assert.deepEqual(makeS3Client(s3({ endpoint: 'https://127.0.0.1:9443' }), { AWS_CA_BUNDLE: CA }).ca, { file: CA, from: 'AWS_CA_BUNDLE' });
    assert.equal(makeS3Client(s3({}), { AWS_CA_BUNDLE: path.join(tmp, 'absent.pem') }).ca, undefined);
  });
  test('a missing file or one without a certificate is a ConfigError naming the file and the setting', () => {
    const notPem = path.join(tmp, 'not.pem');
    writeFileSync(notPem, 'hello');
    assert.throws(() => makeS3Client(s3({ endpoint: 'https://h', caFile: path.join(tmp, 'absent.pem') }), {}),
      (e: Error) => e instanceof ConfigError && /s3\.caFile: cannot read the CA file .*absent\.pem \(ENOENT\)/.test(e.message));
    assert.throws(() => makeS3Client(s3({ endpoint: 'https://h' }), { AWS_CA_BUNDLE: notPem }),
      (e: Error) => e instanceof ConfigError && /AWS_CA_BUNDLE: .*not\.pem holds no PEM certificate/.test(e.message));
  });
});

describe('errors of a first request', () => {
  const conn = makeS3Client(s3({ endpoint: 'https://127.0.0.1:9443' }), {});
  const tlsError = (code: string) => Object.assign(new Error('unable to verify the first certificate'), { code });
  test('an untrusted certificate says what to set, and that verification stays on', () => {
    const e = explainS3Error(tlsError('UNABLE_TO_VERIFY_LEAF_SIGNATURE'), conn) as Error & { code: string };
    assert.equal(e.code, 'UNABLE_TO_VERIFY_LEAF_SIGNATURE');
    assert.match(e.message, /^S3 endpoint https:\/\/127\.0\.0\.1:9443: the certificate is not trusted \(UNABLE_TO_VERIFY_LEAF_SIGNATURE: .*set s3\.caFile \(or CM2_S3_CA_FILE, or AWS_CA_BUNDLE\).*never turned off/);
    assert.match((explainS3Error(tlsError('ERR_TLS_CERT_ALTNAME_INVALID'), conn) as Error).message, /the certificate is not for this host/);
    const withCa = makeS3Client(s3({ endpoint: 'https://127.0.0.1:9443', caFile: CA }), {});
    assert.match((explainS3Error(tlsError('SELF_SIGNED_CERT_IN_CHAIN'), withCa) as Error).message, /The CA file .*ca\.pem \(s3\.caFile, trusted besides the built-in roots\) does not vouch for it/);
  });
  test('a credentials error of the provider comes out as itself; other errors pass unchanged', () => {
    const own = new S3CredentialsError('no S3 credentials found');
    assert.equal(explainS3Error(new Error(`Unable to get credentials: ${own}`, { cause: own }), conn), own);
    const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    assert.equal(explainS3Error(refused, conn), refused);
    const denied = explainS3Error(Object.assign(new Error('The AWS Access Key Id you provided does not exist'), { code: 'InvalidAccessKeyId' }), conn) as Error;
    assert.match(denied.message, /InvalidAccessKeyId: .* \(credentials from the configured source\)$/);
  });
});

test('a store shows its bucket and endpoint, never the credentials its client holds', async () => {
  const store = ObjectStore.fromConfig(s3({ bucket: 'b-inspect' }), { CM2_S3_ACCESS_KEY: 'id', CM2_S3_SECRET_KEY: 'store-secret-value' });
  await (store.client as unknown as { checkAndRefreshCreds(): Promise<void> }).checkAndRefreshCreds(); // the client now holds the keys
  assert.equal(inspect(store), "ObjectStore { bucket: 'b-inspect', endpoint: 'http://127.0.0.1:9000' }");
  assert.equal(JSON.stringify({ store }), '{"store":{"bucket":"b-inspect","endpoint":"http://127.0.0.1:9000"}}');
  assert.ok(!inspect({ nested: { store } }, { depth: 10 }).includes('store-secret-value'));
});
