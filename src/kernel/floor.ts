/**
 * Output floors (issue 28, "no silent failure"): a stage that ends with fewer usable outputs than its configured
 * minimum fails with the reasons counted, instead of completing and leaving the next stage with nothing. Pure.
 */

/** `12× reason, 3× other`, most frequent first (ties in code-point order of the reason). */
export function formatReasons(reasons: Readonly<Record<string, number>>): string {
  return Object.entries(reasons)
    .filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .map(([reason, n]) => `${n}× ${reason}`)
    .join(', ');
}

export interface FloorCheck {
  /** The stage, first word of the message (`checklist`, `rl data`). */
  stage: string;
  /** Usable outputs and the inputs they came from. */
  usable: number;
  of: number;
  /** What the inputs are and what "usable" means: `examples annotated`. */
  what: string;
  /** The configured minimum and the setting that holds it. */
  min: number;
  setting: string;
  /** Why inputs were lost, as `12 failed: 12× reason` parts (empty parts are left out). */
  lost: readonly string[];
}

/**
 * The failure message of a stage below its floor, e.g. `checklist: 0 of 12 examples annotated (12 failed: 12× offline
 * annotator cannot annotate non-demo data — configure llm.roles.annotator); at least 1 needed (checklist.minAnnotated)`,
 * or undefined when the stage has enough.
 */
export function belowFloor(c: FloorCheck): string | undefined {
  if (c.usable >= c.min) return undefined;
  const lost = c.lost.filter((p) => p.length > 0);
  return `${c.stage}: ${c.usable} of ${c.of} ${c.what}${lost.length ? ` (${lost.join('; ')})` : ''}; at least ${c.min} needed (${c.setting})`;
}
