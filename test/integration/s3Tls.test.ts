/**
 * S3 beyond the local MinIO, against a real MinIO of its own behind TLS (test/helpers/tlsMinio.ts, with a static KMS
 * key): https with a private CA, the TLS errors without it, every credential source (the configured variables, the
 * AWS variables, a shared credentials file with a named profile, a container endpoint and IMDSv2, both served by a real
 * local HTTP server handing out real STS credentials of that MinIO), refresh before expiry, server-side encryption on
 * single and multipart uploads, and no secret in any error, log line or inspected object.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { inspect } from 'node:util';
import { AssumeRoleProvider } from 'minio/dist/main/AssumeRoleProvider.js';
import { parseConfig, type S3Config } from '../../src/run/config';
import { ObjectStore, sha256File } from '../../src/storage/store';
import { startFakeCredentialServer, type FakeCredentialServer, type ServedCredentials } from '../helpers/fakeAwsCredentials';
import { CA_FILE, OTHER_CA_FILE, startTlsMinio, type TlsMinio } from '../helpers/tlsMinio';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { projectRoot } from '../../src/infra/binaries';
import { torchPython } from '../../scripts/ensure-torch.mjs';

const torchPy = torchPython();

const BUCKET = 'cm2-tls';
const CONTAINER_TOKEN = 'container-token-for-the-test';
const tmp = mkdtempSync(path.join(tmpdir(), 'cm2-s3-tls-'));
let minio: TlsMinio;
let fake: FakeCredentialServer;
let serve: () => Promise<ServedCredentials>;

/** Every secret handed out, every error seen and every console line: checked for leaks by the last test. */
const secrets = new Set<string>([CONTAINER_TOKEN]);
const errors: unknown[] = [];
let logged = '';
const consoleMethods = ['log', 'info', 'warn', 'error', 'debug'] as const;
const originalConsole = Object.fromEntries(consoleMethods.map((m) => [m, console[m]]));

before(async () => {
  for (const m of consoleMethods) {
    console[m] = (...args: unknown[]) => {
      logged += inspect(args, { depth: 10 }) + '\n';
      originalConsole[m]!(...args);
    };
  }
  minio = await startTlsMinio({ kms: true });
  secrets.add(minio.rootPassword);
  serve = () => stsCredentials();
  fake = await startFakeCredentialServer({ next: () => serve(), containerToken: CONTAINER_TOKEN });
});

after(async () => {
  for (const m of consoleMethods) console[m] = originalConsole[m]!;
  await fake?.close();
  await minio?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

/** Real temporary credentials of the MinIO (STS AssumeRole), served as expiring `expiresInMs` from now. */
async function stsCredentials(expiresInMs = 15 * 60_000): Promise<ServedCredentials> {
  const sts = new AssumeRoleProvider({
    stsEndpoint: minio.endpoint, accessKey: minio.rootUser, secretKey: minio.rootPassword,
    transportAgent: new https.Agent({ ca: readFileSync(CA_FILE) }),
  });
  const c = await sts.getCredentials();
  secrets.add(c.getSecretKey()).add(c.getSessionToken()!);
  return { AccessKeyId: c.getAccessKey(), SecretAccessKey: c.getSecretKey(), Token: c.getSessionToken(), Expiration: new Date(Date.now() + expiresInMs).toISOString() };
}

const cfgFor = (over: Record<string, unknown> = {}): S3Config =>
  parseConfig({ run: { id: 'tls' }, s3: { endpoint: minio.endpoint, bucket: BUCKET, pathStyle: true, caFile: CA_FILE, ...over } }).s3;
/** An environment with no credential source but those a test adds (no ~/.aws, no instance metadata). */
const bare = (extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => ({ AWS_SHARED_CREDENTIALS_FILE: path.join(tmp, 'absent'), AWS_EC2_METADATA_DISABLED: 'true', ...extra });
const rootEnv = () => bare({ CM2_S3_ACCESS_KEY: minio.rootUser, CM2_S3_SECRET_KEY: minio.rootPassword });

async function roundTrip(store: ObjectStore, name: string): Promise<void> {
  const key = `t/${name}.json`;
  await store.putJson(key, { name });
  assert.deepEqual(await store.getJson(key), { name });
}

/** Awaits a rejection, keeps the error for the leak check and returns it. */
async function failure(p: Promise<unknown>): Promise<Error & { code?: string }> {
  try {
    await p;
  } catch (e) {
    errors.push(e);
    return e as Error & { code?: string };
  }
  assert.fail('expected a rejection');
}

describe('https with a private CA', () => {
  test('s3.caFile: the store works over https, path style', async () => {
    const store = ObjectStore.fromConfig(cfgFor(), rootEnv());
    await roundTrip(store, 'ca-file');
    const file = path.join(tmp, 'blob.bin');
    writeFileSync(file, Buffer.alloc(300_000, 7));
    const ref = await store.putFile('t/blob.bin', file);
    await store.getVerifiedFile(ref, path.join(tmp, 'blob.out'));
    assert.deepEqual(await store.list('t/'), ['t/blob.bin', 't/ca-file.json']);
  });

  test('the PyTorch worker\'s store (python/cm2_torch) over https with s3.caFile; refused without it', { skip: torchPy ? undefined : 'no PyTorch environment' }, async () => {
    const file = path.join(tmp, 'pt.yaml');
    const yaml = (ca: string | undefined) => `s3:\n  endpoint: ${minio.endpoint}\n  bucket: ${BUCKET}\n${ca ? `  caFile: ${ca}\n` : ''}`;
    const script = 'import sys\nfrom cm2_torch.config import load_settings\nfrom cm2_torch.store import Store\ns = Store(load_settings(sys.argv[1]))\n'
      + 's.put_json("py/py.json", {"from": "python"})\nprint(s.get_json("py/py.json"), s.list("py/"))\n';
    const runPy = (ca: string | undefined) => {
      writeFileSync(file, yaml(ca));
      return promisify(execFile)(torchPy!, ['-c', script, file], { env: { ...process.env, ...rootEnv(), CM2_S3_ENDPOINT: minio.endpoint, CM2_S3_BUCKET: BUCKET, PYTHONPATH: path.join(projectRoot, 'python', 'cm2_torch') }, encoding: 'utf8' });
    };
    const ok = await runPy(CA_FILE);
    assert.match(ok.stdout, /\{'from': 'python'\} \['py\/py.json'\]/);
    assert.deepEqual(await ObjectStore.fromConfig(cfgFor(), rootEnv()).getJson('py/py.json'), { from: 'python' });
    await assert.rejects(runPy(undefined), (e: Error & { stderr?: string }) => {
      assert.match(e.stderr ?? '', /CERTIFICATE_VERIFY_FAILED|certificate verify failed/);
      assert.ok(!(e.stderr ?? '').includes(minio.rootPassword), 'no secret in the error');
      return true;
    });
  });

  test('AWS_CA_BUNDLE is trusted when s3.caFile is unset', async () => {
    await roundTrip(ObjectStore.fromConfig(cfgFor({ caFile: undefined }), { ...rootEnv(), AWS_CA_BUNDLE: CA_FILE }), 'ca-bundle');
  });

  test('without the CA, or with another one, the first request fails at once with a TLS error saying what to set', async () => {
    const t0 = Date.now();
    const noCa = await failure(ObjectStore.fromConfig(cfgFor({ caFile: undefined }), rootEnv()).getText('t/ca-file.json'));
    assert.ok(Date.now() - t0 < 10_000, 'no hang');
    assert.match(noCa.code!, /^(UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT_LOCALLY)$/);
    assert.match(noCa.message, new RegExp(`^S3 endpoint ${minio.endpoint}: the certificate is not trusted \\(${noCa.code}: .*set s3\\.caFile \\(or CM2_S3_CA_FILE, or AWS_CA_BUNDLE\\) to the PEM file of the CA\\. Certificate verification is never turned off\\.$`));
    const otherCa = await failure(ObjectStore.fromConfig(cfgFor({ caFile: OTHER_CA_FILE }), rootEnv()).getText('t/ca-file.json'));
    assert.match(otherCa.message, /the certificate is not trusted .*The CA file .*other-ca\.pem \(s3\.caFile, trusted besides the built-in roots\) does not vouch for it/);
  });

  test('https to a server that speaks plain http fails with a handshake error, not a hang', { skip: !process.env['CM2_S3_ENDPOINT'] }, async () => {
    const plain = process.env['CM2_S3_ENDPOINT']!.replace(/^http:/, 'https:');
    const e = await failure(ObjectStore.fromConfig(cfgFor({ endpoint: plain }), rootEnv()).exists('x'));
    assert.match(e.message, /the TLS handshake failed \(does the server speak https\?\)/);
  });
});

describe('credential sources', () => {
  test('AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN (temporary credentials)', async () => {
    const c = await stsCredentials();
    await roundTrip(ObjectStore.fromConfig(cfgFor(), bare({ AWS_ACCESS_KEY_ID: c.AccessKeyId, AWS_SECRET_ACCESS_KEY: c.SecretAccessKey, AWS_SESSION_TOKEN: c.Token })), 'aws-env');
    const noToken = await failure(ObjectStore.fromConfig(cfgFor(), bare({ AWS_ACCESS_KEY_ID: c.AccessKeyId, AWS_SECRET_ACCESS_KEY: c.SecretAccessKey })).exists('x'));
    assert.match(noToken.message, /\(credentials from AWS_ACCESS_KEY_ID \/ AWS_SECRET_ACCESS_KEY\)$/);
  });

  test('a shared credentials file with a named profile (s3.profile over AWS_PROFILE)', async () => {
    const c = await stsCredentials();
    const file = path.join(tmp, 'credentials');
    writeFileSync(file, `[default]\naws_access_key_id = nobody\naws_secret_access_key = wrong-secret-in-default\n\n[cm2-test]\naws_access_key_id = ${c.AccessKeyId}\naws_secret_access_key = ${c.SecretAccessKey}\naws_session_token = ${c.Token}\n`);
    secrets.add('wrong-secret-in-default');
    const env = bare({ AWS_SHARED_CREDENTIALS_FILE: file });
    await roundTrip(ObjectStore.fromConfig(cfgFor(), { ...env, AWS_PROFILE: 'cm2-test' }), 'profile-env');
    await roundTrip(ObjectStore.fromConfig(cfgFor({ credentials: 'profile', profile: 'cm2-test' }), { ...env, AWS_PROFILE: 'default' }), 'profile-config');
    const wrong = await failure(ObjectStore.fromConfig(cfgFor(), env).exists('x'));
    assert.match(wrong.code!, /^(InvalidAccessKeyId|AccessDenied)$/); // a HEAD request gets a bare 403
    assert.match(wrong.message, new RegExp(`\\(credentials from shared credentials file ${file}, profile "default"\\)$`));
  });

  test('container credentials: the token is sent, the credentials are refreshed before they expire', async () => {
    serve = () => stsCredentials(4000); // a 4 s lifetime: fetched again after 2 s
    const env = bare({ AWS_CONTAINER_CREDENTIALS_FULL_URI: `${fake.url}/creds`, AWS_CONTAINER_AUTHORIZATION_TOKEN: CONTAINER_TOKEN });
    const store = ObjectStore.fromConfig(cfgFor(), env);
    const hits0 = fake.hits.container;
    await roundTrip(store, 'container');
    const hits1 = fake.hits.container;
    assert.ok(hits1 > hits0);
    await sleep(2500);
    await roundTrip(store, 'container');
    assert.ok(fake.hits.container > hits1, 'fetched again before the expiry');
    serve = async () => ({ AccessKeyId: 'cm2-refreshed-id', SecretAccessKey: 'refreshed-wrong-secret', Expiration: new Date(Date.now() + 4000).toISOString() });
    secrets.add('refreshed-wrong-secret');
    await sleep(2500);
    assert.equal((await failure(store.getText('t/container.json'))).code, 'InvalidAccessKeyId', 'the refreshed credentials are the ones sent');
    serve = () => stsCredentials();

    const refused = fake.refused;
    const badToken = await failure(ObjectStore.fromConfig(cfgFor({ credentials: 'container' }), { ...env, AWS_CONTAINER_AUTHORIZATION_TOKEN: 'not-the-token' }).exists('x'));
    assert.equal(fake.refused, refused + 1);
    assert.equal(badToken.name, 'S3CredentialsError');
    assert.match(badToken.message, new RegExp(`1\\. container credentials at ${fake.url}: HTTP 401 \\(token refused\\)`));
  });

  test('the EC2 instance role through IMDSv2', async () => {
    const hits = fake.hits.instance;
    await roundTrip(ObjectStore.fromConfig(cfgFor(), bare({ AWS_EC2_METADATA_DISABLED: undefined, AWS_EC2_METADATA_SERVICE_ENDPOINT: fake.url })), 'instance');
    assert.equal(fake.hits.instance, hits + 1);
  });

  test('no source: the first request fails with the list of what was tried', async () => {
    const e = await failure(ObjectStore.fromConfig(cfgFor(), bare({ CM2_S3_SECRET_KEY: minio.rootPassword })).exists('x'));
    assert.equal(e.name, 'S3CredentialsError');
    assert.match(e.message, /^no S3 credentials found \(s3\.credentials: auto\); tried, in order:\n {2}1\. CM2_S3_ACCESS_KEY \/ CM2_S3_SECRET_KEY: CM2_S3_ACCESS_KEY is not set\n {2}2\. AWS_ACCESS_KEY_ID/);
  });
});

describe('server-side encryption (MinIO with a static KMS key)', () => {
  test('AES256 on a single PUT and on a multipart upload: the objects are stored encrypted', async () => {
    const store = ObjectStore.fromConfig(cfgFor({ sse: 'AES256' }), rootEnv(), { partSize: 5 * 1024 * 1024 });
    await store.putText('sse/small.txt', 'secret-free text');
    const small = await store.client.statObject(BUCKET, 'sse/small.txt');
    assert.equal(small.metaData['x-amz-server-side-encryption'], 'AES256');
    const file = path.join(tmp, 'large.bin');
    writeFileSync(file, Buffer.alloc(11 * 1024 * 1024, 3));
    const ref = await store.putFile('sse/large.bin', file);
    assert.equal(ref.sha256, (await sha256File(file)).sha256);
    const large = await store.client.statObject(BUCKET, 'sse/large.bin');
    assert.equal(large.metaData['x-amz-server-side-encryption'], 'AES256');
    assert.match(large.etag, /-3$/, 'uploaded in 3 parts');
    await store.getVerifiedFile(ref, path.join(tmp, 'large.out'));
  });

  test('aws:kms with s3.kmsKeyId; an unknown key is refused by the server', async () => {
    const store = ObjectStore.fromConfig(cfgFor({ sse: 'aws:kms', kmsKeyId: minio.kmsKey }), rootEnv());
    await store.putJson('sse/kms.json', { kms: true });
    const st = await store.client.statObject(BUCKET, 'sse/kms.json');
    assert.equal(st.metaData['x-amz-server-side-encryption'], 'aws:kms');
    assert.match(st.metaData['x-amz-server-side-encryption-aws-kms-key-id'], new RegExp(`${minio.kmsKey}$`));
    assert.deepEqual(await store.getJson('sse/kms.json'), { kms: true });
    const unknown = await failure(ObjectStore.fromConfig(cfgFor({ sse: 'aws:kms', kmsKeyId: 'no-such-key' }), rootEnv()).putText('sse/x.txt', 'x'));
    assert.match(unknown.message, /key .* does not exist|KeyNotFound/i);
  });
});

test('no secret in any error, log line or inspected store', async () => {
  const store = ObjectStore.fromConfig(cfgFor(), rootEnv());
  await roundTrip(store, 'inspect');
  const shown = [inspect(store, { depth: 10 }), JSON.stringify(store), logged, ...errors.map((e) => inspect(e, { depth: 10 }))].join('\n');
  assert.ok(errors.length >= 8, `errors collected: ${errors.length}`);
  for (const secret of secrets) assert.ok(!shown.includes(secret), `a secret (${secret.length} chars) leaked`);
});
