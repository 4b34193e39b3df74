/**
 * Plain-text view of an annotated example for `cm2 checklist show RUN UUID`: turn by turn, the dialogue with step
 * numbers (the addressing evidence pointers use, see steps.ts), then that turn's checklist items. Assistant messages
 * are split as the judge splits them (spec §6.4): thinking, user-visible reply, tool calls. Long texts are wrapped
 * to the width and truncated to `maxChars`. No colours, so the output can be piped and diffed.
 */
import { toolName, type Message } from '../../kernel/schema';
import type { AnnotatedExample, ItemCheck, StoredItem } from './schema';
import { replyPart, thinkingPart, turnSpans } from './steps';
import { formatViolation, type Violation } from './validate';

export interface RenderOptions {
  /** Checklist variant to show (default 0). */
  variant?: number;
  /** Line width (default 100, at least 40). */
  width?: number;
  /** Longest message part shown before truncation (default 600 characters). */
  maxChars?: number;
}

const LABEL_WIDTH = 11;
const MESSAGE_INDENT = 4;
const ITEM_INDENT = 6;

function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}… [+${text.length - max} chars]`;
}

/** Greedy word wrap of each line of `text` to `width` columns; words longer than a line are broken. */
export function wrapText(text: string, width: number): string[] {
  const w = Math.max(10, width);
  const out: string[] = [];
  for (const paragraph of text.split('\n')) {
    const words = paragraph.split(/\s+/).filter((x) => x.length > 0);
    if (words.length === 0) {
      if (out.length > 0 && out[out.length - 1] !== '') out.push('');
      continue;
    }
    let line = '';
    for (let word of words) {
      while (word.length > w) {
        if (line) out.push(line);
        line = '';
        out.push(word.slice(0, w));
        word = word.slice(w);
      }
      if (!word) continue;
      if (!line) line = word;
      else if (line.length + 1 + word.length <= w) line += ` ${word}`;
      else {
        out.push(line);
        line = word;
      }
    }
    if (line) out.push(line);
  }
  while (out.length > 0 && out[out.length - 1] === '') out.pop();
  return out.length > 0 ? out : [''];
}

/** `label` in a fixed column, `text` wrapped beside it: `      pass:      The reply states …`. */
function labelled(indent: number, label: string, text: string, width: number): string[] {
  const pad = ' '.repeat(indent);
  const column = label ? Math.max(LABEL_WIDTH, label.length + 1) : 0;
  const lines = wrapText(text, width - indent - column);
  return lines.map((line, i) => `${pad}${(i === 0 ? label : '').padEnd(column)}${line}`.trimEnd());
}

const formatNumber = (n: number): string => String(Number(n.toPrecision(6)));

function callText(call: NonNullable<Message['tool_calls']>[number]): string {
  const args = typeof call.function.arguments === 'string' ? call.function.arguments : JSON.stringify(call.function.arguments);
  return `${call.function.name} ${args}`;
}

/** One message under its step header: user/tool text, or the assistant's thinking, reply and calls. */
function renderMessage(message: Message, header: string, width: number, maxChars: number): string[] {
  const lines: string[] = [];
  if (message.role !== 'assistant') {
    lines.push(...labelled(2, '', `${header} · ${message.role}`, width));
    lines.push(...labelled(MESSAGE_INDENT, '', truncate(message.content, maxChars), width));
    return lines;
  }
  const hasThink = /<think>[\s\S]*?<\/think>/.test(message.content);
  lines.push(...labelled(2, '', `${header} · assistant${hasThink ? '' : ' · no <think> block (all thinking)'}`, width));
  const thinking = thinkingPart(message.content);
  const reply = replyPart(message.content);
  if (thinking) lines.push(...labelled(MESSAGE_INDENT, 'thinking:', truncate(thinking, maxChars), width));
  if (reply) lines.push(...labelled(MESSAGE_INDENT, 'reply:', truncate(reply, maxChars), width));
  for (const call of message.tool_calls ?? []) lines.push(...labelled(MESSAGE_INDENT, 'call:', truncate(callText(call), maxChars), width));
  if (!thinking && !reply && (message.tool_calls ?? []).length === 0) lines.push(`${' '.repeat(MESSAGE_INDENT)}(empty)`);
  return lines;
}

function checkText(check: ItemCheck): string {
  const { kind, ...rest } = check;
  if (kind === 'tool_called' || kind === 'tool_succeeded') return `${kind} ${check.name} ${JSON.stringify(check.arguments)}`;
  return Object.keys(rest).length > 0 ? `${kind} ${JSON.stringify(rest)}` : kind;
}

/** One checklist item: a header line, then its texts and evidence. */
function renderItem(item: StoredItem, turn: number, width: number, maxChars: number): string[] {
  const header = [
    item.id,
    `weight ${formatNumber(item.weight)}`,
    item.required_for_next_turn ? 'required' : 'optional',
    `focus ${item.focus_on}`,
    ...(item.dependence.length > 0 ? [`depends on ${item.dependence.join(', ')}`] : []),
  ].join(' · ');
  const lines = labelled(2, '', header, width);
  lines.push(...labelled(ITEM_INDENT, 'question:', item.question, width));
  lines.push(...labelled(ITEM_INDENT, 'pass:', item.pass_condition, width));
  item.failure_examples.forEach((text, i) => lines.push(...labelled(ITEM_INDENT, i === 0 ? 'fail:' : ' ', `- ${text}`, width)));
  if (item.evidence.length === 0) lines.push(...labelled(ITEM_INDENT, 'evidence:', '(none)', width));
  item.evidence.forEach((ev, i) => {
    const where = ev.turn === turn ? `step ${ev.step}` : `turn ${ev.turn} step ${ev.step}`;
    lines.push(...labelled(ITEM_INDENT, i === 0 ? 'evidence:' : ' ', `${where} · ${ev.from} · ${JSON.stringify(truncate(ev.snippet, Math.min(maxChars, 300)))}`, width));
  });
  if (item.check) lines.push(...labelled(ITEM_INDENT, 'check:', checkText(item.check), width));
  return lines;
}

function rule(title: string, width: number): string {
  const head = `══ ${title} `;
  return head + '═'.repeat(Math.max(3, width - head.length));
}

/** The example's dialogue and one checklist variant, turn by turn. */
export function renderChecklist(example: AnnotatedExample, opts: RenderOptions = {}): string {
  const width = Math.max(40, Math.floor(opts.width ?? 100));
  const maxChars = Math.max(40, opts.maxChars ?? 600);
  const variantIndex = opts.variant ?? 0;
  const variants = example.checklists;
  const variant = variants[variantIndex];
  const spans = turnSpans(example.messages);

  const tools = example.tools.map((t) => toolName(t) ?? '?');
  const head = [
    `Example ${example.uuid}`,
    `${spans.length} turn${spans.length === 1 ? '' : 's'}`,
    `${example.messages.length} messages`,
    variant ? `checklist variant ${variantIndex} of ${variants.length}` : `no checklist variant ${variantIndex} (the example has ${variants.length})`,
    ...(example.annotation ? [`annotator ${example.annotation.annotator}`, `cost $${formatNumber(example.annotation.usage.costUsd)}`] : []),
  ].join(' · ');
  const lines: string[] = [...wrapText(head, width), ...labelled(0, 'tools:', tools.length > 0 ? tools.join(', ') : '(none)', width)];

  const firstUser = spans[0]?.start ?? example.messages.length;
  if (firstUser > 0) {
    lines.push('', rule('Before turn 0', width));
    example.messages.slice(0, firstUser).forEach((m, i) => lines.push(...renderMessage(m, `message ${i}`, width, maxChars)));
  }

  const turns = Math.max(spans.length, variant?.length ?? 0);
  for (let turn = 0; turn < turns; turn++) {
    const span = spans[turn];
    lines.push('', rule(span ? `Turn ${turn}` : `Turn ${turn} (not in the dialogue)`, width));
    if (span) {
      for (let index = span.start; index <= span.end; index++) {
        lines.push(...renderMessage(example.messages[index]!, `step ${index - span.start}`, width, maxChars));
      }
    }
    if (!variant) continue;
    const items = variant[turn];
    if (!items) {
      lines.push('', ...labelled(2, '', '(no checklist for this turn)', width));
      continue;
    }
    const sum = items.reduce((a, i) => a + i.weight, 0);
    lines.push('', ...labelled(2, '', `Checklist · ${items.length} item${items.length === 1 ? '' : 's'} · weights sum ${formatNumber(sum)}`, width));
    for (const item of items) lines.push(...renderItem(item, turn, width, maxChars));
  }
  return lines.join('\n');
}

/** Violations one per line, errors first; "no violations" when there are none. */
export function renderViolations(violations: readonly Violation[]): string {
  if (violations.length === 0) return 'no violations';
  const ordered = [...violations.filter((v) => v.severity === 'error'), ...violations.filter((v) => v.severity !== 'error')];
  return ordered.map(formatViolation).join('\n');
}
