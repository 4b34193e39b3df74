/**
 * "Has the policy learned the format?" — the SFT stage's held-out check: for each held-out dialogue, the model
 * answers its first user message (with the dialogue's candidate tools) and we look at what it generated:
 * - well-formed tool call: the output contains a tool call that parses exactly as the rollout parser parses it
 *   (§8.1: newline-delimited `<tool_call>` tags, JSON with `name` and object `arguments`) and no unparsable one;
 * - correct tool name: the first call names the tool the reference's first step calls.
 * Shares are over the held-out dialogues whose reference starts with a tool call. Greedy decoding, so the numbers are
 * reproducible. The check can run in chunks of prompts (`toolCallTargets` → `generateToolCalls` per chunk →
 * `summarizeToolCalls` over the chunks' samples in order): with chunks a multiple of the batch size, the batches, and so
 * the generations, are those of one pass. No I/O.
 */
import { z } from 'zod';
import type { Example } from '../../kernel/schema';
import { parseToolCalls, splitThinking } from '../../chat/toolCalls';
import { promptIds, type ChatTokenizer } from '../../chat/tokenize';
import { generate } from '../../model/net/generate';
import type { QwenModel } from '../../model/net/qwen';

export const ToolCallSample = z.object({
  uuid: z.string(),
  expectedTool: z.string(),
  output: z.string(),
  wellFormed: z.boolean(),
  correctName: z.boolean(),
  closedThink: z.boolean(),
});
export type ToolCallSample = z.infer<typeof ToolCallSample>;

export interface ToolCallEval {
  prompts: number;
  wellFormedShare: number;
  correctNameShare: number;
  /** Share of outputs with a closed `<think>…</think>` block. */
  thinkShare: number;
  samples: ToolCallSample[];
}

/** The first user message and the tool the reference calls first, or undefined when it does not start with a call. */
export function firstCallTarget(ex: Example): { prompt: Example['messages']; expectedTool: string } | undefined {
  const user = ex.messages.findIndex((m) => m.role === 'user');
  const next = ex.messages[user + 1];
  const name = next?.role === 'assistant' ? next.tool_calls?.[0]?.function.name : undefined;
  if (user < 0 || !name) return undefined;
  return { prompt: ex.messages.slice(0, user + 1), expectedTool: name };
}

/** Scores one generated text against the expected first tool. */
export function scoreToolCall(output: string, expectedTool: string): Pick<ToolCallSample, 'wellFormed' | 'correctName' | 'closedThink'> {
  const parsed = parseToolCalls(output);
  const wellFormed = parsed.calls.length > 0 && parsed.errors.length === 0;
  return {
    wellFormed,
    correctName: wellFormed && parsed.calls[0]?.name === expectedTool,
    closedThink: output.includes('</think>') && splitThinking(output).thinking.length > 0,
  };
}

/** A held-out prompt of the check: the dialogue's first user turn, its tools and the tool its reference calls first. */
export interface ToolCallTarget {
  uuid: string;
  tools: Example['tools'];
  prompt: Example['messages'];
  expectedTool: string;
}

/** The prompts of the check: the first `limit` dialogues whose reference starts with a tool call, in order. */
export function toolCallTargets(examples: readonly Example[], limit = Infinity): ToolCallTarget[] {
  return examples.flatMap((ex) => {
    const t = firstCallTarget(ex);
    return t ? [{ uuid: ex.uuid, tools: ex.tools, ...t }] : [];
  }).slice(0, limit);
}

/** Greedy generations for `targets`, scored, in batches of `batchSize` (default 8) in order. */
export async function generateToolCalls(
  model: QwenModel,
  tok: ChatTokenizer,
  targets: readonly ToolCallTarget[],
  opts: { maxNewTokens: number; batchSize?: number; onProgress?: (done: number) => void },
): Promise<ToolCallSample[]> {
  const samples: ToolCallSample[] = [];
  const batchSize = opts.batchSize ?? 8;
  for (let i = 0; i < targets.length; i += batchSize) {
    const batch = targets.slice(i, i + batchSize);
    const out = generate(model, batch.map((t) => promptIds(t.prompt, t.tools, tok)), {
      maxNewTokens: opts.maxNewTokens,
      temperature: 0,
      stopTokens: [...tok.stopIds],
      padId: tok.special.pad,
    });
    batch.forEach((t, k) => {
      const output = tok.decode(tok.withoutStop(out.tokens[k] ?? []));
      samples.push({ uuid: t.uuid, expectedTool: t.expectedTool, output, ...scoreToolCall(output, t.expectedTool) });
    });
    opts.onProgress?.(samples.length);
    // Generation is synchronous tensor work: let the event loop run (heartbeats, polls) between batches.
    await new Promise((r) => setImmediate(r));
  }
  return samples;
}

/** The shares of a check's samples (of one pass, or of its chunks' samples in order). */
export function summarizeToolCalls(samples: ToolCallSample[]): ToolCallEval {
  const share = (f: (s: ToolCallSample) => boolean) => (samples.length ? samples.filter(f).length / samples.length : 0);
  return {
    prompts: samples.length,
    wellFormedShare: share((s) => s.wellFormed),
    correctNameShare: share((s) => s.correctName),
    thinkShare: share((s) => s.closedThink),
    samples,
  };
}

export async function evaluateToolCalls(
  model: QwenModel,
  tok: ChatTokenizer,
  examples: readonly Example[],
  opts: { maxNewTokens: number; batchSize?: number; limit?: number; onProgress?: (done: number) => void },
): Promise<ToolCallEval> {
  return summarizeToolCalls(await generateToolCalls(model, tok, toolCallTargets(examples, opts.limit), opts));
}
