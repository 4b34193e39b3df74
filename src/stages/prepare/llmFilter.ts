/**
 * Stage 1b — the LLM-based quality filter (spec §2.2), as pure prompt building, verdict parsing and
 * cascade bookkeeping. The call itself lives in src/llm/parseRetries.ts; the offline stand-in in
 * src/demo/offline.ts.
 *
 * The cascade: every pass asks the judge again (with a given reasoning effort) about the examples the
 * previous pass kept; an example survives only if every pass says "no error". The reference `run.sh`
 * runs low, low, medium, medium, high, high, high, high.
 */
import type { DropReason, Example } from '../../kernel/schema';
import type { Effort, FilterVerdict } from '../../kernel/roleContracts';
import { extractJson } from '../../kernel/jsonExtract';
import { FilterCascade } from '../../run/config';
import { type ChatMessage, systemThenUser, closedObject } from '../../llm/prompting';

/**
 * Our wording of the reference prompt's intent: simulated dialogue, candidate tools, hidden thinking to
 * be ignored, the four questions (follows the query, unambiguous, realistic, free of mistakes),
 * strictness, and the `{"Reasoning", "NoError"}` answer format.
 */
export const FILTER_SYSTEM_PROMPT = `You are reviewing a simulated conversation between a user, an assistant and tools. The tools listed under "Candidate Tools" are the tools the assistant could choose from.

Before acting, the assistant thinks inside <think> and </think>. That thinking is removed in post-processing and never shown to the user: ignore it completely when deciding whether there is an error. After thinking, the assistant either calls tools or answers the user.

Judge the assistant's tool-calling logic:
- Does it follow what the user asked for?
- Is it free of ambiguity?
- Could it realistically happen in a real deployment?
- Does it contain any mistake or flaw?

Answer true only if you find no problem at all; if there is any problem, answer false. Be very strict.

Respond with a single JSON object and nothing else:
{
  "Reasoning": "<your reasoning>",
  "NoError": true or false
}`;


/**
 * System + user message for one example. The user message is the reference format:
 * `# Messages:` and `# Candidate Tools:` followed by 2-space-indented JSON. `meta` (provenance) is never
 * shown to the model.
 */
export function buildFilterMessages(example: Pick<Example, 'messages' | 'tools'>): ChatMessage[] {
  const user =
    '# Messages:\n' + JSON.stringify(example.messages, null, 2) + '\n# Candidate Tools:\n' + JSON.stringify(example.tools, null, 2);
  return systemThenUser(FILTER_SYSTEM_PROMPT, user);
}

/** Structured-output schema (strict-mode compatible: all keys required, no additional properties). */
export const FILTER_JSON_SCHEMA = {
  name: 'filter_verdict',
  schema: closedObject({ Reasoning: { type: 'string' }, NoError: { type: 'boolean' } }),
} as const satisfies { name: string; schema: Record<string, unknown> };

export type FilterParse = { ok: true; value: FilterVerdict } | { ok: false; error: string };

/**
 * Parse the judge's answer.
 *
 * The reference keeps an example iff `bool(parsed["NoError"])` is truthy, so the *string* "false" keeps
 * it (a [QUIRK]). We accept only a real boolean or the strings "true"/"false" (any case); anything else
 * (missing, null, numbers, "yes") is a parse failure, which the role retries and finally drops. A missing
 * or non-string `Reasoning` is tolerated (it is informational) and becomes "".
 */
export function parseFilterVerdict(text: string): FilterParse {
  const extracted = extractJson(text, { expect: 'object' });
  if (!extracted.ok) return extracted;
  const obj = extracted.value as Record<string, unknown>;
  const raw = obj['NoError'];
  let noError: boolean;
  if (typeof raw === 'boolean') {
    noError = raw;
  } else if (typeof raw === 'string' && /^(true|false)$/i.test(raw.trim())) {
    noError = raw.trim().toLowerCase() === 'true';
  } else {
    return { ok: false, error: `"NoError" must be a boolean, got ${raw === undefined ? 'nothing' : JSON.stringify(raw)}` };
  }
  const reasoning = typeof obj['Reasoning'] === 'string' ? obj['Reasoning'] : '';
  return { ok: true, value: { noError, reasoning } };
}

// ---------------------------------------------------------------------------------------------------
// Cascade

/** Cascade from a list of efforts, e.g. `cascadeOf(['low', 'medium', 'high'])`. */
export const cascadeOf = (efforts: readonly Effort[]): FilterCascade => FilterCascade.parse({ passes: efforts.map((effort) => ({ effort })) });

/**
 * Cache salt of a pass: identical passes (two "low" passes) must get independent answers, but a retried
 * activity re-running the *same* pass must hit the cache. `pass` is 0-based.
 */
export const filterCacheSalt = (pass: number, effort: Effort): string => `filter-pass-${pass}-${effort}`;

/** What one pass produced for one example (structurally a `RoleOutcome<FilterVerdict>`). */
export type PassOutcome = { ok: true; value: FilterVerdict } | { ok: false; reason: string };

export type CascadeDecision =
  /** Not decided yet: run pass `nextPass` (0-based) with `effort`. */
  | { status: 'pending'; nextPass: number; effort: Effort }
  /** Every pass said "no error". */
  | { status: 'kept'; passes: number }
  /** Dropped at pass `atPass` (0-based): the first pass that judged an error or gave no verdict. */
  | { status: 'dropped'; atPass: number; reason: DropReason };

/** Longest reasoning copied into a drop reason. */
const MAX_REASON_CHARS = 500;

/**
 * Decide an example from the outcomes of the passes run so far, in pass order. Early exit: the first
 * failing pass decides; later outcomes (if any) are ignored.
 */
export function cascadeDecision(outcomes: readonly PassOutcome[], cascade: FilterCascade): CascadeDecision {
  const total = cascade.passes.length;
  for (let i = 0; i < total; i++) {
    const pass = cascade.passes[i]!;
    const outcome = outcomes[i];
    if (outcome === undefined) return { status: 'pending', nextPass: i, effort: pass.effort };
    const where = `pass ${i + 1}/${total} (effort ${pass.effort})`;
    if (!outcome.ok) {
      return { status: 'dropped', atPass: i, reason: { code: 'llm_filter_no_verdict', detail: `${where}: no usable verdict: ${outcome.reason}` } };
    }
    if (!outcome.value.noError) {
      return {
        status: 'dropped',
        atPass: i,
        reason: { code: 'llm_filter', detail: `${where}: judged erroneous: ${truncate(outcome.value.reasoning, MAX_REASON_CHARS)}` },
      };
    }
  }
  return { status: 'kept', passes: total };
}

function truncate(s: string, max: number): string {
  return s.length <= max ? s : s.slice(0, max) + '…';
}
