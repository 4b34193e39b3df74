/**
 * The PyTorch worker's own tests (python/cm2_torch/tests, Python's unittest) in the torch environment that
 * scripts/ensure-torch.mjs makes: the GRPO update against the golden fixture the tfjs trainer is checked against.
 * Skipped when that environment is missing, unless CM2_REQUIRE_TORCH=1 (CI sets it: .ci/run makes the environment).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { projectRoot } from '../../../src/infra/binaries';
import { torchPython } from '../../../scripts/ensure-torch.mjs';

const py = torchPython();
const why = py ? undefined : 'no PyTorch environment (node scripts/ensure-torch.mjs makes it)';
if (!py && process.env['CM2_REQUIRE_TORCH'] === '1') throw new Error(`CM2_REQUIRE_TORCH=1: ${why}`);

test('the PyTorch worker\'s tests pass (python/cm2_torch/tests)', { skip: why }, () => {
  const pkg = path.join(projectRoot, 'python', 'cm2_torch');
  const r = spawnSync(py!, ['-m', 'unittest', 'discover', '-s', path.join(pkg, 'tests'), '-t', pkg, '-v'], {
    cwd: pkg, encoding: 'utf8', env: { ...process.env, OMP_NUM_THREADS: process.env['OMP_NUM_THREADS'] ?? '2', PYTHONPATH: pkg }, timeout: 20 * 60_000,
  });
  const out = `${r.stdout}\n${r.stderr}`;
  assert.equal(r.status, 0, `python -m unittest exited ${r.status}:\n${out.split('\n').slice(-60).join('\n')}`);
  assert.match(out, /\nOK/);
});
