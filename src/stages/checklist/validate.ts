/**
 * Validation of checklists (spec §5.4), in the annotator form (`validateChecklist`, the gate of the labelling
 * repair loop) and in the stored form (`validateAnnotatedExample`, for files written by earlier runs).
 *
 * Every problem is a `Violation` with a machine-readable `code` and a path (`turn`, `item` id, `field` such as
 * `weight.C2`, `dependence.C3` or `evidence[1].step`), so a repair request can tell the labeller exactly what to fix.
 * Errors make a checklist invalid; warnings (`no_evidence`, `mentions_index`, `conditional_question`) are reported
 * and kept. Nothing here throws, whatever the input.
 *
 * The reference's checks (`_validate_checklist_json`): the structure and enums; one block per user message, sorted
 * by turn; `dependence` keys equal to the item ids; every dependency an existing item with focus_on "tool.content";
 * weights summing to 1 within 1e-6. Ours on top, on purpose:
 *  - `turn` equals the block's position, ids are unique, a turn is not empty, `weight` keys equal the item ids,
 *    each weight lies in [0, 1], no item depends on itself, dependencies have no cycles;
 *  - evidence pointers are checked against the dialogue: the pointer's turn is the item's turn, the step exists and
 *    is an assistant or tool message (never the user message at step 0), `from` fits that message's role, and the
 *    snippet occurs in the named part. The reference's labeller has to guess indices; ours sees them (annotatorPrompt.ts).
 *  - A block that does not parse gets only its structure violations, but the other blocks are still checked, so
 *    one answer yields as many problems as possible and the repair loop needs fewer rounds.
 *
 * Snippet matching: a snippet must occur in some faithful rendering of the named part (`partTexts`: the raw text;
 * the text escaped as inside JSON, as `json.dumps` writes it with and without `ensure_ascii`; JSON contents and
 * arguments re-serialized on one line and with indent 4; a tool call as the serialized call object, the form the
 * reference's labeller quotes since it is shown `json.dumps(messages, indent=4)`, or as our prompt's
 * `{name, arguments}`). Both sides are whitespace-normalised (`normaliseWs`) and compared **case-insensitively**, and
 * if that fails, also without the whitespace around JSON punctuation (`{ } [ ] , :`); a snippet may elide text with
 * "..." / "…" (its pieces must occur in order); a snippet copied with JSON escapes is also tried unescaped. Only the
 * named part's renderings are offered, so a snippet from another part or step is still rejected. Snippets are only
 * shown to the judge as hints (spec §6.4), so a quote that differs from the source in case, layout or escaping costs
 * nothing, while a repair round does.
 */
import { z } from 'zod';
import { Message, type Example } from '../../kernel/schema';
import { AnnotatedExample, ChecklistOutput, fromStoredVariant, TurnBlock, WEIGHT_TOLERANCE, type ChecklistItem, type Evidence } from './schema';
import { messageAt, normaliseWs, partIsEmpty, turnSpans, type TurnSpan } from './steps';
import { describe, formatPath, type Violation, isNonNegInt, isPlainObject, issueMessage, itemPath, safeMessages, structureViolation, typeName, valueAt } from './validateParts';
import { locateSnippet, partsForRole, snippetInPart, whereHint } from './evidence';

export type { Violation } from './validateParts';

export interface ChecklistValidation {
  /** True iff no violation is an error. */
  ok: boolean;
  /** The parsed checklist, when its structure parsed (even if semantic errors remain). */
  value?: ChecklistOutput;
  violations: Violation[];
}

// ---------------------------------------------------------------------------------------------------------------
// Checks.

/** Block-level order: `turn` equals the position; no turn twice; every user turn has a block. */
function checkTurnOrder(raw: readonly unknown[], userTurns: number, out: Violation[]): void {
  const turns = raw.map((b) => (isPlainObject(b) && isNonNegInt(b.turn) ? b.turn : undefined));
  turns.forEach((t, i) => {
    if (t !== undefined && t !== i) {
      out.push({ severity: 'error', code: 'turn_order', turn: t, field: 'turn', message: `the block at position ${i} has turn ${t}; blocks must be sorted by turn, with turn 0, 1, 2, … equal to their position` });
    }
  });
  const counts = new Map<number, number>();
  for (const t of turns) if (t !== undefined) counts.set(t, (counts.get(t) ?? 0) + 1);
  for (const [t, n] of [...counts].sort((a, b) => a[0] - b[0])) {
    if (n > 1) out.push({ severity: 'error', code: 'turn_order', turn: t, field: 'turn', message: `${n} blocks have turn ${t}; each turn has exactly one block` });
  }
  if (turns.every((t) => t !== undefined)) {
    for (let t = 0; t < userTurns; t++) {
      if (!counts.has(t)) out.push({ severity: 'error', code: 'turn_order', turn: t, field: 'turn', message: `no block for turn ${t}` });
    }
  }
}

/** Turn/step indices in free text, which the spec forbids (§5.3): "turn 2", "step 1", "Step: 3", "steps #4". */
const INDEX_MENTION = /\b(?:turn|step)s?\s*(?:[:#]|no\.?|number)?\s*\d+/i;
const CONDITIONAL = /^\s*(?:if|when)\b/i;

/** Dependency cycles among the valid edges of a turn, each reported once as `A → B → A`. */
function findCycles(edges: ReadonlyMap<string, readonly string[]>): string[][] {
  const state = new Map<string, 'active' | 'done'>();
  const stack: string[] = [];
  const seen = new Set<string>();
  const cycles: string[][] = [];
  const visit = (id: string): void => {
    state.set(id, 'active');
    stack.push(id);
    for (const next of edges.get(id) ?? []) {
      const s = state.get(next);
      if (s === 'active') {
        const cycle = stack.slice(stack.indexOf(next));
        const key = [...cycle].sort().join('\u0000');
        if (!seen.has(key)) {
          seen.add(key);
          cycles.push([...cycle, next]);
        }
      } else if (s === undefined) visit(next);
    }
    stack.pop();
    state.set(id, 'done');
  };
  for (const id of edges.keys()) if (!state.has(id)) visit(id);
  return cycles;
}

/** The semantic checks of one parsed block. */
function checkBlock(block: TurnBlock, messages: readonly Message[], spans: readonly TurnSpan[], out: Violation[]): void {
  const turn = block.turn;
  const error = (v: Omit<Violation, 'severity' | 'turn'>): void => void out.push({ severity: 'error', turn, ...v });
  const warn = (v: Omit<Violation, 'severity' | 'turn'>): void => void out.push({ severity: 'warning', turn, ...v });

  if (block.checklist.length === 0) error({ code: 'empty_turn', field: 'checklist', message: 'the turn has no checklist items; write at least one' });

  // Ids: non-blank and unique. The first item with an id is the one the maps refer to.
  const byId = new Map<string, ChecklistItem>();
  block.checklist.forEach((item, k) => {
    if (item.id.trim() === '') {
      error({ code: 'duplicate_id', field: `checklist[${k}].id`, message: `item id ${describe(item.id)} is blank` });
    } else if (byId.has(item.id)) {
      const first = block.checklist.findIndex((other) => other.id === item.id);
      error({ code: 'duplicate_id', item: item.id, field: 'id', message: `id "${item.id}" is used by items ${first} and ${k}; ids must be unique within a turn` });
    } else byId.set(item.id, item);
  });
  const ids = [...byId.keys()];
  const idList = ids.length > 0 ? ids.join(', ') : 'none';

  // dependence: keys = ids; every dependency an existing tool.content item other than the item itself; no cycles.
  for (const id of ids) {
    if (!Object.hasOwn(block.dependence, id)) {
      error({ code: 'dependence_keys', item: id, field: formatPath(['dependence', id]), message: `"dependence" has no entry for ${id} (use [] when it depends on nothing)` });
    }
  }
  const edges = new Map<string, string[]>();
  for (const [key, deps] of Object.entries(block.dependence)) {
    const field = formatPath(['dependence', key]);
    if (!byId.has(key)) {
      error({ code: 'dependence_keys', field, message: `"dependence" has a key ${JSON.stringify(key)} that is not an item id of this turn (items: ${idList})` });
      continue;
    }
    const valid: string[] = [];
    for (const dep of deps) {
      const target = byId.get(dep);
      if (dep === key) error({ code: 'self_dependency', item: key, field, message: `${key} depends on itself` });
      else if (!target) error({ code: 'unknown_dependency', item: key, field, message: `${key} depends on ${JSON.stringify(dep)}, which is not an item of this turn (items: ${idList})` });
      else {
        if (target.focus_on !== 'tool.content') {
          error({ code: 'dependency_not_tool_content', item: key, field, message: `${key} depends on ${dep}, whose focus_on is "${target.focus_on}"; an item may only depend on items with focus_on "tool.content"` });
        }
        valid.push(dep);
      }
    }
    edges.set(key, valid);
  }
  for (const cycle of findCycles(edges)) {
    error({ code: 'dependency_cycle', item: cycle[0]!, field: formatPath(['dependence', cycle[0]!]), message: `dependencies form a cycle: ${cycle.join(' → ')}` });
  }

  // weight: keys = ids, each in [0, 1], summing to 1.
  for (const id of ids) {
    if (!Object.hasOwn(block.weight, id)) error({ code: 'weight_keys', item: id, field: formatPath(['weight', id]), message: `"weight" has no entry for ${id}` });
  }
  let allFinite = true;
  for (const [key, w] of Object.entries(block.weight)) {
    const field = formatPath(['weight', key]);
    const item = byId.has(key) ? { item: key } : {};
    if (!byId.has(key)) error({ code: 'weight_keys', field, message: `"weight" has a key ${JSON.stringify(key)} that is not an item id of this turn (items: ${idList})` });
    if (!Number.isFinite(w)) {
      allFinite = false;
      error({ code: 'weight_range', ...item, field, message: `weight ${String(w)} is not a finite number` });
    } else if (w < 0 || w > 1) error({ code: 'weight_range', ...item, field, message: `weight ${w} is outside [0, 1]` });
  }
  if (allFinite && block.checklist.length > 0) {
    const sum = Object.values(block.weight).reduce((a, b) => a + b, 0);
    if (Math.abs(sum - 1) > WEIGHT_TOLERANCE) {
      error({ code: 'weight_sum', field: 'weight', message: `the weights of the turn sum to ${Number(sum.toPrecision(12))}, not 1 (tolerance ${WEIGHT_TOLERANCE})` });
    }
  }

  // Items: evidence pointers and wording.
  block.checklist.forEach((item, k) => {
    const label = item.id.trim() !== '' ? { item: item.id } : {};
    const at = (field: string): string => (label.item !== undefined ? field : `checklist[${k}].${field}`);
    if (item.evidence.length === 0) warn({ code: 'no_evidence', ...label, field: at('evidence'), message: 'the item has no evidence; point at the assistant or tool step that satisfies it' });
    item.evidence.forEach((ev, j) => checkEvidence(ev, turn, messages, spans, (v) => error({ ...label, ...v, field: at(`evidence[${j}].${v.field}`) })));

    const texts: [string, string][] = [
      ['question', item.question],
      ['pass_condition', item.pass_condition],
      ...item.failure_examples.map((t, j): [string, string] => [`failure_examples[${j}]`, t]),
    ];
    for (const [field, text] of texts) {
      const m = INDEX_MENTION.exec(text);
      if (m) warn({ code: 'mentions_index', ...label, field: at(field), message: `mentions "${m[0]}"; never refer to turn or step numbers (the judged assistant's steps differ)` });
    }
    if (CONDITIONAL.test(item.question)) {
      warn({ code: 'conditional_question', ...label, field: at('question'), message: 'the question is conditional ("if"/"when"); ask an unconditional YES/NO question' });
    }
  });
}

/** One evidence pointer against the dialogue; `report` gets the violation with a field relative to the pointer. */
function checkEvidence(
  ev: Evidence,
  blockTurn: number,
  messages: readonly Message[],
  spans: readonly TurnSpan[],
  report: (v: { code: string; field: string; message: string }) => void,
): void {
  if (ev.turn !== blockTurn) {
    report({ code: 'evidence_turn', field: 'turn', message: `evidence points at turn ${ev.turn}, but the item belongs to turn ${blockTurn}; evidence must come from the item's own turn` });
  }
  const span = spans[ev.turn];
  if (!span) {
    report({ code: 'evidence_step', field: 'step', message: `turn ${ev.turn} does not exist (the dialogue has ${spans.length} turn${spans.length === 1 ? '' : 's'})` });
    return;
  }
  const found = messageAt(messages, ev.turn, ev.step);
  if (!found) {
    report({ code: 'evidence_step', field: 'step', message: `turn ${ev.turn} has no step ${ev.step} (its steps are 0..${span.end - span.start})` });
    return;
  }
  if (ev.step === 0) {
    report({ code: 'evidence_user_step', field: 'step', message: 'step 0 is the user message; evidence must point at an assistant or tool step' });
    return;
  }
  const message = found.message;
  const allowed = partsForRole(message.role);
  if (!allowed.includes(ev.from)) {
    const must = allowed.length > 0 ? `"from" must be ${allowed.map((f) => `"${f}"`).join(' or ')}` : 'it cannot be evidence';
    const places = normaliseWs(ev.snippet) ? whereHint(locateSnippet(messages, spans, ev.snippet, ev)) : '';
    report({ code: 'evidence_from', field: 'from', message: `turn ${ev.turn} step ${ev.step} is a${message.role === 'assistant' ? 'n' : ''} ${message.role || 'unknown'} message, so ${must}, not "${ev.from}"${places}` });
    return;
  }
  if (normaliseWs(ev.snippet) === '') {
    report({ code: 'evidence_snippet', field: 'snippet', message: 'the snippet is empty; quote the supporting text verbatim' });
    return;
  }
  if (!snippetInPart(message, ev.from, ev.snippet)) {
    const places = locateSnippet(messages, spans, ev.snippet, ev);
    const empty = partIsEmpty(message, ev.from) ? (ev.from === 'assistant.tool_calls' ? ' (that message makes no tool calls)' : ' (that part is empty)') : '';
    report({ code: 'evidence_snippet', field: 'snippet', message: `snippet ${describe(ev.snippet)} not found in the ${ev.from} of turn ${ev.turn} step ${ev.step}${empty}${whereHint(places)}` });
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Entry points.

/**
 * Validate a labeller's answer (annotator form: the bare array of turn blocks; the caller unwraps `{"turns": …}`)
 * against the dialogue it labels.
 */
export function validateChecklist(raw: unknown, example: Pick<Example, 'messages'>): ChecklistValidation {
  const violations: Violation[] = [];
  const messages = safeMessages(example);
  const spans = turnSpans(messages);
  if (!Array.isArray(raw)) {
    const got = raw === null || raw === undefined ? String(raw) : `${typeName(raw)} ${describe(raw)}`;
    violations.push({ severity: 'error', code: 'structure', message: `the checklist must be a JSON array of turn blocks, got ${got}` });
    return { ok: false, violations };
  }

  const parsed = ChecklistOutput.safeParse(raw);
  if (!parsed.success) violations.push(...parsed.error.issues.map((issue) => structureViolation(issue, raw)));
  if (raw.length !== spans.length) {
    violations.push({ severity: 'error', code: 'block_count', message: `expected ${spans.length} turn block${spans.length === 1 ? '' : 's'} (one per user message), got ${raw.length}` });
  }
  checkTurnOrder(raw, spans.length, violations);
  for (const rawBlock of raw) {
    const block = TurnBlock.safeParse(rawBlock);
    if (block.success) checkBlock(block.data, messages, spans, violations);
  }
  return { ok: !violations.some((v) => v.severity === 'error'), ...(parsed.success ? { value: parsed.data } : {}), violations };
}

/** A zod issue of a stored example: `checklists[v][t][k].field` becomes variant / turn / item / field. */
function storedStructureViolation(issue: z.core.$ZodIssue, raw: unknown): Violation {
  const path = issue.path;
  const message = issueMessage(issue, valueAt(raw, path));
  const base: Violation = { severity: 'error', code: 'structure', message };
  const [top, variant, turn, ...rest] = path;
  if (top !== 'checklists' || typeof variant !== 'number') return path.length > 0 ? { ...base, field: formatPath(path) } : base;
  if (typeof turn !== 'number') return { ...base, variant, ...(path.length > 2 ? { field: formatPath(path.slice(2)) } : {}) };
  if (rest.length === 0) return { ...base, variant, turn };
  return { ...base, variant, turn, ...itemPath(valueAt(raw, path.slice(0, 3)), rest) };
}

/**
 * Validate a stored example (`{uuid, messages, tools, checklists, annotation?}`): its structure, then every variant
 * as a checklist of its own dialogue (via `fromStoredVariant`), violations labelled with the variant. Stored items
 * carry their own `dependence` / `weight`, so those fields are named per item (`item C2 · weight`). Duplicate ids,
 * which would make the per-item form ambiguous, are `duplicate_id` errors like in the annotator form.
 */
export function validateAnnotatedExample(raw: unknown): { ok: boolean; uuid?: string; violations: Violation[] } {
  const uuid = isPlainObject(raw) && typeof raw.uuid === 'string' ? { uuid: raw.uuid } : {};
  const parsed = AnnotatedExample.safeParse(raw);
  if (!parsed.success) return { ok: false, ...uuid, violations: parsed.error.issues.map((issue) => storedStructureViolation(issue, raw)) };

  const example = parsed.data;
  const violations: Violation[] = [];
  example.checklists.forEach((variant, v) => {
    for (const violation of validateChecklist(fromStoredVariant(variant), example).violations) {
      const field = violation.item !== undefined ? violation.field?.replace(/^(dependence|weight)(?:\.[\w$]+|\[".*"\])$/, '$1') : violation.field;
      violations.push({ ...violation, variant: v, ...(field !== undefined ? { field } : {}) });
    }
  });
  const annotated = example.annotation?.variants.length;
  if (annotated !== undefined && annotated !== example.checklists.length) {
    violations.push({ severity: 'warning', code: 'annotation_variants', field: 'annotation.variants', message: `annotation records ${annotated} variant(s) but the example has ${example.checklists.length} checklist(s)` });
  }
  return { ok: !violations.some((v) => v.severity === 'error'), ...uuid, violations };
}

// ---------------------------------------------------------------------------------------------------------------
// Formatting.

/** `variant 0 · turn 1 · item C2 · evidence[0].snippet`, or '' for a violation of the whole checklist. */
export function violationPath(v: Violation): string {
  const parts: string[] = [];
  if (v.variant !== undefined) parts.push(`variant ${v.variant}`);
  if (v.turn !== undefined) parts.push(`turn ${v.turn}`);
  if (v.item !== undefined) parts.push(`item ${v.item}`);
  if (v.field) parts.push(v.field);
  return parts.join(' · ');
}

/** One line: `error turn 1 · item C2 · evidence[0].snippet: snippet … not found in … (evidence_snippet)`. */
export function formatViolation(v: Violation): string {
  const path = violationPath(v);
  return `${v.severity} ${path ? `${path}: ` : ''}${v.message} (${v.code})`;
}

/** At most this many lines in a repair request; the rest are counted. */
const REPAIR_MAX_LINES = 40;

/**
 * The violations as a bullet list for a repair request: errors first, then warnings (marked, to fix if possible),
 * duplicates removed, capped at `REPAIR_MAX_LINES`. '' when there is nothing to report.
 */
export function violationsForRepair(violations: readonly Violation[]): string {
  const line = (v: Violation): string => `- ${v.severity === 'warning' ? '(warning) ' : ''}${violationPath(v) || 'whole answer'}: ${v.message}`;
  const ordered = [...violations.filter((v) => v.severity === 'error'), ...violations.filter((v) => v.severity !== 'error')];
  const lines = [...new Set(ordered.map(line))];
  if (lines.length <= REPAIR_MAX_LINES) return lines.join('\n');
  return [...lines.slice(0, REPAIR_MAX_LINES), `- … and ${lines.length - REPAIR_MAX_LINES} more`].join('\n');
}
