/**
 * The policy's chat template (spec §4.4, reference `model_assets/chat_template.jinja`, the "keepthink" template
 * installed on the SFT model before RL).
 *
 * - With tools, the system block is `<|im_start|>system\n` + (system content, if the first message is a system
 *   message) + `\n\n# Tools\n\n…<tools>` + one `tojson` line per tool + the `<tool_call>` format instruction +
 *   `<|im_end|>\n`. Without a system message the block starts directly with `\n\n# Tools`.
 * - Assistant content is rendered verbatim (leading newlines stripped), **including its `<think>` block, for every
 *   turn** — no history stripping (interleaved thinking).
 * - Structured tool calls are rendered after the content as `<tool_call>\n{"name": "N", "arguments": ARGS}\n</tool_call>`,
 *   preceded by `\n` when it is the first call and the content is non-empty, or any later call (Qwen rule). ARGS is
 *   the argument string verbatim when the call stores a string, else the object through `tojson`.
 * - A run of consecutive tool messages becomes one `<|im_start|>user` block of `\n<tool_response>\n{content}\n</tool_response>`
 *   parts, closed by `<|im_end|>\n`.
 * - The generation prompt is `<|im_start|>assistant\n` (no forced `<think>`); `enableThinking: false` appends an
 *   empty think block.
 *
 * Note: the SFT conversion of the reference (§4.2) writes calls as text with a different spacing
 * (`{"name":"X", "arguments": …}` and a blank line after `</think>`); this template is the one used for RL prompts
 * and for our own SFT rendering, so everything in this project sees one format.
 *
 * `tojson` of @huggingface/jinja prints like Python's `json.dumps(ensure_ascii=False)` (`", "` / `": "` separators),
 * except that JS numbers lose the int/float distinction (`1.0` prints as `1`, spec §8.1).
 */
import { Template } from '@huggingface/jinja';
import type { Message } from '../kernel/schema';

/** The template text. `assets/chat_template.jinja` holds the same text (checked by a unit test). */
export const CHAT_TEMPLATE = String.raw`{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages | length > 0 and messages[0].role == 'system' %}
        {{- messages[0].content }}
    {%- endif %}
    {{- '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
    {%- for tool in tools %}
        {{- '\n' }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages | length > 0 and messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set content = content.lstrip('\n') %}
        {{- '<|im_start|>assistant\n' + content }}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
`;

/** Chat special tokens, as they appear in rendered text. */
export const IM_START = '<|im_start|>';
export const IM_END = '<|im_end|>';
export const THINK_START = '<think>';
export const THINK_END = '</think>';
export const TOOL_CALL_START = '<tool_call>';
export const TOOL_CALL_END = '</tool_call>';
export const TOOL_RESPONSE_START = '<tool_response>';
export const TOOL_RESPONSE_END = '</tool_response>';
/** The generation prompt the template appends (and the header of every assistant message). */
export const ASSISTANT_HEADER = `${IM_START}assistant\n`;

export interface RenderOptions {
  /** Append `<|im_start|>assistant\n` (default false). */
  addGenerationPrompt?: boolean;
  /** `false` appends an empty think block after the generation prompt (reference `enable_thinking=False`). */
  enableThinking?: boolean;
}

let compiled: Template | undefined;
const template = (): Template => (compiled ??= new Template(CHAT_TEMPLATE));

/**
 * Render messages (and candidate tools, which are printed with `tojson` as given) through the chat template.
 * Messages with unknown roles render as nothing (the role_order filter reports them).
 */
export function renderChat(messages: readonly Message[], tools: readonly unknown[] = [], opts: RenderOptions = {}): string {
  const context: Record<string, unknown> = {
    // Only the fields the template reads, without `undefined` values (the interpreter has no `undefined` literal).
    messages: messages.map(plainMessage),
    tools: tools.length > 0 ? tools : null,
    add_generation_prompt: opts.addGenerationPrompt ?? false,
  };
  if (opts.enableThinking !== undefined) context['enable_thinking'] = opts.enableThinking;
  return template().render(context);
}

function plainMessage(m: Message): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content };
  if (m.tool_calls && m.tool_calls.length > 0) {
    out['tool_calls'] = m.tool_calls.map((c) => ({ type: c.type, function: { name: c.function.name, arguments: c.function.arguments } }));
  }
  return out;
}
