/**
 * The project's policy as a τ²-Bench agent (issue 34 item 6): tau2's request (its system prompt with the domain
 * policy, the conversation, its tool schemas) through the chat template with the tools, generated greedily by the
 * embedded model or a serving engine that serves it (episodes running at once share generation batches:
 * ../episodeBatcher.ts), and the answer's `<tool_call>` blocks parsed as in RL rollouts (src/chat/toolCalls.ts). An
 * answer whose blocks do not parse goes to tau2 as text, as a server's tool parser hands back what it cannot parse.
 * A conversation that outgrows the model's context ends the episode (`prompt_too_long`, reward 0).
 */
import { promptIds, type ChatTokenizer } from '../../../chat/tokenize';
import { parseToolCalls } from '../../../chat/toolCalls';
import type { Message } from '../../../kernel/schema';
import type { TokenEngine } from '../../../llm/engine';
import type { QwenModel } from '../../../model/net/qwen';
import { EpisodeBatcher } from '../episodeBatcher';
import { greedyTokens } from '../bfcl/runner';
import { Tau2EpisodeStop, type Tau2Answer, type Tau2ChatMessage, type Tau2Request, type Tau2Responder } from './episode';

export interface ModelAgentOptions {
  maxNewTokens: number;
  batchSize: number;
  /** Prompts longer than this end the episode (`prompt_too_long`). */
  maxPromptTokens: number;
  enableThinking?: boolean;
}

/** tau2's chat-completion messages as the chat template's messages. */
export function templateMessages(messages: readonly Tau2ChatMessage[]): Message[] {
  return messages.map((m): Message => {
    const base: Message = { role: m.role, content: m.content ?? '' };
    if (m.role === 'assistant' && m.tool_calls?.length) base.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.function.name, arguments: c.function.arguments } }));
    if (m.role === 'tool' && m.tool_call_id) base.tool_call_id = m.tool_call_id;
    return base;
  });
}

export class ModelAgent implements Tau2Responder {
  private readonly batcher: EpisodeBatcher;

  constructor(
    model: QwenModel | TokenEngine,
    private readonly tok: ChatTokenizer,
    readonly description: Record<string, unknown>,
    private readonly opts: ModelAgentOptions,
    onBusy?: () => void,
  ) {
    this.batcher = new EpisodeBatcher((prompts) => greedyTokens(model, tok, prompts, opts.maxNewTokens, () => onBusy?.()), opts.batchSize);
  }

  episodeStart(): void {
    this.batcher.episodeStart();
  }

  episodeDone(): void {
    this.batcher.episodeDone();
  }

  promptOf(req: Tau2Request): number[] {
    return promptIds(templateMessages(req.messages), req.tools ?? [], this.tok, this.opts.enableThinking === undefined ? {} : { enableThinking: this.opts.enableThinking });
  }

  async answer(req: Tau2Request): Promise<Tau2Answer> {
    const prompt = this.promptOf(req);
    if (prompt.length > this.opts.maxPromptTokens) throw new Tau2EpisodeStop('prompt_too_long', `${prompt.length} tokens, limit ${this.opts.maxPromptTokens}`);
    const tokens = await this.batcher.next(prompt);
    const text = this.tok.decode(this.tok.withoutStop(tokens));
    const parsed = parseToolCalls(text);
    if (!parsed.hasToolCall || parsed.errors.length > 0 || parsed.calls.length === 0) return { content: text, tokens: tokens.length };
    const n = req.messages.reduce((k, m) => k + (m.tool_calls?.length ?? 0), 0);
    const content = parsed.normalText.trim();
    return {
      content: content || null,
      toolCalls: parsed.calls.map((c, k) => ({ id: `call_${n + k}`, name: c.name, arguments: JSON.stringify(c.arguments) })),
      tokens: tokens.length,
    };
  }
}
