/**
 * Stage 3 activities: cold-start SFT and the held-out format check, on the `cm2-gpu` task queue (one slot per
 * accelerator). Thin adapters: the loop is src/stages/sft/trainer.ts, the model src/model, the chat format src/chat.
 *
 * Crash safety: the training activity checkpoints to S3 every `checkpointEvery` optimizer steps (weights, AdamW
 * moments, step, data cursor, RNG state; manifest written last, src/storage/checkpoints.ts). A new attempt — after a
 * worker kill, a lost heartbeat, a server restart — resumes from the newest complete checkpoint, and because the loop
 * is deterministic it ends with exactly the weights an uninterrupted run would have.
 */
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { loadChatTokenizer, type ChatTokenizer } from '../../chat/tokenize';
import { Example } from '../../kernel/schema';
import { resolveFromRoot } from '../../infra/binaries';
import { sftKeys } from '../../run/layout';
import { selectBackend } from '../../model/net/backend';
import { QwenModel } from '../../model/net/qwen';
import { evaluateToolCalls, generateToolCalls, summarizeToolCalls, ToolCallSample, toolCallTargets, type ToolCallEval } from './evaluate';
import { ChunkTiming } from '../../kernel/chunks';
import { canonicalJson } from '../../kernel/canonicalJson';
import { PolicySlot } from '../../model/net/policySlot';
import { loadStoredHfModel } from '../../storage/policyStore';
import { type ActivityDeps, heartbeat, once, parseInput, saveReport, workerName } from '../activityKit';
import { SftTrainInput, SftTrainResult, SftEvalInput, SftEvalResult, SftEvalChunkInput, SftEvalChunkFile, SftEvalMergeInput, SftImportInput, SftImportResult, SftReportInput, SftReport, type SftPrepareResult } from './shapes';
import { importBaseIfMissing } from './importActivity';
import { baseModel, runSft } from './trainActivity';
import { prepareSft } from './prepareActivity';

/** The check's result from its samples (one pass, or the chunks' samples in order). */
function evalResult(which: 'base' | 'sft', result: ToolCallEval): SftEvalResult {
  return {
    which,
    prompts: result.prompts,
    wellFormedShare: result.wellFormedShare,
    correctNameShare: result.correctNameShare,
    thinkShare: result.thinkShare,
    examples: result.samples.slice(0, 6).map(({ uuid, expectedTool, output, wellFormed, correctName }) => ({ uuid, expectedTool, output, wellFormed, correctName })),
  };
}

/** A loaded policy of the check and its tokenizer, kept in the worker's slot between chunks. */
interface CheckPolicy {
  model: QwenModel;
  tok: ChatTokenizer;
  dispose(): void;
}

export function createSftActivities(deps: ActivityDeps) {
  const { store } = deps;
  /** The policy of the check's chunks on this worker: loaded once per policy, not once per chunk. */
  const slot = new PolicySlot<CheckPolicy>();
  const loadCheckPolicy = async (input: z.infer<typeof SftEvalInput>): Promise<CheckPolicy> => {
    console.log(`[sft ${input.runId}] eval ${input.which}: loading the policy on ${workerName()}`);
    const tok = loadChatTokenizer(resolveFromRoot(input.sft.tokenizerDir));
    let model: QwenModel;
    if (input.which === 'base') model = baseModel(input.sft, tok);
    else {
      if (!input.finalPrefix) throw ApplicationFailure.nonRetryable('sftEvaluate(sft) needs finalPrefix', 'BadInput');
      model = await loadStoredHfModel(store, input.finalPrefix);
    }
    return { model, tok, dispose: () => model.dispose() };
  };
  const checkPolicyKey = (input: z.infer<typeof SftEvalInput>): string =>
    input.which === 'base'
      ? `base:${canonicalJson({ base: input.sft.base, seed: input.sft.seed, tokenizerDir: input.sft.tokenizerDir })}`
      : `sft:${canonicalJson({ prefix: input.finalPrefix ?? '', tokenizerDir: input.sft.tokenizerDir })}`;
  return {
    /** Cold-start SFT, resumable from its S3 checkpoints. Heartbeats every optimizer step. */
    async sftTrain(raw: z.input<typeof SftTrainInput>): Promise<SftTrainResult> {
      const input = parseInput(SftTrainInput, raw, 'sftTrain');
      await slot.clear(); // the format check's policy is not needed while training
      return once(store, sftKeys.trainResult(input.runId), SftTrainResult, () => runSft(store, input));
    },

    /** The data, plan and initial policy of a run for a trainer in another language (src/stages/sft/prepareActivity.ts). */
    async sftPrepare(raw: z.input<typeof SftTrainInput>): Promise<SftPrepareResult> {
      const input = parseInput(SftTrainInput, raw, 'sftPrepare');
      await slot.clear();
      return prepareSft(store, input, (l) => console.log(`[sft ${input.runId}] ${l}`));
    },

    /** The base checkpoint folder, imported on this worker first when the config names where it comes from. */
    async sftImportBase(raw: z.input<typeof SftImportInput>): Promise<SftImportResult> {
      const input = parseInput(SftImportInput, raw, 'sftImportBase');
      return importBaseIfMissing(input.sft, (l) => console.log(`[sft ${input.runId}] ${l}`));
    },

    /** Greedy generations on held-out first turns: share of well-formed tool calls and of correct tool names. */
    async sftEvaluate(raw: z.input<typeof SftEvalInput>): Promise<SftEvalResult> {
      const input = parseInput(SftEvalInput, raw, 'sftEvaluate');
      return once(store, sftKeys.evalResult(input.runId, input.which), SftEvalResult, async () => {
        const { sft } = input;
        await selectBackend(sft.backend);
        const tok = loadChatTokenizer(resolveFromRoot(sft.tokenizerDir));
        let model: QwenModel;
        if (input.which === 'base') model = baseModel(sft, tok);
        else {
          if (!input.finalPrefix) throw ApplicationFailure.nonRetryable('sftEvaluate(sft) needs finalPrefix', 'BadInput');
          model = await loadStoredHfModel(store, input.finalPrefix);
        }
        try {
          const examples = (await store.getJsonl(input.evalSourceKey, Example)).slice(0, sft.eval.prompts * 2);
          const result: ToolCallEval = await evaluateToolCalls(model, tok, examples, {
            maxNewTokens: sft.eval.maxNewTokens,
            limit: sft.eval.prompts,
            onProgress: (done) => heartbeat({ done }),
          });
          return evalResult(input.which, result);
        } finally {
          model.dispose();
        }
      });
    },

    /**
     * One chunk of the format check (`sft.eval.chunkSize` prompts), on any gpu worker; its samples go to S3 under the
     * chunk's own key (`once`: a retried or repeated chunk returns what it stored), the workflow gets its timing.
     */
    async sftEvaluateChunk(raw: z.input<typeof SftEvalChunkInput>): Promise<ChunkTiming> {
      const input = parseInput(SftEvalChunkInput, raw, 'sftEvaluateChunk');
      const stored = await once(store, sftKeys.evalChunk(input.runId, input.which, input.chunk), SftEvalChunkFile, async () => {
        const { sft } = input;
        const startedAt = Date.now();
        const examples = (await store.getJsonl(input.evalSourceKey, Example)).slice(0, sft.eval.prompts * 2);
        const size = sft.eval.chunkSize;
        const targets = toolCallTargets(examples, sft.eval.prompts).slice(input.chunk * size, (input.chunk + 1) * size);
        let samples: ToolCallSample[] = [];
        if (targets.length > 0) {
          await selectBackend(sft.backend);
          samples = await slot.with(checkPolicyKey(input), () => loadCheckPolicy(input), ({ model, tok }) =>
            generateToolCalls(model, tok, targets, { maxNewTokens: sft.eval.maxNewTokens, onProgress: (done) => heartbeat({ chunk: input.chunk, done }) }));
        }
        const finishedAt = Date.now();
        const seconds = (finishedAt - startedAt) / 1000;
        console.log(`[sft ${input.runId}] eval ${input.which} chunk ${input.chunk}: ${samples.length} prompts in ${seconds.toFixed(1)}s on ${workerName()}`);
        return { index: input.chunk, items: samples.length, seconds, startedAt, finishedAt, worker: workerName(), which: input.which, samples };
      });
      const { samples: _samples, which: _which, ...timing } = stored;
      return timing;
    },

    /** The check's result from its chunks (api queue: S3 only), exactly as one pass would give it. */
    async sftEvaluateMerge(raw: z.input<typeof SftEvalMergeInput>): Promise<SftEvalResult> {
      const input = parseInput(SftEvalMergeInput, raw, 'sftEvaluateMerge');
      return once(store, sftKeys.evalResult(input.runId, input.which), SftEvalResult, async () => {
        const files = [];
        for (let i = 0; i < input.chunks; i++) files.push(await store.getJson(sftKeys.evalChunk(input.runId, input.which, i), SftEvalChunkFile));
        return {
          ...evalResult(input.which, summarizeToolCalls(files.flatMap((f) => f.samples))),
          chunks: files.map(({ samples: _samples, which: _which, ...timing }) => timing),
        };
      });
    },

    async writeSftReport(raw: z.input<typeof SftReportInput>): Promise<SftReport> {
      const input = parseInput(SftReportInput, raw, 'writeSftReport');
      const reportKey = sftKeys.report(input.runId);
      const report: SftReport = { runId: input.runId, train: input.train, ...(input.base ? { base: input.base } : {}), ...(input.sft ? { sft: input.sft } : {}), reportKey };
      return saveReport(store, reportKey, report);
    },
  };
}

export type SftActivities = ReturnType<typeof createSftActivities>;

