/**
 * How the judge is shown a step (reference `get_messages_str_v2`, spec §6.4): the earlier turns and the current turn
 * rendered as text, with the reference's quirks (see judge.ts).
 */
import { type JudgeView } from '../../checklist/check';
import { Message, ToolCall } from '../../../kernel/schema';
import { fromJs, parsePyJson, pyDumps, type PyJson, type PyObject } from '../../../kernel/pyjson';

export interface RenderJudgeOptions {
  /** Number shown for the slice's first user message. Default 0: the reference's quirk (numbering restarts per slice). */
  firstTurn?: number;
}

export const THINK_BLOCK = /<think>([\s\S]*?)<\/think>/;

/** A tool call as the reference's pydantic `model_dump()` has it: arguments decoded to an object when possible. */
export function callAsPy(call: ToolCall): PyObject {
  let args: PyJson;
  if (typeof call.function.arguments === 'string') {
    try {
      args = parsePyJson(call.function.arguments);
    } catch {
      args = call.function.arguments;
    }
  } else {
    args = fromJs(call.function.arguments);
  }
  const out: PyObject = new Map();
  if (call.id !== undefined) out.set('id', call.id);
  out.set('type', call.type);
  out.set(
    'function',
    new Map<string, PyJson>([
      ['name', call.function.name],
      ['arguments', args],
    ]),
  );
  return out;
}

/** The three fields of an assistant message in the judge's rendering. */
export function judgeAssistantFields(message: Pick<Message, 'content' | 'tool_calls'>): { thinking: string; reply: string; toolCall: string } {
  const { content } = message;
  const m = THINK_BLOCK.exec(content);
  let thinking = content;
  let reply = 'None';
  if (m) {
    thinking = m[1] ?? '';
    // Python `content.split(thinking + "</think>")[1].strip()`: up to a second occurrence, if any.
    reply = (content.split(`${thinking}</think>`)[1] ?? '').trim() || 'None';
  }
  let toolCall = 'None';
  if (message.tool_calls !== undefined) {
    toolCall = pyDumps(message.tool_calls.map(callAsPy));
  } else if (reply.includes('<tool_call>') || reply.includes('</tool_call>')) {
    toolCall = reply.replaceAll('<tool_call>', '<|tool_call_start|>').replaceAll('</tool_call>', '<|tool_call_end|>');
    reply = 'None';
  }
  return { thinking, reply, toolCall };
}

/** The judge's text of a slice of a conversation (see the module comment for the quirks). */
export function renderJudgeMessages(messages: readonly Message[], opts: RenderJudgeOptions = {}): string {
  let turn = (opts.firstTurn ?? 0) - 1;
  let step = 0;
  let out = '';
  for (const m of messages) {
    switch (m.role) {
      case 'system':
        out += `Role: system\ncontent: ${m.content}\n`;
        step = 0;
        break;
      case 'user':
        turn++;
        step = 0;
        out += `# Turn: ${turn}\nRole: user\ncontent: ${m.content}\n`;
        break;
      case 'assistant': {
        const f = judgeAssistantFields(m);
        out += `## Step: ${step}\nRole: assistant\ncontent.thinking: ${f.thinking}\ncontent.user_visible_reply: ${f.reply}\ntool_call: ${f.toolCall}\n`;
        step++;
        break;
      }
      case 'tool':
      case 'observation':
        out += `Role: tool\ncontent: ${m.content}\n`;
        break;
      default:
      // Other roles are not shown (as in the reference).
    }
  }
  return out;
}

/** Both blocks of a judge view, rendered. */
export interface RenderedView {
  previous: string;
  current: string;
}

export const renderJudgeView = (view: JudgeView): RenderedView => ({ previous: renderJudgeMessages(view.previous), current: renderJudgeMessages(view.current) });
