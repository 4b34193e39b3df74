/** A fake LLM judge for the fake OpenAI server: answers one-item and batched judge prompts in their schemas. */
import { createHash } from 'node:crypto';
import { replies, type ChatBody, type FakeReply } from './fakeOpenAI';
import { VERDICT_FIELDS } from '../../src/stages/rl/judge/judgePrompt';

const fields = (answer: boolean) => Object.fromEntries(VERDICT_FIELDS.map((f) => [f, f === 'answer' ? answer : 'fake analysis']));

/** The text of the (single) user message of a judge request. */
export const promptOf = (body: ChatBody): string => String(body.messages?.[body.messages.length - 1]?.content ?? '');

/**
 * The answer to a judge request. `verdict(itemId, prompt)` decides each item; for a one-item prompt `itemId` is ''.
 * Batched prompts are recognised by their schema (`verdicts[].item_id` with an enum of the batch's ids).
 */
export function judgeReply(body: ChatBody, verdict: (itemId: string, prompt: string) => boolean): FakeReply {
  const schema = body.response_format?.json_schema?.schema as { properties?: { verdicts?: { items?: { properties?: { item_id?: { enum?: string[] } } } } } } | undefined;
  const ids = schema?.properties?.verdicts?.items?.properties?.item_id?.enum;
  const prompt = promptOf(body);
  if (ids) return replies.json({ verdicts: ids.map((id) => ({ item_id: id, ...fields(verdict(id, prompt)) })) });
  return replies.json(fields(verdict('', prompt)));
}

/** A deterministic pseudo-verdict from some text (half true, half false). */
export const hashVerdict = (text: string): boolean => createHash('sha256').update(text).digest()[0]! % 2 === 0;
