/**
 * The committed record of a study that is run in pieces (pure): `docs/results/<name>.json` holds the held-out prompts
 * and, per policy, the greedy held-out reward of every prompt, its BFCL counts, its settings, the git commit and the
 * machine it ran on. Each piece of a study (the SFT policy, one RL run, BFCL of a policy) adds its policy to the file
 * and is committed, so a study resumes on a fresh machine: a piece already in the file is skipped.
 *
 * The statistics are paired, as the issue asks: every policy is evaluated greedily on the same prompts, so RL − SFT is
 * taken per prompt and its standard error is sd(differences) / √n. The unpaired figure, (RL − SFT) / √(SE_RL² +
 * SE_SFT²), is printed beside it. No I/O here.
 */
import { z } from 'zod';
import { promptMeanStats } from '../kernel/heldOut';
import { FIRST_STEP_KINDS } from './firstStep';
import { RunDigests } from './episodeDigest';

const Count = z.object({ correct: z.number().int().nonnegative(), total: z.number().int().nonnegative() });

/**
 * What the evaluated episodes did, from the evaluation's metrics row: checklist items passed per focus (the tool calls,
 * the tool results, the replies) and how many episodes ended for each reason (`error_tool_call`: a broken call).
 */
export const StudyEpisodes = z.object({
  passByFocus: z.record(z.string(), z.object({ passed: z.number().int().nonnegative(), total: z.number().int().nonnegative() })),
  endReasons: z.record(z.string(), z.number().int().nonnegative()),
  /** The first step against the reference dialogue, counted per outcome (src/report/firstStep.ts). */
  firstStep: z.partialRecord(z.enum(FIRST_STEP_KINDS), z.number().int().nonnegative()).optional(),
}).strict();
export type StudyEpisodes = z.infer<typeof StudyEpisodes>;

export const StudyFilePolicy = z.object({
  kind: z.enum(['base', 'sft', 'rl']),
  granularity: z.enum(['trajectory', 'turn', 'step']).nullable(),
  seed: z.number().int().nullable(),
  /** RL steps taken (0 for base and SFT). */
  steps: z.number().int().nonnegative(),
  /** The policy this one was trained from (RL: the SFT policy's name; SFT: the base's), null for the base. */
  from: z.string().nullable(),
  /** Greedy held-out checklist reward per prompt uuid (every prompt of `prompts`). */
  heldOut: z.record(z.string(), z.number()),
  /** BFCL counts per category (absent until its BFCL piece ran). */
  bfcl: z.record(z.string(), Count).optional(),
  /** What decides the policy: the settings of the run that made it, as recorded (model, data, SFT or RL settings). */
  config: z.record(z.string(), z.unknown()).default({}),
  /** Where it came from: the Temporal run id, the S3 key of the policy, the git commit, the machine, when. */
  runId: z.string().optional(),
  policyKey: z.string().optional(),
  commit: z.string().optional(),
  machine: z.string().optional(),
  recordedAt: z.string().optional(),
  /** Training reward and KL per RL step, and the held-out means along the way, for the plots. */
  train: z.array(z.object({ step: z.number().int().positive(), mean: z.number(), std: z.number().nonnegative(), kl: z.number().optional() })).optional(),
  evals: z.array(z.object({ step: z.number().int().nonnegative(), mean: z.number(), se: z.number().nullable() })).optional(),
  /** What its held-out episodes did (the format figures): items passed per focus, end reasons. */
  episodes: StudyEpisodes.optional(),
  /** Digests of its held-out episodes and of each training step's groups (src/report/episodeDigest.ts). */
  digests: RunDigests.optional(),
  /** Free text: what happened (a stopped run, a failure), recorded with the numbers. */
  note: z.string().optional(),
}).strict();
export type StudyFilePolicy = z.infer<typeof StudyFilePolicy>;

/**
 * One run of the hyperparameter search (issue 30 item 4): RL from the SFT policy with some settings, evaluated on the
 * validation prompts (never the held-out ones). `steps: 0` is the SFT policy itself on those prompts, the search's
 * baseline.
 */
export const StudySearch = z.object({
  steps: z.number().int().nonnegative(),
  /** The RL settings the run trained with (`rl` of its input, less the evaluation schedule). */
  settings: z.record(z.string(), z.unknown()),
  /** Greedy validation reward per prompt uuid (every prompt of `validationPrompts`), at the run's last evaluation. */
  validation: z.record(z.string(), z.number()),
  train: z.array(z.object({ step: z.number().int().positive(), mean: z.number(), std: z.number().nonnegative(), kl: z.number().optional() })).optional(),
  evals: z.array(z.object({ step: z.number().int().nonnegative(), mean: z.number(), se: z.number().nullable() })).optional(),
  /** What its validation episodes did at the last evaluation. */
  episodes: StudyEpisodes.optional(),
  /** Digests of its last evaluation's episodes and of each training step's groups (src/report/episodeDigest.ts). */
  digests: RunDigests.optional(),
  runId: z.string().optional(),
  commit: z.string().optional(),
  machine: z.string().optional(),
  recordedAt: z.string().optional(),
  note: z.string().optional(),
}).strict();
export type StudySearch = z.infer<typeof StudySearch>;

export const StudyFile = z.object({
  /** The held-out prompts (uuids), the same for every policy. */
  prompts: z.array(z.string().min(1)),
  policies: z.record(z.string(), StudyFilePolicy),
  /** The validation prompts (uuids) of the search, disjoint from `prompts`. */
  validationPrompts: z.array(z.string().min(1)).default([]),
  /** The hyperparameter search, one entry per run, in the order they ran. */
  searches: z.record(z.string(), StudySearch).default({}),
  /** Searches and pieces that produced no policy worth keeping, recorded as they ended (the failures included). */
  log: z.array(z.object({ at: z.string(), piece: z.string(), text: z.string() })).default([]),
}).strict();
export type StudyFile = z.infer<typeof StudyFile>;

export const emptyStudyFile = (): StudyFile => ({ prompts: [], policies: {}, validationPrompts: [], searches: {}, log: [] });

/** Parses a study file's text, naming the file and the field on error. */
export function parseStudyFile(text: string, file: string): StudyFile {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`${file}: not JSON (${(e as Error).message})`);
  }
  const r = StudyFile.safeParse(raw);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new Error(`${file}: ${i.path.join('.') || '(top level)'}: ${i.message}`);
  }
  for (const [name, p] of Object.entries(r.data.policies)) {
    const missing = r.data.prompts.filter((u) => !(u in p.heldOut));
    if (missing.length) throw new Error(`${file}: policies.${name}.heldOut: no reward for ${missing.length} of the ${r.data.prompts.length} prompts (first ${missing[0]})`);
  }
  for (const [name, p] of Object.entries(r.data.searches)) {
    const missing = r.data.validationPrompts.filter((u) => !(u in p.validation));
    if (missing.length) throw new Error(`${file}: searches.${name}.validation: no reward for ${missing.length} of the ${r.data.validationPrompts.length} validation prompts (first ${missing[0]})`);
  }
  disjoint(r.data, `${file}: validationPrompts`);
  return r.data;
}

/** The file's text: stable key order for policies as added, two-space JSON, a final newline (diff-friendly). */
export function studyFileText(f: StudyFile): string {
  return `${JSON.stringify(StudyFile.parse(f), null, 2)}\n`;
}

/**
 * Per-prompt held-out reward from an evaluation's advantage rows (`runs/<run>/rl/eval/step-N/advantages.json`: rows
 * `{id: "<uuid>#<sample>", reward}`): the mean over each prompt's samples (one with greedy evaluation).
 */
export function promptRewards(rows: readonly { id: string; reward?: number }[], where = 'advantages'): Record<string, number> {
  const sums = new Map<string, { sum: number; n: number }>();
  rows.forEach((r, i) => {
    if (typeof r.reward !== 'number' || !Number.isFinite(r.reward)) throw new Error(`${where}: rows[${i}].reward: missing (a file written before rewards were kept)`);
    const hash = r.id.lastIndexOf('#');
    const uuid = hash > 0 ? r.id.slice(0, hash) : r.id;
    const s = sums.get(uuid) ?? { sum: 0, n: 0 };
    s.sum += r.reward;
    s.n++;
    sums.set(uuid, s);
  });
  return Object.fromEntries([...sums].map(([u, s]) => [u, s.sum / s.n]));
}

/**
 * Adds (or replaces) a policy. The first policy fixes the prompts; every later one must have been evaluated on exactly
 * those prompts (a study whose pieces ran on different held-out sets cannot be paired, and is refused, naming both).
 */
export function withPolicy(f: StudyFile, name: string, p: StudyFilePolicy): StudyFile {
  const got = Object.keys(p.heldOut).sort();
  if (f.prompts.length === 0 && Object.keys(f.policies).length === 0) {
    return disjoint({ ...f, prompts: got, policies: { [name]: p } });
  }
  samePrompts(got, f.prompts, `policy ${name}`, 'held-out');
  return { ...f, policies: { ...f.policies, [name]: p } };
}

/** Adds (or replaces) a search run; the first fixes the validation prompts, which must not be held-out prompts. */
export function withSearch(f: StudyFile, name: string, s: StudySearch): StudyFile {
  const got = Object.keys(s.validation).sort();
  if (f.validationPrompts.length === 0 && Object.keys(f.searches).length === 0) {
    return disjoint({ ...f, validationPrompts: got, searches: { [name]: s } });
  }
  samePrompts(got, f.validationPrompts, `search ${name}`, 'validation');
  return { ...f, searches: { ...f.searches, [name]: s } };
}

function samePrompts(got: readonly string[], study: readonly string[], what: string, set: string): void {
  const want = [...study].sort();
  const extra = got.filter((u) => !want.includes(u));
  const missing = want.filter((u) => !got.includes(u));
  if (extra.length || missing.length) {
    throw new Error(`study: ${what} was evaluated on other prompts than the study's ${want.length} (${missing.length} missing, first ${missing[0] ?? '–'}; ${extra.length} not in the study, first ${extra[0] ?? '–'}): the ${set} set must be the same for every ${set === 'held-out' ? 'policy' : 'search run'}`);
  }
}

/** `f`, or an error (prefixed `where`) when some of its validation prompts are held-out prompts. */
function disjoint(f: StudyFile, where = 'study'): StudyFile {
  const both = f.validationPrompts.filter((u) => f.prompts.includes(u));
  if (both.length) throw new Error(`${where}: ${both.length} validation prompts are held-out prompts too (first ${both[0]}): the search must not see the held-out prompts`);
  return f;
}

/** A policy's BFCL counts summed over its categories. */
export const bfclTotal = (b: Record<string, { correct: number; total: number }>): { correct: number; total: number } =>
  Object.values(b).reduce((a, c) => ({ correct: a.correct + c.correct, total: a.total + c.total }), { correct: 0, total: 0 });

export interface PolicyStats {
  n: number;
  mean: number;
  se: number | null;
}

export function policyStats(f: StudyFile, name: string): PolicyStats {
  const p = f.policies[name];
  if (!p) throw new Error(`study: no policy ${name}`);
  const s = promptMeanStats(f.prompts.map((u) => p.heldOut[u]!), f.prompts);
  return { n: s.n, mean: s.mean, se: s.se };
}

export interface Paired {
  n: number;
  /** mean over prompts of a − b */
  diff: number;
  /** sd(a − b) / √n; null with fewer than two prompts */
  se: number | null;
  /** diff / se (null without se, or se 0 with diff 0) */
  z: number | null;
  /** the unpaired figure beside it: diff / √(SE_a² + SE_b²) */
  unpairedZ: number | null;
  /** prompts where a scored higher, lower, the same */
  wins: number;
  losses: number;
  ties: number;
}

/** Policy `a` against policy `b` on the study's prompts, paired per prompt. */
export function paired(f: StudyFile, a: string, b: string): Paired {
  const pa = f.policies[a];
  const pb = f.policies[b];
  if (!pa || !pb) throw new Error(`study: no policy ${pa ? b : a}`);
  return pairedRewards(pa.heldOut, pb.heldOut, f.prompts);
}

/** Search run `a` against search run `b` on the validation prompts, paired per prompt. */
export function pairedSearch(f: StudyFile, a: string, b: string): Paired {
  const sa = f.searches[a];
  const sb = f.searches[b];
  if (!sa || !sb) throw new Error(`study: no search run ${sa ? b : a}`);
  return pairedRewards(sa.validation, sb.validation, f.validationPrompts);
}

/** Rewards `a` against `b` per prompt of `prompts`: mean difference, paired SE, z, the unpaired z, won/lost/tied. */
export function pairedRewards(a: Record<string, number>, b: Record<string, number>, prompts: readonly string[]): Paired {
  const d = prompts.map((u) => a[u]! - b[u]!);
  const s = promptMeanStats(d, prompts);
  const sa = promptMeanStats(prompts.map((u) => a[u]!), prompts);
  const sb = promptMeanStats(prompts.map((u) => b[u]!), prompts);
  const ratio = (x: number, y: number | null): number | null => (y === null ? null : y > 0 ? x / y : x === 0 ? null : Math.sign(x) * Infinity);
  const unpairedSe = sa.se === null || sb.se === null ? null : Math.sqrt(sa.se ** 2 + sb.se ** 2);
  return {
    n: s.n,
    diff: s.mean,
    se: s.se,
    z: ratio(s.mean, s.se),
    unpairedZ: ratio(sa.mean - sb.mean, unpairedSe),
    wins: d.filter((x) => x > 0).length,
    losses: d.filter((x) => x < 0).length,
    ties: d.filter((x) => x === 0).length,
  };
}

/** The RL policies of one granularity started from one policy, with two seeds or more: they are averaged per prompt. */
export interface SeedGroup {
  granularity: string;
  from: string;
  policies: string[];
  /** the per-prompt mean over the seeds against `from`, paired */
  paired: Paired;
  /** sd over the seeds of each seed's held-out mean (how far the seeds differ from each other) */
  seedSd: number;
}

/**
 * The seeds averaged: for each (granularity, from) with two RL seeds or more, every prompt's reward averaged over the
 * seeds, then paired against the policy they started from. Averaging takes out the seed-to-seed noise of the policies
 * (not the prompts'), so it asks whether the method, not one run, moves the held-out reward.
 */
export function seedGroups(f: StudyFile): SeedGroup[] {
  const groups = new Map<string, { granularity: string; from: string; policies: string[] }>();
  for (const [name, p] of Object.entries(f.policies)) {
    if (p.kind !== 'rl' || !p.from || !f.policies[p.from]) continue;
    const granularity = p.granularity ?? '?';
    const key = JSON.stringify([granularity, p.from]);
    const g = groups.get(key) ?? { granularity, from: p.from, policies: [] };
    g.policies.push(name);
    groups.set(key, g);
  }
  return [...groups.values()].filter((g) => g.policies.length >= 2).map((g) => {
    const avg: Record<string, number> = {};
    for (const u of f.prompts) avg[u] = g.policies.reduce((n, name) => n + f.policies[name]!.heldOut[u]!, 0) / g.policies.length;
    // each seed's held-out mean is one "prompt" of promptMeanStats: its sd is the seeds' spread
    const seedSd = promptMeanStats(g.policies.map((n) => policyStats(f, n).mean), g.policies).sd!;
    return { ...g, paired: pairedRewards(avg, f.policies[g.from]!.heldOut, f.prompts), seedSd };
  });
}

const f4 = (v: number): string => v.toFixed(4);
const signed = (v: number): string => `${v >= 0 ? '+' : '−'}${f4(Math.abs(v))}`;
const zs = (v: number | null): string => (v === null ? '–' : !Number.isFinite(v) ? (v > 0 ? '+∞' : '−∞') : `${v >= 0 ? '+' : '−'}${Math.abs(v).toFixed(1)}`);

/**
 * The study as Markdown (for docs/rl-results.md): every policy's held-out mean ± SE, each RL policy against the SFT
 * policy it started from, paired (mean difference ± paired SE, how many SE, prompts won/lost/tied) with the unpaired
 * figure beside it, BFCL per category, and the log of pieces that ended without a policy.
 */
export function studyFileMarkdown(f: StudyFile, opts: { title?: string } = {}): string {
  const names = Object.keys(f.policies);
  const lines: string[] = [];
  if (opts.title) lines.push(opts.title, '');
  lines.push(`${f.prompts.length} held-out prompts, greedy, the same for every policy.`, '');
  lines.push('| policy | kind | from | RL steps | held-out reward (mean ± SE) | vs its SFT policy, paired: Δ ± SE (z) | won / lost / tied | unpaired z |', '|---|---|---|---|---|---|---|---|');
  for (const name of names) {
    const p = f.policies[name]!;
    const s = policyStats(f, name);
    const kind = p.kind === 'rl' ? `RL, ${p.granularity ?? '?'}${p.seed !== null ? `, seed ${p.seed}` : ''}` : p.kind;
    let vs = '–';
    let wl = '–';
    let unpaired = '–';
    const ref = p.kind === 'rl' ? p.from : null;
    if (ref && f.policies[ref]) {
      const d = paired(f, name, ref);
      vs = `${signed(d.diff)}${d.se === null ? '' : ` ± ${f4(d.se)}`} (${zs(d.z)} SE)`;
      wl = `${d.wins} / ${d.losses} / ${d.ties}`;
      unpaired = zs(d.unpairedZ);
    }
    lines.push(`| ${name} | ${kind} | ${p.from ?? '–'} | ${p.steps} | ${f4(s.mean)}${s.se === null ? '' : ` ± ${f4(s.se)}`} | ${vs} | ${wl} | ${unpaired} |`);
  }
  const groups = seedGroups(f);
  if (groups.length) {
    lines.push('', 'The seeds averaged: every prompt\'s reward averaged over the RL seeds of one granularity, paired against the policy they started from (the seed-to-seed noise taken out, not the prompts\').', '');
    lines.push('| RL policies | from | held-out reward, seeds averaged | vs it, paired: Δ ± SE (z) | won / lost / tied | sd of the seeds\' means |', '|---|---|---|---|---|---|');
    for (const g of groups) {
      const d = g.paired;
      const mean = policyStats(f, g.from).mean + d.diff;
      lines.push(`| ${g.granularity}: ${g.policies.join(', ')} | ${g.from} | ${f4(mean)} | ${signed(d.diff)}${d.se === null ? '' : ` ± ${f4(d.se)}`} (${zs(d.z)} SE) | ${d.wins} / ${d.losses} / ${d.ties} | ${f4(g.seedSd)} |`);
    }
  }
  lines.push(...episodesMarkdown(names.flatMap((n) => (f.policies[n]!.episodes ? [[n, f.policies[n]!.episodes!] as const] : [])), f.prompts.length));
  const withBfcl = names.filter((n) => f.policies[n]!.bfcl);
  if (withBfcl.length) {
    const cats = [...new Set(withBfcl.flatMap((n) => Object.keys(f.policies[n]!.bfcl!)))];
    const pct = (c?: { correct: number; total: number }): string => (c && c.total > 0 ? `${((100 * c.correct) / c.total).toFixed(1)}% (${c.correct}/${c.total})` : '–');
    lines.push('', 'BFCL (greedy):', '', `| category | ${withBfcl.join(' | ')} |`, `|---|${withBfcl.map(() => '---').join('|')}|`);
    for (const c of cats) lines.push(`| ${c} | ${withBfcl.map((n) => pct(f.policies[n]!.bfcl![c])).join(' | ')} |`);
    lines.push(`| **overall** | ${withBfcl.map((n) => pct(bfclTotal(f.policies[n]!.bfcl!))).join(' | ')} |`);
  }
  lines.push(...searchMarkdown(f));
  const notes = names.filter((n) => f.policies[n]!.note);
  if (notes.length || f.log.length) {
    lines.push('', 'Notes and pieces that ended without a policy:', '');
    for (const n of notes) lines.push(`- ${n}: ${f.policies[n]!.note}`);
    for (const l of f.log) lines.push(`- ${l.at.slice(0, 10)}, ${l.piece}: ${l.text}`);
  }
  return lines.join('\n');
}

/** Column names of the checklist's focus fields (spec §5), others as they are. */
const FOCUS_NAMES: Record<string, string> = {
  'assistant.tool_calls': 'tool-call items',
  'tool.content': 'tool-result items',
  'assistant.content.user_visible_reply': 'reply items',
};
/** End reasons first in this order, others after them. */
const END_ORDER = ['error_tool_call', 'turn_control', 'final_turn', 'max_assistant_turns'];

/**
 * The format figures: per policy, the checklist items passed per focus and how its episodes ended (`error_tool_call`
 * is a malformed call, an unknown tool or a schema error), columns as the recorded policies have them.
 */
export function episodesMarkdown(rows: ReadonlyArray<readonly [string, StudyEpisodes]>, prompts: number, what = 'policy'): string[] {
  if (!rows.length) return [];
  const focus = [...new Set(rows.flatMap(([, e]) => Object.keys(e.passByFocus)))]
    .sort((a, b) => (Object.keys(FOCUS_NAMES).indexOf(a) + 1 || 99) - (Object.keys(FOCUS_NAMES).indexOf(b) + 1 || 99));
  const ends = [...new Set(rows.flatMap(([, e]) => Object.keys(e.endReasons)))]
    .sort((a, b) => (END_ORDER.indexOf(a) + 1 || 99) - (END_ORDER.indexOf(b) + 1 || 99) || a.localeCompare(b));
  const pct = (c?: { passed: number; total: number }) => (c && c.total > 0 ? `${c.passed}/${c.total} (${((100 * c.passed) / c.total).toFixed(0)}%)` : '–');
  const lines = ['', `What the ${prompts} episodes did: checklist items passed by focus, and how the episodes ended (\`error_tool_call\`: a malformed call, an unknown tool or a schema error).`, ''];
  lines.push(`| ${what} | ${[...focus.map((k) => FOCUS_NAMES[k] ?? k), ...ends.map((k) => `ended: ${k}`)].join(' | ')} |`, `|---|${[...focus, ...ends].map(() => '---|').join('')}`);
  for (const [n, e] of rows) lines.push(`| ${n} | ${[...focus.map((k) => pct(e.passByFocus[k])), ...ends.map((k) => String(e.endReasons[k] ?? 0))].join(' | ')} |`);
  const first = rows.filter(([, e]) => e.firstStep);
  if (first.length) {
    const kinds = FIRST_STEP_KINDS.filter((k) => first.some(([, e]) => e.firstStep![k]));
    lines.push('', 'The first step against the reference dialogue (episodes per outcome):', '');
    lines.push(`| ${what} | ${kinds.join(' | ')} |`, `|---|${kinds.map(() => '---|').join('')}`);
    for (const [n, e] of first) lines.push(`| ${n} | ${kinds.map((k) => String(e.firstStep![k] ?? 0)).join(' | ')} |`);
  }
  return lines;
}

/** Flattens settings to `a.b.c → JSON value` for a diff. */
function flat(v: unknown, prefix = ''): Record<string, string> {
  if (v && typeof v === 'object' && !Array.isArray(v)) return Object.assign({}, ...Object.entries(v).map(([k, x]) => flat(x, prefix ? `${prefix}.${k}` : k)));
  return { [prefix]: JSON.stringify(v) };
}

/**
 * The search as Markdown: every run with the settings that differ between runs, its validation reward and, against
 * the baseline (the run with 0 steps: the SFT policy on the validation prompts), the paired difference.
 */
function searchMarkdown(f: StudyFile): string[] {
  const names = Object.keys(f.searches);
  if (!names.length) return [];
  const base = names.find((n) => f.searches[n]!.steps === 0);
  const trained = names.filter((n) => f.searches[n]!.steps > 0);
  const flats = Object.fromEntries(trained.map((n) => [n, flat(f.searches[n]!.settings)]));
  // A setting recorded only by later runs (added to the config since) differs only if its recorded values do.
  const keys = [...new Set(trained.flatMap((n) => Object.keys(flats[n]!)))].filter((k) => k === 'hp.lr' || (k !== 'seed' && new Set(trained.flatMap((n) => (flats[n]![k] === undefined ? [] : [flats[n]![k]]))).size > 1));
  const lines = ['', `Hyperparameter search: ${f.validationPrompts.length} validation prompts (disjoint from the held-out ones), greedy${base ? `; baseline \`${base}\` (the SFT policy)` : ''}.`, ''];
  const row = (cells: string[]) => `| ${cells.join(' | ')} |`;
  lines.push(row(['run', ...keys, 'RL steps', 'validation reward (mean ± SE)', 'vs baseline, paired: Δ ± SE (z)', 'won / lost / tied', 'last training reward']), row(Array<string>(keys.length + 6).fill('---')));
  for (const n of names) {
    const r = f.searches[n]!;
    const st = promptMeanStats(f.validationPrompts.map((u) => r.validation[u]!), f.validationPrompts);
    const d = base && n !== base ? pairedSearch(f, n, base) : undefined;
    const last = r.train?.at(-1);
    lines.push(row([
      n,
      ...keys.map((k) => (r.steps > 0 ? (flats[n]![k] ?? '–') : '–')),
      String(r.steps),
      `${f4(st.mean)}${st.se === null ? '' : ` ± ${f4(st.se)}`}`,
      d ? `${signed(d.diff)}${d.se === null ? '' : ` ± ${f4(d.se)}`} (${zs(d.z)} SE)` : '–',
      d ? `${d.wins} / ${d.losses} / ${d.ties}` : '–',
      last ? `${f4(last.mean)} (step ${last.step})` : '–',
    ]));
  }
  lines.push(...episodesMarkdown(names.flatMap((n) => (f.searches[n]!.episodes ? [[n, f.searches[n]!.episodes!] as const] : [])), f.validationPrompts.length, 'run'));
  const notes = names.filter((n) => f.searches[n]!.note);
  if (notes.length) lines.push('', ...notes.map((n) => `- ${n}: ${f.searches[n]!.note}`));
  return lines;
}
