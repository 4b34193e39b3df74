/**
 * Whether a tool call's arguments match expected ones, as the checklist's tool-call checks, the offline annotator and
 * the study's first-step counts all match them: every expected key present with an equal value — strings trimmed and
 * case-insensitive, numbers by value (`1` == `1.0`), anything else by canonical JSON (sorted keys). Extra keys are
 * allowed: optional parameters may be sent or left to their defaults.
 */
import { canonicalJson } from './canonicalJson';

/** One expected argument value against a sent one. */
export function argumentValueEquals(expected: unknown, actual: unknown): boolean {
  if (typeof expected === 'string' && typeof actual === 'string') return expected.trim().toLowerCase() === actual.trim().toLowerCase();
  if (typeof expected === 'number' && typeof actual === 'number') return expected === actual;
  return canonicalJson(expected) === canonicalJson(actual);
}

/** Every key of `expected` is present in `actual` with an equal value. */
export function argumentsMatch(expected: Record<string, unknown>, actual: Record<string, unknown> | undefined): boolean {
  if (!actual) return false;
  return Object.entries(expected).every(([k, v]) => Object.hasOwn(actual, k) && argumentValueEquals(v, actual[k]));
}
