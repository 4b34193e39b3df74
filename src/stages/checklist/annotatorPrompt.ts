/**
 * The checklist annotator's prompt (spec §5.2–5.3), written for this project, and the parsing of its answer.
 *
 * Differences from the reference, on purpose (docs/decisions.md):
 * - every message is shown with its `turn` and `step` (the reference prompt's message schema promises them but the
 *   reference script never injects them, so its labeller must count); evidence pointers are then checkable;
 * - the answer is `{"turns": [...]}` — structured-output APIs need an object at the root — and a bare array (the
 *   reference form) is accepted as well;
 * - the prompt states every rule the validator enforces, so a repair request can cite them by name.
 * `meta` (provenance, ground truth) is never shown.
 */
import { extractJson } from '../../kernel/jsonExtract';
import type { Example } from '../../kernel/schema';
import { EVIDENCE_FROM, FOCUS_ON } from './schema';
import { turnSpans } from './steps';
import { type ChatMessage, closedObject, systemThenUser } from '../../llm/prompting';

export const CHECKLIST_SYSTEM_PROMPT = `You design evaluation checklists for multi-turn, multi-step tool-use conversations between a user, an assistant and tools. Your checklists are used to judge whether ANOTHER assistant, facing the same user messages and tools, meets the user's requirements. Write one concise checklist per user turn.

# The conversation model
- A turn starts with one user message and ends with the assistant's user-visible reply. Turns are numbered from 0.
- Inside a turn every message is a step; steps restart at each turn: the user message is step 0, the next message step 1, and so on.
- Before acting, the assistant thinks privately inside <think> and </think>; then it either calls one or more tools (assistant.tool_calls) or writes a user-visible reply (the text after </think>).
- A tool message (tool.content) answers the preceding tool call.
- Each message below is given with its "turn" and "step".

# How the checklist is used
Every assistant step of another assistant's turn (with the tool responses that follow it) is judged against every item of that turn's checklist. An item counts as satisfied if it is satisfied at some step of the turn; it need not be the same step as in the reference conversation.

# Rules
1. Each item is a YES/NO question with an objective pass condition.
2. Each item is observable from the messages.
3. Each item has evidence: pointers to the specific assistant or tool steps of the reference conversation that satisfy it (never the user message at step 0). An evidence "snippet" must be copied verbatim from that step's part named by "from".
4. Prerequisites (for example "search before booking") are dependencies: "dependence" maps every item id to the ids it depends on (an empty list if none). An item may only depend on items whose focus_on is "tool.content", in the same turn; no cycles.
5. Cover the key requirements of the turn: correctness, completeness, no hallucination, the user's constraints, required formatting, key reasoning.
6. Items are atomic: one requirement per item.
7. Avoid purely stylistic checks.
8. Each item focuses on exactly one part: ${FOCUS_ON.map((f) => `"${f}"`).join(', ')}.
9. Allow procedurally different paths that reach the same verifiable result (other call orders, extra harmless calls).
10. "weight" maps every item id to a weight in [0, 1] reflecting its contribution to the turn's final reply; the weights of a turn sum to exactly 1.
11. "required_for_next_turn": true for critical items — if such an item fails, the conversation should not continue.
12. Do not mention failed attempts or self-corrections of the reference conversation.
13. Assume tool calls have no errors.
Also: do not limit the number of tool calls; decide for each value whether it must match exactly or within a tolerance and say so in the pass condition; arguments that have defaults are not required; no conditional ("if"/"when") questions; never mention turn or step numbers in "focus_on", "question", "pass_condition" or "failure_examples".

# Output
Answer with one JSON object and nothing else:
{"turns": [
  {"turn": 0,
   "checklist": [
     {"id": "C0",
      "evidence": [{"turn": 0, "step": 1, "from": "assistant.tool_calls", "snippet": "<verbatim text>"}],
      "focus_on": "assistant.tool_calls",
      "question": "<yes/no question>",
      "pass_condition": "<objective condition>",
      "failure_examples": ["<a concrete way to fail>"],
      "required_for_next_turn": true}
   ],
   "dependence": {"C0": []},
   "weight": {"C0": 1.0}}
]}
- One block per user turn, in order, with "turn" equal to its position.
- Item ids are unique within a turn ("C0", "C1", … restarting at each turn).
- "from" is one of ${EVIDENCE_FROM.filter((f) => f !== 'user.content').map((f) => `"${f}"`).join(', ')}.`;

/** The conversation as the annotator sees it: messages with turn/step indices, arguments as JSON strings. */
export function renderConversation(example: Pick<Example, 'messages'>): unknown[] {
  const spans = turnSpans(example.messages);
  return example.messages.map((m, i) => {
    const span = spans.find((s) => i >= s.start && i <= s.end);
    const out: Record<string, unknown> = span ? { turn: span.turn, step: i - span.start, role: m.role } : { role: m.role };
    out['content'] = m.content;
    if (m.tool_calls && m.tool_calls.length > 0) {
      out['tool_calls'] = m.tool_calls.map((c) => ({
        name: c.function.name,
        arguments: typeof c.function.arguments === 'string' ? c.function.arguments : JSON.stringify(c.function.arguments),
      }));
    }
    return out;
  });
}

export function buildChecklistMessages(example: Pick<Example, 'messages' | 'tools'>): ChatMessage[] {
  const user = `# Candidate Tools:\n${JSON.stringify(example.tools, null, 2)}\n# Messages:\n${JSON.stringify(renderConversation(example), null, 2)}`;
  return systemThenUser(CHECKLIST_SYSTEM_PROMPT, user);
}

/** The follow-up message that asks for a repaired checklist. */
export function buildRepairMessage(problems: string): ChatMessage {
  return {
    role: 'user',
    content: `Your checklist breaks these rules:\n${problems}\nReturn the complete corrected JSON object ({"turns": [...]}, one block per user turn), and nothing else.`,
  };
}

const STRING_ARRAY = { type: 'array', items: { type: 'string' } } as const;

/**
 * Structured-output schema for the annotator. `dependence` and `weight` are maps, which strict mode cannot express,
 * so it is sent with `strict: false`; the validator is the real gate.
 */
export const CHECKLIST_JSON_SCHEMA = {
  name: 'checklists',
  strict: false,
  schema: closedObject({
    turns: {
      type: 'array',
      items: closedObject({
        turn: { type: 'integer', minimum: 0 },
        checklist: {
          type: 'array',
          items: closedObject({
            id: { type: 'string' },
            evidence: {
              type: 'array',
              items: closedObject({
                turn: { type: 'integer', minimum: 0 },
                step: { type: 'integer', minimum: 0 },
                from: { type: 'string', enum: [...EVIDENCE_FROM] },
                snippet: { type: 'string' },
              }),
            },
            focus_on: { type: 'string', enum: [...FOCUS_ON] },
            question: { type: 'string' },
            pass_condition: { type: 'string' },
            failure_examples: STRING_ARRAY,
            required_for_next_turn: { type: 'boolean' },
          }),
        },
        dependence: { type: 'object', additionalProperties: STRING_ARRAY },
        weight: { type: 'object', additionalProperties: { type: 'number' } },
      }),
    },
  }),
};

/**
 * The turn blocks of an answer: `{"turns": [...]}` (or another single key holding the array, as models sometimes
 * rename it), or a bare array (the reference form). Unvalidated.
 */
export function extractChecklistBlocks(text: string): { ok: true; value: unknown } | { ok: false; error: string } {
  const found = extractJson(text);
  if (!found.ok) return found;
  const v = found.value;
  if (Array.isArray(v)) return { ok: true, value: v };
  if (v !== null && typeof v === 'object') {
    const obj = v as Record<string, unknown>;
    if (Array.isArray(obj['turns'])) return { ok: true, value: obj['turns'] };
    const arrays = Object.values(obj).filter(Array.isArray);
    if (arrays.length === 1) return { ok: true, value: arrays[0] };
    return { ok: false, error: 'the JSON object has no "turns" array' };
  }
  return { ok: false, error: `expected {"turns": [...]}, got a JSON ${v === null ? 'null' : typeof v}` };
}
