/**
 * Rule-based data filters of stage 1a (spec §2.1).
 *
 * Each filter is a pure function `(example) => DropReason[]`; an empty array means the example passes. The reason
 * `code` is the reference's flag name, so reports line up with the reference's `error_type` counts. Every enabled
 * filter runs on every example and the reasons overlap, as in the reference; an example is kept only if no
 * enabled filter objects.
 *
 * Differences from the reference, on purpose (see docs/decisions-data.md):
 *  - no filter ever throws: inputs on which the reference would crash (a non-function tool entry in the duplicate
 *    checks, an unknown parameter `type`, arguments that decode to a list, content that is not a string) become a
 *    drop reason or are skipped with the responsibility left to the filter that owns that check;
 *  - a filter reports every violation it finds (one reason per offending message / tool call / tool) instead of
 *    stopping at the first, so the detail of a rejected example is complete;
 *  - the argument *type* check, which the reference effectively never applies (§2.1 QUIRK), is the separate,
 *    opt-in filter `tool_argument_types`, so the default behaviour matches the reference's effective behaviour.
 */
import type { DropReason, Example } from '../../kernel/schema';
import { assistantCalls, callLabel, checkAgainstSchema, contentOf, countOf, decodeCall, describe, EMPTY_OBJECT_SCHEMA, hasToolCalls, indexTools, isBlankLikePython, isPlainObject, messagesOf, parseJsonLikePython, roleOf, toolCallsOf } from './filterParts';
import { canonicalJson } from '../../kernel/canonicalJson';

export type RuleFilter = (example: Example) => DropReason[];

/** Filter names in the reference's order (its `error_type` dict), plus our opt-in `tool_argument_types`. */
export const RULE_FILTER_NAMES = [
  'tool_schema',
  'role_order',
  'tool_call_response_match',
  'no_tool_response_in_assistant_message',
  'tool_response_json_valid',
  'duplicate_tools_by_schema',
  'duplicate_tools_by_name',
  'non_empty_content',
  'think_tags',
  'tool_argument_types',
] as const;
export type RuleFilterName = (typeof RULE_FILTER_NAMES)[number];

/** What `run.sh` enables: everything except `duplicate_tools_by_schema` (and our opt-in `tool_argument_types`). */
export const DEFAULT_ENABLED_FILTERS = [
  'tool_schema',
  'role_order',
  'tool_call_response_match',
  'no_tool_response_in_assistant_message',
  'tool_response_json_valid',
  'duplicate_tools_by_name',
  'non_empty_content',
  'think_tags',
] as const satisfies readonly RuleFilterName[];

export function isRuleFilterName(name: string): name is RuleFilterName {
  return (RULE_FILTER_NAMES as readonly string[]).includes(name);
}

// ---------------------------------------------------------------------------------------------------------------
// The filters. Each is wrapped by `guarded`, so even an unforeseen input yields a reason instead of an exception.

function guarded(code: string, check: (ex: Example, reason: Reason) => DropReason[]): RuleFilter {
  const reason: Reason = (detail, messageIndex) =>
    messageIndex === undefined ? { code, detail } : { code, detail, messageIndex };
  return (ex) => {
    try {
      return check(ex, reason);
    } catch (e) {
      return [reason(`filter could not evaluate this example: ${(e as Error).message}`)];
    }
  };
}

type Reason = (detail: string, messageIndex?: number) => DropReason;

/** A guarded filter that looks at each message on its own: `check` gives at most one reason per message. */
function perMessage(code: string, check: (message: unknown, i: number, reason: Reason) => DropReason | undefined): RuleFilter {
  return guarded(code, (ex, reason) => messagesOf(ex).flatMap((message, i) => check(message, i, reason) ?? []));
}

/** 1. `tool_schema`: the tool list is well formed and every assistant tool call fits a declared schema. */
export const toolSchema: RuleFilter = guarded('tool_schema', (ex, reason) => {
  const index = indexTools(isPlainObject(ex) ? ex.tools : undefined);
  // As in the reference, a broken tool list fails the example before any call is checked.
  if (!index.ok) return index.problems.map((p) => reason(p));
  const reasons: DropReason[] = [];
  for (const site of assistantCalls(ex)) {
    const decoded = decodeCall(site.call);
    if (!decoded.ok) {
      reasons.push(reason(`${callLabel(site)}: ${decoded.problem}`, site.messageIndex));
      continue;
    }
    const schemas = index.schemasByName.get(decoded.name);
    if (!schemas) {
      reasons.push(reason(`${callLabel(site, decoded.name)}: tool "${decoded.name}" is not among the candidate tools`, site.messageIndex));
      continue;
    }
    const checks = schemas.map((schema) => checkAgainstSchema(decoded.args, schema));
    if (checks.some((c) => c.structural.length === 0)) continue;
    const problems = checks.map((c) => c.structural.join('; ')).join(' | ');
    reasons.push(reason(`${callLabel(site, decoded.name)}: ${problems}`, site.messageIndex));
  }
  return reasons;
});

/**
 * Opt-in `tool_argument_types`: supplied arguments have the declared JSON types. Only calls that pass the structural
 * `tool_schema` checks are examined; everything else is that filter's business.
 */
export const toolArgumentTypes: RuleFilter = guarded('tool_argument_types', (ex, reason) => {
  const index = indexTools(isPlainObject(ex) ? ex.tools : undefined);
  if (!index.ok) return [];
  const reasons: DropReason[] = [];
  for (const site of assistantCalls(ex)) {
    const decoded = decodeCall(site.call);
    if (!decoded.ok) continue;
    const schemas = index.schemasByName.get(decoded.name) ?? [];
    const fitting = schemas.map((schema) => checkAgainstSchema(decoded.args, schema)).filter((c) => c.structural.length === 0);
    if (fitting.length === 0 || fitting.some((c) => c.types.length === 0)) continue;
    reasons.push(reason(`${callLabel(site, decoded.name)}: ${fitting[0]?.types.join('; ')}`, site.messageIndex));
  }
  return reasons;
});

/**
 * 2. `role_order`: optional system at index 0 followed by user, otherwise user first; user→assistant;
 * assistant→tool|user (tool iff it has tool calls); tool→tool|assistant; no unknown roles; the last message is an
 * assistant without tool calls; at least one user→assistant adjacency. One reason per offending position.
 */
export const roleOrder: RuleFilter = guarded('role_order', (ex, reason) => {
  const messages = messagesOf(ex);
  if (messages.length === 0) return [reason('message list is empty')];
  const roles = messages.map(roleOf);
  const reasons: DropReason[] = [];
  roles.forEach((role, i) => {
    if (role === 'system' && i !== 0) reasons.push(reason(`system message at index ${i}; only index 0 may be system`, i));
  });
  if (roles[0] === 'system') {
    if (roles.length < 2) reasons.push(reason('a leading system message must be followed by a user message', 0));
    else if (roles[1] !== 'user') reasons.push(reason(`message 1 after the system message must be user, got ${describe(roles[1])}`, 1));
  } else if (roles[0] !== 'user') {
    reasons.push(reason(`first message must be user or system, got ${describe(roles[0])}`, 0));
  }
  for (let i = 0; i + 1 < roles.length; i++) {
    const role = roles[i];
    const next = roles[i + 1];
    if (role === 'user') {
      if (next !== 'assistant') reasons.push(reason(`user at index ${i} must be followed by assistant, got ${describe(next)}`, i));
    } else if (role === 'assistant') {
      const calls = hasToolCalls(messages[i]);
      if (next !== 'tool' && next !== 'user') reasons.push(reason(`assistant at index ${i} must be followed by tool or user, got ${describe(next)}`, i));
      else if (calls && next !== 'tool') reasons.push(reason(`assistant at index ${i} has tool calls but is followed by ${describe(next)}, not tool`, i));
      else if (!calls && next === 'tool') reasons.push(reason(`assistant at index ${i} has no tool calls but is followed by tool`, i));
    } else if (role === 'tool') {
      if (next !== 'tool' && next !== 'assistant') reasons.push(reason(`tool at index ${i} must be followed by tool or assistant, got ${describe(next)}`, i));
    } else if (role !== 'system') {
      reasons.push(reason(`unknown role ${describe(role)} at index ${i}`, i));
    }
  }
  const last = messages.length - 1;
  if (roles[last] !== 'assistant') reasons.push(reason(`last message must be assistant, got ${describe(roles[last])}`, last));
  else if (hasToolCalls(messages[last])) reasons.push(reason(`last message (index ${last}) must not have tool calls`, last));
  if (!roles.some((role, i) => role === 'user' && roles[i + 1] === 'assistant')) {
    reasons.push(reason('no complete turn: no user message is directly followed by an assistant message'));
  }
  return reasons;
});

/** 3. `tool_call_response_match`: an assistant with N tool calls is followed by exactly N consecutive tool messages (IDs ignored). */
export const toolCallResponseMatch: RuleFilter = guarded('tool_call_response_match', (ex, reason) => {
  const messages = messagesOf(ex);
  const reasons: DropReason[] = [];
  let i = 0;
  while (i < messages.length) {
    const expected = roleOf(messages[i]) === 'assistant' ? toolCallsOf(messages[i]).length : 0;
    if (expected === 0) {
      i++;
      continue;
    }
    let j = i + 1;
    while (j < messages.length && roleOf(messages[j]) === 'tool') j++;
    const actual = j - i - 1;
    if (actual !== expected) {
      reasons.push(reason(`assistant at index ${i} has ${expected} tool call(s) but is followed by ${actual} tool message(s)`, i));
    }
    i = j;
  }
  return reasons;
});

/** 4. `no_tool_response_in_assistant_message`: assistant text must not contain `<tool_response>` / `</tool_response>`. */
export const noToolResponseInAssistantMessage: RuleFilter = perMessage('no_tool_response_in_assistant_message', (message, i, reason) => {
  if (roleOf(message) !== 'assistant') return undefined;
  const content = contentOf(message);
  const tags = ['<tool_response>', '</tool_response>'].filter((tag) => content.includes(tag));
  return tags.length > 0 ? reason(`assistant message at index ${i} contains ${tags.join(' and ')}`, i) : undefined;
});

/** 5. `tool_response_json_valid`: every tool message is non-empty and parses as JSON (any value; Python's `json.loads`). */
export const toolResponseJsonValid: RuleFilter = perMessage('tool_response_json_valid', (message, i, reason) => {
  if (roleOf(message) !== 'tool') return undefined;
  const content = contentOf(message);
  if (content === '') return reason(`tool message at index ${i} is empty`, i);
  const parsed = parseJsonLikePython(content);
  return parsed.ok ? undefined : reason(`tool message at index ${i} is not valid JSON: ${parsed.error}`, i);
});

/** Function tools of the list with their positions; malformed entries are skipped (tool_schema reports them). */
function functionTools(ex: Example): { index: number; name: string; parameters: unknown }[] {
  const tools = isPlainObject(ex) && Array.isArray(ex.tools) ? ex.tools : [];
  const out: { index: number; name: string; parameters: unknown }[] = [];
  for (const [index, tool] of tools.entries()) {
    if (!isPlainObject(tool) || tool.type !== 'function' || !isPlainObject(tool.function)) continue;
    const { name, parameters } = tool.function;
    if (typeof name === 'string' && name !== '') out.push({ index, name, parameters });
  }
  return out;
}

/** 6. `duplicate_tools_by_name`: no function name appears twice in the tool list. One reason per repeated name. */
export const duplicateToolsByName: RuleFilter = guarded('duplicate_tools_by_name', (ex, reason) => {
  const positions = new Map<string, number[]>();
  for (const tool of functionTools(ex)) positions.set(tool.name, [...(positions.get(tool.name) ?? []), tool.index]);
  return [...positions]
    .filter(([, at]) => at.length > 1)
    .map(([name, at]) => reason(`tool "${name}" appears ${at.length} times in the tool list (tools[${at.join('], tools[')}])`));
});

/** Recursively drop every `description` key (descriptions do not make two schemas different). */
function stripDescriptions(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(stripDescriptions);
  if (!isPlainObject(value)) return value;
  return Object.fromEntries(Object.entries(value).filter(([k]) => k !== 'description').map(([k, v]) => [k, stripDescriptions(v)]));
}


/**
 * 6b. `duplicate_tools_by_schema` (opt-in, disabled in the reference run): no two tools share a name *and* an
 * identical parameter schema once descriptions are removed (missing/empty parameters = empty object schema).
 */
export const duplicateToolsBySchema: RuleFilter = guarded('duplicate_tools_by_schema', (ex, reason) => {
  const positions = new Map<string, { name: string; at: number[] }>();
  for (const tool of functionTools(ex)) {
    const params = tool.parameters === undefined || tool.parameters === null || (isPlainObject(tool.parameters) && Object.keys(tool.parameters).length === 0)
      ? EMPTY_OBJECT_SCHEMA
      : tool.parameters;
    const key = `${tool.name}\u0000${canonicalJson(stripDescriptions(params))}`;
    const entry = positions.get(key) ?? { name: tool.name, at: [] };
    entry.at.push(tool.index);
    positions.set(key, entry);
  }
  return [...positions.values()]
    .filter((e) => e.at.length > 1)
    .map((e) => reason(`tool "${e.name}" appears with an identical schema at tools[${e.at.join('], tools[')}]`));
});

/** 7. `non_empty_content`: every message (any role) has content that is not blank (Python `strip()`). */
export const nonEmptyContent: RuleFilter = perMessage('non_empty_content', (message, i, reason) =>
  isBlankLikePython(contentOf(message)) ? reason(`message at index ${i} (${describe(roleOf(message))}) has empty content`, i) : undefined);

/**
 * 8. `think_tags`: user and tool messages contain neither `<think>` nor `</think>`; every assistant message has
 * exactly one of each, the opening tag first. System messages are not checked (as in the reference).
 */
export const thinkTags: RuleFilter = perMessage('think_tags', (message, i, reason) => {
  const role = roleOf(message);
  const content = contentOf(message);
  if (role === 'user' || role === 'tool') {
    return content.includes('<think>') || content.includes('</think>') ? reason(`${role} message at index ${i} contains a think tag`, i) : undefined;
  }
  if (role !== 'assistant') return undefined;
  const open = countOf(content, '<think>');
  const close = countOf(content, '</think>');
  if (open !== 1 || close !== 1) {
    return reason(`assistant message at index ${i} has ${open} <think> and ${close} </think> tags, expected exactly one of each`, i);
  }
  return content.indexOf('<think>') > content.indexOf('</think>') ? reason(`assistant message at index ${i} has </think> before <think>`, i) : undefined;
});

/** Every filter by its reference name. */
export const RULE_FILTERS: Readonly<Record<RuleFilterName, RuleFilter>> = {
  tool_schema: toolSchema,
  role_order: roleOrder,
  tool_call_response_match: toolCallResponseMatch,
  no_tool_response_in_assistant_message: noToolResponseInAssistantMessage,
  tool_response_json_valid: toolResponseJsonValid,
  duplicate_tools_by_schema: duplicateToolsBySchema,
  duplicate_tools_by_name: duplicateToolsByName,
  non_empty_content: nonEmptyContent,
  think_tags: thinkTags,
  tool_argument_types: toolArgumentTypes,
};

/**
 * Validate a user-supplied list of filter names (CLI flag, config file). Throws on an unknown name, listing the
 * valid ones: that is a usage error, not a data error.
 */
export function resolveEnabledFilters(names?: readonly string[]): RuleFilterName[] {
  if (names === undefined) return [...DEFAULT_ENABLED_FILTERS];
  const unknown = names.filter((n) => !isRuleFilterName(n));
  if (unknown.length > 0) throw new Error(`unknown rule filter(s): ${unknown.join(', ')}; valid: ${RULE_FILTER_NAMES.join(', ')}`);
  return [...new Set(names as RuleFilterName[])];
}

/**
 * Run every enabled filter on one example (in the reference's order) and collect all reasons; the example is kept
 * only when there are none. An unknown filter name throws (a configuration error; validate names up front with
 * `resolveEnabledFilters`).
 */
export function applyRuleFilters(example: Example, enabled: readonly string[] = DEFAULT_ENABLED_FILTERS): { kept: boolean; reasons: DropReason[] } {
  const wanted = new Set(resolveEnabledFilters(enabled));
  const reasons = RULE_FILTER_NAMES.filter((name) => wanted.has(name)).flatMap((name) => RULE_FILTERS[name](example));
  return { kept: reasons.length === 0, reasons };
}
