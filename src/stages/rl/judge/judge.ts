/**
 * The checklist judge of the RL stage (spec §6.4): one verdict per (assistant step, checklist item), decided by an
 * LLM on the judge's view of the step (src/stages/checklist/check.ts: earlier turns as "Previous Messages", the current
 * turn from its user message through the judged step and its tool messages as "Current Messages to Evaluate").
 *
 * Reference behaviour kept (`verl/utils/reward_score/checklist_reward.py`, `verl/interactions/checklist_interaction.py`):
 * - Message rendering with its quirks (`renderJudgeMessages`): "Turn: k" counts from 0 within the rendered slice
 *   (the current turn is always "Turn: 0"); "Step: s" restarts at each user (and system) message; thinking = the
 *   first `<think>…</think>`, reply = what follows `thinking + "</think>"` (Python `split(…)[1]`, so up to a second
 *   occurrence), stripped; no think block → the whole content is thinking and the reply "None"; `tool_call` = the
 *   structured calls as Python `json.dumps` when the message has a `tool_calls` list, else a reply holding
 *   `<tool_call>`/`</tool_call>` moves there with the tags renamed `<|tool_call_start|>`/`<|tool_call_end|>` and the
 *   reply becomes "None"; "None" otherwise. Only question, focus_on, pass_condition, failure_examples (JSON,
 *   ASCII-escaped, indent 2) and the evidence snippets are shown: never weights, dependencies, evidence pointers,
 *   `required_for_next_turn` or tool schemas.
 * - The special tool-call rule, the 5-step process and the 5 output fields; strict structured output.
 * - `attempts` (the reference's retry_times 2) attempts at a usable answer; still none → `{pass: false, ok: false}`
 *   (the verdict is false and the call failed, which fails the sample, §8.3).
 * - Shortcut: a tool message after the judged step that is JSON with an `error_tool_call` key → items focused on
 *   `assistant.tool_calls` / `tool.content` are `{pass: false, ok: true}` without a call.
 * - Sampling temperature 0.6, top_p 0.8, 6000 max tokens: the LLM client sends only what the role config sets, so
 *   these defaults live in the config — build the judge's client from `withJudgeDefaults(llmConfig)`.
 *
 * Decisions (our additions and deviations):
 * - **Prompt wording is ours**, carrying the reference's inputs, rules and output fields; `JUDGE_PROMPT_VERSION`
 *   names it and enters the verdict cache key.
 * - **Batching** (`batchItems` > 1): the LLM-judged items of one step go to the judge `batchItems` at a time in one
 *   call (`judgeBatchPrompt`), answered as `{"verdicts": [{"item_id", <the 5 fields>}, …]}`. A call for a single item
 *   always uses the reference's one-item prompt, so `batchItems: 1` is exactly the reference. An item the batch
 *   answer misses (absent, not a boolean `answer`, contradictory duplicates, or the whole answer unparseable) has
 *   failed that attempt only; its remaining attempts are **one-item calls** — the reference's form, which also
 *   gets around a batch answer that is too long for the token budget.
 * - **Parsing** is slightly more lenient than the reference's `json.loads`: a code fence or text around the JSON
 *   object is tolerated (src/kernel/jsonExtract.ts), for servers without schema-guided decoding; a JSON answer whose
 *   `answer` is not a boolean is retried (the reference fails it at once).
 * - **Majority vote** over `samples` K (reference 1): each sample is its own call (cache salt `…/sample-k`); the
 *   verdict is the majority of the samples that produced an answer, ties → false; `ok` false only when no sample did.
 * - **Offline checks** (`offlineChecks`): `auto` — with an online judge the LLM judges every item (real runs stay
 *   faithful), with an offline one (no client or no `baseUrl`) items with a `check` are decided by `evaluateCheck`
 *   on the same view; `always` — a `check` always decides, the LLM only judges items without one; `never` — only
 *   the LLM. An item the configuration leaves without a judge (offline, no usable check) is a configuration error:
 *   `LlmFatalError` (non-retryable), thrown before any call. The shortcut comes first in every mode.
 * - **Verdict cache**, content-addressed: sha256 of the canonical JSON of the item's judging fields, the rendered
 *   view (both blocks), the prompt version and the judge settings that can change a verdict (model, temperature,
 *   top_p, max tokens, reasoning effort, K, and whether items are batched — a batch's other items can sway a
 *   verdict). Not the endpoint URL (the same model elsewhere judges alike), not `attempts` (failures are never
 *   cached), not the caller's salt: the same (item, judged text, settings) is paid once, even across rollouts.
 *   Final verdicts only; failed verdicts are not cached. Identical work in flight in the same `Judge` is shared
 *   instead of asked twice (a group often holds identical turns).
 * - **Errors**: transport errors after the client's own retries (`LlmRetryableError`) and fatal ones
 *   (`LlmFatalError`) propagate: a judge outage fails the activity, which Temporal retries, instead of silently
 *   failing samples. The client's response cache (salted with `ctx.salt`) makes the retry pay only for what was
 *   not answered yet.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { evaluateCheck, type JudgeView } from '../../checklist/check';
import type { StoredItem } from '../../checklist/schema';
import { type LlmAsk } from '../../../llm/client';
import { canonicalJson } from '../../../kernel/canonicalJson';
import { isOnline, type LlmConfig, withSamplingDefaults } from '../../../llm/llmConfig';
import { attemptSalt } from '../../../llm/parseRetries';
import type { Verdict } from '../rolloutSchema';
import { batchItemIds, isPlainObject, JUDGE_JSON_SCHEMA, judgeBatchJsonSchema, judgeBatchPrompt, judgePrompt, parseJudgeAnswer, parseJudgeBatchAnswer } from './judgePrompt';
import { type RenderedView, renderJudgeView } from './judgeView';
import type { RlSettings } from '../../../run/config';
import { type JudgeTotals, zeroJudgeTotals } from '../../../kernel/counts';
import { LlmFatalError } from '../../../llm/errors';

// ---------------------------------------------------------------------------------------------------------------
// Configuration and stats

/** Names the prompt wording below; part of the verdict cache key. Bump it whenever the prompts change. */
export const JUDGE_PROMPT_VERSION = 'cm2-judge-v1';

/** The reference judge's sampling (§6.4, §6.8). */
export const JUDGE_SAMPLING = { temperature: 0.6, topP: 0.8, maxTokens: 6000 } as const;

/** `config` with the judge role's unset temperature / top_p / max tokens set to the reference values. */
export const withJudgeDefaults = (config: LlmConfig): LlmConfig => withSamplingDefaults(config, 'judge', JUDGE_SAMPLING);

export const JudgeConfig = z.object({
  /** Items of one step judged in one call; 1 = the reference (one item per call). */
  batchItems: z.number().int().positive().default(8),
  /** Majority vote over K judge samples; 1 = the reference. Ties → false. */
  samples: z.number().int().positive().default(1),
  /** Attempts at a usable answer per item and sample (the reference's retry_times 2). */
  attempts: z.number().int().positive().default(2),
  /** When an item's machine-checkable `check` decides it instead of the LLM (see the module comment). */
  offlineChecks: z.enum(['auto', 'always', 'never']).default('auto'),
  promptVersion: z.string().min(1).default(JUDGE_PROMPT_VERSION),
});
export type JudgeConfig = z.infer<typeof JudgeConfig>;
export type JudgeConfigInput = z.input<typeof JudgeConfig>;

/** Where final verdicts are kept (an S3 prefix in production, a Map in tests). */
export interface VerdictCache {
  get(key: string): Promise<Verdict | undefined>;
  put(key: string, v: Verdict): Promise<void>;
}

// ---------------------------------------------------------------------------------------------------------------
// The judge

/** Items with this focus get false at once when the judged step's tool answer is an `error_tool_call` (§6.4). */
const SHORTCUT_FOCUS = new Set<string>(['assistant.tool_calls', 'tool.content']);

/** A tool message after the last assistant message of the current block is JSON with an `error_tool_call` key. */
export function judgedStepHasToolCallError(view: JudgeView): boolean {
  let last = -1;
  view.current.forEach((m, i) => {
    if (m.role === 'assistant') last = i;
  });
  if (last < 0) return false;
  return view.current.slice(last + 1).some((m) => {
    if (m.role !== 'tool' && m.role !== 'observation') return false;
    try {
      const value: unknown = JSON.parse(m.content);
      return isPlainObject(value) && 'error_tool_call' in value;
    } catch {
      return false;
    }
  });
}

export interface JudgeDeps {
  /** The judge role's client; absent (or a role without `baseUrl`) = offline judge. */
  llm?: LlmAsk;
  cache?: VerdictCache;
  /** Where warnings go (verdict cache write failures). Default: console.warn. */
  log?: (message: string) => void;
}

type Deferred = { promise: Promise<Verdict>; resolve: (v: Verdict) => void; reject: (e: unknown) => void };

function deferred(): Deferred {
  let resolve!: (v: Verdict) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<Verdict>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // Nobody may be waiting: a rejection must not become an unhandled one.
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}

function chunk<T>(xs: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += size) out.push(xs.slice(i, i + size));
  return out;
}

export class Judge {
  readonly cfg: JudgeConfig;
  private readonly llm: LlmAsk | undefined;
  private readonly cache: VerdictCache | undefined;
  private readonly log: (message: string) => void;
  /** Verdict cache key → the verdict being worked out by some `judgeStep` of this judge. */
  private readonly inflight = new Map<string, Promise<Verdict>>();

  constructor(deps: JudgeDeps, cfg: JudgeConfigInput = {}) {
    this.cfg = JudgeConfig.parse(cfg);
    this.llm = deps.llm;
    this.cache = deps.cache;
    this.log = deps.log ?? ((m) => console.warn(m));
  }

  /** True when an LLM judges (a client whose judge role has an endpoint). */
  get online(): boolean {
    return this.llm !== undefined && isOnline(this.llm.roleConfig('judge'));
  }

  /**
   * Verdicts of `items` (in order) on the view of one assistant step. `ctx.salt` identifies the step (rollout,
   * variant, turn, step) for the client's response cache, so a retried activity replays what it already paid for.
   */
  async judgeStep(view: JudgeView, items: readonly StoredItem[], ctx: { salt: string }): Promise<{ verdicts: Verdict[]; stats: JudgeTotals }> {
    const stats = zeroJudgeTotals();
    const verdicts = new Array<Verdict | undefined>(items.length);
    const toolCallError = judgedStepHasToolCallError(view);
    const online = this.online;
    const forLlm: number[] = [];
    items.forEach((item, i) => {
      if (toolCallError && SHORTCUT_FOCUS.has(item.focus_on)) {
        verdicts[i] = { pass: false, ok: true };
        stats.shortcut++;
        return;
      }
      const mode = this.cfg.offlineChecks;
      if (item.check !== undefined && (mode === 'always' || (mode === 'auto' && !online))) {
        verdicts[i] = { pass: evaluateCheck(item.check, view), ok: true };
        stats.offline++;
        return;
      }
      if (!online) {
        const why = item.check === undefined ? 'has no machine-checkable `check`' : 'has a `check`, but offlineChecks is "never"';
        throw new LlmFatalError(
          `judge: item ${item.id} ${why} and the judge role is offline (no LLM client or no llm.roles.judge.baseUrl); ` +
            'give the judge role an endpoint, or use checklists with checks (offline annotator) and offlineChecks "auto"/"always"',
        );
      }
      forLlm.push(i);
    });

    if (forLlm.length > 0) {
      const rendered = renderJudgeView(view);
      const keys = forLlm.map((i) => this.verdictKey(items[i]!, rendered));
      // Claim the keys nobody is working on (synchronously, before any await), wait for the others.
      const owned: Array<{ i: number; key: string; d: Deferred }> = [];
      const waits: Array<Promise<void>> = [];
      forLlm.forEach((i, k) => {
        const key = keys[k]!;
        const busy = this.inflight.get(key);
        if (busy) {
          waits.push(
            busy.then((v) => {
              verdicts[i] = v;
              if (v.ok) stats.cacheHits++;
              else stats.failed++;
            }),
          );
          return;
        }
        const d = deferred();
        this.inflight.set(key, d.promise);
        owned.push({ i, key, d });
      });
      // Subscribed now, awaited last: a failure of someone else's work must not go unhandled if ours throws first.
      const waitAll = Promise.all(waits);
      waitAll.catch(() => undefined);

      try {
        const toAsk: typeof owned = [];
        await Promise.all(
          owned.map(async (o) => {
            const hit = this.cache ? await this.cache.get(o.key) : undefined;
            if (hit) {
              verdicts[o.i] = hit;
              stats.cacheHits++;
              o.d.resolve(hit);
            } else {
              toAsk.push(o);
            }
          }),
        );
        toAsk.sort((a, b) => a.i - b.i);
        if (toAsk.length > 0) {
          const asked = await this.judgeWithLlm(
            toAsk.map((o) => items[o.i]!),
            rendered,
            ctx.salt,
            stats,
          );
          await Promise.all(
            toAsk.map(async (o, k) => {
              const v = asked[k]!;
              verdicts[o.i] = v;
              if (!v.ok) stats.failed++;
              else if (this.cache) {
                try {
                  await this.cache.put(o.key, v);
                } catch (e) {
                  this.log(`[judge] could not write the verdict cache (${(e as Error).message}); continuing`);
                }
              }
              o.d.resolve(v);
            }),
          );
        }
      } catch (e) {
        for (const o of owned) o.d.reject(e);
        throw e;
      } finally {
        for (const o of owned) this.inflight.delete(o.key);
      }
      await waitAll;
    }

    return { verdicts: verdicts.map((v) => v!), stats };
  }

  /** The verdict cache key of `item` on a rendered view under this judge's settings. */
  verdictKey(item: StoredItem, view: RenderedView): string {
    const role = this.llm?.roleConfig('judge');
    const material = {
      kind: 'cm2/judge-verdict',
      promptVersion: this.cfg.promptVersion,
      item: {
        question: item.question,
        focus_on: item.focus_on,
        pass_condition: item.pass_condition,
        failure_examples: item.failure_examples,
        snippets: item.evidence.map((e) => e.snippet),
      },
      view,
      judge: {
        model: role?.model ?? null,
        temperature: role?.temperature ?? null,
        topP: role?.topP ?? null,
        maxTokens: role?.maxTokens ?? null,
        reasoningEffort: role?.reasoningEffort ?? null,
        samples: this.cfg.samples,
        batched: this.cfg.batchItems > 1,
      },
    };
    return createHash('sha256').update(canonicalJson(material)).digest('hex');
  }

  /** Majority over K samples of each item's LLM verdict. */
  private async judgeWithLlm(items: StoredItem[], view: RenderedView, salt: string, stats: JudgeTotals): Promise<Verdict[]> {
    const votes = items.map(() => ({ yes: 0, no: 0 }));
    await Promise.all(
      Array.from({ length: this.cfg.samples }, async (_, k) => {
        const answers = await this.sample(items, view, k === 0 ? salt : `${salt}/sample-${k}`, stats);
        answers.forEach((a, j) => {
          if (a === true) votes[j]!.yes++;
          else if (a === false) votes[j]!.no++;
        });
      }),
    );
    return votes.map((v) => ({ pass: v.yes > v.no, ok: v.yes + v.no > 0 }));
  }

  /** One sample: every item's answer (undefined = no usable answer after `attempts` attempts). */
  private async sample(items: StoredItem[], view: RenderedView, salt: string, stats: JudgeTotals): Promise<Array<boolean | undefined>> {
    const answers = new Array<boolean | undefined>(items.length);
    const all = items.map((_, j) => j);
    // Attempt 1: batches of `batchItems`; later attempts: each still unanswered item on its own.
    await Promise.all(chunk(all, this.cfg.batchItems).map((group) => this.ask(items, group, view, attemptSalt(salt, 1), answers, stats)));
    for (let attempt = 2; attempt <= this.cfg.attempts; attempt++) {
      const missing = all.filter((j) => answers[j] === undefined);
      if (missing.length === 0) break;
      await Promise.all(missing.map((j) => this.ask(items, [j], view, attemptSalt(salt, attempt), answers, stats)));
    }
    return answers;
  }

  /** One call judging `items[group]`; writes the usable answers into `answers`. Transport errors propagate. */
  private async ask(items: StoredItem[], group: number[], view: RenderedView, salt: string, answers: Array<boolean | undefined>, stats: JudgeTotals): Promise<void> {
    const llm = this.llm!;
    const chosen = group.map((j) => items[j]!);
    const single = chosen.length === 1;
    const res = await llm.chat({
      role: 'judge',
      messages: [{ role: 'user', content: single ? judgePrompt(chosen[0]!, view) : judgeBatchPrompt(chosen, view) }],
      jsonSchema: single ? JUDGE_JSON_SCHEMA : judgeBatchJsonSchema(chosen),
      cacheSalt: salt,
    });
    stats.calls++;
    stats.promptTokens += res.usage.promptTokens;
    stats.completionTokens += res.usage.completionTokens;
    stats.costUsd += res.usage.costUsd;
    if (single) {
      const parsed = parseJudgeAnswer(res.text);
      if (parsed.ok) answers[group[0]!] = parsed.value;
      return;
    }
    const ids = batchItemIds(chosen);
    const byId = parseJudgeBatchAnswer(res.text, ids);
    group.forEach((j, k) => {
      const a = byId.get(ids[k]!);
      if (a !== undefined) answers[j] = a;
    });
  }
}

/** The judge settings of an RL config. */
export function judgeConfigOf(rl: RlSettings): JudgeConfig {
  return JudgeConfig.parse({ batchItems: rl.judge.batchItems, samples: rl.judge.samples, attempts: rl.judge.attempts, offlineChecks: rl.judge.offlineChecks });
}
