/**
 * A fake OpenAI-compatible endpoint with a fixed rate limit, for load tests (test/integration/rateLimit.test.ts,
 * bench/rate-limit.ts): a token bucket of `rate` requests/s and `burst` tokens in front of an answering behaviour.
 * A request that finds no token gets 429 with `Retry-After` (whole seconds, rounded up) and `retry-after-ms` (the
 * exact wait for the next token), as OpenAI sends them; one that gets a token is answered by `answer` after
 * `latencyMs` (an LLM takes a while), and that answer is a paid call.
 *
 * Counted per request content (sha256 of model, messages and response_format): 200 answers delivered (`paid`) and
 * 429s; and per second since the first request, the paid answers (`paidPerSecond`, for the steady-state rate).
 * Requests are not kept (tens of thousands of prompts would not fit).
 *
 * Helpers for the answers: `checklistAnswerer` (valid checklists for demo-world examples: the offline annotator's,
 * without the machine checks, as an LLM would write them) and `judgeAnswerer` (valid verdicts, one-item or batched).
 */
import { createHash } from 'node:crypto';
import { canonicalJson } from '../../src/kernel/canonicalJson';
import type { Example } from '../../src/kernel/schema';
import { buildChecklistMessages } from '../../src/stages/checklist/annotatorPrompt';
import type { ChecklistOutput } from '../../src/stages/checklist/schema';
import { offlineChecklist } from '../../src/demo/checklist';
import { replies, startFakeOpenAI, type ChatBody, type FakeReply, type RecordedRequest } from './fakeOpenAI';
import { hashVerdict, judgeReply } from './fakeJudge';

export interface RateLimitedOptions {
  /** Requests per second the endpoint accepts. */
  rate: number;
  /**
   * Bucket size: requests accepted at once after an idle spell. Default max(2, rate / 4). (Real endpoints limit per
   * minute, with far larger bursts; with a burst of 1, two requests that a busy event loop sends a few ms too close
   * together already get a 429.)
   */
  burst?: number;
  /** Time to answer an accepted request, ms (default 50). */
  latencyMs?: number;
  /** No limit at all (a capacity probe: how fast can our side go). */
  unlimited?: boolean;
  answer: (req: RecordedRequest) => FakeReply;
}

export interface RateLimitedEndpoint {
  url: string;
  rate: number;
  burst: number;
  /** 200 answers delivered per request content hash. */
  paid: Map<string, number>;
  /** 429 answers per request content hash. */
  limited: Map<string, number>;
  /** Paid answers in each whole second since the first request. */
  paidPerSecond: number[];
  totals(): { requests: number; paid: number; limited: number; paidTwiceOrMore: number; maxPaidPerKey: number; firstAt: number; lastPaidAt: number };
  close(): Promise<void>;
}

export const contentHash = (body: ChatBody): string =>
  createHash('sha256').update(canonicalJson({ model: body.model ?? null, messages: body.messages ?? null, format: body.response_format ?? null })).digest('hex');

export async function startRateLimitedOpenAI(opts: RateLimitedOptions): Promise<RateLimitedEndpoint> {
  const rate = opts.rate;
  const burst = opts.burst ?? Math.max(2, Math.round(rate / 4));
  const latencyMs = opts.latencyMs ?? 50;
  const paid = new Map<string, number>();
  const limited = new Map<string, number>();
  const paidPerSecond: number[] = [];
  let tokens = burst;
  let refilledAt = Date.now();
  let requests = 0;
  let firstAt = 0;
  let lastPaidAt = 0;

  const take = (): number | undefined => {
    if (opts.unlimited) return undefined;
    const t = Date.now();
    tokens = Math.min(burst, tokens + ((t - refilledAt) / 1000) * rate);
    refilledAt = t;
    if (tokens >= 1) {
      tokens -= 1;
      return undefined;
    }
    return Math.max(1, Math.ceil(((1 - tokens) / rate) * 1000));
  };

  const fake = await startFakeOpenAI({
    record: false,
    keyOf: contentHash,
    behaviour: (req) => {
      requests++;
      if (firstAt === 0) firstAt = req.receivedAt;
      const waitMs = take();
      if (waitMs !== undefined) {
        limited.set(req.key, (limited.get(req.key) ?? 0) + 1);
        return replies.status(429, {
          message: 'Rate limit reached for requests, please retry later',
          code: 'rate_limit_exceeded',
          headers: { 'retry-after': String(Math.ceil(waitMs / 1000)), 'retry-after-ms': String(waitMs) },
        });
      }
      const reply = opts.answer(req);
      // Counted when the token is taken: the fake never drops an accepted request (the test processes stay up).
      paid.set(req.key, (paid.get(req.key) ?? 0) + 1);
      const done = Date.now() + latencyMs;
      lastPaidAt = Math.max(lastPaidAt, done);
      const second = Math.floor((done - firstAt) / 1000);
      while (paidPerSecond.length <= second) paidPerSecond.push(0);
      paidPerSecond[second]!++;
      return reply.kind === 'content' ? { ...reply, delayMs: latencyMs } : reply;
    },
  });

  return {
    url: fake.url,
    rate,
    burst,
    paid,
    limited,
    paidPerSecond,
    totals: () => {
      let p = 0;
      let twice = 0;
      let max = 0;
      for (const n of paid.values()) {
        p += n;
        max = Math.max(max, n);
      }
      let l = 0;
      for (const n of limited.values()) l += n;
      for (const n of paid.values()) if (n > 1) twice++;
      return { requests, paid: p, limited: l, paidTwiceOrMore: twice, maxPaidPerKey: max, firstAt, lastPaidAt };
    },
    close: () => fake.close(),
  };
}

/** A correct checklist answer for an example, as an LLM would write it (no `check`), as `{"turns": [...]}`. */
export const checklistAnswer = (ex: Example): { turns: ChecklistOutput } => ({
  turns: offlineChecklist(ex).map((b) => ({ ...b, checklist: b.checklist.map(({ check: _c, ...item }) => item) })),
});

/** Answers annotator requests for `examples` with their correct checklists (a request for another prompt: 400). */
export function checklistAnswerer(examples: readonly Example[]): (req: RecordedRequest) => FakeReply {
  const byPrompt = new Map<string, Example>();
  for (const ex of examples) byPrompt.set(buildChecklistMessages(ex)[1]!.content, ex);
  return (req) => {
    const prompt = req.body.messages?.[1]?.content;
    const ex = typeof prompt === 'string' ? byPrompt.get(prompt) : undefined;
    return ex ? replies.json(checklistAnswer(ex)) : replies.status(400, { message: 'unknown annotator prompt' });
  };
}

/** Answers judge requests (one-item or batched) with a verdict that is a hash of the item and the prompt. */
export const judgeAnswerer = (): ((req: RecordedRequest) => FakeReply) => (req) => judgeReply(req.body, (id, prompt) => hashVerdict(`${id}\n${prompt}`));

