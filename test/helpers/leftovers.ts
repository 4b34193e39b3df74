/**
 * Processes a test file starts (servers, workers) die with it: when the test runner stops a file that ran past its
 * limit (SIGTERM) or it is interrupted, every pid still tracked is SIGKILLed, so one stuck file never leaves a
 * Temporal server, a MinIO or workers loading the machine for the rest of the run.
 */
import { constants } from 'node:os';

const pids = new Set<number>();
let installed = false;

function killAll(): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
  pids.clear();
}

/** Kill `pid` when this process exits or is told to stop. */
export function track(pid: number | undefined): void {
  if (pid === undefined) return;
  pids.add(pid);
  if (installed) return;
  installed = true;
  process.once('exit', killAll);
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) {
    process.once(signal, () => {
      killAll();
      process.exit(128 + constants.signals[signal]);
    });
  }
}

/** The process ended (or was stopped) on purpose. */
export function untrack(pid: number | undefined): void {
  if (pid !== undefined) pids.delete(pid);
}
