/**
 * `cm2 demo` (`npm run demo`): on a fresh clone, installs what is missing (temporal CLI, MinIO), starts the
 * local infrastructure and the workers, runs the whole pipeline (`cm2Pipeline`) on the demo tool world with the
 * offline roles, writes the HTML report, prints the Web UI URL and the report path, and stops
 * what it started (workers; the infrastructure too unless it was already running or `--keep-infra` is given).
 *
 * Every way out stops what the demo started: the end of the run, its failure, Ctrl-C (SIGINT), SIGTERM and SIGHUP
 * (the same as Ctrl-C), an uncaught error in the CLI. An interrupted run is resumable: its workflows live in the dev
 * server's SQLite file, and the next `npm run demo` attaches to them.
 *
 * The workers are supervised: the gpu worker (a child process) is restarted with a bounded back-off when it dies
 * (an out-of-memory kill), the in-process workflow and api workers when they fail; if the parent dies without
 * cleaning up, the child notices (IPC channel) and stops itself.
 */
import type { Client } from '@temporalio/client';
import path from 'node:path';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { loadConfig, type Cm2Config } from '../run/config';
import { ensureBinaries, projectRoot } from '../infra/binaries';
import { defaultInfraDir, infraEnv, infraHealth, isAlive, portsFromEnv, readInfraState, setInfraOwner, startInfra, stopInfra } from '../infra/localInfra';
import { startWorkers } from '../workers';
import { connect, followPipeline, guardedPrint, linePrinter, printRunEnd, startRun, writeLocalReport } from './pipelineCommand';
import { restartDelayFault } from './faults';
import { pipelineWorkflowId } from './stages';
import { trackWorkflowId } from '../run/layout';
import { SupervisedChild, SupervisedWorkers, type SuperviseOptions } from '../workers/supervisor';
import { rootCauseText } from './watch';

/** The gpu worker's output lines worth showing (SFT progress, the backend, errors). */
const forwardGpuLine = (line: string) => /^\[sft |tfjs backend|Error|ERROR/.test(line);

/**
 * `cm2 worker --queues gpu` as a supervised child process; resolves once it polls. Its SFT progress lines are passed
 * through, the rest of its log is kept quiet. When it dies it is restarted (bounded back-off, a message per restart).
 */
function gpuWorker(configFile: string, opts: Partial<SuperviseOptions> = {}): SupervisedChild {
  return new SupervisedChild(
    {
      name: 'gpu worker',
      command: process.execPath,
      args: [path.join(projectRoot, 'bin', 'cm2.js'), 'worker', '--config', configFile, '--queues', 'gpu'],
      env: process.env,
      readyText: 'cm2 worker polling',
      forward: forwardGpuLine,
    },
    { log: opts.log ?? ((l) => console.log(l)), ...(opts.onGiveUp ? { onGiveUp: opts.onGiveUp } : {}), ...(opts.backoff ? { backoff: opts.backoff } : {}) },
  );
}

/**
 * `cm2 worker --queues gpu` as a supervised child process; resolves once it polls. Its SFT progress lines are passed
 * through, the rest of its log is kept quiet. When it dies it is restarted (bounded back-off, a message per restart).
 */
export async function startGpuWorker(configFile: string, opts: Partial<SuperviseOptions> = {}): Promise<SupervisedChild> {
  const gpu = gpuWorker(configFile, opts);
  await gpu.begin();
  return gpu;
}

type Exit = { code: number; why: 'done' | 'failed' | 'signal' | 'crash' };

/**
 * What the demo started and how to stop it, in order. `stop` runs once, however many ways out are taken at the same
 * time (a signal during the normal end, a crash during a stop); a part registered after the stop began is stopped
 * at once. A second signal, or a stop that overruns `forceAfterMs`, kills the children and exits.
 */
class Lifecycle {
  private readonly parts: { name: string; stop: () => Promise<void>; kill?: () => void }[] = [];
  private stopping: Promise<void> | undefined;
  readonly abort = new AbortController();
  exit: Exit | undefined;

  constructor(private readonly say: (line: string) => void, private readonly forceAfterMs = 45_000) {}

  get stopped(): boolean {
    return this.stopping !== undefined;
  }

  /** Registers a started part; stopped in reverse order of registration (workers before the servers they use). */
  add(name: string, stop: () => Promise<void>, kill?: () => void): void {
    const part = { name, stop, ...(kill ? { kill } : {}) };
    if (this.stopping) {
      void part.stop().catch(() => undefined);
      return;
    }
    this.parts.push(part);
  }

  /** Stops everything (idempotent): workers and child processes first, in parallel; then the servers. */
  stop(exit: Exit): Promise<void> {
    this.exit ??= exit;
    if (this.stopping) return this.stopping;
    this.abort.abort();
    const force = setTimeout(() => {
      this.say(`stopping took longer than ${this.forceAfterMs / 1000}s: killing what is left`);
      this.kill();
      process.exit(this.exit?.code ?? 1);
    }, this.forceAfterMs);
    force.unref();
    const servers = this.parts.filter((p) => p.name === 'servers');
    const rest = this.parts.filter((p) => p.name !== 'servers').reverse();
    const run = async (p: (typeof this.parts)[number]) => {
      try {
        await p.stop();
      } catch (e) {
        this.say(`could not stop the ${p.name}: ${e instanceof Error ? e.message : String(e)}`);
      }
    };
    this.stopping = (async () => {
      await Promise.all(rest.map(run));
      for (const p of servers) await run(p);
      clearTimeout(force);
    })();
    return this.stopping;
  }

  /** Kills the child processes at once (a forced exit). */
  kill(): void {
    for (const p of this.parts) {
      try {
        p.kill?.();
      } catch {
        /* best effort */
      }
    }
  }
}

export async function demoCommand(configFile: string, opts: { keepInfra: boolean; runId?: string | undefined }): Promise<void> {
  const t0 = Date.now();
  const print = guardedPrint(linePrinter());
  const say = (line: string) => print(line, true);
  const life = new Lifecycle(say);
  let runId: string | undefined = opts.runId;

  // Display errors on a closed stdout/stderr (a pipe whose reader went away) are not worth dying for.
  process.stdout.on('error', () => undefined);
  process.stderr.on('error', () => undefined);

  const finish = async (exit: Exit) => {
    await life.stop(exit);
    process.exit(life.exit?.code ?? exit.code);
  };
  let firstSignalAt: number | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    // Ctrl-C under `npm run demo` arrives twice at once (from the terminal and forwarded by npm): one interruption.
    if (firstSignalAt !== undefined && Date.now() - firstSignalAt < 2000) return;
    if (firstSignalAt !== undefined) {
      say(`${signal} again: killing what the demo started and exiting now`);
      life.kill();
      process.exit(life.exit?.code ?? 130);
    }
    firstSignalAt = Date.now();
    say(`\n${signal === 'SIGINT' ? 'interrupted' : `${signal} received`}: stopping the workers${life.stopped ? '' : ' and what else the demo started'}; ` +
      `${runId ? `run "${runId}" is kept (its workflows live in the dev server's database); \`npm run demo${opts.runId ? ` -- --run ${runId}` : ''}\` resumes it.` : 'nothing was started yet.'}`);
    void finish({ code: signal === 'SIGINT' ? 130 : 128 + (signal === 'SIGTERM' ? 15 : 1), why: 'signal' });
  };
  // SIGTERM (kill, systemd, docker stop) and SIGHUP (a closed terminal) are treated exactly like Ctrl-C.
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => onSignal(sig));
  const onCrash = (kind: string) => (e: unknown) => {
    try {
      console.error(`\ncm2 demo: ${kind}: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
      console.error(`stopping what the demo started${runId ? `; \`npm run demo${opts.runId ? ` -- --run ${runId}` : ''}\` resumes run "${runId}"` : ''}`);
    } catch {
      /* display only */
    }
    void finish({ code: 1, why: 'crash' });
  };
  process.on('uncaughtException', onCrash('uncaught error'));
  process.on('unhandledRejection', onCrash('unhandled rejection'));

  let cfg: Cm2Config;
  const servers = { stopped: false };
  try {
    cfg = await setUp(configFile, opts, life, say, servers);
    runId = cfg.run.id;
  } catch (e) {
    if (life.stopped) return; // a signal arrived during set-up: its handler stops what started and exits
    say(`\ncm2 demo: could not start: ${e instanceof Error ? e.message : String(e)}`);
    return finish({ code: 1, why: 'failed' });
  }
  if (life.stopped) return;

  let exit: Exit = { code: 0, why: 'done' };
  try {
    const { client, store } = await connect(cfg);
    const state = readInfraState(defaultInfraDir());
    const uiUrl = `${state?.temporal.uiUrl ?? cfg.temporal.uiUrl}/namespaces/${cfg.temporal.namespace}/workflows/${pipelineWorkflowId(cfg.run.id)}`;
    say(`Web UI: ${uiUrl}`);
    const handle = await startRun(client, store, cfg);
    try {
      printRunEnd(await followPipeline(client, handle, { print, workflowQueue: cfg.temporal.taskQueues.workflows, signal: life.abort.signal }), cfg);
    } catch (e) {
      if (life.stopped) return; // interrupted: the signal or crash handler finishes
      const outer = e instanceof Error ? (e.cause instanceof Error ? e.cause.message : e.message) : String(e);
      const root = rootCauseText(e);
      say(`\nthe demo run failed: ${outer}${root && root !== outer ? `\n  cause: ${root}` : ''}`);
      say(`\`npx cm2 logs ${cfg.run.id}\` shows what happened; \`npm run demo${opts.runId ? ` -- --run ${cfg.run.id}` : ''}\` resumes the run.`);
      exit = { code: 1, why: 'failed' };
    }
    if (life.stopped) return;
    try {
      const reportPath = await writeLocalReport(client, store, cfg, cfg.run.id);
      say(`\ndemo finished in ${((Date.now() - t0) / 1000).toFixed(0)}s`);
      say(`Web UI: ${uiUrl}`);
      say(`report: ${reportPath}`);
    } catch (e) {
      say(`\ncould not write the report: ${e instanceof Error ? e.message : String(e)} (\`npx cm2 report ${cfg.run.id}\` tries again)`);
    }
    if (life.stopped) return;
    if (cfg.tracking.length) await awaitTracking(client, cfg, say);
  } catch (e) {
    if (life.stopped) return;
    say(`\ncm2 demo: ${e instanceof Error ? e.message : String(e)}`);
    exit = { code: 1, why: 'failed' };
  }
  if (life.stopped) return;
  await life.stop(exit);
  if (servers.stopped) say('(the local Temporal server and MinIO were stopped; `npx cm2 infra up` brings them and the Web UI back, with this run\'s history)');
  else say('(local infrastructure left running; stop it with `npx cm2 infra down`)');
  process.exit(life.exit?.code ?? exit.code);
}

/**
 * With `tracking`: waits (up to 2 minutes) for the run's tracking workflow to send the last points and complete, then
 * says where they are. A tracker that is down does not hold the demo: the workflow goes on with the servers' next start.
 */
async function awaitTracking(client: Client, cfg: Cm2Config, say: (line: string) => void): Promise<void> {
  const where = cfg.tracking.map((t) => (t.kind === 'mlflow' ? `MLflow ${t.uri} (experiment ${t.experiment})` : t.kind === 'tensorboard' ? `TensorBoard: tensorboard --logdir ${t.dir}` : `W&B ${t.project}`)).join('; ');
  try {
    const handle = client.workflow.getHandle(trackWorkflowId(cfg.run.id));
    const done = await Promise.race([handle.result().then(() => true), new Promise<false>((r) => setTimeout(() => r(false), 120_000).unref())]);
    say(done ? `tracked: ${where}` : `tracking still retrying after 2 minutes (\`npx cm2 logs ${cfg.run.id}\` says why; it goes on with the servers' next start, or \`npx cm2 track ${cfg.run.id}\`): ${where}`);
  } catch (e) {
    say(`tracking: ${e instanceof Error ? e.message : String(e)} (\`npx cm2 track ${cfg.run.id}\` sends the run again): ${where}`);
  }
}

/**
 * Binaries, servers, workers, each registered with the lifecycle before it is awaited (a signal during a start stops
 * it too). Returns the run's config; `servers.stopped` tells later whether the demo stopped the servers.
 */
async function setUp(configFile: string, opts: { keepInfra: boolean; runId?: string | undefined }, life: Lifecycle, say: (line: string) => void, servers: { stopped: boolean }): Promise<Cm2Config> {
  await ensureBinaries((l) => say(l));
  const dir = defaultInfraDir();
  const before = readInfraState(dir);
  const upBefore = before ? Object.values(await infraHealth(before)).every(Boolean) : false;
  // Servers a crashed demo left behind are adopted: this demo stops them at its end.
  const orphaned = upBefore && before?.owner?.command === 'demo' && !isAlive(before.owner.pid);
  const ownsServers = !opts.keepInfra && (!upBefore || orphaned);
  const owner = { pid: process.pid, command: 'demo' };
  const starting = startInfra({ dir, log: (l) => say(l), ...portsFromEnv(), ...(ownsServers ? { owner } : {}) });
  if (ownsServers) {
    life.add('servers', async () => {
      await starting.catch(() => undefined);
      // Still ours? (`cm2 infra up` in the meantime claims them for the user.)
      if (readInfraState(dir)?.owner?.pid !== process.pid) return;
      await stopInfra(dir);
      servers.stopped = true;
    });
  }
  const state = await starting;
  if (orphaned) {
    setInfraOwner(dir, owner);
    say(`(these servers were left running by a \`cm2 demo\` (pid ${before!.owner!.pid}) that is gone: this demo stops them at its end)`);
  }
  if (life.stopped) throw new Error('interrupted');
  for (const [k, v] of Object.entries(infraEnv(state))) process.env[k] ??= v;
  const cfg = loadConfig(configFile);
  if (opts.runId) cfg.run.id = opts.runId;
  // Worker chatter (bundle stats, state changes) would drown the progress lines; warnings and errors still show.
  // The demo handles the shutdown signals itself (in order: follow, workers, children, servers).
  Runtime.install({
    shutdownSignals: [],
    logger: new DefaultLogger('WARN', (entry) => {
      try {
        if (/^No (activities|workflows) registered/.test(entry.message)) return; // by design: one worker per queue kind
        console.error(`[${entry.level}] ${entry.message}`, entry.meta ?? '');
      } catch {
        /* a logging error must not reach the worker */
      }
    }),
  });
  const giveUp = (e: Error) => {
    say(`\ncm2 demo: ${e.message}\nstopping; fix the cause, then \`npm run demo${opts.runId ? ` -- --run ${cfg.run.id}` : ''}\` resumes the run.`);
    void life.stop({ code: 1, why: 'failed' }).then(() => process.exit(1));
  };
  // Model work runs in its own process (as it would on a GPU machine): a training step is seconds of synchronous
  // tensor work, which must not stall the workflow and LLM workers' event loop.
  const workers = new SupervisedWorkers('workflow and api workers', () => startWorkers(cfg, ['workflows', 'api'], { shutdownGraceSeconds: 5 }), { log: say, onGiveUp: giveUp });
  life.add('workers', () => workers.stop(25_000));
  await workers.begin();
  if (cfg.sft.enabled || cfg.rl.enabled || cfg.eval.enabled) {
    const slow = restartDelayFault();
    const gpu = gpuWorker(configFile, { log: say, onGiveUp: giveUp, ...(slow !== undefined ? { backoff: { initialMs: slow, maxMs: Math.max(slow, 30_000) } } : {}) });
    life.add('gpu worker', () => gpu.stop(15_000), () => gpu.kill());
    await gpu.begin();
    say(`gpu worker started (pid ${gpu.pid})`);
  }
  if (life.stopped) throw new Error('interrupted');
  return cfg;
}
