/**
 * Fault injection for the CLI's robustness tests (test/integration/demo*.test.ts); never set in normal use.
 * `CM2_FAULT_INJECT` is a comma-separated list of:
 *
 *   display-throw        every progress-line update throws (the follow loop must degrade, the run go on)
 *   display-throw-once   the first progress-line update throws
 *   crash-in:<stage>     the CLI process crashes with an uncaught error once the run has reached <stage> (its state is
 *                        past pending; checked after the tick's display work, so an injected display fault of the
 *                        same tick is reported first). The demo must stop what it started; a later `cm2 demo`
 *                        resumes the run
 *   restart-delay:<ms>   a supervised worker that died waits <ms> before its first restart (slow recovery: long
 *                        enough to see the progress line report a task queue that nobody polls)
 */
const faults = () => (process.env['CM2_FAULT_INJECT'] ?? '').split(',').map((s) => s.trim()).filter(Boolean);

let displayThrown = 0;
let crashed = false;

/** Throws where a progress-line update would, when the display fault is injected. */
export function displayFault(): void {
  const f = faults();
  if (f.includes('display-throw') || (f.includes('display-throw-once') && displayThrown === 0)) {
    displayThrown++;
    throw new RangeError(`injected display fault #${displayThrown} (CM2_FAULT_INJECT)`);
  }
}

/**
 * Crashes the process with an uncaught error (outside any try) once the stage named by `crash-in:<stage>` has
 * started. "Has started", not "is current": a follow loop on a loaded machine may poll only after a short stage ended.
 */
export function crashFault(stages: readonly { name: string; state: string }[] | undefined): void {
  if (crashed) return;
  const f = faults().find((x) => x.startsWith('crash-in:'));
  const stage = f?.slice('crash-in:'.length);
  const s = stages?.find((x) => x.name === stage);
  if (!s || s.state === 'pending' || s.state === 'disabled') return;
  crashed = true;
  setImmediate(() => {
    throw new Error(`injected CLI crash in stage ${stage} (CM2_FAULT_INJECT)`);
  });
}

/** The first-restart delay forced by `restart-delay:<ms>`, if any. */
export function restartDelayFault(): number | undefined {
  const f = faults().find((x) => x.startsWith('restart-delay:'));
  const ms = f ? Number(f.slice('restart-delay:'.length)) : Number.NaN;
  return Number.isFinite(ms) && ms >= 0 ? ms : undefined;
}
