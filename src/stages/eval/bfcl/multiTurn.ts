/**
 * BFCL-V4 multi-turn (issue 34): episodes against BFCL's own backends and BFCL's own verdicts.
 *
 * An entry is a scripted conversation: user turns (a `miss_func` entry has an empty turn where a held-back function
 * is offered), a set of BFCL backend classes with their initial state, and a ground truth of call strings per turn.
 * The episode follows BFCL's inference loop (`BaseHandler.inference_multi_turn_*`): per turn, the turn's messages are
 * added, then the policy is asked again and again; each answer's calls are executed against the entry's backends and
 * their results go back into the conversation; an answer without calls (or one that cannot be decoded) ends the turn;
 * more than 20 steps in one turn ends the episode (BFCL's `MAXIMUM_STEP_LIMIT`: the entry then fails as
 * force-terminated). The result is BFCL's decoded multi-turn result: per turn, per step, the call strings.
 *
 * Executing calls and scoring are BFCL's (`MultiTurnBackend`, served by python/bfcl_bridge/bridge.py); this module
 * holds the loop and the bookkeeping, and is pure given a backend and a policy.
 */
import { mapConcurrent } from '../../../kernel/mapConcurrent';
import type { FunctionDoc } from './checker';
import type { BfclMessage } from './data';

export const MULTI_TURN_CATEGORIES = ['multi_turn_base', 'multi_turn_miss_func', 'multi_turn_miss_param', 'multi_turn_long_context'] as const;
export const isMultiTurn = (category: string): boolean => (MULTI_TURN_CATEGORIES as readonly string[]).includes(category);

/** BFCL's `MAXIMUM_STEP_LIMIT` (bfcl_eval/constants/default_prompts.py): more steps in one turn end the episode. */
export const MAXIMUM_STEP_LIMIT = 20;
/** BFCL's user message for a turn that offers held-back functions (function-calling mode). */
export const ADDITIONAL_FUNCTION_PROMPT = 'I have updated some more functions you can choose from. What about now?';

/** One entry as BFCL's `load_dataset_entry` gives it (function docs filled in, held-back ones moved to their turns). */
export interface MultiTurnEntry {
  id: string;
  category: string;
  question: BfclMessage[][];
  functions: FunctionDoc[];
  /** Turn index → the functions offered at that turn (`miss_func`). */
  missedFunctions: Record<string, FunctionDoc[]>;
  involvedClasses: string[];
  /** Per turn, the ground truth's call strings (an empty turn: no call is expected). */
  groundTruth: string[][];
}

/** BFCL's decoded multi-turn result: per turn, per step, the call strings of that step. */
export type MultiTurnResult = string[][][];

export interface MultiTurnVerdict {
  valid: boolean;
  /** BFCL's error_type (`multi_turn:instance_state_mismatch`, …). */
  errorType?: string;
  errorMessage?: string;
}

/** What BFCL itself does for an entry (python/bfcl_bridge/bridge.py). Sessions are named by the caller. */
export interface MultiTurnBackend {
  open(session: string, entryId: string): Promise<void>;
  execute(session: string, calls: readonly string[]): Promise<string[]>;
  close(session: string): Promise<void>;
  check(entryId: string, result: MultiTurnResult): Promise<MultiTurnVerdict>;
}

/** A message of the episode's conversation (the policy renders it as its template or API needs). */
export type EpisodeMessage =
  | { role: 'system' | 'user'; content: string }
  | { role: 'assistant'; content: string; calls: string[]; raw?: unknown }
  | { role: 'tool'; call: string; content: string };

/** What the policy sees at each step. */
export interface EpisodeView {
  entry: MultiTurnEntry;
  turn: number;
  step: number;
  /** The functions offered so far (the entry's, plus held-back ones from the turns that offered them). */
  functions: readonly FunctionDoc[];
  /** Functions first offered at this turn (`miss_func`), empty otherwise. */
  newFunctions: readonly FunctionDoc[];
  messages: readonly EpisodeMessage[];
}

/** One answer of the policy: the text it wrote and its calls as call strings (`null`: the text did not decode). */
export interface EpisodeAnswer {
  text: string;
  calls: string[] | null;
  decodeError?: string;
  tokens?: number;
  /** What the policy needs to write this answer back into its conversation (an endpoint's tool calls with their ids). */
  raw?: unknown;
}

export interface MultiTurnPolicy {
  readonly description: Record<string, unknown>;
  /** The turn's user messages as the policy's mode writes them (a `miss_func` turn has none in the data). */
  turnMessages(view: Omit<EpisodeView, 'messages' | 'step'>, dataMessages: readonly BfclMessage[]): BfclMessage[] | Promise<BfclMessage[]>;
  answer(view: EpisodeView): Promise<EpisodeAnswer>;
  /** An episode starts / ended: a batching policy generates once every running episode waits for an answer. */
  episodeStart?(): void;
  episodeDone?(): void;
}

/** The transcript of an episode, stored beside the verdict. */
export interface EpisodeTranscript {
  id: string;
  result: MultiTurnResult;
  messages: EpisodeMessage[];
  forceQuit: boolean;
  steps: number;
  tokens: number;
  /** Why answers ended their turn undecoded (the first few), e.g. a prompt that did not fit. */
  decodeErrors: string[];
}

/**
 * One episode. `session` names the backend session (unique per attempt: a retried chunk opens its own). The
 * session is closed whatever happens.
 */
export async function runEpisode(entry: MultiTurnEntry, policy: MultiTurnPolicy, backend: MultiTurnBackend, session: string, opts: { onStep?: () => void } = {}): Promise<EpisodeTranscript> {
  await backend.open(session, entry.id);
  const messages: EpisodeMessage[] = [];
  const result: MultiTurnResult = [];
  const functions: FunctionDoc[] = [...entry.functions];
  let forceQuit = false;
  let steps = 0;
  let tokens = 0;
  const decodeErrors: string[] = [];
  try {
    for (let turn = 0; turn < entry.question.length; turn++) {
      const newFunctions = entry.missedFunctions[String(turn)] ?? [];
      functions.push(...newFunctions);
      const base = { entry, turn, functions, newFunctions };
      for (const m of await policy.turnMessages(base, entry.question[turn]!)) messages.push({ role: m.role === 'system' ? 'system' : 'user', content: m.content });
      const turnSteps: string[][] = [];
      for (let step = 0; ; step++) {
        const answer = await policy.answer({ ...base, step, messages });
        steps++;
        tokens += answer.tokens ?? 0;
        opts.onStep?.();
        if (answer.calls === null && decodeErrors.length < 5) decodeErrors.push(`turn ${turn} step ${step}: ${answer.decodeError ?? 'not decodable'}`);
        const calls = answer.calls ?? [];
        messages.push({ role: 'assistant', content: answer.text, calls, ...(answer.raw !== undefined ? { raw: answer.raw } : {}) });
        turnSteps.push(calls);
        if (answer.calls === null || calls.length === 0) break;
        const results = await backend.execute(session, calls);
        calls.forEach((call, k) => messages.push({ role: 'tool', call, content: results[k] ?? '' }));
        if (step + 1 > MAXIMUM_STEP_LIMIT) {
          forceQuit = true;
          break;
        }
      }
      result.push(turnSteps);
      if (forceQuit) break;
    }
  } finally {
    await backend.close(session);
  }
  return { id: entry.id, result, messages, forceQuit, steps, tokens, decodeErrors };
}

/**
 * The ground truth played as a policy: at each turn, one answer with the turn's calls, then one without. Checks the
 * harness end to end (episode loop, execution, checker), as `--policy reference` does for the AST categories.
 */
export class ReferenceMultiTurnPolicy implements MultiTurnPolicy {
  readonly description = { kind: 'reference' };

  turnMessages(_view: Omit<EpisodeView, 'messages' | 'step'>, data: readonly BfclMessage[]): BfclMessage[] {
    return [...data];
  }

  async answer(view: EpisodeView): Promise<EpisodeAnswer> {
    const calls = view.step === 0 ? view.entry.groundTruth[view.turn] ?? [] : [];
    return { text: calls.length ? `[${calls.join(', ')}]` : '', calls };
  }
}

/** Checks the shape of a multi-turn answers row (`result`): turns of steps of call strings. Returns the problem's field, or undefined. */
export function multiTurnResultProblem(result: unknown): { field: string; problem: string } | undefined {
  if (!Array.isArray(result)) return { field: 'result', problem: 'a multi-turn result is a list of turns, each a list of steps, each a list of call strings' };
  for (let t = 0; t < result.length; t++) {
    const turn: unknown = result[t];
    if (!Array.isArray(turn)) return { field: `result[${t}]`, problem: 'a turn is a list of steps (each a list of call strings)' };
    for (let s = 0; s < turn.length; s++) {
      const step: unknown = turn[s];
      if (!Array.isArray(step)) return { field: `result[${t}][${s}]`, problem: 'a step is a list of call strings' };
      const k = step.findIndex((c) => typeof c !== 'string');
      if (k >= 0) return { field: `result[${t}][${s}][${k}]`, problem: 'a call is a string such as "cd(folder=\'document\')"' };
    }
  }
  return undefined;
}

/** A verdict as the results file records it (the shape of ./score.ts `ExampleResult`). */
export interface MultiTurnExampleResult {
  id: string;
  category: string;
  valid: boolean;
  reason?: string;
  bfcl?: string;
  detail?: string;
  /** The decoded result (turns of steps of call strings). */
  calls?: unknown[];
  tokens?: number;
}

/** `multi_turn:instance_state_mismatch` → `instance_state_mismatch` (the results' reason; `bfcl` keeps the full type). */
const reasonOf = (errorType: string | undefined): string => (errorType ? errorType.replace(/^multi_turn:/, '') : 'invalid');

export function multiTurnExampleResult(entry: Pick<MultiTurnEntry, 'id' | 'category'>, result: MultiTurnResult | undefined, verdict: MultiTurnVerdict, extra: { tokens?: number; reason?: string; decodeErrors?: readonly string[] } = {}): MultiTurnExampleResult {
  const r: MultiTurnExampleResult = { id: entry.id, category: entry.category, valid: verdict.valid };
  if (!verdict.valid) {
    // A prompt that did not fit is the harness's limit, not the model's answer: said so, as the single-turn runner does.
    const tooLong = extra.decodeErrors?.some((e) => e.includes('prompt_too_long'));
    r.reason = extra.reason ?? (tooLong ? 'prompt_too_long' : reasonOf(verdict.errorType));
    if (verdict.errorType) r.bfcl = verdict.errorType;
    const detail = [verdict.errorMessage ?? '', ...(extra.decodeErrors?.length ? [`undecoded answers: ${extra.decodeErrors.join('; ')}`] : [])].filter(Boolean).join(' | ');
    if (detail) r.detail = detail.length > 2000 ? `${detail.slice(0, 2000)}…` : detail;
  }
  if (result) r.calls = result;
  if (extra.tokens !== undefined) r.tokens = extra.tokens;
  return r;
}

export interface MultiTurnRunOptions {
  /** A prefix that makes backend session names unique to this attempt. */
  sessionPrefix?: string;
  /** Episodes played at once (an endpoint's concurrent requests; a model's generation batch). Default 1. */
  concurrency?: number;
  onProgress?: (done: number, total: number) => void;
  onBusy?: () => void;
  signal?: AbortSignal;
  /** An entry's result recorded before (a retried chunk): it is not played again. */
  recorded?: (entry: MultiTurnEntry) => Promise<MultiTurnExampleResult | undefined>;
  /** Keeps a finished entry's result and transcript (before it counts as done). */
  record?: (entry: MultiTurnEntry, result: MultiTurnExampleResult, episode: EpisodeTranscript) => Promise<void>;
}

/** Plays every entry as an episode and scores it with BFCL's checker; results in the entries' order. */
export async function evaluateMultiTurnEpisodes(entries: readonly MultiTurnEntry[], policy: MultiTurnPolicy, backend: MultiTurnBackend, opts: MultiTurnRunOptions = {}): Promise<MultiTurnExampleResult[]> {
  return mapConcurrent(entries, opts.concurrency ?? 1, async (entry) => {
    const before = await opts.recorded?.(entry);
    if (before) return before;
    if (opts.signal?.aborted) throw opts.signal.reason instanceof Error ? opts.signal.reason : new Error('cancelled');
    policy.episodeStart?.();
    try {
      const episode = await runEpisode(entry, policy, backend, `${opts.sessionPrefix ?? 'ep'}-${entry.id}`, { ...(opts.onBusy ? { onStep: opts.onBusy } : {}) });
      const verdict = await backend.check(entry.id, episode.result);
      const result = multiTurnExampleResult(entry, episode.result, verdict, { tokens: episode.tokens, decodeErrors: episode.decodeErrors });
      await opts.record?.(entry, result, episode);
      return result;
    } finally {
      policy.episodeDone?.();
    }
  }, opts.onProgress);
}

/** Scores precomputed results (`--answers`): an entry without a row is `no_answer`. */
export async function scoreMultiTurnAnswers(entries: readonly MultiTurnEntry[], answers: ReadonlyMap<string, MultiTurnResult>, backend: MultiTurnBackend): Promise<MultiTurnExampleResult[]> {
  const out: MultiTurnExampleResult[] = [];
  for (const entry of entries) {
    const result = answers.get(entry.id);
    if (!result) {
      out.push(multiTurnExampleResult(entry, undefined, { valid: false, errorMessage: `no line with id ${entry.id} in the answers file` }, { reason: 'no_answer' }));
      continue;
    }
    out.push(multiTurnExampleResult(entry, result, await backend.check(entry.id, result)));
  }
  return out;
}
