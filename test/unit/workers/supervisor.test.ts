/**
 * Worker supervision with real child processes (no servers needed): a child killed with SIGKILL (what an
 * out-of-memory kill does) is started again after a bounded back-off, `stop()` ends it for good, a child that keeps
 * dying makes the supervisor give up with the child's last lines, and a child notices its parent's death.
 */
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { DEFAULT_BACKOFF, exitText, restartDelayMs, SupervisedChild, SupervisedWorkers } from '../../../src/workers/supervisor';
import { isAlive } from '../../../src/infra/localInfra';
import type { RunningWorkers } from '../../../src/workers';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, check: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** A child that prints a ready line, then idles (or exits after `exitAfterMs`). */
const child = (script: string) => ({ name: 'test worker', command: process.execPath, args: ['-e', script], readyText: 'READY' });
const IDLE = `console.log('booting'); setTimeout(() => console.log('READY'), 20); setInterval(() => {}, 1000);`;

describe('restart back-off', () => {
  test('doubles from the initial delay and stays under the cap', () => {
    assert.deepEqual([1, 2, 3, 4, 5, 6, 7, 50].map((n) => restartDelayMs(n)), [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
    assert.equal(restartDelayMs(0), DEFAULT_BACKOFF.initialMs);
    assert.equal(restartDelayMs(3, { initialMs: 10, maxMs: 25 }), 25);
    assert.match(exitText(null, 'SIGKILL'), /SIGKILL \(an out-of-memory kill/);
    assert.equal(exitText(3, null), 'exited with code 3');
  });
});

describe('SupervisedChild', () => {
  test('a SIGKILLed child is restarted with a message; stop() ends it without a restart', async () => {
    const log: string[] = [];
    const s = await SupervisedChild.start(child(IDLE), { log: (l) => log.push(l), backoff: { initialMs: 50, maxMs: 200 } });
    const first = s.pid!;
    assert.ok(isAlive(first));
    process.kill(first, 'SIGKILL');
    await until('a restarted child', () => log.some((l) => l.includes('restarted')));
    assert.ok(s.pid !== undefined && s.pid !== first);
    assert.equal(s.restarts, 1);
    assert.ok(log.some((l) => /test worker \(pid \d+\) was killed by SIGKILL.*restarting it in 0s \(restart 1\)/.test(l)), log.join('\n'));
    assert.ok(log.some((l) => /test worker restarted \(pid \d+\)/.test(l)), log.join('\n'));
    const second = s.pid!;
    await s.stop(5000);
    assert.ok(!isAlive(second));
    await sleep(300);
    assert.equal(s.pid, undefined);
    assert.equal(s.restarts, 1, 'no restart after stop()');
  });

  test('a child that ignores SIGTERM is killed after the grace time', async () => {
    const s = await SupervisedChild.start(child(`process.on('SIGTERM', () => {}); ${IDLE}`), { log: () => undefined });
    const pid = s.pid!;
    const t0 = Date.now();
    await s.stop(300);
    assert.ok(!isAlive(pid));
    assert.ok(Date.now() - t0 < 10_000);
  });

  test('a child that keeps dying: the back-off grows, then the supervisor gives up with the last lines', async () => {
    const log: string[] = [];
    let gaveUp: Error | undefined;
    const s = await SupervisedChild.start(child(`console.log('READY'); console.error('boom: out of memory'); setTimeout(() => process.exit(3), 30);`), {
      log: (l) => log.push(l),
      onGiveUp: (e) => (gaveUp = e),
      backoff: { initialMs: 20, maxMs: 80, maxFailures: 4 },
    });
    await until('give-up', () => gaveUp !== undefined);
    assert.match(gaveUp!.message, /exited with code 3; it failed 4 times in a row, giving up/);
    assert.match(gaveUp!.message, /boom: out of memory/);
    const delays = log.filter((l) => l.includes('restarting it in')).length;
    assert.equal(delays, 4);
    assert.equal(s.restarts, 4);
    await s.stop();
  });

  test('a first start that fails rejects with the reason (no restart loop)', async () => {
    await assert.rejects(
      SupervisedChild.start(child(`console.error('cannot load config.yaml'); process.exit(2)`), { log: () => undefined }),
      /test worker exited with code 2 during start; its last lines:\ncannot load config\.yaml/,
    );
  });

  test('stop() during the first start ends the child and rejects the start', async () => {
    const s = new SupervisedChild(child(`setInterval(() => {}, 1000)`), { log: () => undefined });
    const started = s.begin();
    await sleep(200);
    await s.stop(2000);
    await assert.rejects(started, /was stopped during its start/);
  });

  test('a child with the IPC channel notices when its parent dies without stopping it', async () => {
    // parent → SupervisedChild → grandchild; the grandchild exits on 'disconnect' (as `cm2 worker` does).
    const grandchild = `process.channel && process.channel.unref(); process.once('disconnect', () => process.exit(0)); console.log('READY ' + process.pid); setInterval(() => {}, 1000);`;
    const parentScript = `
      require('tsx/cjs');
      const { SupervisedChild } = require(${JSON.stringify(require.resolve('../../../src/workers/supervisor'))});
      SupervisedChild.start({ name: 'g', command: process.execPath, args: ['-e', ${JSON.stringify(grandchild)}], readyText: 'READY' }, { log: () => {} })
        .then((s) => console.log('CHILD ' + s.pid));
      setInterval(() => {}, 1000);`;
    const parent = spawn(process.execPath, ['-e', parentScript], { stdio: ['ignore', 'pipe', 'inherit'], cwd: process.cwd() });
    let out = '';
    parent.stdout.on('data', (d: Buffer) => (out += d.toString()));
    await until('the grandchild', () => /CHILD \d+/.test(out));
    const pid = Number(/CHILD (\d+)/.exec(out)![1]);
    assert.ok(isAlive(pid));
    parent.kill('SIGKILL');
    await until('the orphan to exit', () => !isAlive(pid), 30_000);
  });
});

describe('SupervisedWorkers', () => {
  /** A fake worker set whose `done` settles when told to (the in-process Temporal workers' contract). */
  const fakeSet = () => {
    let fail!: (e: Error) => void;
    let resolve!: () => void;
    const done = new Promise<void>((res, rej) => {
      resolve = res;
      fail = rej;
    });
    const set: RunningWorkers = { workers: [], done, shutdown: async () => { resolve(); await done.catch(() => undefined); } };
    return { set, fail };
  };

  test('a failed set is started again; stop() shuts the current one down', async () => {
    const sets: ReturnType<typeof fakeSet>[] = [];
    const log: string[] = [];
    const s = await SupervisedWorkers.start('in-process workers', async () => {
      const f = fakeSet();
      sets.push(f);
      return f.set;
    }, { log: (l) => log.push(l), backoff: { initialMs: 10 } });
    sets[0]!.fail(new Error('connection lost'));
    await until('a second set', () => sets.length === 2);
    assert.ok(log.some((l) => /in-process workers failed: connection lost; restarting them in 0s/.test(l)), log.join('\n'));
    await s.stop(1000);
    await sleep(50);
    assert.equal(sets.length, 2, 'no restart after stop()');
  });
});
