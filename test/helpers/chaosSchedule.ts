/**
 * The chaos drill's schedule (test/helpers/chaos.ts): which worker is killed, and when Temporal and MinIO are
 * restarted, as a function of the seed and of the run's progress, so a seed replays the same interleaving.
 *
 * Progress is what the workflows expose: the pipeline's `pipelineStatus` query names the running stage, and that
 * stage's `progress` query its phase (and for RL, `done` = the steps finished). A point of progress is a key
 * [stage, major, minor] compared in order: for RL, major = steps finished and minor = the phase of the step in
 * flight (eval < rollout < advantages < train), so "step 37, train" is [rl, 36, train]; for the other stages,
 * major = the index of the phase in their known order. An event fires at the first observation at or past its point
 * (the driver polls about four times a second): the same seed kills the same worker at the same step and phase.
 *
 * The schedule is drawn up front from the seed on an axis of "step units": each RL step is one unit, the stages
 * before RL count as a fixed number of units each (about the time they take, in RL steps, on the CI machine).
 * `clock: 'wall'` keeps the former wall-clock schedule (seconds since the chaos run began) as a fallback.
 */
import type { Client } from '@temporalio/client';
import { mulberry32 } from '../../src/kernel/rng';
import { pipelineWorkflowId, STAGES, stageWorkflowId } from '../../src/run/layout';

export const QUEUES = ['workflows', 'api', 'gpu'] as const;
export type Queue = (typeof QUEUES)[number];

/** The phases of each stage, in order (unknown phases count as the stage's start). */
const PHASES: Record<string, string[]> = {
  prepare: ['starting', 'import', 'rule_filter', 'llm_filter_pass0', 'split', 'compression', 'selection', 'report', 'done'],
  checklist: ['starting', 'input', 'annotate', 'report', 'done'],
  sft: ['starting', 'eval_base', 'train', 'eval_sft', 'report', 'done'],
  rl: ['starting', 'data', 'eval', 'rollout', 'advantages', 'train', 'done'],
  eval: ['starting', 'bfcl', 'done'],
};
/**
 * Step units of the stages before RL: about their time in RL steps (the 100-step CI pipeline on 2 loaded cores,
 * 2026-11-27: prepare ≈ 5 s, checklist ≈ 2 s, SFT ≈ 13 s, an RL step ≈ 2–3 s).
 */
export const PRE_RL_UNITS: Record<string, number> = { prepare: 3, checklist: 2, sft: 7 };

export type ProgressKey = [number, number, number];

export interface Progress {
  key: ProgressKey;
  /** e.g. "rl step 37 train" or "sft train". */
  label: string;
}

export const START: Progress = { key: [-1, 0, 0], label: 'not started' };

export const cmpKey = (a: ProgressKey, b: ProgressKey): number => a[0] - b[0] || a[1] - b[1] || a[2] - b[2];

export function progressLabel(key: ProgressKey): string {
  const stage = STAGES[key[0]];
  if (!stage) return key[0] < 0 ? 'not started' : 'finished';
  const phases = PHASES[stage] ?? [];
  if (stage === 'rl') return key[1] === 0 && key[2] <= 1 ? `rl ${phases[key[2]] ?? '?'}` : `rl step ${key[1] + 1} ${phases[key[2]] ?? '?'}`;
  return `${stage} ${phases[key[1]] ?? '?'}`;
}

export function progressKey(stage: string, phase: string, done: number): ProgressKey {
  const s = STAGES.indexOf(stage as (typeof STAGES)[number]);
  const phases = PHASES[stage] ?? [];
  // A phase like `compression + selection` (parallel phases) or an unknown one: its first known part, else the start.
  const idx = Math.max(0, ...phase.split(' + ').map((p) => phases.indexOf(p.trim())));
  if (stage === 'rl') return phase === 'done' ? [s, done, phases.length - 1] : [s, done, idx];
  return [s, idx, 0];
}

const withTimeout = <T>(p: Promise<T>, ms: number): Promise<T> =>
  Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms).unref())]);

/** The run's progress now, or undefined when it cannot be asked (server down, no workflows worker). */
export async function observeProgress(client: Client, runId: string, timeoutMs = 3000): Promise<Progress | undefined> {
  try {
    const status = await withTimeout(client.workflow.getHandle(pipelineWorkflowId(runId)).query<{ state: string; current?: string }>('pipelineStatus'), timeoutMs);
    if (!status.current) return status.state === 'running' ? undefined : { key: [STAGES.length, 0, 0], label: `pipeline ${status.state}` };
    const p = await withTimeout(client.workflow.getHandle(stageWorkflowId(runId, status.current)).query<{ phase: string; done: number }>('progress'), timeoutMs);
    const key = progressKey(status.current, p.phase, p.done);
    return { key, label: progressLabel(key) };
  } catch {
    return undefined;
  }
}

export type ChaosEvent =
  | { kind: 'kill'; queue: Queue; at: number; target?: ProgressKey }
  | { kind: 'restart'; server: 'Temporal' | 'MinIO'; downMs: number; at: number; target?: ProgressKey };

export type ChaosSchedule =
  /** Points of progress: a worker kill every `killEverySteps` step units, each server restarted every `serverEverySteps` (undefined: once each). */
  | { clock: 'progress'; killEverySteps: [number, number]; serverEverySteps?: number }
  /** The former schedule: seconds since the chaos run began. */
  | { clock: 'wall'; killEverySec: [number, number]; serverEverySec?: number };

/** The step-units axis: [stage, its first unit, its units]. */
function axis(steps: number): Array<[string, number, number]> {
  const out: Array<[string, number, number]> = [];
  let x = 0;
  for (const s of ['prepare', 'checklist', 'sft'] as const) {
    out.push([s, x, PRE_RL_UNITS[s]!]);
    x += PRE_RL_UNITS[s]!;
  }
  out.push(['rl', x, steps]);
  return out;
}

/** The point of progress at `x` step units (the RL stage's phase within a step by the fraction: 0.55 rollout, 0.15 advantages, 0.3 train). */
export function pointAt(x: number, steps: number): ProgressKey {
  for (const [stage, from, units] of axis(steps)) {
    if (x >= from + units) continue;
    const frac = (x - from) / units;
    const s = STAGES.indexOf(stage as (typeof STAGES)[number]);
    if (stage === 'rl') {
      const step = Math.floor(x - from);
      const f = x - from - step;
      return [s, step, PHASES['rl']!.indexOf(f < 0.55 ? 'rollout' : f < 0.7 ? 'advantages' : 'train')];
    }
    // Between the stage's first real phase and its last before `done`.
    const phases = PHASES[stage]!;
    return [s, 1 + Math.floor(frac * (phases.length - 2)), 0];
  }
  return [STAGES.indexOf('rl'), steps - 1, PHASES['rl']!.indexOf('train')];
}

/** Every event of a run, drawn from the seed, ordered by when it fires (`at`: step units or seconds). */
export function drawSchedule(seed: number, steps: number, schedule: ChaosSchedule): ChaosEvent[] {
  const rand = mulberry32(seed);
  const between = (lo: number, hi: number) => lo + (hi - lo) * rand();
  const events: ChaosEvent[] = [];
  if (schedule.clock === 'progress') {
    const total = axis(steps).reduce((n, [, , u]) => n + u, 0);
    // Nothing after 97 % of the RL steps: every event fires before the run ends.
    const end = total - Math.max(1, steps * 0.03);
    const [lo, hi] = schedule.killEverySteps;
    for (let x = between(lo, hi); x < end; x += between(lo, hi)) events.push({ kind: 'kill', queue: QUEUES[Math.floor(rand() * QUEUES.length)]!, at: x });
    const every = schedule.serverEverySteps;
    const servers = [['Temporal', 0.05, 0.45], ['MinIO', 0.15, 0.6]] as const;
    for (const [server, a, b] of servers) {
      for (let x = every === undefined ? between(a * total, b * total) : every * between(0.75, 1.25); x < end; x = every === undefined ? Infinity : x + every * between(0.75, 1.25)) {
        events.push({ kind: 'restart', server, downMs: between(1, 4) * 1000, at: x });
      }
    }
    for (const e of events) e.target = pointAt(e.at, steps);
  } else {
    // Wall clock: the first kill and each server's first restart as before; later ones as far apart as configured.
    const [lo, hi] = schedule.killEverySec;
    const horizon = 24 * 3600;
    for (let x = between(lo, hi); x < horizon; x += between(lo, hi)) events.push({ kind: 'kill', queue: QUEUES[Math.floor(rand() * QUEUES.length)]!, at: x });
    const every = schedule.serverEverySec;
    for (const [server, a, b] of [['Temporal', 10, 50], ['MinIO', 30, 70]] as const) {
      for (let x = between(a, b); x < horizon; x = every === undefined ? Infinity : x + every * between(0.75, 1.25)) events.push({ kind: 'restart', server, downMs: between(1, 4) * 1000, at: x });
    }
  }
  return events.sort((a, b) => a.at - b.at);
}

/** A line for the report: what the event is and when it is due. */
export const describeEvent = (e: ChaosEvent): string =>
  `${e.kind === 'kill' ? `SIGKILL the ${e.queue} worker` : `restart ${e.server} (down ${(e.downMs / 1000).toFixed(1)} s)`} at ${e.target ? progressLabel(e.target) : `${e.at.toFixed(0)} s`}`;
