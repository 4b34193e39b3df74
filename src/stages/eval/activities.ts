/**
 * Evaluation activities, on the `cm2-gpu` task queue: BFCL function-calling accuracy of a policy (issue 7).
 *
 * `evalBfcl` runs a policy — an SFT policy (HF folder in S3), an RL checkpoint, or an OpenAI-compatible endpoint —
 * over BFCL categories, writes the full results JSON to S3 and returns a small summary. Thin adapter: loading,
 * decoding and scoring live in src/stages/eval/bfcl. Idempotent: a summary already written at the output key is returned
 * as it is (`once`), so a retried or replayed activity does not evaluate twice; endpoint answers are cached under
 * `cache/llm/` by request hash, so an attempt that died halfway does not pay twice either.
 */
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { ChatTokenizer, loadChatTokenizer } from '../../chat/tokenize';
import { DEFAULT_CATEGORIES } from './bfcl/categories';
import { BfclDataError, BfclInputError } from './bfcl/data';
import { stringifyPyJson } from './bfcl/pyValue';
import { EndpointConfig, EndpointPolicy, evaluateBfcl, ModelPolicy, type Policy } from './bfcl/runner';
import { Accuracy, formatSummary } from './bfcl/score';
import { bfclDataDir, resolveFromRoot } from '../../infra/binaries';
import { ifExists, NotFoundError, storeCache, type ObjectStore } from '../../storage/store';
import { evalKeys } from '../../run/layout';
import { selectBackend, backendPrefs, type BackendPref } from '../../model/backend';
import { QwenModel } from '../../model/qwen';
import { BadPolicyError, loadPolicy, PolicyRef } from '../../model/policyStore';
import { type ActivityDeps, asTemporalFailure, cancellationSignal, heartbeat, once, parseInput, stageLog } from '../activityKit';

/** What to evaluate: an SFT policy folder (`hf`), an RL checkpoint (`ckpt`), or an endpoint. No secrets. */
export const EvalPolicy = z.discriminatedUnion('kind', [
  ...PolicyRef.options,
  z.object({ kind: z.literal('endpoint'), endpoint: EndpointConfig }),
]);
export type EvalPolicy = z.infer<typeof EvalPolicy>;

export const Generation = z.object({
  maxNewTokens: z.number().int().positive().default(256).describe('Generated tokens per example (greedy).'),
  batchSize: z.number().int().positive().default(8).describe('Examples per generation batch.'),
  enableThinking: z.boolean().optional().describe('`false` appends an empty think block to the generation prompt.'),
  backend: z.enum(backendPrefs as [BackendPref, ...BackendPref[]]).default('auto').describe('tfjs backend.'),
});

export const EvalBfclInput = z.object({
  runId: z.string().min(1),
  policy: EvalPolicy,
  /** Tokenizer folder (absolute or relative to the project) when the policy's S3 folder has no tokenizer.json (RL checkpoints). */
  tokenizerDir: z.string().optional(),
  categories: z.array(z.string().min(1)).min(1).default([...DEFAULT_CATEGORIES]),
  limit: z.number().int().positive().optional(),
  /** BFCL data folder on the worker; default: the shared one (`CM2_BFCL_DIR`, `shared/benchmarks/bfcl`). */
  dataDir: z.string().optional(),
  /** Names the default output key `runs/<runId>/eval/bfcl/<label>.json` (default: from the policy: `sft`, `rl-step-N`, the model). */
  label: z.string().regex(/^[A-Za-z0-9._-]{1,80}$/).optional(),
  /** Where the full results go (overrides the label's default key). */
  outputKey: z.string().min(1).optional(),
  generation: Generation.prefault({}),
});
export type EvalBfclInput = z.input<typeof EvalBfclInput>;

export const EvalBfclSummary = z.object({
  /** S3 key of the full results (./src/stages/eval/bfcl/score.ts `BfclResults`). */
  key: z.string(),
  label: z.string(),
  overall: Accuracy,
  categories: z.record(z.string(), Accuracy),
  seconds: z.number(),
});
export type EvalBfclSummary = z.infer<typeof EvalBfclSummary>;

/** The default label of a policy: `sft` for `…/sft/final`, `rl-step-N` for an RL checkpoint, else a slug. */
export function policyLabel(policy: EvalPolicy): string {
  const slug = (s: string) => s.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 80) || 'policy';
  if (policy.kind === 'ckpt') return `rl-step-${policy.step}`;
  if (policy.kind === 'endpoint') return slug(`endpoint-${policy.endpoint.model}`);
  const parts = policy.prefix.split('/').filter(Boolean);
  return parts.at(-1) === 'final' && parts.length >= 2 ? slug(parts.at(-2)!) : slug(parts.slice(-2).join('-'));
}


const optionalJson = (store: ObjectStore, key: string) => ifExists(async () => JSON.parse(await store.getText(key)) as Record<string, unknown>);

/**
 * A policy in S3 and its tokenizer: an HF folder (config.json, model.safetensors, tokenizer files as the SFT stage
 * writes them) or an RL checkpoint (manifest-verified files; the tokenizer then comes from `tokenizerDir`).
 */
export async function loadStoredModel(store: ObjectStore, ref: z.infer<typeof PolicyRef>, tokenizerDir?: string): Promise<{ model: QwenModel; tok: ChatTokenizer }> {
  try {
    return await readStoredModel(store, ref, tokenizerDir);
  } catch (e) {
    // A policy that is not there will not appear by retrying.
    if (e instanceof NotFoundError) throw ApplicationFailure.nonRetryable(`policy not found: ${e.message}`, 'BadInput');
    if (e instanceof BadPolicyError) throw ApplicationFailure.nonRetryable(e.message, 'BadInput');
    throw e;
  }
}

async function readStoredModel(store: ObjectStore, ref: z.infer<typeof PolicyRef>, tokenizerDir?: string): Promise<{ model: QwenModel; tok: ChatTokenizer }> {
  // Weights stream from S3 through a temp folder, one tensor at a time (an RL checkpoint's optimizer state is not fetched).
  const model = await loadPolicy(store, ref);
  try {
    let tok: ChatTokenizer | undefined;
    if (ref.kind === 'hf') {
      const tj = await optionalJson(store, `${ref.prefix}/tokenizer.json`);
      if (tj && !tokenizerDir) tok = new ChatTokenizer(tj, (await optionalJson(store, `${ref.prefix}/tokenizer_config.json`)) ?? {});
    }
    if (!tok) {
      if (!tokenizerDir) throw ApplicationFailure.nonRetryable('the policy folder has no tokenizer.json: give tokenizerDir', 'BadInput');
      tok = loadChatTokenizer(resolveFromRoot(tokenizerDir));
    }
    return { model, tok };
  } catch (e) {
    model.dispose();
    throw e;
  }
}

export function createEvalActivities(deps: ActivityDeps) {
  const { store } = deps;
  const log = stageLog(deps, 'eval');
  return {
    /** BFCL accuracy of a policy: full results to S3, summary returned. Heartbeats per batch / answered example. */
    async evalBfcl(raw: EvalBfclInput): Promise<EvalBfclSummary> {
      const input = parseInput(EvalBfclInput, raw, 'evalBfcl');
      const label = input.label ?? policyLabel(input.policy);
      const key = input.outputKey ?? evalKeys.bfcl(input.runId, label);
      return once(store, `${key.replace(/\.json$/, '')}.summary.json`, EvalBfclSummary, async () => {
        let policy: Policy;
        let dispose: () => void = () => undefined;
        if (input.policy.kind === 'endpoint') {
          policy = new EndpointPolicy(input.policy.endpoint, { cache: storeCache(store) });
        } else {
          await selectBackend(input.generation.backend, log);
          const { model, tok } = await loadStoredModel(store, input.policy, input.tokenizerDir);
          const description = input.policy.kind === 'hf' ? { kind: 'hf', prefix: input.policy.prefix } : { kind: 'ckpt', manifestKey: input.policy.manifestKey, step: input.policy.step };
          policy = new ModelPolicy(model, tok, description, input.generation);
          dispose = () => model.dispose();
        }
        try {
          const signal = cancellationSignal();
          const results = await evaluateBfcl(policy, {
            categories: input.categories,
            ...(input.limit !== undefined ? { limit: input.limit } : {}),
            dataDir: input.dataDir ?? bfclDataDir(),
            onProgress: (category, done, total) => heartbeat({ category, done, total }),
            log: (l) => log(`${label}: ${l}`),
            ...(signal ? { signal } : {}),
          });
          await store.putText(key, `${stringifyPyJson(results, 1)}\n`, 'application/json');
          log(`${label}: BFCL results in ${key}\n${formatSummary(results)}`);
          const strip = (a: { accuracy: number; correct: number; total: number }) => ({ accuracy: a.accuracy, correct: a.correct, total: a.total });
          return {
            key,
            label,
            overall: results.overall,
            categories: Object.fromEntries(Object.entries(results.categories).map(([c, r]) => [c, strip(r)])),
            seconds: results.seconds,
          };
        } catch (e) {
          // Bad data or an unknown category cannot be fixed by retrying.
          if (e instanceof BfclDataError || e instanceof BfclInputError) {
            throw ApplicationFailure.nonRetryable(e.message, 'BadInput');
          }
          throw asTemporalFailure(e);
        } finally {
          dispose();
        }
      });
    },
  };
}

export type EvalActivities = ReturnType<typeof createEvalActivities>;
