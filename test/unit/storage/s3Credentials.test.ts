/**
 * The S3 credential chain (src/storage/s3Credentials.ts): the order of the sources, pinning one, the shared credentials
 * file and its profiles, container and instance endpoints (a real local HTTP server answering like them), refreshing
 * ahead of expiry, and the error that lists what was tried without a secret in it.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { inspect } from 'node:util';
import { S3Config } from '../../../src/run/config';
import { parseIni, S3CredentialChain, S3CredentialsError, sharedCredentialsFile } from '../../../src/storage/s3Credentials';
import { startFakeCredentialServer, type FakeCredentialServer, type ServedCredentials } from '../../helpers/fakeAwsCredentials';

const tmp = mkdtempSync(path.join(tmpdir(), 'cm2-s3-creds-'));
const credentialsFile = path.join(tmp, 'credentials');
writeFileSync(credentialsFile, [
  '# a comment',
  '[default]',
  'aws_access_key_id = file-default-id',
  'aws_secret_access_key = file-default-secret',
  '',
  '[team]',
  '; another comment',
  'aws_access_key_id=file-team-id',
  'aws_secret_access_key=file-team-secret',
  'aws_session_token = file-team-token',
  '[assume]',
  'role_arn = arn:aws:iam::123456789012:role/x',
  'source_profile = default',
].join('\n'));

/** An environment with no credential source but those a test adds (no ~/.aws, no instance metadata). */
const bare = (extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => ({ AWS_SHARED_CREDENTIALS_FILE: path.join(tmp, 'absent'), AWS_EC2_METADATA_DISABLED: 'true', ...extra });
const cfgOf = (over: Partial<S3Config> = {}) => S3Config.parse(over);
const resolve = async (chain: S3CredentialChain) => {
  const c = await chain.getCredentials();
  return { accessKey: c.getAccessKey(), secretKey: c.getSecretKey(), sessionToken: c.getSessionToken() as string | undefined, source: chain.source };
};

let serial = 0;
const dummy = (expiresInMs?: number, now = Date.now()): ServedCredentials => {
  serial++;
  return {
    AccessKeyId: `remote-id-${serial}`,
    SecretAccessKey: `remote-secret-${serial}`,
    Token: `remote-token-${serial}`,
    ...(expiresInMs !== undefined ? { Expiration: new Date(now + expiresInMs).toISOString() } : {}),
  };
};

let server: FakeCredentialServer;
let serve: () => ServedCredentials = () => dummy(3600_000);
before(async () => {
  server = await startFakeCredentialServer({ next: () => serve(), containerToken: 'container-auth-token' });
});
after(() => server.close());

const containerEnv = (extra: NodeJS.ProcessEnv = {}) =>
  bare({ AWS_CONTAINER_CREDENTIALS_FULL_URI: `${server.url}/creds`, AWS_CONTAINER_AUTHORIZATION_TOKEN: 'container-auth-token', ...extra });

test('parseIni reads sections, keys with or without spaces around =, and skips comments', () => {
  const ini = parseIni('top=ignored\n[a]\nk = v\n# c\n; c\n[ b c ]\nK2=v=2\r\n');
  assert.deepEqual([...ini.keys()], ['a', 'b c']);
  assert.deepEqual(ini.get('a'), { k: 'v' });
  assert.deepEqual(ini.get('b c'), { k2: 'v=2' });
});

describe('auto: the first source with credentials, in the AWS SDK order', () => {
  const all = {
    CM2_S3_ACCESS_KEY: 'cm2-id', CM2_S3_SECRET_KEY: 'cm2-secret',
    AWS_ACCESS_KEY_ID: 'aws-id', AWS_SECRET_ACCESS_KEY: 'aws-secret', AWS_SESSION_TOKEN: 'aws-token',
    AWS_SHARED_CREDENTIALS_FILE: credentialsFile,
  };
  test('the variables the config names come first', async () => {
    assert.deepEqual(await resolve(new S3CredentialChain(cfgOf(), containerEnv(all))), { accessKey: 'cm2-id', secretKey: 'cm2-secret', sessionToken: undefined, source: 'CM2_S3_ACCESS_KEY / CM2_S3_SECRET_KEY' });
    const renamed = cfgOf({ accessKeyEnv: 'MY_KEY', secretKeyEnv: 'MY_SECRET' });
    assert.equal((await resolve(new S3CredentialChain(renamed, containerEnv({ ...all, MY_KEY: 'k', MY_SECRET: 's' })))).accessKey, 'k');
  });
  test('then AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY with AWS_SESSION_TOKEN', async () => {
    const env = containerEnv({ ...all, CM2_S3_ACCESS_KEY: undefined, CM2_S3_SECRET_KEY: undefined });
    assert.deepEqual(await resolve(new S3CredentialChain(cfgOf(), env)), { accessKey: 'aws-id', secretKey: 'aws-secret', sessionToken: 'aws-token', source: 'AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY' });
  });
  test('then the shared credentials file, then container credentials, then the instance role', async () => {
    const fileOnly = containerEnv({ AWS_SHARED_CREDENTIALS_FILE: credentialsFile });
    assert.equal((await resolve(new S3CredentialChain(cfgOf(), fileOnly))).accessKey, 'file-default-id');
    const before = server.hits.container;
    const container = await resolve(new S3CredentialChain(cfgOf(), containerEnv()));
    assert.match(container.accessKey, /^remote-id-/);
    assert.match(container.sessionToken!, /^remote-token-/);
    assert.equal(container.source, `container credentials at ${server.url}`);
    assert.equal(server.hits.container, before + 1);
    const instance = await resolve(new S3CredentialChain(cfgOf(), bare({ AWS_EC2_METADATA_DISABLED: undefined, AWS_EC2_METADATA_SERVICE_ENDPOINT: server.url })));
    assert.match(instance.accessKey, /^remote-id-/);
    assert.equal(instance.source, `EC2 instance role (IMDSv2 at ${server.url}), role cm2-test-role`);
  });
});

describe('a pinned source is the only one read', () => {
  test('profile and container ignore the variables', async () => {
    const env = containerEnv({ CM2_S3_ACCESS_KEY: 'cm2-id', CM2_S3_SECRET_KEY: 'cm2-secret', AWS_SHARED_CREDENTIALS_FILE: credentialsFile });
    assert.equal((await resolve(new S3CredentialChain(cfgOf({ credentials: 'profile' }), env))).accessKey, 'file-default-id');
    assert.match((await resolve(new S3CredentialChain(cfgOf({ credentials: 'container' }), env))).accessKey, /^remote-id-/);
  });
  test('env reads the configured variables, then the AWS ones, and nothing else', async () => {
    const aws = { AWS_ACCESS_KEY_ID: 'aws-id', AWS_SECRET_ACCESS_KEY: 'aws-secret' };
    assert.equal((await resolve(new S3CredentialChain(cfgOf({ credentials: 'env' }), containerEnv(aws)))).accessKey, 'aws-id');
    await assert.rejects(resolve(new S3CredentialChain(cfgOf({ credentials: 'env' }), containerEnv({ AWS_SHARED_CREDENTIALS_FILE: credentialsFile }))), (e: Error) => {
      assert.ok(e instanceof S3CredentialsError);
      assert.match(e.message, /s3\.credentials: env/);
      assert.doesNotMatch(e.message, /container|shared credentials/);
      return true;
    });
  });
  test('instance with no role attached says so', async () => {
    const noRole = await startFakeCredentialServer({ next: () => dummy(), role: null });
    try {
      await assert.rejects(resolve(new S3CredentialChain(cfgOf({ credentials: 'instance' }), { AWS_EC2_METADATA_SERVICE_ENDPOINT: noRole.url })), /no IAM role is attached to the instance/);
    } finally {
      await noRole.close();
    }
  });
});

describe('the shared credentials file', () => {
  const env = (extra: NodeJS.ProcessEnv = {}) => bare({ AWS_SHARED_CREDENTIALS_FILE: credentialsFile, ...extra });
  test('profile: s3.profile, else AWS_PROFILE, else default; a session token is kept', async () => {
    assert.deepEqual(sharedCredentialsFile(cfgOf(), {}).profile, 'default');
    assert.equal(sharedCredentialsFile(cfgOf(), { HOME: '/home/u' }).file, '/home/u/.aws/credentials');
    assert.equal((await resolve(new S3CredentialChain(cfgOf(), env({ AWS_PROFILE: 'team' })))).sessionToken, 'file-team-token');
    const pinned = await resolve(new S3CredentialChain(cfgOf({ profile: 'team' }), env({ AWS_PROFILE: 'default' })));
    assert.deepEqual(pinned, { accessKey: 'file-team-id', secretKey: 'file-team-secret', sessionToken: 'file-team-token', source: `shared credentials file ${credentialsFile}, profile "team"` });
  });
  test('a missing profile names the profiles there; a role profile says how to export its keys', async () => {
    await assert.rejects(resolve(new S3CredentialChain(cfgOf({ credentials: 'profile', profile: 'nope' }), env())), /no \[nope\] section \(profiles in the file: default, team, assume\)/);
    await assert.rejects(resolve(new S3CredentialChain(cfgOf({ credentials: 'profile', profile: 'assume' }), env())), /uses role_arn, which cm2 does not read: export its temporary keys instead \(`aws configure export-credentials --profile assume --format env`\)/);
  });
});

describe('container credentials', () => {
  test('a wrong authorization token is refused; the token file wins over the variable', async () => {
    await assert.rejects(resolve(new S3CredentialChain(cfgOf({ credentials: 'container' }), containerEnv({ AWS_CONTAINER_AUTHORIZATION_TOKEN: 'wrong' }))), /HTTP 401 \(token refused\)/);
    const tokenFile = path.join(tmp, 'token');
    writeFileSync(tokenFile, 'container-auth-token\n');
    const c = await resolve(new S3CredentialChain(cfgOf({ credentials: 'container' }), containerEnv({ AWS_CONTAINER_AUTHORIZATION_TOKEN: 'wrong', AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE: tokenFile })));
    assert.match(c.accessKey, /^remote-id-/);
  });
  test('plain http only to a loopback or the ECS/EKS address; the relative URI goes to 169.254.170.2', async () => {
    const env = { AWS_CONTAINER_CREDENTIALS_FULL_URI: 'http://credentials.example.com/creds' };
    await assert.rejects(resolve(new S3CredentialChain(cfgOf({ credentials: 'container' }), env)), /must be https:\/\/, or http:\/\/ to a loopback or the ECS\/EKS link-local address/);
    const relative = new S3CredentialChain(cfgOf({ credentials: 'container' }), { AWS_CONTAINER_CREDENTIALS_RELATIVE_URI: '/v2/credentials/x' }, { timeoutMs: 300 });
    await assert.rejects(resolve(relative), /container credentials at http:\/\/169\.254\.170\.2: /);
  });
});

describe('refresh ahead of expiry', () => {
  test('5 minutes before expiry, or half-way through a shorter lifetime; concurrent requests share one fetch', async () => {
    let now = Date.parse('2030-01-01T00:00:00Z');
    serve = () => dummy(3600_000, now);
    const chain = new S3CredentialChain(cfgOf({ credentials: 'container' }), containerEnv(), { now: () => now });
    const start = server.hits.container;
    const first = await Promise.all([1, 2, 3, 4].map(() => resolve(chain)));
    assert.equal(server.hits.container, start + 1, 'one fetch for four concurrent requests');
    assert.equal(new Set(first.map((c) => c.accessKey)).size, 1);
    now += 54 * 60_000;
    assert.equal((await resolve(chain)).accessKey, first[0]!.accessKey, 'still 6 minutes left: no refresh');
    now += 2 * 60_000;
    const second = await resolve(chain);
    assert.notEqual(second.accessKey, first[0]!.accessKey, '4 minutes left: refreshed');
    assert.equal(server.hits.container, start + 2);

    serve = () => dummy(4 * 60_000, now); // a 4-minute lifetime: refreshed after 2
    now += 3600_000;
    const third = await resolve(chain);
    now += 90_000;
    assert.equal((await resolve(chain)).accessKey, third.accessKey);
    now += 60_000;
    assert.notEqual((await resolve(chain)).accessKey, third.accessKey);
  });

  test('a failed refresh keeps credentials that are still valid; once expired, the error says so', async () => {
    let now = Date.parse('2030-01-01T00:00:00Z');
    serve = () => dummy(10 * 60_000, now);
    const env = containerEnv();
    const chain = new S3CredentialChain(cfgOf(), env, { now: () => now });
    const first = await resolve(chain);
    serve = () => ({ AccessKeyId: '', SecretAccessKey: '' }); // the endpoint now answers garbage
    now += 8 * 60_000;
    assert.equal((await resolve(chain)).accessKey, first.accessKey);
    now += 3 * 60_000;
    await assert.rejects(resolve(chain), (e: Error) => {
      assert.ok(e instanceof S3CredentialsError);
      assert.match(e.message, /the S3 credentials from container credentials at .* expire at 2030-01-01T00:10:00\.000Z and could not be refreshed:\n {2}1\. container credentials at .*: the answer has no AccessKeyId \/ SecretAccessKey/);
      return true;
    });
    serve = () => dummy(3600_000);
  });
});

test('nothing found: the error lists every source tried, in order, and no secret', async () => {
  const env = bare({ CM2_S3_SECRET_KEY: 'half-set-secret-value', AWS_ACCESS_KEY_ID: 'lonely-id', AWS_CONTAINER_CREDENTIALS_FULL_URI: `${server.url}/creds`, AWS_CONTAINER_AUTHORIZATION_TOKEN: 'wrong-token-value' });
  const chain = new S3CredentialChain(cfgOf(), env);
  await assert.rejects(chain.getCredentials(), (e: Error) => {
    assert.ok(e instanceof S3CredentialsError);
    assert.equal(e.message.split('\n').slice(0, 6).join('\n'), [
      'no S3 credentials found (s3.credentials: auto); tried, in order:',
      '  1. CM2_S3_ACCESS_KEY / CM2_S3_SECRET_KEY: CM2_S3_ACCESS_KEY is not set',
      '  2. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY: AWS_SECRET_ACCESS_KEY is not set',
      `  3. shared credentials file ${path.join(tmp, 'absent')}, profile "default": no such file`,
      `  4. container credentials at ${server.url}: HTTP 401 (token refused)`,
      '  5. EC2 instance role (IMDSv2 at http://169.254.169.254): AWS_EC2_METADATA_DISABLED is true',
    ].join('\n'));
    for (const secret of ['half-set-secret-value', 'wrong-token-value']) assert.ok(!inspect(e, { depth: 10 }).includes(secret));
    return true;
  });
  const found = new S3CredentialChain(cfgOf(), bare({ CM2_S3_ACCESS_KEY: 'id', CM2_S3_SECRET_KEY: 'inspect-me-not' }));
  await found.getCredentials();
  assert.ok(!inspect(found, { depth: 10, showHidden: true }).includes('inspect-me-not'), 'the provider does not show the secret');
});
