/** test/helpers/leftovers: a test file stopped by the runner (SIGTERM) takes the processes it started with it. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test('SIGTERM to a test process SIGKILLs the children it tracked, not those it untracked', async () => {
  const helper = path.resolve(__dirname, '..', '..', 'helpers', 'leftovers.ts');
  const script = `
    const { spawn } = require('node:child_process');
    const { track, untrack } = require(${JSON.stringify(helper)});
    const a = spawn('sleep', ['300'], { detached: true, stdio: 'ignore' });
    const b = spawn('sleep', ['300'], { detached: true, stdio: 'ignore' });
    track(a.pid); track(b.pid); untrack(b.pid);
    console.log(JSON.stringify([a.pid, b.pid]));
    setInterval(() => {}, 1000);`;
  const proc = spawn(process.execPath, ['--import', 'tsx', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const pids = await new Promise<number[]>((resolve) => proc.stdout.once('data', (d: Buffer) => resolve(JSON.parse(d.toString()) as number[])));
  const [tracked, untracked] = pids as [number, number];
  try {
    assert.ok(alive(tracked) && alive(untracked));
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    proc.kill('SIGTERM');
    assert.equal(await exited, 143);
    for (let i = 0; i < 50 && alive(tracked); i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(alive(tracked), false, 'the tracked child is gone');
    assert.equal(alive(untracked), true, 'the untracked one is left alone');
  } finally {
    for (const pid of pids) if (alive(pid)) process.kill(pid, 'SIGKILL');
  }
});
