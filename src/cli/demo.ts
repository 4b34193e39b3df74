/**
 * `cm2 demo` (`npm run demo`): on a fresh clone, installs what is missing (temporal CLI, MinIO), starts the
 * local infrastructure and the workers, runs the whole pipeline (`cm2Pipeline`) on the demo tool world with the
 * offline roles, writes the HTML report, prints the Web UI URL and the report path, and stops
 * what it started (workers; the infrastructure too unless it was already running or `--keep-infra` is given).
 * Ctrl-C leaves a resumable run:
 * the workflows live in the dev server's SQLite file, and the next `npm run demo` attaches to them.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { loadConfig } from '../infra/config';
import { ensureBinaries, projectRoot } from '../infra/binaries';
import { defaultInfraDir, infraEnv, infraHealth, readInfraState, startInfra, stopInfra } from '../infra/localInfra';
import { startWorkers } from '../workers';
import { connect, followPipeline, printRunEnd, startRun, writeLocalReport } from './pipelineCommand';
import { pipelineWorkflowId } from './stages';

/**
 * `cm2 worker --queues gpu` as a child process; resolves once it polls. Its SFT progress lines are passed through,
 * the rest of its log is kept quiet.
 */
export async function startGpuWorker(configFile: string): Promise<{ stop: () => Promise<void> }> {
  const proc = spawn(process.execPath, [path.join(projectRoot, 'bin', 'cm2.js'), 'worker', '--config', configFile, '--queues', 'gpu'], {
    env: process.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let buffered = '';
  const forward = (chunk: Buffer) => {
    buffered += chunk.toString();
    const lines = buffered.split('\n');
    buffered = lines.pop() ?? '';
    for (const line of lines) if (/^\[sft |tfjs backend|Error|ERROR/.test(line)) console.log(`  gpu worker: ${line}`);
  };
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      if (chunk.toString().includes('cm2 worker polling')) resolve();
      forward(chunk);
    };
    proc.stdout!.on('data', onData);
    proc.stderr!.on('data', forward);
    proc.once('exit', (code) => reject(new Error(`the gpu worker exited with code ${code} during start`)));
  });
  return {
    stop: () =>
      new Promise<void>((resolve) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
        proc.once('exit', () => resolve());
        proc.kill('SIGTERM');
      }),
  };
}

export async function demoCommand(configFile: string, opts: { keepInfra: boolean; runId?: string | undefined }): Promise<void> {
  const t0 = Date.now();
  ensureBinaries((l) => console.log(l));
  const dir = defaultInfraDir();
  const before = readInfraState(dir);
  const alreadyUp = before ? Object.values(await infraHealth(before)).every(Boolean) : false;
  const state = await startInfra({ dir, log: (l) => console.log(l) });
  for (const [k, v] of Object.entries(infraEnv(state))) process.env[k] ??= v;
  const cfg = loadConfig(configFile);
  if (opts.runId) cfg.run.id = opts.runId;
  // Worker chatter (bundle stats, state changes) would drown the progress lines; warnings and errors still show.
  Runtime.install({
    logger: new DefaultLogger('WARN', (entry) => {
      if (/^No (activities|workflows) registered/.test(entry.message)) return; // by design: one worker per queue kind
      console.error(`[${entry.level}] ${entry.message}`, entry.meta ?? '');
    }),
  });
  // Model work runs in its own process (as it would on a GPU machine): a training step is seconds of synchronous
  // tensor work, which must not stall the workflow and LLM workers' event loop.
  const workers = await startWorkers(cfg, ['workflows', 'api']);
  const gpu = cfg.sft.enabled ? await startGpuWorker(configFile) : undefined;
  const { client, store } = await connect(cfg);
  const stopInfraToo = !alreadyUp && !opts.keepInfra;

  let stopping = false;
  const cleanup = async () => {
    await workers.shutdown();
    await gpu?.stop();
    if (stopInfraToo) await stopInfra(dir);
  };
  process.once('SIGINT', () => {
    if (stopping) return;
    stopping = true;
    console.log(`\ninterrupted: run "${cfg.run.id}" is kept (its workflows live in the dev server's database); \`npm run demo\` resumes it.`);
    void cleanup().finally(() => process.exit(130));
  });

  const uiUrl = `${state.temporal.uiUrl}/namespaces/${cfg.temporal.namespace}/workflows/${pipelineWorkflowId(cfg.run.id)}`;
  console.log(`Web UI: ${uiUrl}`);
  const handle = await startRun(client, store, cfg);
  try {
    printRunEnd(await followPipeline(client, handle), cfg);
  } catch (e) {
    console.error(`\nthe demo run failed: ${e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e)}`);
    console.error(`\`npx cm2 logs ${cfg.run.id}\` shows what happened; \`npm run demo\` resumes the run.`);
    process.exitCode = 1;
  }
  const reportPath = await writeLocalReport(client, store, cfg, cfg.run.id);
  console.log(`\ndemo finished in ${((Date.now() - t0) / 1000).toFixed(0)}s`);
  console.log(`Web UI: ${uiUrl}`);
  console.log(`report: ${reportPath}`);
  stopping = true;
  await cleanup();
  if (stopInfraToo) console.log('(the local Temporal server and MinIO were stopped; `npx cm2 infra up` brings them and the Web UI back, with this run\'s history)');
  else console.log('(local infrastructure left running; stop it with `npx cm2 infra down`)');
}
