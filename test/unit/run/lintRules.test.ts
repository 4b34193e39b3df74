/**
 * The source layout's floors as lint rules (scripts/lint-rules.mjs): `npm run lint` fails an import that reaches up a
 * floor (shown by breaking one on purpose: the model importing a stage) and one that closes a circle of files.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ESLint } from 'eslint';
import tseslint from 'typescript-eslint';
import { cm2Plugin, FLOORS, layerViolation } from '../../../scripts/lint-rules.mjs';
import { REPO } from '../../helpers/paths';

test('floors: imports go down; rooms of one floor do not import each other; src/ stays in src/', () => {
  assert.equal(layerViolation('src/stages/rl/grpo.ts', 'src/model/net/qwen.ts'), undefined);
  assert.equal(layerViolation('src/stages/rl/grpo.ts', 'src/stages/checklist/schema.ts'), undefined);
  assert.equal(layerViolation('src/activities/index.ts', 'src/demo/world.ts'), undefined);
  assert.match(layerViolation('src/workflows/index.ts', 'src/demo/world.ts')!, /share a floor/);
  assert.match(layerViolation('src/model/net/qwen.ts', 'src/stages/rl/grpo.ts')!, /^model\/ \(floor 4\) may not import stages\/ \(floor 8\): imports go down$/);
  assert.match(layerViolation('src/stages/rl/activities.ts', 'src/demo/tools.ts')!, /may not import demo\//);
  assert.match(layerViolation('src/storage/store.ts', 'src/infra/temporal.ts')!, /share a floor/);
  assert.match(layerViolation('src/kernel/rng.ts', 'bench/soak.ts')!, /outside src/);
  assert.equal(layerViolation('src/infra/binaries.ts', 'scripts/ensure-servers.mjs'), undefined);
  assert.equal(layerViolation('test/unit/x.test.ts', 'src/cli/main.ts'), undefined, 'only src/ is held to the floors');
  // Every folder of src/ is on a floor.
  const rooms = new Set(FLOORS.flat());
  for (const name of ['kernel', 'chat', 'llm', 'run', 'model', 'storage', 'infra', 'report', 'stages', 'demo', 'workflows', 'activities', 'workers', 'cli']) assert.ok(rooms.has(name), name);
});

test('npm run lint fails a wrong-way import: the model importing a stage, broken on purpose', async () => {
  const eslint = new ESLint({ cwd: REPO });
  const file = path.join(REPO, 'src', 'model', 'net', 'qwen.ts');
  const text = `${readFileSync(file, 'utf8')}\nexport { GrpoTrainer } from '../../stages/rl/grpo';\n`;
  const [result] = await eslint.lintText(text, { filePath: file });
  const layers = result!.messages.filter((m) => m.ruleId === 'cm2/layers');
  assert.deepEqual(layers.map((m) => m.message), ['src/model/net/qwen.ts → ../../stages/rl/grpo: model/ (floor 4) may not import stages/ (floor 8): imports go down']);
  // The file as it is passes.
  const [clean] = await eslint.lintFiles([file]);
  assert.deepEqual(clean!.messages.filter((m) => m.ruleId?.startsWith('cm2/')), []);
});

test('a circle of imports fails, type-only imports included', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cm2-circles-'));
  try {
    mkdirSync(path.join(dir, 'src', 'model'), { recursive: true });
    writeFileSync(path.join(dir, 'src', 'model', 'a.ts'), "import type { B } from './b';\nexport interface A { b?: B }\n");
    writeFileSync(path.join(dir, 'src', 'model', 'b.ts'), "import type { A } from './a';\nexport interface B { a?: A }\n");
    writeFileSync(path.join(dir, 'src', 'model', 'c.ts'), "import type { A } from './a';\nexport type C = A;\n");
    const eslint = new ESLint({
      cwd: dir,
      overrideConfigFile: true,
      overrideConfig: [{ files: ['**/*.ts'], languageOptions: { parser: tseslint.parser as never }, plugins: { cm2: cm2Plugin }, rules: { 'cm2/layers': 'error', 'cm2/no-circles': 'error' } }],
    });
    const results = await eslint.lintFiles(['src/**/*.ts']);
    const byFile = Object.fromEntries(results.map((r) => [path.basename(r.filePath), r.messages.map((m) => `${m.ruleId}: ${m.message}`)]));
    assert.deepEqual(byFile, {
      'a.ts': ['cm2/no-circles: ./b closes a circle of imports: src/model/a.ts, src/model/b.ts'],
      'b.ts': ['cm2/no-circles: ./a closes a circle of imports: src/model/a.ts, src/model/b.ts'],
      'c.ts': [],
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
