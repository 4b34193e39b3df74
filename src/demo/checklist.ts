/**
 * Offline checklist annotator for the demo tool world (spec §5.3–5.4 without an LLM): each turn's checklist is
 * derived from the generator's ground truth (`meta.world`), so the pipeline's labelling stage, the judge and the
 * rewards can run and be tested offline.
 *
 * Unlike the offline filter and compressor (offline.ts), which must see only what an LLM would see, this annotator
 * reads `meta.world`: the LLM labeller it replaces sees the whole reference dialogue and infers the same facts from
 * it, and ground truth makes the checklist exact instead of a heuristic guess. It uses nothing else: the items are a
 * pure function of `example.messages`, `example.tools` and `meta.world`.
 *
 * Per turn, items C0, C1, … in this order (weights are units normalised per turn, required items weigh more):
 * - one `assistant.tool_calls` item per expected call (check `tool_called`, required, 3 units);
 * - one `tool.content` item (check `tool_succeeded`, required, 2 units) per call whose result the reply needs: the
 *   successful calls of the turn's last calling step (the results the reply reports on) and every successful call
 *   whose result holds an answer fact. A call the reference itself sees fail (order out of stock, calendar
 *   conflict) gets none: the reference must pass its own checklist, and the demo world's errors are real outcomes
 *   the reply has to report, not mistakes (spec rule 13 assumes error-free calls; the worked example §5.5 shows
 *   the labeller encoding an error anyway — we keep only what is checkable);
 * - one `assistant.content.user_visible_reply` item per answer fact (check `reply_states`, required, 3 units),
 *   depending on the `tool.content` items of the latest step whose results hold the fact (dependencies may only
 *   point at tool.content items, §5.4);
 * - no-tool turns instead get "answered without a tool" (`no_tool_call`, required, 3) and, when the turn must ask
 *   the user back (the `*.ask_*` intents: a missing city or account), "asks the user" (`reply_asks`, required, 3);
 * - last, "no invented facts" (`reply_grounded`): 1 unit and not required, except in a closing turn (the user only
 *   says thanks), where answering without new facts is the whole task, so it is required and weighs 3.
 *
 * Arguments equal to the parameter's default (in the example's tool schemas) are left out of the checks: the spec
 * tells labellers that "arguments with defaults are not required", and a call that omits them does the same thing.
 *
 * Questions, pass conditions and failure examples are written for an LLM judge that never sees `check`, and never
 * mention turn or step indices (§5.3).
 */
import { decodeArguments, type Example, type Message } from '../kernel/schema';
import { indexOnBoundaries, isToolError } from '../stages/checklist/check';
import { argumentsMatch } from '../kernel/arguments';
import type { ChecklistItem, ChecklistOutput, Evidence, ItemCheck, TurnBlock } from '../stages/checklist/schema';
import { replyPart, turnSpans, type TurnSpan } from '../stages/checklist/steps';
import type { WorldExpectedCall, WorldMeta, WorldTurn } from './generator';
import { GroundingContext } from '../kernel/grounding';
import { isPlainObject, parametersOfTools } from './worldTypes';

/** Annotator name stored in `annotation.annotator`. */
export const OFFLINE_ANNOTATOR = 'offline:demo-world';

/** Weight units (see the module comment); normalised per turn. */
const UNITS = { call: 3, toolContent: 2, fact: 3, noTool: 3, asks: 3, groundedRequired: 3, grounded: 1 } as const;

/** Longest evidence snippet quoted from a tool result or reply (a prefix, so it still occurs verbatim). */
const MAX_SNIPPET = 160;

/** What each world tool returns, for questions about its result. */
const RESULT_OF: Readonly<Record<string, string>> = {
  get_weather: 'the current weather',
  get_forecast: 'the forecast',
  search_products: 'the matching products',
  get_product: 'the product details',
  place_order: 'an order confirmation',
  get_order_status: 'the order status',
  get_balance: 'the account balance',
  list_transactions: 'the transactions',
  transfer_money: 'a transfer confirmation',
  convert_currency: 'the converted amount',
  search_flights: 'the matching flights',
  book_flight: 'a booking confirmation',
  get_flight_status: 'the flight status',
  list_events: 'the events of the day',
  find_free_slot: 'the free time slots',
  create_event: 'the created event',
};

/** Friendlier names than the raw result keys, for facts ("the temperature 21"). */
const FACT_LABELS: Readonly<Record<string, string>> = {
  delivery_days: 'delivery time in days',
  delay_minutes: 'delay in minutes',
  seats_left: 'number of free seats',
  duration_minutes: 'duration in minutes',
  new_balance: 'new balance',
  transfer_id: 'transfer id',
  booking_id: 'booking id',
  flight_id: 'flight id',
  order_id: 'order id',
  event_id: 'event id',
  product_id: 'product id',
  unit_price: 'unit price',
  converted: 'converted amount',
  high: 'high temperature',
  low: 'low temperature',
  condition: 'weather condition',
  name: 'product name',
  depart: 'departure time',
  title: 'event',
};

/** Checklist blocks for every turn of a demo-world example (annotator form, spec §5.4). */
export function offlineChecklist(example: Example): ChecklistOutput {
  const world = (example.meta as { world?: WorldMeta } | undefined)?.world;
  if (!world) throw new Error(`offline annotator cannot annotate non-demo data — configure llm.roles.annotator: example ${example.uuid} has no meta.world (only demo-world examples can be annotated offline)`);
  const spans = turnSpans(example.messages);
  if (spans.length !== world.turns.length) {
    throw new Error(`offline checklist: example ${example.uuid} has ${spans.length} user turns but meta.world describes ${world.turns.length}`);
  }
  const defaults = parameterDefaults(example.tools);
  return world.turns.map((wt, t) => turnBlock(example, spans[t]!, wt, defaults));
}

// ---------------------------------------------------------------------------------------------------------------
// One turn

/** An item before ids and weights are assigned; `deps` point at other drafts of the same turn. */
interface Draft {
  item: Omit<ChecklistItem, 'id'>;
  units: number;
  deps: Draft[];
}

/** An expected call located in the reference messages. */
interface LocatedCall {
  expected: WorldExpectedCall;
  /** The arguments a correct call must carry (defaults left out). */
  checkArgs: Record<string, unknown>;
  step: number;
  rawArguments: string;
  toolStep?: number;
  result?: string;
  ok: boolean;
  item?: Draft;
}

function turnBlock(example: Example, span: TurnSpan, wt: WorldTurn, defaults: Map<string, Record<string, unknown>>): TurnBlock {
  const where = `example ${example.uuid} turn ${span.turn}`;
  const messages = example.messages;
  const assistantIdx: number[] = [];
  for (let i = span.start + 1; i <= span.end; i++) if (messages[i]?.role === 'assistant') assistantIdx.push(i);
  const finalIdx = assistantIdx[assistantIdx.length - 1];
  const final = finalIdx === undefined ? undefined : messages[finalIdx];
  if (finalIdx === undefined || !final || (final.tool_calls?.length ?? 0) > 0) throw new Error(`offline checklist: ${where} does not end with a final reply`);
  const finalStep = finalIdx - span.start;
  const reply = replyPart(final.content);
  const replyEvidence = (snippet: string): Evidence => ({ turn: span.turn, step: finalStep, from: 'assistant.content.user_visible_reply', snippet });

  const calls = locateCalls(messages, span, assistantIdx, wt.expectedCalls, defaults, where);
  const drafts: Draft[] = [];

  for (const c of calls) {
    const argsText = describeArgs(c.checkArgs);
    const with_ = argsText === '' ? '' : ` with ${argsText}`;
    const firstKey = Object.keys(c.checkArgs)[0];
    drafts.push({
      units: UNITS.call,
      deps: [],
      item: {
        evidence: [{ turn: span.turn, step: c.step, from: 'assistant.tool_calls', snippet: c.rawArguments }],
        focus_on: 'assistant.tool_calls',
        question: `Did the assistant call ${c.expected.name}${with_}?`,
        pass_condition: `An actual tool call (not just a plan in the thinking) is made to ${c.expected.name}${with_}. Text values match ignoring case and surrounding spaces, numbers by value; optional arguments not listed may be omitted or left at their defaults.`,
        failure_examples: [
          `${c.expected.name} is never called.`,
          firstKey === undefined ? `A different tool is called instead of ${c.expected.name}.` : `${c.expected.name} is called with a different ${humanKey(firstKey)} than ${showValue(c.checkArgs[firstKey])}.`,
          `The assistant only says in its thinking or reply that it will call ${c.expected.name}, without making the call.`,
        ],
        required_for_next_turn: true,
        check: { kind: 'tool_called', name: c.expected.name, arguments: c.checkArgs as Extract<ItemCheck, { kind: 'tool_called' }>['arguments'] },
      },
    });
  }

  // Which results hold each answer fact; the reply depends on the latest step that provides it.
  const facts = dedupe(wt.answerFacts.map((f) => f.trim()).filter((f) => f !== ''));
  const sourcesOf = new Map<string, LocatedCall[]>();
  for (const fact of facts) {
    const holders = calls.filter((c) => c.ok && c.result !== undefined && resultStates(c.result, fact));
    const latest = Math.max(-1, ...holders.map((c) => c.expected.assistantStep));
    sourcesOf.set(fact, holders.filter((c) => c.expected.assistantStep === latest));
  }
  const lastCallingStep = Math.max(-1, ...calls.map((c) => c.expected.assistantStep));
  const needed = calls.filter((c) => c.ok && (c.expected.assistantStep === lastCallingStep || facts.some((f) => sourcesOf.get(f)?.includes(c))));
  for (const c of needed) {
    const argsText = describeArgs(c.checkArgs);
    const what = RESULT_OF[c.expected.name] ?? `the result of ${c.expected.name}`;
    const called = argsText === '' ? c.expected.name : `${c.expected.name} with ${argsText}`;
    c.item = {
      units: UNITS.toolContent,
      deps: [],
      item: {
        evidence: [{ turn: span.turn, step: c.toolStep!, from: 'tool.content', snippet: prefixSnippet(c.result!) }],
        focus_on: 'tool.content',
        question: `Did the call to ${called} return ${what} without an error?`,
        pass_condition: `A tool result answering the call to ${called} is present and gives ${what}; it is not an error object.`,
        failure_examples: [
          `The tool answers with an error (for example an unknown or invalid argument).`,
          `${c.expected.name} is never called with these arguments, so there is no such result.`,
        ],
        required_for_next_turn: true,
        check: { kind: 'tool_succeeded', name: c.expected.name, arguments: c.checkArgs as Extract<ItemCheck, { kind: 'tool_succeeded' }>['arguments'] },
      },
    };
    drafts.push(c.item);
  }

  for (const fact of facts) {
    const sources = sourcesOf.get(fact) ?? [];
    const key = factKey(fact, sources.length > 0 ? sources : calls.filter((c) => c.ok));
    const shown = showFact(fact);
    const label = key === undefined ? undefined : (FACT_LABELS[key] ?? humanKey(key));
    const phrase = label === undefined ? shown : `the ${label} ${shown}`;
    // A terse reference reply (meta.demonstrator) leaves some facts out; the item still asks for them, with the tool
    // result that gives the fact (an error result too: "overlaps \"dentist visit\""; for a derived fact such as "out of
    // stock", the turn's last successful result) as evidence. A fact with no tool result at all to point at gets no item.
    let evidence: Evidence;
    if (indexOnBoundaries(reply.toLowerCase(), fact.toLowerCase()) >= 0) evidence = replyEvidence(clauseAround(reply, fact));
    else {
      const answered = calls.filter((c) => c.result !== undefined);
      const holder = [...sources, ...answered.filter((c) => resultStates(c.result!, fact)), ...answered.filter((c) => c.ok).reverse()][0];
      if (holder?.result === undefined) continue;
      evidence = { turn: span.turn, step: holder.toolStep!, from: 'tool.content', snippet: windowAround(holder.result, fact) };
    }
    drafts.push({
      units: UNITS.fact,
      deps: sources.map((s) => s.item!),
      item: {
        evidence: [evidence],
        focus_on: 'assistant.content.user_visible_reply',
        question: `Does the reply state ${phrase}?`,
        pass_condition: `The user-visible reply states ${shown}${label === undefined ? '' : ` as the ${label}`}, exactly as the tool result gives it (ignoring case).`,
        failure_examples: [
          `The reply gives a different value${label === undefined ? '' : ` for the ${label}`} than the tool returned.`,
          `The reply leaves ${shown} out.`,
          `${shown} appears only in the hidden thinking, not in the reply.`,
        ],
        required_for_next_turn: true,
        check: { kind: 'reply_states', value: fact },
      },
    });
  }

  const closing = !wt.requiresTool && !asksBack(wt);
  if (!wt.requiresTool) {
    drafts.push({
      units: UNITS.noTool,
      deps: [],
      item: {
        evidence: [replyEvidence(prefixSnippet(reply))],
        focus_on: 'assistant.tool_calls',
        question: 'Did the assistant answer without calling a tool?',
        pass_condition: 'The assistant replies to the user directly and makes no tool call.',
        failure_examples: closing
          ? ['The assistant calls a tool again although the user only says thanks.', 'The assistant repeats an earlier lookup instead of closing the conversation.']
          : ['The assistant calls a tool with a guessed value instead of asking the user.', 'The assistant calls a tool with an empty or made-up argument.'],
        required_for_next_turn: true,
        check: { kind: 'no_tool_call' },
      },
    });
  }
  if (!wt.requiresTool && asksBack(wt)) {
    const what = askedFor(wt.goal);
    drafts.push({
      units: UNITS.asks,
      deps: [],
      item: {
        evidence: [replyEvidence(questionSentence(reply))],
        focus_on: 'assistant.content.user_visible_reply',
        question: `Does the reply ask the user ${what}?`,
        pass_condition: `The user-visible reply asks the user a question ${what}, so that the request can be completed once the user answers.`,
        failure_examples: [
          'The reply guesses the missing value and answers without asking.',
          'The reply says it cannot help but asks the user nothing.',
          'The question is only in the hidden thinking, not in the reply.',
        ],
        required_for_next_turn: true,
        check: { kind: 'reply_asks' },
      },
    });
  }
  drafts.push({
    units: closing ? UNITS.groundedRequired : UNITS.grounded,
    deps: [],
    item: {
      evidence: [replyEvidence(prefixSnippet(reply))],
      focus_on: 'assistant.content.user_visible_reply',
      question: closing
        ? 'Does the reply close the conversation politely without stating any new facts?'
        : 'Does the reply avoid numbers, ids or times that neither the user nor any tool result gave?',
      pass_condition: closing
        ? 'The reply acknowledges the user and states no number, id, time or other fact that the user or the tools did not provide.'
        : 'Every number, id or time stated in the user-visible reply appears in the user messages or in the tool results of the conversation.',
      failure_examples: closing
        ? ['The reply adds a new booking, order or amount the user did not ask for.', 'The reply states a number that no tool returned.']
        : ['The reply states an amount, temperature or price that no tool returned.', 'The reply invents an id (order, booking, transfer or event id).', 'The reply changes a number from the tool result (for example rounds or mistypes it).'],
      required_for_next_turn: closing,
      check: { kind: 'reply_grounded' },
    },
  });

  return assemble(span.turn, drafts);
}

/** Ids C0, C1, …, dependence lists and weights that sum to 1 (the last item takes the rounding remainder). */
function assemble(turn: number, drafts: readonly Draft[]): TurnBlock {
  const ids = new Map(drafts.map((d, i) => [d, `C${i}`]));
  const total = drafts.reduce((s, d) => s + d.units, 0);
  const weight: Record<string, number> = {};
  let sum = 0;
  drafts.forEach((d, i) => {
    const id = `C${i}`;
    if (i < drafts.length - 1) {
      weight[id] = Math.round((d.units / total) * 1e4) / 1e4;
      sum += weight[id];
    } else {
      weight[id] = Math.round((1 - sum) * 1e10) / 1e10;
    }
  });
  return {
    turn,
    checklist: drafts.map((d, i) => ({ id: `C${i}`, ...d.item })),
    dependence: Object.fromEntries(drafts.map((d, i) => [`C${i}`, d.deps.map((x) => ids.get(x)!)])),
    weight,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Locating the reference calls

/** Parameter defaults by tool name (a name listed twice: the last one), read defensively from the candidate tools. */
function parameterDefaults(tools: readonly unknown[]): Map<string, Record<string, unknown>> {
  return new Map(parametersOfTools(tools, (schema) => ('default' in schema ? schema.default : undefined)));
}

/**
 * Find each expected call in the reference: its assistant message is the `assistantStep`-th assistant message of
 * the turn, the call the first unused one there with the same name and arguments, and its tool message the k-th
 * tool message after that assistant message (the generator writes them in call order).
 */
function locateCalls(
  messages: readonly Message[],
  span: TurnSpan,
  assistantIdx: readonly number[],
  expected: readonly WorldExpectedCall[],
  defaults: Map<string, Record<string, unknown>>,
  where: string,
): LocatedCall[] {
  const used = new Set<string>();
  return expected.map((e) => {
    const index = assistantIdx[e.assistantStep];
    const message = index === undefined ? undefined : messages[index];
    const calls = message?.tool_calls ?? [];
    const k = calls.findIndex((c, j) => {
      if (used.has(`${index}:${j}`) || c.function.name !== e.name) return false;
      const decoded = decodeArguments(c.function.arguments);
      const args = decoded.ok && isPlainObject(decoded.value) ? decoded.value : undefined;
      return args !== undefined && Object.keys(args).length === Object.keys(e.arguments).length && argumentsMatch(e.arguments, args);
    });
    const call = calls[k];
    if (index === undefined || !call) throw new Error(`offline checklist: ${where}: the reference has no call ${e.name}(${JSON.stringify(e.arguments)}) at assistant step ${e.assistantStep}`);
    used.add(`${index}:${k}`);
    const toolIndex = index + 1 + k;
    const tool = messages[toolIndex]?.role === 'tool' && toolIndex <= span.end ? messages[toolIndex] : undefined;
    const dflt = defaults.get(e.name) ?? {};
    const checkArgs = Object.fromEntries(Object.entries(e.arguments).filter(([key, v]) => !(key in dflt && dflt[key] === v)));
    return {
      expected: e,
      checkArgs,
      step: index - span.start,
      rawArguments: typeof call.function.arguments === 'string' ? call.function.arguments : JSON.stringify(call.function.arguments),
      ...(tool ? { toolStep: toolIndex - span.start, result: tool.content } : {}),
      ok: tool !== undefined && !isToolError(tool.content),
    };
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Facts and wording

const PURE_NUMBER = /^-?\d+(?:\.\d+)?$/;

/** The result text states the fact (as a phrase on word boundaries, or a number by value). */
function resultStates(result: string, fact: string): boolean {
  const ctx = new GroundingContext();
  ctx.add(result);
  return ctx.hasPhrase(fact) || (PURE_NUMBER.test(fact) && ctx.hasNumber(Number(fact)));
}

/** Every string/number leaf of a JSON value with the key it sits under. */
function leaves(value: unknown, key: string | undefined): { key: string | undefined; value: string | number }[] {
  if (typeof value === 'string' || typeof value === 'number') return [{ key, value }];
  if (Array.isArray(value)) return value.flatMap((v) => leaves(v, key));
  if (isPlainObject(value)) return Object.entries(value).flatMap(([k, v]) => leaves(v, k));
  return [];
}

/** The result key whose value is the fact ("temperature" for "21"), when one result has it. */
function factKey(fact: string, calls: readonly LocatedCall[]): string | undefined {
  const wanted = fact.toLowerCase();
  for (const c of calls) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(c.result ?? '');
    } catch {
      continue;
    }
    const hit = leaves(parsed, undefined).find((l) => l.key !== undefined && String(l.value).toLowerCase() === wanted);
    if (hit) return hit.key;
  }
  return undefined;
}

function dedupe(values: readonly string[]): string[] {
  const seen = new Set<string>();
  return values.filter((v) => {
    const k = v.toLowerCase();
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

const humanKey = (key: string): string => key.replace(/_/g, ' ');
const showValue = (v: unknown): string => (typeof v === 'string' ? v : JSON.stringify(v));
/** Values with a digit (numbers, ids, times) read well bare; words are quoted. */
const showFact = (fact: string): string => (/\d/.test(fact) ? fact : `"${fact}"`);

/** "city Paris and days 3". */
function describeArgs(args: Record<string, unknown>): string {
  const parts = Object.entries(args).map(([k, v]) => `${humanKey(k)} ${showValue(v)}`);
  return parts.length <= 1 ? parts.join('') : `${parts.slice(0, -1).join(', ')} and ${parts[parts.length - 1]}`;
}

/** A turn must ask the user back when its intent says so (`weather.ask_city`, `banking.ask_account`) or its goal does. */
const asksBack = (wt: WorldTurn): boolean => /\.ask_/.test(wt.intent) || /^ask the user\b/i.test(wt.goal);

/** "which city they mean" from "Ask the user which city they mean, without …"; a generic phrase otherwise. */
function askedFor(goal: string): string {
  const m = /^ask the user (.+?)(?:,|\.|$)/i.exec(goal.trim());
  return m?.[1] ? m[1] : 'for the missing information';
}

/**
 * The clause of the reply that states the fact ("day 1 will be cloudy with a high of 18 and a low of 12"): a bare
 * "18" would tell a judge reading the snippet nothing. Clauses end at `, ; . ! ?` followed by a space, so times and
 * decimals ("16:00", "12.5") stay whole. The fact itself when the reply does not state it.
 */
function clauseAround(reply: string, fact: string): string {
  const at = indexOnBoundaries(reply.toLowerCase(), fact.toLowerCase());
  if (at < 0) return fact;
  const end = at + fact.length;
  let start = 0;
  for (const m of reply.slice(0, at).matchAll(/[,;.!?:]\s/g)) start = (m.index ?? 0) + m[0].length;
  const stop = /[,;.!?]\s|[.!?]$/.exec(reply.slice(end));
  const clause = reply.slice(start, stop ? end + stop.index : reply.length).trim();
  if (clause.length <= MAX_SNIPPET) return clause;
  // Too long: a window of words around the fact, still verbatim.
  const from = Math.max(0, reply.lastIndexOf(' ', Math.max(0, at - 60)) + 1);
  const to = reply.indexOf(' ', Math.min(reply.length, end + 60));
  return reply.slice(from, to < 0 ? reply.length : to).trim();
}

/** A verbatim window of `text` around the first occurrence of `value` (ignoring case), at most MAX_SNIPPET long. */
function windowAround(text: string, value: string): string {
  const at = text.toLowerCase().indexOf(value.toLowerCase());
  if (at < 0) return prefixSnippet(text);
  const from = Math.max(0, at - 40);
  return text.slice(from, Math.min(text.length, at + value.length + 40, from + MAX_SNIPPET));
}

/** A prefix of the text, cut at a word boundary: still a verbatim substring, short enough to read. */
function prefixSnippet(text: string): string {
  if (text.length <= MAX_SNIPPET) return text;
  const cut = text.slice(0, MAX_SNIPPET);
  const space = cut.lastIndexOf(' ');
  return (space > MAX_SNIPPET / 2 ? cut.slice(0, space) : cut).trimEnd();
}

/** The sentence of the reply that asks (ends with "?"), or the reply's prefix. */
function questionSentence(reply: string): string {
  const q = reply.split(/(?<=[.!?])\s+/).find((s) => s.includes('?'));
  return q ? prefixSnippet(q) : prefixSnippet(reply);
}
