/**
 * The multi-turn backend and data served by the BFCL bridge (src/infra/bfclBridge.ts, python/bfcl_bridge/bridge.py):
 * the entries come from the installed `bfcl-eval` package (its questions, function docs and possible answers), calls
 * are executed by its backends and entries scored by its checker.
 */
import { z } from 'zod';
import { BfclInputError, selectExamples } from './categories';
import type { FunctionDoc } from './checker';
import type { BfclMessage } from './data';
import type { BfclFormatter } from './multiTurnPolicies';
import { parsePyJson, stringifyPyJson, type PyValue } from './pyValue';
import { isMultiTurn, type MultiTurnBackend, type MultiTurnEntry, type MultiTurnResult, type MultiTurnVerdict } from './multiTurn';

/** What the modules here need of the bridge process (src/infra/bfclBridge.ts `BfclBridge`): one request, one answer. */
export interface BfclBridge {
  request<T extends Record<string, unknown> = Record<string, unknown>>(op: string, body?: Record<string, unknown>): Promise<T>;
}

const Message = z.looseObject({ role: z.string(), content: z.string().nullable().transform((c) => c ?? '') });
const Doc = z.looseObject({ name: z.string().min(1), parameters: z.looseObject({}) });
const Entry = z.looseObject({
  id: z.string().min(1),
  question: z.array(z.array(Message)),
  function: z.array(Doc),
  missed_function: z.record(z.string(), z.array(Doc)).optional(),
  involved_classes: z.array(z.string()),
});
const Loaded = z.object({
  entries: z.array(Entry),
  ground_truth: z.array(z.object({ id: z.string(), ground_truth: z.array(z.array(z.string())).nullable() })),
});

export interface BridgeInfo {
  bfclEval: string;
  python: string;
  data: string;
}

export async function bridgeInfo(bridge: BfclBridge): Promise<BridgeInfo> {
  const r = await bridge.request<{ bfcl_eval: string; python: string; data: string }>('hello');
  return { bfclEval: r.bfcl_eval, python: r.python, data: r.data };
}

/** The entries of a multi-turn category, in BFCL's order (those `ids` names, then the first `limit`). The bridge keeps them for execution and checks. */
export async function loadMultiTurnCategory(bridge: BfclBridge, category: string, limit?: number, ids?: readonly string[]): Promise<MultiTurnEntry[]> {
  if (!isMultiTurn(category)) throw new BfclInputError(`'${category}' is not a multi-turn category`);
  const parsed = Loaded.safeParse(await bridge.request('load', { category }));
  if (!parsed.success) throw new BfclInputError(`bfcl-eval's ${category} data is not as expected: ${parsed.error.issues[0]?.message} at ${parsed.error.issues[0]?.path.join('.')}`);
  const truth = new Map(parsed.data.ground_truth.map((g) => [g.id, g.ground_truth]));
  const entries = parsed.data.entries.map((e): MultiTurnEntry => {
    const gt = truth.get(e.id);
    if (!gt) throw new BfclInputError(`bfcl-eval's ${category} has no possible answer for ${e.id}`);
    return {
      id: e.id,
      category,
      question: e.question.map((turn) => turn.map((m) => ({ role: m.role, content: m.content }))),
      functions: e.function as unknown as FunctionDoc[],
      missedFunctions: (e.missed_function ?? {}) as unknown as Record<string, FunctionDoc[]>,
      involvedClasses: e.involved_classes,
      groundTruth: gt,
    };
  });
  return selectExamples(category, entries, ids, limit, `bfcl-eval's ${category}`);
}

/** BFCL's execution and checker through the bridge. */
export function bridgeBackend(bridge: BfclBridge): MultiTurnBackend {
  return {
    open: async (session, entryId) => {
      await bridge.request('open', { session, entry: entryId });
    },
    execute: async (session, calls) => (await bridge.request<{ results: string[] }>('execute', { session, calls })).results,
    close: async (session) => {
      await bridge.request('close', { session });
    },
    check: async (entryId: string, result: MultiTurnResult): Promise<MultiTurnVerdict> => {
      const r = await bridge.request<{ valid: boolean; error_type?: string; error_message?: string }>('check', { entry: entryId, result });
      return r.valid ? { valid: true } : { valid: false, ...(r.error_type ? { errorType: r.error_type } : {}), ...(r.error_message ? { errorMessage: r.error_message } : {}) };
    },
  };
}

/** BFCL's prompt writers and parsers through the bridge. */
export function bridgeFormatter(bridge: BfclBridge): BfclFormatter {
  return {
    systemPrompt: async (entryId, messages, functions) => (await bridge.request<{ messages: BfclMessage[] }>('system_prompt', { entry: entryId, messages, functions })).messages.map((m) => ({ role: m.role, content: m.content ?? '' })),
    decode: async (text) => {
      const r = await bridge.request<{ calls: string[] | null; error?: string }>('decode', { text });
      return { calls: r.calls, ...(r.error ? { error: r.error } : {}) };
    },
    toCalls: async (calls: readonly PyValue[]) => (await bridge.request<{ calls: string[] }>('to_calls', { calls_json: stringifyPyJson(calls as PyValue) })).calls,
    formatResults: async (calls, results) => (await bridge.request<{ content: string }>('format_results', { calls, results })).content,
    missedFunctionPrompt: async (functions) => (await bridge.request<{ content: string }>('missed_function_prompt', { functions })).content,
    promptMessages: async (entryId) => (await bridge.request<{ messages: BfclMessage[] }>('prompt_messages', { entry: entryId })).messages.map((m) => ({ role: m.role, content: m.content ?? '' })),
    decodeAst: async (text, language) => {
      const r = await bridge.request<{ calls_json: string | null; error?: string }>('decode_ast', { text, language });
      if (r.calls_json === null) return { calls: [], error: r.error ?? 'not decodable' };
      const calls = parsePyJson(r.calls_json);
      return Array.isArray(calls) ? { calls } : { calls: [], error: `BFCL's decoder gave ${r.calls_json.slice(0, 200)}` };
    },
  };
}
