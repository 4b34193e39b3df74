/**
 * A study in pieces (issue 30) on Temporal + MinIO at test scale: `scripts/rl-study.ts --results FILE` evaluates the
 * SFT policy and one RL run on the same held-out prompts, writes each piece to the file as it ends, skips what the
 * file already holds when run again, and remakes the Markdown block, the SVG charts and the HTML report from the file
 * alone (`--report-only`, no servers).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseStudyFile } from '../../src/report/studyFile';
import { testConfig, testStore, uniqueId } from '../helpers/env';
import { startChildWorker, writeConfigFile } from '../helpers/processes';
import { tinyRl, writeRlFixture } from '../helpers/rlFixture';

const root = path.resolve(__dirname, '..', '..');

function study(args: string[], env: NodeJS.ProcessEnv = process.env): string {
  const r = spawnSync(process.execPath, ['--require', 'tsx/cjs', path.join(root, 'scripts', 'rl-study.ts'), ...args], { cwd: root, env, encoding: 'utf8', timeout: 15 * 60_000 });
  const out = `${r.stdout}${r.stderr}`;
  assert.equal(r.status, 0, `rl-study ${args.join(' ')} failed:\n${out}`);
  return out;
}

test('rl-study --results: the SFT and one RL piece on the same held-out prompts, recorded as they end, skipped when done, shown from the file alone', async () => {
  const from = uniqueId('stf');
  const cfg = testConfig(from, { rl: tinyRl({ steps: 2, eval: { prompts: 3, validation: 2, every: 2 } }) });
  const store = testStore(cfg);
  await writeRlFixture(cfg, store);
  // what a LoRA SFT run leaves (runs/<from>/sft/adapter): exported into the repository by the first piece
  await store.putJson(`runs/${from}/sft/adapter/adapter_config.json`, { peft_type: 'LORA', r: 8 });
  await store.putBytes(`runs/${from}/sft/adapter/adapter_model.safetensors`, Buffer.from('weights'));
  const cfgFile = writeConfigFile(cfg);
  const dir = mkdtempSync(path.join(tmpdir(), 'cm2-study-'));
  const file = path.join(dir, 'tiny-study.json');
  const doc = path.join(dir, 'results.md');
  const id = uniqueId('st');
  const common = ['-c', cfgFile, '--from', from, '--id', id, '--results', file, '--seeds', '1', '--granularities', 'trajectory', '--no-bfcl', '--doc', doc];
  const worker = await startChildWorker(cfgFile);
  try {
    const adapterDir = path.join(dir, 'sft-adapter');
    study([...common, '--pieces', 'sft', '--sft-adapter', adapterDir]);
    assert.deepEqual(JSON.parse(readFileSync(path.join(adapterDir, 'adapter_config.json'), 'utf8')), { peft_type: 'LORA', r: 8 });
    assert.equal(readFileSync(path.join(adapterDir, 'adapter_model.safetensors'), 'utf8'), 'weights');
    let f = parseStudyFile(readFileSync(file, 'utf8'), file);
    assert.deepEqual(Object.keys(f.policies), ['sft'], 'only the piece asked for');
    assert.equal(f.prompts.length, 3);
    const sft = f.policies.sft!;
    assert.equal(sft.kind, 'sft');
    assert.equal(sft.runId, `${id}-sft`);
    assert.match(sft.commit ?? '', /^[0-9a-f]{12}(\+dirty)?$|^unknown$/);
    assert.ok(sft.machine && sft.recordedAt);

    const out = study(common);
    assert.match(out, /this time: trajectory-s1\b/, 'the SFT piece is skipped: the file has it');
    f = parseStudyFile(readFileSync(file, 'utf8'), file);
    assert.deepEqual(Object.keys(f.policies), ['sft', 'trajectory-s1']);
    const rl = f.policies['trajectory-s1']!;
    assert.deepEqual([rl.kind, rl.granularity, rl.seed, rl.steps, rl.from], ['rl', 'trajectory', 1, 2, 'sft']);
    assert.deepEqual(Object.keys(rl.heldOut).sort(), [...f.prompts].sort(), 'the same held-out prompts');
    assert.deepEqual(rl.train?.map((t) => t.step), [1, 2]);
    assert.equal((rl.config.rl as { hp: { granularity: string } }).hp.granularity, 'trajectory');
    assert.equal(sft.heldOut[f.prompts[0]!], f.policies.sft!.heldOut[f.prompts[0]!], 'the SFT piece is not redone');

    assert.match(study(common), /this time: nothing/);

    // The search: the SFT baseline and one run with an lr override, on the validation prompts only.
    study([...common, '--search', 'sft']);
    study([...common, '--search', 'lr-high', '--note', 'a test run'], { ...process.env, CM2_CFG__rl__hp__lr: '0.005', CM2_CFG__rl__steps: '1' });
    f = parseStudyFile(readFileSync(file, 'utf8'), file);
    assert.deepEqual(Object.keys(f.searches), ['sft', 'lr-high']);
    assert.equal(f.validationPrompts.length, 2);
    assert.ok(f.validationPrompts.every((u) => !f.prompts.includes(u)), 'validation prompts are not held-out prompts');
    const s = f.searches['lr-high']!;
    assert.deepEqual([s.steps, (s.settings.hp as { lr: number }).lr, s.note], [1, 0.005, 'a test run']);
    assert.deepEqual(Object.keys(s.validation).sort(), [...f.validationPrompts].sort());
    assert.equal(f.searches.sft!.steps, 0);
    assert.match(study([...common, '--search', 'lr-high']), /search lr-high: recorded already/);
    // the episode digests: the last evaluation's episodes and each training step's groups, and their diagnosis
    assert.deepEqual(s.digests?.eval.map((d) => d.uuid).sort(), [...f.validationPrompts].sort());
    assert.deepEqual(s.digests?.steps.map((x) => x.step), [1]);
    assert.ok(s.digests!.steps[0]!.groups.every((g) => g.contrast && g.members.length === cfg.rl.groupSize && g.members.every((m) => typeof m.reward === 'number')));
    assert.ok(f.searches.sft!.digests?.eval.length === 2 && f.searches.sft!.digests.steps.length === 0);
    assert.match(readFileSync(path.join(dir, 'tiny-study-digests.md'), 'utf8'), /## search lr-high\n[\s\S]*\| 1 \| \d+ \|[\s\S]*Validation prompts \(evaluation after step 1\)/);
    // a run recorded without digests (before they existed) gets them from a rerun with the same settings
    const bare0 = JSON.parse(readFileSync(file, 'utf8')) as { searches: Record<string, { digests?: unknown; note?: string }> };
    delete bare0.searches['lr-high']!.digests;
    writeFileSync(file, JSON.stringify(bare0));
    assert.throws(() => study([...common, '--search', 'lr-high', '--digests'], { ...process.env, CM2_CFG__rl__steps: '1' }), /the settings differ from the recorded run's/);
    study([...common, '--search', 'lr-high', '--digests'], { ...process.env, CM2_CFG__rl__hp__lr: '0.005', CM2_CFG__rl__steps: '1' });
    f = parseStudyFile(readFileSync(file, 'utf8'), file);
    assert.deepEqual(Object.keys(f.searches), ['sft', 'lr-high']);
    assert.deepEqual(f.searches['lr-high']!.digests, s.digests);
    assert.match(f.searches['lr-high']!.note ?? '', /^a test run; rerun for its episode digests \(.*\): every validation reward the same$/);
    const text = readFileSync(doc, 'utf8');
    assert.match(text, /<!-- study:tiny-study -->/);
    assert.match(text, /\| trajectory-s1 \| RL, trajectory, seed 1 \| sft \| 2 \|/);
    assert.match(text, /!\[tiny-study-paired\]\(tiny-study-paired\.svg\)/);
    assert.match(text, /Hyperparameter search: 2 validation prompts/);
    assert.match(text, /\| lr-high \| 0\.005 \| 1 \|/);
    for (const chart of ['heldout', 'paired', 'curves']) assert.ok(existsSync(path.join(dir, `tiny-study-${chart}.svg`)), chart);
  } finally {
    await worker.kill();
  }
  // From the file alone: no Temporal, no S3 in the environment.
  const bare = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(TEMPORAL_|CM2_S3_|AWS_)/.test(k)));
  const doc2 = path.join(dir, 'again.md');
  study(['--results', file, '--report-only', '--doc', doc2], bare);
  assert.match(readFileSync(doc2, 'utf8'), /\| sft \| sft \|/);
  assert.ok(existsSync(path.join(root, '.cm2', 'reports', 'tiny-study', 'report.html')));
});
