/**
 * Policies that play BFCL multi-turn episodes (./multiTurn.ts), as BFCL's own handlers talk to a model:
 *
 * - `EndpointMultiTurnPolicy`, mode `fc`: an OpenAI-compatible endpoint with native tool calling, as BFCL's OpenAI
 *   function-calling handler does it: the functions as `tools` (recompiled when a `miss_func` turn adds some, with
 *   the user message "I have updated some more functions you can choose from. What about now?"), the answer's
 *   `tool_calls` turned into call strings by BFCL's `convert_to_function_call`, each result sent back as a `tool`
 *   message with its call's id.
 * - `EndpointMultiTurnPolicy`, mode `prompt`: BFCL's prompting mode (issue 34 item 5), for models that write their
 *   calls as text: BFCL's system prompt with the function docs in the first turn, the answer's text parsed by BFCL's
 *   `default_decode_execute_prompting`, a step's results sent back as one user message (BFCL's
 *   `format_execution_results_prompting`), held-back functions offered in a user message as BFCL writes it.
 * - `ModelMultiTurnPolicy`: the project's policy (tfjs, or a serving engine that serves it), greedy, in the chat
 *   template with the functions as tools (as the single-turn `ModelPolicy`), the answer decoded like BFCL's Qwen
 *   handler, results as `tool` messages. Episodes running at once share generation batches.
 *
 * Everything BFCL defines (prompts, parsers, the call strings) comes from bfcl-eval through `BfclFormatter` (the
 * bridge), never rewritten here.
 */
import type { ChatCompletionCreateParamsNonStreaming, ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { promptIds, type ChatTokenizer } from '../../../chat/tokenize';
import type { Message } from '../../../kernel/schema';
import { mapConcurrent } from '../../../kernel/mapConcurrent';
import { isContextLengthError } from '../../../llm/errors';
import type { TokenEngine } from '../../../llm/engine';
import type { QwenModel } from '../../../model/net/qwen';
import type { FunctionDoc } from './checker';
import type { BfclExample, BfclMessage } from './data';
import { categoryLanguage } from './categories';
import { decodeOpenAiMessage, decodeQwenText, type Decoded, type ToolCallMessage } from './decode';
import { ADDITIONAL_FUNCTION_PROMPT, type EpisodeAnswer, type EpisodeMessage, type EpisodeView, type MultiTurnPolicy } from './multiTurn';
import type { PyValue } from './pyValue';
import type { Language } from './languages';
import { EpisodeBatcher } from '../episodeBatcher';
import { greedyTokens, type EndpointPolicy, type Policy, type PolicyOutput, type PolicyRunOptions } from './runner';
import { toOpenAiTools } from './tools';

/** BFCL's own prompt writers and parsers (python/bfcl_bridge/bridge.py). */
export interface BfclFormatter {
  systemPrompt(entryId: string, messages: readonly BfclMessage[], functions: readonly FunctionDoc[]): Promise<BfclMessage[]>;
  decode(text: string): Promise<{ calls: string[] | null; error?: string }>;
  toCalls(calls: readonly PyValue[]): Promise<string[]>;
  formatResults(calls: readonly string[], results: readonly string[]): Promise<string>;
  missedFunctionPrompt(functions: readonly FunctionDoc[]): Promise<string>;
  /** Single-turn prompting mode: an entry's first-turn messages with BFCL's system prompt, and BFCL's AST decoder. */
  promptMessages(entryId: string): Promise<BfclMessage[]>;
  decodeAst(text: string, language: Language): Promise<Decoded>;
}

export type MultiTurnMode = 'fc' | 'prompt';

type TurnView = Omit<EpisodeView, 'messages' | 'step'>;

/** The user message of a turn in function-calling mode (a `miss_func` turn has none in the data). */
function fcTurnMessages(view: TurnView, data: readonly BfclMessage[]): BfclMessage[] {
  return view.newFunctions.length > 0 ? [{ role: 'user', content: ADDITIONAL_FUNCTION_PROMPT }] : [...data];
}

/** Decoded calls → BFCL's call strings; an undecodable answer ends the turn (`calls: null`). */
async function answerOf(decoded: Decoded, text: string, formatter: BfclFormatter, extra: Partial<EpisodeAnswer> = {}): Promise<EpisodeAnswer> {
  if (decoded.error !== undefined) return { text, calls: null, decodeError: decoded.error, ...extra };
  const calls = decoded.calls.length ? await formatter.toCalls(decoded.calls) : [];
  return { text, calls, ...extra };
}

/** The ids an endpoint's tool calls get in the conversation: fixed by position, so a repeated request is the same request. */
const callId = (turn: number, step: number, k: number) => `call_${turn}_${step}_${k}`;

export class EndpointMultiTurnPolicy implements MultiTurnPolicy {
  readonly description: Record<string, unknown>;
  private readonly formatted = new Map<string, string>();

  constructor(private readonly endpoint: EndpointPolicy, private readonly formatter: BfclFormatter, private readonly mode: MultiTurnMode, private readonly signal?: AbortSignal) {
    this.description = { ...endpoint.description, mode };
  }

  async turnMessages(view: TurnView, data: readonly BfclMessage[]): Promise<BfclMessage[]> {
    if (this.mode === 'fc') return fcTurnMessages(view, data);
    if (view.newFunctions.length > 0) return [{ role: 'user', content: await this.formatter.missedFunctionPrompt(view.newFunctions) }];
    return view.turn === 0 ? this.formatter.systemPrompt(view.entry.id, data, view.entry.functions) : [...data];
  }

  /** The conversation as chat-completion messages. */
  private async chatMessages(messages: readonly EpisodeMessage[]): Promise<ChatCompletionMessageParam[]> {
    const out: ChatCompletionMessageParam[] = [];
    let ids: string[] = [];
    let k = 0;
    for (let i = 0; i < messages.length; i++) {
      const m = messages[i]!;
      if (m.role === 'system' || m.role === 'user') out.push({ role: m.role, content: m.content });
      else if (m.role === 'assistant') {
        const raw = m.raw as { toolCalls?: { id: string; name: string; arguments: string }[] } | undefined;
        ids = raw?.toolCalls?.map((c) => c.id) ?? [];
        k = 0;
        if (this.mode === 'fc' && raw?.toolCalls?.length) {
          out.push({ role: 'assistant', content: m.content || null, tool_calls: raw.toolCalls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } })) });
        } else out.push({ role: 'assistant', content: m.content });
      } else if (this.mode === 'fc') out.push({ role: 'tool', tool_call_id: ids[k++] ?? `call_${i}`, content: m.content });
      else {
        // prompting mode: a step's results are one user message
        const calls: string[] = [];
        const results: string[] = [];
        for (; i < messages.length && messages[i]!.role === 'tool'; i++) {
          const t = messages[i] as Extract<EpisodeMessage, { role: 'tool' }>;
          calls.push(t.call);
          results.push(t.content);
        }
        i--;
        const key = JSON.stringify([calls, results]);
        let content = this.formatted.get(key);
        if (content === undefined) this.formatted.set(key, (content = await this.formatter.formatResults(calls, results)));
        out.push({ role: 'user', content });
      }
    }
    return out;
  }

  async answer(view: EpisodeView): Promise<EpisodeAnswer> {
    const body: ChatCompletionCreateParamsNonStreaming = { ...this.endpoint.requestBase(), messages: await this.chatMessages(view.messages) };
    if (this.mode === 'fc') body.tools = toOpenAiTools(view.functions, { dotToUnderscore: true }) as ChatCompletionCreateParamsNonStreaming['tools'];
    let message: Awaited<ReturnType<EndpointPolicy['complete']>>;
    try {
      message = await this.endpoint.complete(body, this.signal);
    } catch (e) {
      // the conversation outgrew the model's context: the turn ends there, the entry is scored as it stands
      if (isContextLengthError(e)) return { text: '', calls: null, decodeError: `prompt_too_long: ${(e as Error).message.slice(0, 300)}` };
      throw e;
    }
    const text = message.content ?? '';
    const tokens = message.completionTokens ?? 0;
    if (this.mode === 'prompt') {
      const d = await this.formatter.decode(text);
      return { text, calls: d.calls, ...(d.error ? { decodeError: d.error } : {}), tokens };
    }
    const toolCalls = (message.tool_calls ?? []).map((c, k) => ({ id: callId(view.turn, view.step, k), name: c.function.name ?? '', arguments: c.function.arguments ?? '' }));
    return answerOf(decodeOpenAiMessage(message as ToolCallMessage), text, this.formatter, { tokens, raw: { toolCalls } });
  }
}

export interface ModelMultiTurnOptions {
  maxNewTokens: number;
  /** Episodes whose answers are generated together (at most). */
  batchSize: number;
  /** Prompts longer than this are not generated: the answer ends the turn undecoded (`prompt_too_long`). */
  maxPromptTokens: number;
  enableThinking?: boolean;
}

export class ModelMultiTurnPolicy implements MultiTurnPolicy {
  private readonly batcher: EpisodeBatcher;

  constructor(
    model: QwenModel | TokenEngine,
    private readonly tok: ChatTokenizer,
    readonly description: Record<string, unknown>,
    private readonly formatter: BfclFormatter,
    private readonly opts: ModelMultiTurnOptions,
    onBusy?: () => void,
  ) {
    this.batcher = new EpisodeBatcher((prompts) => greedyTokens(model, tok, prompts, opts.maxNewTokens, () => onBusy?.()), opts.batchSize);
  }

  turnMessages(view: TurnView, data: readonly BfclMessage[]): BfclMessage[] {
    return fcTurnMessages(view, data);
  }

  episodeStart(): void {
    this.batcher.episodeStart();
  }

  episodeDone(): void {
    this.batcher.episodeDone();
  }

  /** The prompt ids of a step: the conversation through the chat template, the functions as tools. */
  promptOf(view: EpisodeView): number[] {
    const messages: Message[] = view.messages.map((m) => (m.role === 'tool' ? { role: 'tool', content: m.content } : { role: m.role, content: m.content }));
    return promptIds(messages, toOpenAiTools(view.functions), this.tok, this.opts.enableThinking === undefined ? {} : { enableThinking: this.opts.enableThinking });
  }

  async answer(view: EpisodeView): Promise<EpisodeAnswer> {
    const prompt = this.promptOf(view);
    if (prompt.length > this.opts.maxPromptTokens) return { text: '', calls: null, decodeError: `prompt_too_long: ${prompt.length} tokens, limit ${this.opts.maxPromptTokens}` };
    const tokens = await this.batcher.next(prompt);
    const text = this.tok.decode(this.tok.withoutStop(tokens));
    return answerOf(decodeQwenText(text), text, this.formatter, { tokens: tokens.length });
  }

}

/**
 * BFCL's prompting mode for the single-turn categories (issue 34 item 5): the first turn with BFCL's system prompt
 * (the function docs as bfcl-eval loads them), no tools in the request, the answer's text parsed by BFCL's
 * `default_decode_ast_prompting` in the category's language, then scored by cm2's AST checker as any answer.
 */
export class EndpointPromptPolicy implements Policy {
  readonly underscoreToDot = false;
  readonly description: Record<string, unknown>;

  constructor(private readonly endpoint: EndpointPolicy, private readonly formatter: BfclFormatter) {
    this.description = { ...endpoint.description, mode: 'prompt' };
  }

  async run(examples: readonly BfclExample[], opts: PolicyRunOptions = {}): Promise<PolicyOutput[]> {
    return mapConcurrent(examples, this.endpoint.concurrency, async (example): Promise<PolicyOutput> => {
      const messages = await this.formatter.promptMessages(example.id);
      let message: Awaited<ReturnType<EndpointPolicy['complete']>>;
      try {
        message = await this.endpoint.complete({ ...this.endpoint.requestBase(), messages: messages as ChatCompletionMessageParam[] }, opts.signal);
      } catch (e) {
        if (isContextLengthError(e)) return { decoded: { calls: [] }, failure: { reason: 'prompt_too_long', detail: (e as Error).message.slice(0, 300) } };
        throw e;
      }
      const text = message.content ?? '';
      return { decoded: await this.formatter.decodeAst(text, categoryLanguage(example.category)), text, ...(message.completionTokens !== undefined ? { tokens: message.completionTokens } : {}) };
    }, opts.onProgress);
  }
}
