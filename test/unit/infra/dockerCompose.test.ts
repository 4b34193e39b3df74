/**
 * docker-compose.yml (for users; there is no Docker engine here) holds the production rules: no default
 * credentials, host ports on 127.0.0.1 only, the Temporal frontend behind mTLS, every cm2 process a TLS client with
 * the payload codec on, and the cm2 commands it runs exist with the options it passes.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import YAML from 'yaml';
import { REPO } from '../../helpers/paths';

const text = readFileSync(path.join(REPO, 'docker-compose.yml'), 'utf8');
const compose = YAML.parse(text, { merge: true }) as { services: Record<string, { environment?: Record<string, string>; ports?: string[]; command?: string[]; build?: string; volumes?: string[] }> };

test('docker-compose.yml: no credential has a default value', () => {
  const defaults = [...text.matchAll(/\$\{(\w+):-([^}]*)\}/g)].filter(([, name, value]) => /PASSWORD|SECRET|KEY|TOKEN|PWD/.test(name!) && value !== '');
  assert.deepEqual(defaults.map(([m]) => m), []);
  for (const name of ['TEMPORAL_DB_PASSWORD', 'CM2_S3_ACCESS_KEY', 'CM2_S3_SECRET_KEY', 'CM2_CODEC_KEY']) {
    assert.match(text, new RegExp(`\\$\\{${name}:\\?`), `${name} is required`);
  }
});

test('docker-compose.yml: host ports on 127.0.0.1 only', () => {
  const ports = Object.entries(compose.services).flatMap(([name, s]) => (s.ports ?? []).map((p) => `${name} ${p}`));
  assert.ok(ports.length >= 5);
  assert.deepEqual(ports.filter((p) => !/ 127\.0\.0\.1:/.test(p)), []);
});

test('docker-compose.yml: the frontend requires client certificates; every cm2 process connects with TLS and the codec', () => {
  const t = compose.services['temporal']!.environment!;
  assert.equal(t['TEMPORAL_TLS_REQUIRE_CLIENT_AUTH'], 'true');
  const cm2Services = Object.entries(compose.services).filter(([, s]) => s.build === '.');
  assert.ok(cm2Services.length >= 5);
  for (const [name, s] of cm2Services) {
    const env = s.environment ?? {};
    assert.ok(env['CM2_CODEC_KEY'], `${name}: payload codec on`);
    if (name === 'codec-server') continue;
    for (const v of ['TEMPORAL_TLS_SERVER_CA_CERT_PATH', 'TEMPORAL_TLS_CLIENT_CERT_PATH', 'TEMPORAL_TLS_CLIENT_KEY_PATH', 'TEMPORAL_TLS_SERVER_NAME']) assert.ok(env[v], `${name}: ${v}`);
    assert.deepEqual(s.volumes, ['./certs:/certs:ro'], `${name}: the certificates are mounted`);
  }
  assert.equal(compose.services['temporal-ui']!.environment!['TEMPORAL_CODEC_ENDPOINT'], 'http://localhost:8888');
});

test('docker-compose.yml: the cm2 commands it runs take the options it passes', () => {
  const cli = (args: string[]) => execFileSync(process.execPath, [path.join(REPO, 'bin', 'cm2.js'), ...args, '--help'], { encoding: 'utf8' });
  for (const [name, s] of Object.entries(compose.services)) {
    if (s.build !== '.' || !s.command) continue;
    const [command, ...rest] = s.command;
    const help = cli([command!]);
    for (const opt of rest.filter((a) => a.startsWith('--'))) assert.ok(help.includes(opt), `${name}: cm2 ${command} takes ${opt}`);
  }
});
