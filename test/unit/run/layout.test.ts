/**
 * The source layout's rules (README, "Source layout"), checked on the code: one folder per stage, dependencies that
 * point down, workflows that import only what is safe in the workflow sandbox, and no file over 500 lines.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { REPO } from '../../helpers/paths';
import { layerViolation } from '../../../scripts/lint-rules.mjs';

const src = path.join(REPO, 'src');

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    return statSync(full).isDirectory() ? files(full) : name.endsWith('.ts') ? [full] : [];
  });
}

interface Import {
  /** Path of the imported module relative to src/ (without .ts), or the package name. */
  target: string;
  /** `import type …`, or every named binding marked `type`. */
  typeOnly: boolean;
  text: string;
}

function importsOf(file: string): Import[] {
  const text = readFileSync(file, 'utf8');
  const out: Import[] = [];
  for (const m of text.matchAll(/^(?:import|export)\s+(type\s+)?([^;]*?)\s+from\s+'([^']+)';/gms)) {
    const [whole, typeKw, bindings, spec] = m as unknown as [string, string | undefined, string, string];
    const names = /\{([^}]*)\}/.exec(bindings)?.[1]?.split(',').map((s) => s.trim()).filter(Boolean) ?? [];
    const typeOnly = typeKw !== undefined || (names.length > 0 && !/^\s*\w+\s*,|\*/.test(bindings) && names.every((n) => n.startsWith('type ')));
    const target = spec.startsWith('.') ? path.relative(src, path.resolve(path.dirname(file), spec)).replace(/\\/g, '/').replace(/\.ts$/, '') : spec;
    out.push({ target, typeOnly, text: whole.split('\n')[0]! });
  }
  return out;
}

const all = files(src).map((f) => ({ rel: path.relative(src, f).replace(/\\/g, '/'), imports: importsOf(f), lines: readFileSync(f, 'utf8').split('\n').length }));
const under = (rel: string, ...dirs: string[]) => dirs.some((d) => rel === d || rel.startsWith(`${d}/`));
const isWorkflow = (rel: string) => /^stages\/[^/]+\/workflow\.ts$/.test(rel) || rel === 'workflows/index.ts';
/**
 * A stage's activities: `activities.ts`, their inputs and outputs (`shapes.ts`), an activity's body as a plain function
 * (`<name>Activity.ts`), the shared kit.
 */
const isActivities = (rel: string) => /^stages\/[^/]+\/(activities|shapes|\w+Activity)\.ts$/.test(rel) || rel === 'stages/activityKit.ts';

function violations(check: (file: (typeof all)[number], imp: Import) => string | undefined): string[] {
  const out: string[] = [];
  for (const f of all) for (const imp of f.imports) {
    const why = check(f, imp);
    if (why) out.push(`${f.rel}: ${imp.text} (${why})`);
  }
  return out;
}

test('every CM2 stage is one folder with its method modules, activities.ts and workflow.ts', () => {
  for (const stage of ['prepare', 'checklist', 'sft', 'rl', 'eval', 'pipeline']) {
    const have = readdirSync(path.join(src, 'stages', stage));
    assert.ok(have.includes('activities.ts') && have.includes('workflow.ts'), `stages/${stage}: ${have.join(', ')}`);
  }
});

test('no file in src/ is over 500 lines', () => {
  assert.deepEqual(all.filter((f) => f.lines > 500).map((f) => `${f.rel}: ${f.lines} lines`), []);
});

test('workflows import values only from kernel/, run/ and @temporalio/workflow; anything else as types only', () => {
  const bad = violations((f, imp) => {
    if (!isWorkflow(f.rel) || imp.typeOnly) return undefined;
    if (imp.target === '@temporalio/workflow' || under(imp.target, 'kernel', 'run')) return undefined;
    if (f.rel === 'workflows/index.ts' && /^stages\/[^/]+\/workflow$/.test(imp.target)) return undefined; // the bundle's entry re-exports them
    return 'a value a workflow may not import';
  });
  assert.deepEqual(bad, []);
});

test('what workflows import from kernel/ and run/ is safe in the workflow sandbox (no Node modules, no I/O)', () => {
  const sandboxed = new Set(all.filter((f) => isWorkflow(f.rel)).flatMap((f) => f.imports.filter((i) => !i.typeOnly && under(i.target, 'kernel', 'run')).map((i) => i.target)));
  const seen = new Set<string>();
  const bad: string[] = [];
  const visit = (rel: string) => {
    if (seen.has(rel)) return;
    seen.add(rel);
    const f = all.find((x) => x.rel === `${rel}.ts`);
    if (!f) return;
    for (const imp of f.imports) {
      if (imp.typeOnly) continue;
      if (imp.target.startsWith('node:') || ['yaml', 'minio', 'openai'].includes(imp.target)) bad.push(`${f.rel}: ${imp.text}`);
      else if (!imp.target.startsWith('@') && under(imp.target, 'kernel', 'run', 'llm', 'stages', 'model', 'storage', 'infra', 'demo', 'cli', 'chat', 'report')) visit(imp.target);
    }
  };
  for (const m of sandboxed) visit(m);
  assert.deepEqual(bad, []);
});

test('method modules import neither infrastructure, storage, the demo world, the CLI nor activities and workflows', () => {
  const bad = violations((f, imp) => {
    if (!f.rel.startsWith('stages/') || isWorkflow(f.rel) || isActivities(f.rel)) return undefined;
    if (under(imp.target, 'infra', 'storage', 'demo', 'cli', 'worker')) return 'method → infrastructure/demo';
    if (/\/(activities|workflow)$/.test(imp.target) || imp.target === 'stages/activityKit') return 'method → activities/workflow';
    return undefined;
  });
  assert.deepEqual(bad, []);
});

test('lower layers do not reach up: every import in src/ goes down the floors that `npm run lint` holds (scripts/lint-rules.mjs)', () => {
  const inRepo = (target: string) => (target.startsWith('../') ? path.posix.normalize(`src/${target}`) : all.some((x) => x.rel === `${target}.ts`) ? `src/${target}.ts` : undefined);
  const bad = violations((f, imp) => {
    const to = inRepo(imp.target);
    return to ? layerViolation(`src/${f.rel}`, to) : undefined;
  });
  assert.deepEqual(bad, []);
});
