/**
 * The science result of a setup (issue 13 item 5): held-out mean checklist reward of the base model, of its SFT
 * policy and of RL policies trained from that SFT policy (one RL run per seed × granularity), and BFCL accuracy of
 * every one of them, on the running Temporal server and MinIO with `cm2 worker` processes serving the queues.
 *
 *   npx tsx scripts/rl-study.ts --config config/smollm2.yaml --from smollm2-full1 --id sm-study1 \
 *     [--seeds 1,2,3] [--granularities trajectory,turn] [--base-dir models/smollm2] [--bfcl-limit 50] [--no-bfcl]
 *     [--adopt trajectory-s1=<run id>]
 *
 * `--from` names the run whose SFT policy (`runs/<from>/sft/final`) and annotated examples the study starts from. RL
 * settings are the config's (and `CM2_CFG__rl__…` overrides), except the seed and granularity each run sets.
 *
 * Every measurement is a Temporal workflow: the base and SFT policies are evaluated by RL runs with `rl.steps: 0`
 * (`<id>-base`, `<id>-sft`), each RL run is `<id>-<granularity>-s<seed>` (no step-0 evaluation: the SFT run's is
 * the baseline of all of them), BFCL is one evaluation workflow (`cm2-<id>-eval`) over every policy. Runs go one at
 * a time. The script is resumable: run it again after any interruption and it takes finished workflows' results,
 * attaches to running ones and starts the rest (their activities skip work already in S3).
 *
 * `--adopt <label>=<run id>` takes a finished RL run made earlier (e.g. the pilot that chose the settings) as the
 * study's run of that label, after checking that its recorded RL settings are the ones the study would use (all but
 * the evaluation schedule), so an hour of identical training is not paid twice.
 *
 * Writes `.cm2/reports/<id>/study.json`, the HTML report with the plots (`report.html`), and the study's block in
 * docs/rl-results.md (between `<!-- study:<id> -->` markers; `--doc` names another file, `--doc ''` none).
 *
 * A study in pieces (issue 30): `--results docs/results/<name>.json` is the committed record (src/report/studyFile.ts).
 * Each policy is a piece: its held-out evaluation (the greedy reward of every held-out prompt, read from the
 * evaluation's advantage rows) and, unless `--no-bfcl`, its BFCL counts, written to the file as soon as the piece ends
 * (with `--git-commit`, committed too), with its settings, the git commit and the machine. A piece already in the file
 * is skipped, so the study resumes on a fresh machine; `--pieces base,sft,trajectory-s1` runs only those this time.
 * BFCL of an RL policy runs in its own piece, while its checkpoint is in this machine's S3.
 *
 * `--results FILE --search NAME` is one run of the hyperparameter search (issue 30 item 4): RL from the SFT policy with
 * the config's settings and `CM2_CFG__rl__…` overrides, evaluated on the validation prompts only, recorded under
 * `searches.NAME` with every validation prompt's reward; `--search sft` evaluates the SFT policy there (the baseline the
 * search runs are paired against). The held-out prompts are never looked at.
 *
 * `--results FILE --report-only` needs no servers: it remakes, from the file alone, the study's block in `--doc` with
 * its charts (`docs/results/<name>-{heldout,paired,curves,bfcl}.svg`) and the HTML report (`.cm2/reports/<name>/`).
 *
 * On a fresh machine the SFT policy comes from the committed adapter: `--sft-adapter DIR` (PEFT files) is merged into
 * the base (`--base-dir`) and uploaded as `runs/<from>/sft/final` when S3 lacks it, and the annotated examples of
 * `--from` are made again by the prepare and checklist stages (deterministic offline) when S3 lacks them.
 */
import { WORLD_TOOL_NAMES } from '../src/demo/tools';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { WorkflowNotFoundError, type Client, type WorkflowHandle } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import type { EvalBfclSummary, EvalPolicy } from '../src/stages/eval/shapes';
import { connect } from '../src/cli/pipelineCommand';
import { resultOf, rlInput, startChecklist, startPrepare, startRl, startStage } from '../src/cli/stages';
import { executableToolNames } from '../src/stages/rl/env/answers';
import { DEFAULT_CATEGORIES } from '../src/stages/eval/bfcl/categories';
import { projectRoot } from '../src/infra/binaries';
import { loadConfig, type Cm2Config } from '../src/run/config';
import { canonicalJson } from '../src/kernel/canonicalJson';
import { useLocalInfraEnv } from '../src/infra/localInfra';
import { type ObjectStore } from '../src/storage/store';
import { checklistKeys, rlKeys, runKey, sftKeys, stageWorkflowId } from '../src/run/layout';
import { evalPromptRewards, heldOutSummary, lastEvalEpisodes, readRlRows } from '../src/report/collect';
import { renderReport } from '../src/report/html';
import { StudyResult, studyMarkdown, studyReportData, upsertStudyBlock, type StudyPolicy } from '../src/report/study';
import { ReportData } from '../src/report/reportData';
import { evalWorkflow, type EvalResult, type EvalWorkflowInput } from '../src/stages/eval/workflow';
import { rlStatusQuery, type RlResult, type RlWorkflowInput } from '../src/stages/rl/workflow';
import { type PolicyRef } from '../src/run/layout';
import { studyFileReportData, studyFileSvgs } from '../src/report/studyFileReport';
import { emptyStudyFile, parseStudyFile, studyFileMarkdown, studyFileText, withPolicy, withSearch, type StudyEpisodes, type StudyFile, type StudyFilePolicy, type StudySearch } from '../src/report/studyFile';
import { firstStepCounts } from '../src/report/firstStep';
import { RolloutFile } from '../src/stages/rl/shapes';
import { digestEpisodes, digestMarkdown, type RunDigests } from '../src/report/episodeDigest';
import type { AnnotatedExample } from '../src/stages/checklist/schema';
import { importBaseIfMissing } from '../src/stages/sft/importActivity';
import { modelMergeCommand } from '../src/cli/modelCommand';
import { selectBackend } from '../src/model/net/backend';

const { values: args } = parseArgs({
  options: {
    config: { type: 'string', short: 'c', default: 'config/smollm2.yaml' },
    from: { type: 'string' },
    id: { type: 'string' },
    seeds: { type: 'string', default: '1,2,3' },
    granularities: { type: 'string', default: 'trajectory,turn' },
    'base-dir': { type: 'string' },
    'bfcl-limit': { type: 'string', default: '50' },
    'bfcl-categories': { type: 'string', default: DEFAULT_CATEGORIES.join(',') },
    'no-bfcl': { type: 'boolean', default: false },
    'report-only': { type: 'boolean', default: false },
    doc: { type: 'string', default: 'docs/rl-results.md' },
    adopt: { type: 'string', multiple: true, default: [] },
    results: { type: 'string', default: '' },
    pieces: { type: 'string', default: '' },
    'git-commit': { type: 'boolean', default: false },
    'sft-adapter': { type: 'string', default: '' },
    search: { type: 'string', default: '' },
    note: { type: 'string', default: '' },
    digests: { type: 'boolean', default: false },
  },
});

const log = (line: string) => console.log(`${new Date().toISOString().slice(11, 19)} ${line}`);

interface Planned {
  label: string;
  kind: StudyPolicy['kind'];
  runId: string;
  granularity?: string;
  seed?: number;
  cfg: Cm2Config;
}

/** Uploads the base model folder (config.json last: its presence marks a complete upload). */
async function uploadBase(store: ObjectStore, dir: string, prefix: string): Promise<void> {
  if (await store.exists(`${prefix}/config.json`)) return;
  const files = ['model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'config.json'].filter((f) => existsSync(path.join(dir, f)));
  if (!files.includes('config.json') || !files.includes('model.safetensors')) throw new Error(`${dir}: not an HF model folder (config.json and model.safetensors needed)`);
  log(`uploading the base model ${dir} → ${prefix}/`);
  for (const f of files) await store.putFile(`${prefix}/${f}`, path.join(dir, f));
}

async function closedStatus(handle: WorkflowHandle): Promise<string | undefined> {
  try {
    return (await handle.describe()).status.name;
  } catch (e) {
    if (e instanceof WorkflowNotFoundError) return undefined;
    throw e;
  }
}

/**
 * The RL run's result: taken from a finished workflow, or started (attached to when running) and awaited, through
 * lost contact with the Temporal server (a dev server starved on a busy machine answers a long poll with an error).
 */
async function runRl(client: Client, p: Planned): Promise<RlResult> {
  const existing = client.workflow.getHandle(stageWorkflowId(p.runId, 'rl'));
  if ((await closedStatus(existing)) === 'COMPLETED') return (await existing.result()) as RlResult;
  log(`${p.label}: run ${p.runId} (${p.cfg.rl.steps} RL steps, ${p.cfg.rl.hp.granularity}, seed ${p.cfg.rl.seed})`);
  const handle = await startRl(client, p.cfg);
  const timer = setInterval(() => {
    handle.query(rlStatusQuery).then(
      (s) => log(`${p.label}: step ${s.step}/${s.totalSteps}, ${s.phase}`),
      () => undefined, // a status line is a courtesy: no answer (worker busy or restarting) is not an error
    );
  }, 120_000);
  try {
    return await resultOf<RlResult>(handle, { note: (l) => log(`${p.label}: ${l}`) });
  } finally {
    clearInterval(timer);
  }
}

/** The RL settings that decide what a run trains (not when it evaluates or how its workflow is cut). */
const trainingSettings = (rl: Cm2Config['rl']) => {
  const { eval: _eval, continueAsNewEvery: _can, startToCloseTimeout: _t, ...rest } = rl;
  return rest;
};

/** A finished RL run taken as the study's run of `p.label`: its recorded settings must equal the planned ones. */
async function adoptRun(client: Client, p: Planned, runId: string): Promise<RlResult> {
  const handle = client.workflow.getHandle(stageWorkflowId(runId, 'rl'));
  if ((await closedStatus(handle)) !== 'COMPLETED') throw new Error(`--adopt ${p.label}=${runId}: run ${runId} has no completed RL workflow`);
  const history = await handle.fetchHistory();
  const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  const input = payload ? (defaultPayloadConverter.fromPayload(payload) as RlWorkflowInput) : undefined;
  if (!input) throw new Error(`--adopt ${p.label}=${runId}: no workflow input in the history of ${stageWorkflowId(runId, 'rl')}`);
  // Executable tools as the run resolves them (a recorded `true` predates the resolution and meant the demo world's tools).
  const want = { ...trainingSettings(rlInput(p.cfg).rl), sourceKey: p.cfg.rl.sourceKey, policyPrefix: p.cfg.rl.policyPrefix };
  const got = { ...trainingSettings({ ...input.rl, executableTools: executableToolNames(input.rl.executableTools, true, WORLD_TOOL_NAMES) }), sourceKey: input.sourceKey, policyPrefix: input.policyPrefix };
  if (canonicalJson(want) !== canonicalJson(got)) throw new Error(`--adopt ${p.label}=${runId}: its RL settings differ from the study's:\n  run:   ${canonicalJson(got)}\n  study: ${canonicalJson(want)}`);
  log(`${p.label}: adopted run ${runId}`);
  return await resultOf<RlResult>(handle, { note: log });
}

async function runBfcl(client: Client, cfg: Cm2Config, id: string, policies: EvalWorkflowInput['policies'], categories: string[], limit: number): Promise<EvalBfclSummary[]> {
  const workflowId = `cm2-${id}-eval`;
  const existing = client.workflow.getHandle<typeof evalWorkflow>(workflowId);
  if ((await closedStatus(existing)) === 'COMPLETED') {
    const done = (await existing.result()) as EvalResult;
    if (policies.every((p) => done.bfcl.some((b) => b.label === p.label))) return done.bfcl;
  }
  log(`BFCL: ${policies.map((p) => p.label).join(', ')} on ${categories.join(', ')} (first ${limit} each)`);
  const input: EvalWorkflowInput = {
    runId: id,
    policies,
    bfcl: { ...cfg.eval.bfcl, categories, limit },
    startToCloseTimeout: cfg.eval.startToCloseTimeout,
    tokenizerDir: cfg.sft.tokenizerDir,
    taskQueues: { gpu: cfg.temporal.taskQueues.gpu, api: cfg.temporal.taskQueues.api },
    activity: cfg.temporal.activity,
  };
  const handle = await startStage(client, { ...cfg, run: { id } }, evalWorkflow, 'eval', [input], 'CM2 study BFCL');
  return (await resultOf<EvalResult>(handle, { note: (l) => log(`BFCL: ${l}`) })).bfcl;
}

async function policyOf(store: ObjectStore, p: Planned, result: RlResult | undefined): Promise<StudyPolicy> {
  const rows = await readRlRows(store, p.runId);
  const h = heldOutSummary(rows);
  const last = h.evals.at(-1);
  if (!last) throw new Error(`${p.runId}: no held-out evaluation in runs/${p.runId}/rl/metrics.jsonl`);
  return {
    label: p.label,
    kind: p.kind,
    runId: p.runId,
    ...(p.granularity ? { granularity: p.granularity } : {}),
    ...(p.seed !== undefined ? { seed: p.seed } : {}),
    steps: result?.steps ?? last.step,
    mean: last.mean,
    se: last.se,
    prompts: last.n,
    evals: h.evals.map((e) => ({ step: e.step, mean: e.mean, se: e.se })),
    train: rows.flatMap((r) => (r.kind === 'step' ? [{ step: r.step, mean: r.reward.mean, std: r.reward.std, ...(r.kl !== undefined ? { kl: r.kl } : {}), rollouts: r.rollouts, failed: r.failedSamples }] : [])),
  };
}

async function main(): Promise<void> {
  if (args.results && args['report-only']) {
    const file = path.resolve(projectRoot, args.results);
    writeStudyOutputs(file, readResults(file));
    return;
  }
  if (!args.from || !args.id) throw new Error('--from <run with the SFT policy> and --id <study id> are required');
  const id = args.id;
  useLocalInfraEnv();
  const base = loadConfig(args.config, { overrides: { run: { id } } });
  const { client, store } = await connect(base);

  const sftPrefix = sftKeys.final(args.from);
  const sourceKey = base.rl.sourceKey ?? checklistKeys.annotated(args.from);
  const baseDir = args['base-dir'] ?? (base.sft.base.kind === 'hf' ? base.sft.base.dir : undefined);
  const basePrefix = runKey(id, 'base', 'policy');
  const withRl = (runId: string, rl: Partial<Cm2Config['rl']>): Cm2Config => ({ ...base, run: { id: runId }, rl: { ...base.rl, sourceKey, ...rl } });
  const plan: Planned[] = [];
  if (baseDir) plan.push({ label: 'base', kind: 'base', runId: `${id}-base`, cfg: withRl(`${id}-base`, { steps: 0, policyPrefix: basePrefix }) });
  plan.push({ label: 'sft', kind: 'sft', runId: `${id}-sft`, cfg: withRl(`${id}-sft`, { steps: 0, policyPrefix: sftPrefix }) });
  for (const g of args.granularities.split(',').map((s) => s.trim()).filter(Boolean)) {
    for (const seed of args.seeds.split(',').map(Number)) {
      const runId = `${id}-${g}-s${seed}`;
      plan.push({
        label: `${g}-s${seed}`,
        kind: 'rl',
        runId,
        granularity: g,
        seed,
        cfg: withRl(runId, { policyPrefix: sftPrefix, seed, hp: { ...base.rl.hp, granularity: g as Cm2Config['rl']['hp']['granularity'] }, eval: { ...base.rl.eval, atStart: false } }),
      });
    }
  }

  const adopted = new Map(args.adopt.map((a) => a.split('=') as [string, string]));
  for (const [label, runId] of adopted) {
    const p = plan.find((x) => x.label === label && x.kind === 'rl');
    if (!p || !runId) throw new Error(`--adopt ${label}=${runId ?? ''}: expected <RL label of this study>=<run id>`);
    p.runId = runId;
  }
  if (args.results && args.search) {
    await runSearch(client, store, base, { id, sftPrefix, sourceKey, basePrefix, baseDir });
    return;
  }
  if (args.results) {
    await runPieces(client, store, base, plan, { id, sftPrefix, sourceKey, basePrefix, baseDir });
    return;
  }
  const results = new Map<string, RlResult>();
  if (!args['report-only']) {
    if (baseDir) await uploadBase(store, path.resolve(projectRoot, baseDir), basePrefix);
    for (const p of plan) {
      const r = adopted.has(p.label) ? await adoptRun(client, p, p.runId) : await runRl(client, p);
      results.set(p.label, r);
      const h = heldOutSummary(await readRlRows(store, p.runId)).evals.at(-1);
      if (h) log(`${p.label}: held-out ${h.mean.toFixed(4)}${h.se !== null ? ` ± ${h.se.toFixed(4)}` : ''} at step ${h.step}`);
    }
  }
  const policies: StudyPolicy[] = [];
  for (const p of plan) {
    try {
      policies.push(await policyOf(store, p, results.get(p.label)));
    } catch (e) {
      if (!args['report-only']) throw e;
      log(`${p.label}: ${(e as Error).message} (left out of the report)`);
    }
  }

  let bfcl: EvalBfclSummary[] = [];
  if (!args['no-bfcl']) {
    const evalPolicies: EvalWorkflowInput['policies'] = [];
    for (const p of plan) {
      const ref: PolicyRef | undefined = p.kind === 'base' ? { kind: 'hf', prefix: basePrefix } : p.kind === 'sft' ? { kind: 'hf', prefix: sftPrefix } : results.get(p.label)?.policy;
      if (ref) evalPolicies.push({ label: p.label, policy: ref as EvalPolicy });
    }
    const categories = args['bfcl-categories'].split(',').map((s) => s.trim()).filter(Boolean);
    if (!args['report-only'] && evalPolicies.length) bfcl = await runBfcl(client, base, id, evalPolicies, categories, Number(args['bfcl-limit']));
    else {
      const done = await client.workflow.getHandle(`cm2-${id}-eval`).result().catch(() => undefined) as EvalResult | undefined;
      bfcl = done?.bfcl ?? [];
    }
    const order = plan.map((p) => p.label);
    bfcl.sort((a, b) => order.indexOf(a.label) - order.indexOf(b.label));
  }

  const rl = base.rl;
  const study = StudyResult.parse({
    id,
    generatedAt: new Date().toISOString(),
    settings: {
      config: args.config,
      'SFT policy': `s3://${base.s3.bucket}/${sftPrefix}`,
      ...(baseDir ? { 'base model': baseDir } : {}),
      'annotated examples': `s3://${base.s3.bucket}/${sourceKey}`,
      'RL (each run)': `${rl.steps} steps × ${rl.promptsPerStep} prompts × G=${rl.groupSize}, lr ${rl.hp.lr}, KL ${rl.hp.klCoef}, rollout ${rl.rollout.maxNewTokens} new tokens per turn at temperature ${rl.rollout.temperature}`,
      'held-out evaluation': `${rl.eval.prompts} prompts × ${rl.eval.samples}, temperature ${rl.eval.temperature} (${rl.eval.temperature === 0 ? 'greedy' : 'sampled'})`,
      seeds: args.seeds,
      granularities: args.granularities,
      ...(args['no-bfcl'] ? {} : { BFCL: `${args['bfcl-categories']}, first ${args['bfcl-limit']} each, greedy, ${base.eval.bfcl.maxNewTokens} new tokens` }),
    },
    policies,
    bfcl: bfcl.map((b) => ({ label: b.label, overall: b.overall, categories: b.categories })),
  });

  const dir = path.join(projectRoot, '.cm2', 'reports', id);
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'study.json'), JSON.stringify(study, null, 2));
  const data = ReportData.parse(studyReportData(study));
  writeFileSync(path.join(dir, 'report.html'), renderReport(data));
  writeFileSync(path.join(dir, 'report.json'), JSON.stringify(data, null, 2));
  await store.putJson(runKey(id, 'study.json'), study);
  const reportPath = path.relative(projectRoot, path.join(dir, 'report.html'));
  // The CM2_CFG__ overrides in force are part of the setup: the command repeats them.
  const overrides = Object.entries(process.env).filter(([k]) => k.startsWith('CM2_CFG__')).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k}='${v ?? ''}' `).join('');
  const command = `${overrides}npx tsx scripts/rl-study.ts --config ${args.config} --from ${args.from} --id ${id} --seeds ${args.seeds} --granularities ${args.granularities}${args['base-dir'] ? ` --base-dir ${args['base-dir']}` : ''}${args['no-bfcl'] ? ' --no-bfcl' : ''}${args.adopt.map((a) => ` --adopt ${a}`).join('')}`;
  const block = studyMarkdown(study, { reportPath, command });
  console.log(`\n${block}\n`);
  if (args.doc) {
    const doc = path.resolve(projectRoot, args.doc);
    writeFileSync(doc, upsertStudyBlock(existsSync(doc) ? readFileSync(doc, 'utf8') : '', id, block, `## Study \`${id}\``));
    log(`written: ${path.relative(projectRoot, doc)}, ${reportPath}`);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// A study in pieces (--results)

const sh = (cmd: string, argv: string[]): string => execFileSync(cmd, argv, { cwd: projectRoot, stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim();

/** The code a piece ran: HEAD, marked `+dirty` when tracked files differ from it. */
function gitCommitOf(): string {
  try {
    const head = sh('git', ['rev-parse', '--short=12', 'HEAD']);
    return sh('git', ['status', '--porcelain', '--untracked-files=no']) ? `${head}+dirty` : head;
  } catch {
    return 'unknown';
  }
}

const machineOf = (): string => `${os.cpus()[0]?.model?.trim() ?? 'unknown CPU'} × ${os.cpus().length}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.platform()} ${os.arch()}`;

/** Where and when a piece ran: the code, the machine, the time. */
const provenance = (): { commit: string; machine: string; recordedAt: string } => ({ commit: gitCommitOf(), machine: machineOf(), recordedAt: new Date().toISOString() });

function readResults(file: string): StudyFile {
  return existsSync(file) ? parseStudyFile(readFileSync(file, 'utf8'), path.relative(projectRoot, file)) : emptyStudyFile();
}

/** Writes the file (and with --git-commit commits it, with what else the piece wrote: the adapter folder). */
function saveResults(file: string, f: StudyFile, piece: string, extra: string[] = []): void {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, studyFileText(f));
  log(`${piece}: recorded in ${path.relative(projectRoot, file)}`);
  // the digests go with the record they are made from
  const digests = writeDigestsFile(file, f);
  if (!args['git-commit']) return;
  const files = [file, ...(digests ? [digests] : []), ...extra];
  try {
    sh('git', ['add', '--', ...files]);
    sh('git', ['commit', '-m', `study ${path.basename(file, '.json')}: ${piece}`, '--', ...files]);
    log(`${piece}: committed`);
  } catch (e) {
    log(`${piece}: git commit failed (${(e as Error).message.split('\n')[0]}); the file is written, commit it by hand`);
  }
}

/** The last held-out evaluation of a run: per-prompt rewards from its advantage rows, and the run's curves. */
async function heldOutOf(store: ObjectStore, runId: string): Promise<Pick<StudyFilePolicy, 'heldOut' | 'train' | 'evals' | 'episodes' | 'digests'> & { step: number }> {
  const rows = await readRlRows(store, runId);
  const h = heldOutSummary(rows);
  const last = h.evals.at(-1);
  if (!last) throw new Error(`${runId}: no held-out evaluation in runs/${runId}/rl/metrics.jsonl`);
  const train = rows.flatMap((r) => (r.kind === 'step' ? [{ step: r.step, mean: r.reward.mean, std: r.reward.std, ...(r.kl !== undefined ? { kl: r.kl } : {}) }] : []));
  const episodes = await withFirstStep(store, runId, last.step, lastEvalEpisodes(rows));
  const digests = await digestsOf(store, runId, last.step, train.map((t) => t.step));
  return { step: last.step, heldOut: await evalPromptRewards(store, runId, last.step), evals: h.evals.map((e) => ({ step: e.step, mean: e.mean, se: e.se })), ...(train.length ? { train } : {}), ...(episodes ? { episodes } : {}), ...(digests ? { digests } : {}) };
}

/** The finished rollouts of a step or evaluation folder: the merged file, or else its last phase. */
async function folderRollouts(store: ObjectStore, folder: string) {
  const phases = (await store.list(`${folder}/`)).filter((k) => /\/phase-\d+\.json$/.test(k)).sort();
  const key = (await store.exists(rlKeys.merged(folder))) ? rlKeys.merged(folder) : phases.at(-1);
  if (!key) throw new Error(`no rollouts in ${folder}/`);
  return (await store.getJson(key, RolloutFile)).rollouts;
}

const runExamples = async (store: ObjectStore, runId: string) => new Map((await store.getJsonl<AnnotatedExample>(rlKeys.folder(runId, 'data', 'examples.jsonl'))).map((e) => [e.uuid, e] as const));

/**
 * Adds the first-step outcomes of an evaluation (its finished rollouts against the run's examples) to its format
 * figures; left out, with a line in the log, when S3 no longer has the rollouts.
 */
async function withFirstStep(store: ObjectStore, runId: string, step: number, episodes: StudyEpisodes | undefined): Promise<StudyEpisodes | undefined> {
  if (!episodes) return episodes;
  try {
    const rollouts = await folderRollouts(store, rlKeys.eval(runId, step));
    const { counts, unmatched } = firstStepCounts(rollouts, await runExamples(store, runId));
    if (unmatched) log(`${runId}: ${unmatched} episode(s) of step ${step} without a first step or an example, left out of the first-step counts`);
    return { ...episodes, firstStep: counts };
  } catch (e) {
    log(`${runId}: first-step outcomes left out (${(e as Error).message.split('\n')[0]})`);
    return episodes;
  }
}

/**
 * The digests of a run (src/report/episodeDigest.ts): its evaluation after `evalStep` and every training step's groups,
 * with the rewards of their advantage rows; left out, with a line in the log, when S3 no longer has them.
 */
async function digestsOf(store: ObjectStore, runId: string, evalStep: number, steps: readonly number[]): Promise<RunDigests | undefined> {
  try {
    const examples = await runExamples(store, runId);
    const of = async (folder: string, groups: boolean) => {
      // the rows as written (the trainer's schema, AdvantagesFile, leaves their rewards out)
      const rows = (await store.getJson<{ rows?: { id: string; reward?: number }[] }>(rlKeys.advantages(folder))).rows ?? [];
      const rewards = new Map(rows.flatMap((r) => (typeof r.reward === 'number' ? [[r.id, r.reward] as const] : [])));
      return digestEpisodes(await folderRollouts(store, folder), rewards, examples, groups);
    };
    const out: RunDigests = { evalStep, eval: await of(rlKeys.eval(runId, evalStep), false), steps: [] };
    for (const step of [...new Set(steps)].sort((a, b) => a - b)) out.steps.push({ step, groups: await of(rlKeys.step(runId, step), true) });
    return out;
  } catch (e) {
    log(`${runId}: episode digests left out (${(e as Error).message.split('\n')[0]})`);
    return undefined;
  }
}

/**
 * What a fresh machine needs before any piece: the annotated examples of `--from` (prepare + checklist again:
 * deterministic offline) and its SFT policy (the committed adapter merged into the base).
 */
async function ensureFrom(client: Client, store: ObjectStore, base: Cm2Config, ctx: { sftPrefix: string; sourceKey: string; baseDir?: string }, needSft: boolean): Promise<void> {
  const from = args.from!;
  if (!(await store.exists(ctx.sourceKey))) {
    if (base.rl.sourceKey) throw new Error(`rl.sourceKey ${base.rl.sourceKey}: not in S3, and the study cannot make it (it makes runs/${from}/checklists/annotated.jsonl only)`);
    const cfg: Cm2Config = { ...base, run: { id: from } };
    log(`${from}: no annotated examples in S3; making them again (prepare, checklist)`);
    await resultOf(await startPrepare(client, cfg), { note: log });
    await resultOf(await startChecklist(client, cfg), { note: log });
  }
  if (!needSft || (await store.exists(`${ctx.sftPrefix}/config.json`))) return;
  const adapter = args['sft-adapter'] ? path.resolve(projectRoot, args['sft-adapter']) : '';
  if (!adapter || !existsSync(path.join(adapter, 'adapter_config.json'))) throw new Error(`no SFT policy at s3://${base.s3.bucket}/${ctx.sftPrefix}, and no --sft-adapter folder (adapter_config.json + adapter_model.safetensors) to make it from`);
  if (!ctx.baseDir) throw new Error('--sft-adapter needs the base model folder: sft.base of kind hf in the config, or --base-dir');
  await importBaseIfMissing({ ...base.sft, base: { ...base.sft.base, dir: ctx.baseDir } } as Cm2Config['sft'], log);
  await selectBackend('auto', log);
  const tmp = mkdtempSync(path.join(os.tmpdir(), 'cm2-study-sft-'));
  try {
    const out = path.join(tmp, 'merged');
    modelMergeCommand({ checkpoint: path.resolve(projectRoot, ctx.baseDir), adapter, out });
    const files = readdirSync(out).sort((a, b) => Number(a === 'config.json') - Number(b === 'config.json')); // config.json last: marks it complete
    for (const f of files) await store.putFile(`${ctx.sftPrefix}/${f}`, path.join(out, f));
    log(`${from}: SFT policy made from ${path.relative(projectRoot, adapter)} → s3://${base.s3.bucket}/${ctx.sftPrefix}`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/**
 * The SFT piece's adapter into the repository: with `--sft-adapter DIR` naming a folder that does not exist yet and
 * S3 holding the LoRA adapter of `--from` (`runs/<from>/sft/adapter`, PEFT's files), the files are copied to DIR (and
 * committed with --git-commit), so later pieces start from it on any machine.
 */
async function exportAdapter(store: ObjectStore, file: string): Promise<void> {
  const dir = args['sft-adapter'] ? path.resolve(projectRoot, args['sft-adapter']) : '';
  if (!dir || existsSync(path.join(dir, 'adapter_config.json'))) return;
  const prefix = sftKeys.adapter(args.from!);
  const keys = (await store.list(`${prefix}/`)).filter((k) => !k.endsWith('/'));
  if (!keys.some((k) => k.endsWith('/adapter_config.json'))) return;
  mkdirSync(dir, { recursive: true });
  // the config last: its presence marks a complete folder
  for (const k of keys.sort((a, b) => Number(a.endsWith('/adapter_config.json')) - Number(b.endsWith('/adapter_config.json')))) await store.getFile(k, path.join(dir, path.basename(k)));
  log(`the SFT adapter s3://…/${prefix}/ → ${path.relative(projectRoot, dir)}/ (${keys.map((k) => path.basename(k)).join(', ')})`);
  if (args['git-commit']) saveResults(file, readResults(file), `the SFT adapter of ${args.from}`, [dir]);
}

/** One BFCL evaluation of one policy, its own workflow (so a piece's BFCL is independent of the others'). */
async function bfclOf(client: Client, cfg: Cm2Config, id: string, label: string, policy: PolicyRef): Promise<StudyFilePolicy['bfcl']> {
  const categories = args['bfcl-categories'].split(',').map((s) => s.trim()).filter(Boolean);
  const [summary] = await runBfcl(client, cfg, `${id}-${label}`, [{ label, policy: policy as EvalPolicy }], categories, Number(args['bfcl-limit']));
  if (!summary) throw new Error(`BFCL of ${label}: no result`);
  return Object.fromEntries(Object.entries(summary.categories).map(([c, a]) => [c, { correct: a.correct, total: a.total }]));
}

async function runPieces(client: Client, store: ObjectStore, base: Cm2Config, plan: Planned[], ctx: { id: string; sftPrefix: string; sourceKey: string; basePrefix: string; baseDir?: string }): Promise<void> {
  const file = path.resolve(projectRoot, args.results);
  if (base.rl.eval.on !== 'heldout') throw new Error(`--results records held-out evaluations; rl.eval.on is ${base.rl.eval.on} (a hyperparameter search runs with \`cm2 rl run\`, docs/rl-results.md)`);
  const wanted = args.pieces ? new Set(args.pieces.split(',').map((s) => s.trim()).filter(Boolean)) : undefined;
  for (const w of wanted ?? []) if (!plan.some((p) => p.label === w)) throw new Error(`--pieces: no piece ${w} (this study's: ${plan.map((p) => p.label).join(', ')})`);
  let f = readResults(file);
  const todo = plan.filter((p) => (!wanted || wanted.has(p.label)) && !f.policies[p.label]);
  // a base or SFT policy recorded without BFCL (an earlier `--no-bfcl`) gets it now; an RL policy's checkpoint may be gone
  const bfclOnly = args['no-bfcl'] ? [] : plan.filter((p) => (!wanted || wanted.has(p.label)) && p.kind !== 'rl' && f.policies[p.label] && !f.policies[p.label]!.bfcl);
  log(`study ${path.relative(projectRoot, file)}: ${Object.keys(f.policies).length} policies recorded; this time: ${[...todo.map((p) => p.label), ...bfclOnly.map((p) => `BFCL of ${p.label}`)].join(', ') || 'nothing'}`);
  await exportAdapter(store, file);
  if (todo.length || bfclOnly.length) await ensureFrom(client, store, base, ctx, [...todo, ...bfclOnly].some((p) => p.kind !== 'base'));
  if (bfclOnly.some((p) => p.kind === 'base') && ctx.baseDir) await uploadBase(store, path.resolve(projectRoot, ctx.baseDir), ctx.basePrefix);
  for (const p of bfclOnly) {
    const bfcl = await bfclOf(client, base, ctx.id, p.label, p.kind === 'base' ? { kind: 'hf', prefix: ctx.basePrefix } : { kind: 'hf', prefix: ctx.sftPrefix });
    const now = readResults(file);
    f = withPolicy(now, p.label, { ...now.policies[p.label]!, bfcl, config: { ...now.policies[p.label]!.config, bfcl: { categories: args['bfcl-categories'], limit: Number(args['bfcl-limit']), maxNewTokens: base.eval.bfcl.maxNewTokens } } });
    saveResults(file, f, `BFCL of ${p.label}`);
  }
  if (todo.some((p) => p.kind === 'base') && ctx.baseDir) {
    await importBaseIfMissing({ ...base.sft, base: { ...base.sft.base, dir: ctx.baseDir } } as Cm2Config['sft'], log);
    await uploadBase(store, path.resolve(projectRoot, ctx.baseDir), ctx.basePrefix);
  }
  for (const p of todo) {
    const t0 = Date.now();
    const result = await runRl(client, p);
    const held = await heldOutOf(store, p.runId);
    const policyRef: PolicyRef | undefined = p.kind === 'base' ? { kind: 'hf', prefix: ctx.basePrefix } : p.kind === 'sft' ? { kind: 'hf', prefix: ctx.sftPrefix } : result.policy;
    const bfcl = args['no-bfcl'] || !policyRef ? undefined : await bfclOf(client, base, ctx.id, p.label, policyRef);
    const entry: StudyFilePolicy = {
      kind: p.kind,
      granularity: (p.granularity as StudyFilePolicy['granularity']) ?? null,
      seed: p.seed ?? null,
      steps: p.kind === 'rl' ? (result.steps ?? held.step) : 0,
      from: p.kind === 'rl' ? 'sft' : p.kind === 'sft' ? (ctx.baseDir ? 'base' : null) : null,
      heldOut: held.heldOut,
      ...(bfcl ? { bfcl } : {}),
      config: {
        model: base.sft.base,
        data: base.data.source,
        ...(p.kind === 'rl' ? { rl: trainingSettings(rlInput(p.cfg).rl) } : {}),
        ...(p.kind === 'sft' ? { sft: { epochs: base.sft.epochs, peakLr: base.sft.peakLr, lora: base.sft.lora, initAdapter: base.sft.initAdapter, gradAccum: base.sft.gradAccum, microBatch: base.sft.microBatch, maxSeqLen: base.sft.maxSeqLen }, adapter: args['sft-adapter'] || null } : {}),
        heldOut: { prompts: p.cfg.rl.eval.prompts, samples: p.cfg.rl.eval.samples, temperature: p.cfg.rl.eval.temperature },
        ...(bfcl ? { bfcl: { categories: args['bfcl-categories'], limit: Number(args['bfcl-limit']), maxNewTokens: base.eval.bfcl.maxNewTokens } } : {}),
      },
      runId: p.runId,
      ...(policyRef ? { policyKey: 'prefix' in policyRef ? policyRef.prefix : JSON.stringify(policyRef) } : {}),
      ...provenance(),
      ...(held.train ? { train: held.train } : {}),
      evals: held.evals,
      ...(held.episodes ? { episodes: held.episodes } : {}),
      ...(held.digests ? { digests: held.digests } : {}),
    };
    f = withPolicy(readResults(file), p.label, entry); // re-read: another piece may have been recorded meanwhile
    saveResults(file, f, `${p.label} (${((Date.now() - t0) / 60000).toFixed(0)} min)`);
  }
  writeStudyOutputs(file, f);
}

/**
 * One run of the hyperparameter search (`--search NAME`): RL from the SFT policy with the config's RL settings and
 * `CM2_CFG__rl__…` overrides, evaluated on the validation prompts only (`rl.eval.on: validation`), recorded under
 * `searches.NAME` with its settings and every validation prompt's reward. `--search sft` is the baseline: the SFT
 * policy itself (0 steps). A name already recorded is skipped. `--note` records what happened (a stopped run).
 */
async function runSearch(client: Client, store: ObjectStore, base: Cm2Config, ctx: { id: string; sftPrefix: string; sourceKey: string; basePrefix: string; baseDir?: string }): Promise<void> {
  const file = path.resolve(projectRoot, args.results);
  const name = args.search;
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name)) throw new Error(`--search ${name}: a name of letters, digits, '.', '_' and '-'`);
  let f = readResults(file);
  const prior = f.searches[name];
  if (prior && !(args.digests && !prior.digests)) {
    log(`search ${name}: recorded already in ${path.relative(projectRoot, file)} (skipped)`);
    writeStudyOutputs(file, f);
    return;
  }
  await ensureFrom(client, store, base, ctx, true);
  const runId = `${ctx.id}-search-${name}`;
  const cfg: Cm2Config = {
    ...base,
    run: { id: runId },
    rl: { ...base.rl, sourceKey: ctx.sourceKey, policyPrefix: ctx.sftPrefix, ...(name === 'sft' ? { steps: 0 } : {}), eval: { ...base.rl.eval, on: 'validation', atStart: name === 'sft' } },
  };
  if (prior) {
    const now = canonicalJson(trainingSettings(rlInput(cfg).rl));
    if (now !== canonicalJson(prior.settings)) throw new Error(`--search ${name} --digests: the settings differ from the recorded run's (give the same CM2_CFG__rl__… overrides):\n  recorded: ${canonicalJson(prior.settings)}\n  now:      ${now}`);
    log(`search ${name}: recorded without episode digests; running it again for them (the same settings)`);
  }
  const t0 = Date.now();
  const result = await runRl(client, { label: `search ${name}`, kind: name === 'sft' ? 'sft' : 'rl', runId, cfg });
  const held = await heldOutOf(store, runId);
  const entry: StudySearch = {
    steps: name === 'sft' ? 0 : (result.steps ?? held.step),
    settings: trainingSettings(rlInput(cfg).rl) as Record<string, unknown>,
    validation: held.heldOut,
    ...(held.train ? { train: held.train } : {}),
    evals: held.evals,
    ...(held.episodes ? { episodes: held.episodes } : {}),
    ...(held.digests ? { digests: held.digests } : {}),
    runId,
    ...provenance(),
    ...(args.note ? { note: args.note } : result.stopped ? { note: `stopped at step ${result.steps}` } : {}),
  };
  const minutes = ((Date.now() - t0) / 60000).toFixed(0);
  if (prior) {
    // a rerun for its digests: the same validation rewards (greedy, seeded) add the digests to the recorded run;
    // different ones are a run of their own, recorded beside it
    const differ = Object.keys(prior.validation).filter((u) => Math.abs((prior.validation[u] ?? 0) - (entry.validation[u] ?? Number.NaN)) > 1e-9 || !(u in entry.validation));
    const at = `${entry.commit ?? 'this commit'}, ${minutes} min`;
    if (differ.length === 0 && entry.digests) {
      f = withSearch(readResults(file), name, { ...prior, digests: entry.digests, note: `${prior.note ? `${prior.note}; ` : ''}rerun for its episode digests (${at}): every validation reward the same` });
      saveResults(file, f, `search ${name}: its episode digests (rerun, ${minutes} min)`);
    } else {
      const other = `${name}-rerun`;
      f = withSearch(readResults(file), other, { ...entry, note: `${entry.note ? `${entry.note}; ` : ''}a rerun of ${name} for its episode digests (${at}): ${differ.length} of ${Object.keys(prior.validation).length} validation rewards differ from the recorded run's${entry.digests ? '' : '; no digests (see the log)'}` });
      saveResults(file, f, `search ${other} (${minutes} min)`);
    }
    writeStudyOutputs(file, f);
    return;
  }
  f = withSearch(readResults(file), name, entry);
  saveResults(file, f, `search ${name} (${minutes} min)`);
  writeStudyOutputs(file, f);
}

/**
 * The diagnosis of every search run and RL policy that has episode digests, against the SFT policy's (the search's
 * baseline `sft`, the policies' `sft`), as one Markdown file; undefined when there are none.
 */
function studyDigestsMarkdown(f: StudyFile, name: string): string | undefined {
  const parts: string[] = [];
  for (const [n, s] of Object.entries(f.searches)) if (s.digests && n !== 'sft') parts.push(digestMarkdown(`search ${n}`, s.digests, 'sft', f.searches.sft?.digests));
  for (const [n, p] of Object.entries(f.policies)) if (p.digests && p.kind === 'rl') parts.push(digestMarkdown(n, p.digests, 'sft', f.policies.sft?.digests, 'held-out'));
  if (!parts.length) return undefined;
  return `# Episode digests of study \`${name}\`\n\nMade from \`docs/results/${name}.json\` by \`npx tsx scripts/rl-study.ts --results docs/results/${name}.json --report-only\` (src/report/episodeDigest.ts says how to read it).\n\n${parts.join('\n')}\n`;
}

/** The episode digests file beside the record (`<name>-digests.md`), when any run has digests: its path. */
function writeDigestsFile(file: string, f: StudyFile): string | undefined {
  const name = path.basename(file, '.json');
  const digests = studyDigestsMarkdown(f, name);
  if (!digests) return undefined;
  const out = path.join(path.dirname(file), `${name}-digests.md`);
  writeFileSync(out, digests);
  return out;
}

/**
 * What a study file shows, made from the file alone (no servers): the Markdown block in `--doc` with its charts as SVG
 * files beside the record (`docs/results/<name>-<chart>.svg`), and the HTML report `.cm2/reports/<name>/report.html`.
 */
function writeStudyOutputs(file: string, f: StudyFile): void {
  const name = path.basename(file, '.json');
  const rel = path.relative(projectRoot, file);
  const svgs = studyFileSvgs(f);
  const svgFiles: string[] = [];
  for (const [chart, svg] of Object.entries(svgs)) {
    const out = path.join(path.dirname(file), `${name}-${chart}.svg`);
    writeFileSync(out, `${svg}\n`);
    svgFiles.push(out);
  }
  const dir = path.join(projectRoot, '.cm2', 'reports', name);
  mkdirSync(dir, { recursive: true });
  const data = ReportData.parse(studyFileReportData(f, { name, generatedAt: new Date().toISOString(), source: rel }));
  writeFileSync(path.join(dir, 'report.html'), renderReport(data));
  writeFileSync(path.join(dir, 'report.json'), JSON.stringify(data, null, 2));
  const digests = writeDigestsFile(file, f);
  if (digests) log(`written: ${path.relative(projectRoot, digests)}`);
  const block = studyFileMarkdown(f);
  console.log(`\n${block}\n`);
  log(`written: ${svgFiles.map((x) => path.relative(projectRoot, x)).join(', ') || 'no charts yet'}, ${path.relative(projectRoot, path.join(dir, 'report.html'))}`);
  if (args.doc && Object.keys(f.policies).length) {
    const doc = path.resolve(projectRoot, args.doc);
    const images = svgFiles.map((x) => `![${path.basename(x, '.svg')}](${path.relative(path.dirname(doc), x)})`).join('\n');
    const text = `${block}\n\n${images ? `${images}\n\n` : ''}From \`${rel}\` (\`npx tsx scripts/rl-study.ts --results ${rel} --report-only\` remakes this block, the charts and the HTML report).`;
    writeFileSync(doc, upsertStudyBlock(existsSync(doc) ? readFileSync(doc, 'utf8') : '', name, text, `## Study \`${name}\``));
    log(`written: ${path.relative(projectRoot, doc)}`);
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  },
);
