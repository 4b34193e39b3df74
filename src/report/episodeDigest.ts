/**
 * Digests of RL episodes for a study's diagnosis (pure): what the policy did and which checklist items it passed, per
 * prompt, small enough to commit beside the numbers. A search run whose training reward climbs while the validation
 * prompts do not follow can then be read after its S3 data is gone: the validation prompts it lost and won against the
 * SFT policy, step by step, and each training step's groups with what their rewards differed on (the first step, how
 * the episode ended, or something later: the arguments of a later call, the reply).
 *
 * An assistant message reads `name {arguments}` per call, `reply: text`, or `broken: text` (a call that did not parse);
 * a tool result `= text`, a replayed user message `user: text`. Items are those of the first checklist variant, for the
 * turns the episode reached: `pass` has one character per item of `items` (`+` passed, `-` failed, `.` turn not
 * reached). No I/O.
 */
import { z } from 'zod';
import { parseToolCalls } from '../chat/toolCalls';
import type { Example, Message } from '../kernel/schema';
import { FIRST_STEP_KINDS, firstStepOf } from './firstStep';

/** One episode of a prompt. */
export const MemberDigest = z.object({
  /** The group member (training steps); absent for an evaluation's one greedy episode. */
  member: z.number().int().nonnegative().optional(),
  /** The episode's reward (null when the advantage rows did not have it). */
  reward: z.number().nullable(),
  ended: z.string(),
  firstStep: z.enum(FIRST_STEP_KINDS).optional(),
  /** One character per item of the prompt's `items`: `+` passed, `-` failed, `.` its turn was not reached. */
  pass: z.string(),
  steps: z.array(z.string()),
}).strict();
export type MemberDigest = z.infer<typeof MemberDigest>;

/** What a group's rewards differed on (trajectory level: a group whose rewards are all equal has no advantage). */
export const CONTRASTS = ['none', 'first step', 'ending', 'later'] as const;
export type Contrast = (typeof CONTRASTS)[number];

/** One prompt: its checklist items (`t<turn> <focus>: <question>`) and its episodes. */
export const PromptDigest = z.object({
  uuid: z.string(),
  items: z.array(z.string()),
  contrast: z.enum(CONTRASTS).optional(),
  members: z.array(MemberDigest),
}).strict();
export type PromptDigest = z.infer<typeof PromptDigest>;

/** The digests of a run: its last evaluation's episodes and, for an RL run, each training step's groups. */
export const RunDigests = z.object({
  evalStep: z.number().int().nonnegative(),
  eval: z.array(PromptDigest),
  steps: z.array(z.object({ step: z.number().int().positive(), groups: z.array(PromptDigest) }).strict()).default([]),
}).strict();
export type RunDigests = z.infer<typeof RunDigests>;

/** What a digest reads of a checklist variant (stages/checklist's ChecklistVariant): turn → items. */
type ChecklistVariant = ReadonlyArray<ReadonlyArray<{ focus_on: string; question: string }>>;
/** What it reads of a rollout's verdicts (stages/rl's RolloutVerdicts): `[variant][reached turn]`. */
type RolloutVerdicts = ReadonlyArray<ReadonlyArray<{ turn: number; steps: ReadonlyArray<ReadonlyArray<{ pass: boolean; ok: boolean } | undefined>> }>>;

const clip = (s: string, n: number): string => {
  const t = s.replace(/\s+/g, ' ').trim();
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
};

/** A message's `<think>` block (clipped, or empty) and the text after it. */
function splitThink(text: string): { think: string; rest: string } {
  const m = /^\s*<think>([\s\S]*?)<\/think>/.exec(text);
  return m ? { think: clip(m[1]!, 60), rest: text.slice(m[0].length) } : { think: '', rest: text };
}

/** One message as a digest line; undefined for the prompt's system message. */
export function messageLine(m: Pick<Message, 'role' | 'content'>): string | undefined {
  if (m.role === 'system') return undefined;
  if (m.role === 'user') return `user: ${clip(m.content, 100)}`;
  if (m.role === 'tool') return `= ${clip(m.content, 100)}`;
  const { think, rest } = splitThink(m.content);
  const pre = think ? `[${think}] ` : '';
  const parsed = parseToolCalls(m.content);
  if (!parsed.hasToolCall) return `${pre}reply: ${clip(rest, 160)}`;
  if (parsed.errors.length || parsed.calls.length === 0) return `${pre}broken: ${clip(rest, 120)}`;
  return `${pre}${clip(parsed.calls.map((c) => `${c.name} ${JSON.stringify(c.arguments)}`).join('; '), 200)}`;
}

/** The item descriptions of a checklist variant, in turn and item order. */
export function itemLines(variant: ChecklistVariant): string[] {
  return variant.flatMap((items, turn) => items.map((it) => `t${turn} ${it.focus_on}: ${clip(it.question, 110)}`));
}

/** The pass string of one episode against the first variant (`+`, `-`, `.`), an item passing at any step of its turn. */
export function passString(variant: ChecklistVariant, verdicts: RolloutVerdicts | undefined): string {
  const reached = new Map((verdicts?.[0] ?? []).filter((tv) => tv.steps.length > 0).map((tv) => [tv.turn, tv] as const));
  return variant
    .map((items, turn) => {
      const tv = reached.get(turn);
      return items.map((_, c) => (!tv ? '.' : tv.steps.some((s) => s[c]?.ok && s[c]?.pass) ? '+' : '-')).join('');
    })
    .join('');
}

/** The episodes a digest reads: the rollout's fields it needs. */
export interface DigestEpisode {
  uuid: string;
  member: number;
  messages: ReadonlyArray<Pick<Message, 'role' | 'content'>>;
  ended?: string;
  verdicts?: RolloutVerdicts;
}

/** The first-step outcome of an episode, against its example (undefined without one). */
function firstOf(e: DigestEpisode, example: Pick<Example, 'messages' | 'tools'> | undefined) {
  const first = e.messages.find((m) => m.role === 'assistant');
  return example && first ? firstStepOf(first.content, example) : undefined;
}

/** What a group's rewards differed on: none, the first step's outcome, the end reason, or something later. */
export function contrastOf(members: ReadonlyArray<Pick<MemberDigest, 'reward' | 'ended' | 'firstStep'>>): Contrast {
  const rewards = new Set(members.map((m) => m.reward));
  if (rewards.size <= 1) return 'none';
  if (new Set(members.map((m) => m.firstStep ?? '')).size > 1) return 'first step';
  if (new Set(members.map((m) => m.ended)).size > 1) return 'ending';
  return 'later';
}

/**
 * The digests of a batch of episodes grouped by prompt, in first-seen order: `rewards` by rollout id (the advantage
 * rows), `examples` with their checklists. `groups` true marks each prompt with its contrast and each episode with its
 * member index (a training step); false gives an evaluation's one episode per prompt.
 */
export function digestEpisodes(
  episodes: ReadonlyArray<DigestEpisode & { id: string }>,
  rewards: ReadonlyMap<string, number>,
  examples: ReadonlyMap<string, Pick<Example, 'messages' | 'tools'> & { checklists?: readonly ChecklistVariant[] }>,
  groups: boolean,
): PromptDigest[] {
  const byUuid = new Map<string, PromptDigest>();
  for (const e of episodes) {
    const ex = examples.get(e.uuid);
    const variant = ex?.checklists?.[0] ?? [];
    let d = byUuid.get(e.uuid);
    if (!d) byUuid.set(e.uuid, (d = { uuid: e.uuid, items: itemLines(variant), members: [] }));
    const first = firstOf(e, ex);
    d.members.push({
      ...(groups ? { member: e.member } : {}),
      reward: rewards.get(e.id) ?? null,
      ended: e.ended ?? 'unfinished',
      ...(first ? { firstStep: first } : {}),
      pass: passString(variant, e.verdicts),
      // the replayed first user message is the prompt: the steps start after it
      steps: e.messages.slice(e.messages.findIndex((m) => m.role === 'user') + 1).flatMap((m) => messageLine(m) ?? []),
    });
  }
  const out = [...byUuid.values()];
  for (const d of out) {
    d.members.sort((a, b) => (a.member ?? 0) - (b.member ?? 0));
    if (groups) d.contrast = contrastOf(d.members);
  }
  return out;
}

const focusOf = (item: string): string => /^t\d+ ([^:]+):/.exec(item)?.[1] ?? '?';
const fmt = (x: number | null): string => (x === null ? '–' : x.toFixed(3));

/**
 * Which items separated a contrast group's better episodes from its worse ones (reward above the group's mean or
 * not), counted per focus: `up` items passed more often by the better episodes (what the update reinforces), `down`
 * items passed more often by the worse ones (what it trades away).
 */
export function separatingItems(groups: readonly PromptDigest[]): Record<string, { up: number; down: number }> {
  const out: Record<string, { up: number; down: number }> = {};
  for (const g of groups) {
    if (!g.contrast || g.contrast === 'none') continue;
    const rs = g.members.map((m) => m.reward ?? 0);
    const mean = rs.reduce((a, b) => a + b, 0) / rs.length;
    const hi = g.members.filter((m) => (m.reward ?? 0) > mean);
    const lo = g.members.filter((m) => (m.reward ?? 0) <= mean);
    const rate = (ms: readonly MemberDigest[], i: number) => ms.filter((m) => m.pass[i] === '+').length / Math.max(1, ms.length);
    g.items.forEach((item, i) => {
      const d = rate(hi, i) - rate(lo, i);
      if (d === 0) return;
      const slot = (out[focusOf(item)] ??= { up: 0, down: 0 });
      if (d > 0) slot.up++;
      else slot.down++;
    });
  }
  return out;
}

/** One prompt's episode as Markdown lines: reward, ending, pass string and steps. */
function episodeLines(label: string, m: MemberDigest | undefined): string[] {
  if (!m) return [`${label}: no episode`];
  return [`${label}: reward ${fmt(m.reward)}, ended ${m.ended}, items ${m.pass}${m.firstStep ? `, first step: ${m.firstStep}` : ''}`, ...m.steps.map((s) => `  ${s}`)];
}

/**
 * The diagnosis of a search run (Markdown): each training step's groups (how many had a contrast, on what, and which
 * items separated better from worse episodes), then the validation (or held-out) prompts it lost and won against the baseline, both
 * episodes side by side with the prompt's items.
 */
export function digestMarkdown(name: string, run: RunDigests, baseName: string, base: RunDigests | undefined, set: 'validation' | 'held-out' = 'validation'): string {
  const lines: string[] = [`## ${name}`, ''];
  if (run.steps.length) {
    lines.push(
      `Training steps: groups by what their rewards differed on (a group whose rewards are all equal has no trajectory-level advantage), and the items that separated a group's better episodes from its worse ones (up: passed more by the better, down: by the worse), per focus.`,
      '',
      '| step | groups | mean reward | no contrast | first step | ending | later | items up / down |',
      '|---|---|---|---|---|---|---|---|',
    );
    for (const s of run.steps) {
      const n = (c: Contrast) => s.groups.filter((g) => g.contrast === c).length;
      const rs = s.groups.flatMap((g) => g.members.map((m) => m.reward ?? 0));
      const sep = Object.entries(separatingItems(s.groups))
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([f, v]) => `${f} ${v.up}/${v.down}`)
        .join(', ');
      lines.push(`| ${s.step} | ${s.groups.length} | ${(rs.reduce((a, b) => a + b, 0) / Math.max(1, rs.length)).toFixed(3)} | ${n('none')} | ${n('first step')} | ${n('ending')} | ${n('later')} | ${sep || '–'} |`);
    }
    lines.push('');
  }
  const baseBy = new Map((base?.eval ?? []).map((d) => [d.uuid, d] as const));
  const diffs = run.eval.flatMap((d) => {
    const b = baseBy.get(d.uuid);
    const r = d.members[0]?.reward ?? null;
    const br = b?.members[0]?.reward ?? null;
    return r !== null && br !== null && Math.abs(r - br) > 1e-12 ? [{ d, b: b!, delta: r - br }] : [];
  });
  if (!base) lines.push(`No digests of ${baseName} to compare the validation episodes with.`, '');
  else {
    const lost = diffs.filter((x) => x.delta < 0).sort((a, b) => a.delta - b.delta);
    const won = diffs.filter((x) => x.delta > 0).sort((a, b) => b.delta - a.delta);
    lines.push(`${set === 'validation' ? 'Validation' : 'Held-out'} prompts (evaluation after step ${run.evalStep}) where ${name} and ${baseName} differ: ${lost.length} lost, ${won.length} won, ${run.eval.length - diffs.length} the same reward.`, '');
    for (const [what, xs] of [['lost', lost], ['won', won]] as const) {
      for (const x of xs) {
        lines.push(`### ${what}: ${x.d.uuid} (${fmt(x.b.members[0]?.reward ?? null)} → ${fmt(x.d.members[0]?.reward ?? null)})`, '', '```text');
        x.d.items.forEach((it, i) => lines.push(`item ${i + 1}: ${it}`));
        lines.push(...episodeLines(baseName, x.b.members[0]), ...episodeLines(name, x.d.members[0]), '```', '');
      }
    }
  }
  return lines.join('\n');
}
