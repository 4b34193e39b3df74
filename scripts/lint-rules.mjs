// The source layout's floors as lint rules (`npm run lint`): `cm2/layers` fails an import that reaches up a floor and
// `cm2/no-circles` an import that closes a circle of files. README, "Source layout", draws the floors.
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

/**
 * The rooms of src/, lowest floor first. A room imports its own files and the rooms of lower floors only; rooms that
 * share a floor do not import each other.
 */
export const FLOORS = [
  ['kernel'], //          pure data shapes and helpers: schema, rng, JSON, statistics
  ['chat', 'llm'], //     the chat template and tool-call text; the LLM client and its roles
  ['run'], //             the config and the run's S3 layout
  ['model'], //           the network, its file formats and optimizers (no I/O beyond local files)
  ['storage', 'infra'], // S3 (objects, checkpoints, policies); Temporal, binaries, telemetry
  ['report'], //          the run report and the study record
  ['tracking'], //        what a run tells experiment trackers (MLflow, TensorBoard), read from its S3
  ['stages'], //          the method: one folder per CM2 stage (method modules, activities, workflow)
  ['demo', 'workflows'], // the offline demo world (src/stages/world.ts); the workflow bundle's entry (deterministic: no demo)
  ['activities'], //      the activity registry per task queue, the demo world handed to the stages
  ['workers'], //         the worker entry points and their supervisor
  ['cli'], //             the command line
];

/** Imports out of src/ that are allowed: set-up scripts that run before dependencies exist, shared with src. */
export const OUTSIDE = { 'src/infra/binaries.ts': ['scripts/ensure-servers.mjs'], 'src/infra/bfclBridge.ts': ['scripts/ensure-bfcl.mjs'], 'src/infra/tau2Bridge.ts': ['scripts/ensure-tau2.mjs'], 'src/tracking/sinks.ts': ['scripts/ensure-trackers.mjs'] };

const floorOf = new Map(FLOORS.flatMap((rooms, i) => rooms.map((r) => [r, i])));

/** The room of a repository-relative path under src/ (`src/cli/main.ts` → cli), or undefined outside src/. */
export function roomOf(rel) {
  const parts = rel.split('/');
  if (parts[0] !== 'src' || parts.length < 2) return undefined;
  return parts.length === 2 ? parts[1].replace(/\.[cm]?[tj]s$/, '') : parts[1];
}

/** Why `fromRel` may not import `toRel` (repository-relative paths), or undefined when it may. */
export function layerViolation(fromRel, toRel) {
  const from = roomOf(fromRel);
  if (from === undefined) return undefined;
  const to = roomOf(toRel);
  if (to === undefined) return (OUTSIDE[fromRel] ?? []).includes(toRel) ? undefined : `src/ imports ${toRel}, outside src/`;
  if (from === to) return undefined;
  const f = floorOf.get(from);
  const t = floorOf.get(to);
  if (f === undefined) return `src/${from} is on no floor (scripts/lint-rules.mjs FLOORS)`;
  if (t === undefined) return `src/${to} is on no floor (scripts/lint-rules.mjs FLOORS)`;
  if (t < f) return undefined;
  return t === f ? `${from}/ and ${to}/ share a floor and do not import each other` : `${from}/ (floor ${f + 1}) may not import ${to}/ (floor ${t + 1}): imports go down`;
}

const EXTS = ['', '.ts', '.mts', '.mjs', '.js', '/index.ts'];

/** The file a relative specifier names, or undefined (a package, or nothing there). */
export function resolveImport(fromFile, spec) {
  if (!spec.startsWith('.')) return undefined;
  const base = path.resolve(path.dirname(fromFile), spec);
  for (const ext of EXTS) {
    const p = base + ext;
    if (existsSync(p) && statSync(p).isFile()) return p;
  }
  return undefined;
}

const SPEC = /(?:^|[\s;}])(?:import|export)\s+(?:type\s+)?(?:[^'"]*?\sfrom\s+)?['"](\.[^'"]+)['"]|import\(\s*['"](\.[^'"]+)['"]\s*\)/g;

function sourceFiles(dir) {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    return statSync(full).isDirectory() ? sourceFiles(full) : /\.(ts|mts)$/.test(name) ? [full] : [];
  });
}

/** The import graph of src/ (absolute paths), its files in circles (strongly connected, two or more), read once per lint run. */
let circlesCache;
export function circlesOf(srcDir) {
  if (circlesCache?.srcDir === srcDir) return circlesCache.inCircle;
  const edges = new Map();
  for (const file of sourceFiles(srcDir)) {
    const text = readFileSync(file, 'utf8');
    const out = new Set();
    for (const m of text.matchAll(SPEC)) {
      const target = resolveImport(file, m[1] ?? m[2]);
      if (target && target.startsWith(srcDir + path.sep)) out.add(target);
    }
    edges.set(file, [...out]);
  }
  // Tarjan's strongly connected components.
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const inCircle = new Map();
  const visit = (v) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const comp = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        comp.push(w);
      } while (w !== v);
      if (comp.length > 1) for (const f of comp) inCircle.set(f, comp);
    }
  };
  for (const v of edges.keys()) if (!idx.has(v)) visit(v);
  circlesCache = { srcDir, inCircle };
  return inCircle;
}

function importSources(context, check) {
  const visit = (node) => {
    if (node.source && typeof node.source.value === 'string') check(node, node.source.value);
  };
  return { ImportDeclaration: visit, ExportNamedDeclaration: visit, ExportAllDeclaration: visit, ImportExpression: visit };
}

const layers = {
  meta: { type: 'problem', docs: { description: 'imports in src/ go down the floors of scripts/lint-rules.mjs' }, schema: [] },
  create(context) {
    const root = context.cwd;
    const file = context.filename;
    const fromRel = path.relative(root, file).split(path.sep).join('/');
    if (!fromRel.startsWith('src/')) return {};
    return importSources(context, (node, spec) => {
      const target = resolveImport(file, spec);
      if (!target) return;
      const why = layerViolation(fromRel, path.relative(root, target).split(path.sep).join('/'));
      if (why) context.report({ node: node.source, message: `${fromRel} → ${spec}: ${why}` });
    });
  },
};

const noCircles = {
  meta: { type: 'problem', docs: { description: 'no circle of imports between the files of src/' }, schema: [] },
  create(context) {
    const root = context.cwd;
    const file = context.filename;
    const srcDir = path.join(root, 'src');
    if (!file.startsWith(srcDir + path.sep)) return {};
    const circle = circlesOf(srcDir).get(file);
    if (!circle) return {};
    const names = circle.map((f) => path.relative(root, f).split(path.sep).join('/')).sort();
    return importSources(context, (node, spec) => {
      const target = resolveImport(file, spec);
      if (target && circle.includes(target)) context.report({ node: node.source, message: `${spec} closes a circle of imports: ${names.join(', ')}` });
    });
  },
};

export const cm2Plugin = { rules: { layers, 'no-circles': noCircles } };
