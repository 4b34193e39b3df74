/**
 * Multi-turn answers for the cross-check of cm2's scoring against bfcl-eval's own (issue 34 item 4): each entry's
 * ground truth and several kinds of perturbed answers, and bfcl-eval's verdicts on them from
 * python/bfcl_bridge/crosscheck.py (BFCL's file-level runner in a process of its own).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { MultiTurnEntry, MultiTurnResult } from '../../src/stages/eval/bfcl/multiTurn';

export const PERTURBATIONS = ['truth', 'one_step_per_call', 'drop_last_call', 'empty_turn', 'changed_argument', 'repeated_call', 'fewer_turns', 'calls_in_empty_turn', 'swapped_calls'] as const;
export type Perturbation = (typeof PERTURBATIONS)[number];

const clone = (r: MultiTurnResult): MultiTurnResult => r.map((t) => t.map((s) => [...s]));

/** The first argument value changed: a string literal gets a suffix, a number grows by one. Undefined when nothing to change. */
export function changeArgument(call: string): string | undefined {
  const str = /=\s*'([^'\\]*)'|=\s*"([^"\\]*)"/.exec(call);
  if (str) return `${call.slice(0, str.index)}='${(str[1] ?? str[2]) ?? ''}_x'${call.slice(str.index + str[0].length)}`;
  const num = /=\s*(-?\d+(?:\.\d+)?)/.exec(call);
  if (num) return `${call.slice(0, num.index)}=${Number(num[1]) + 1}${call.slice(num.index + num[0].length)}`;
  // a positional argument: sort('final_report.pdf')
  const pos = /\(\s*'([^'\\]*)'/.exec(call);
  if (pos) return `${call.slice(0, pos.index)}('${pos[1]}_x'${call.slice(pos.index + pos[0].length)}`;
  return undefined;
}

/** The answer of a kind for an entry (undefined when the kind does not apply to it). Turns with calls are one step each, as the reference plays them. */
export function perturb(entry: Pick<MultiTurnEntry, 'groundTruth'>, kind: Perturbation): MultiTurnResult | undefined {
  const truth: MultiTurnResult = entry.groundTruth.map((calls) => (calls.length ? [[...calls]] : []));
  const withCalls = entry.groundTruth.map((c, i) => (c.length ? i : -1)).filter((i) => i >= 0);
  const last = withCalls[withCalls.length - 1];
  switch (kind) {
    case 'truth':
      return truth;
    case 'one_step_per_call':
      return entry.groundTruth.map((calls) => calls.map((c) => [c]));
    case 'drop_last_call': {
      if (last === undefined) return undefined;
      const r = clone(truth);
      r[last]![0]!.pop();
      return r;
    }
    case 'empty_turn': {
      if (last === undefined) return undefined;
      const r = clone(truth);
      r[withCalls[0]!] = [];
      return r;
    }
    case 'changed_argument': {
      for (const t of withCalls) {
        for (let k = entry.groundTruth[t]!.length - 1; k >= 0; k--) {
          const changed = changeArgument(entry.groundTruth[t]![k]!);
          if (changed === undefined) continue;
          const r = clone(truth);
          r[t]![0]![k] = changed;
          return r;
        }
      }
      return undefined;
    }
    case 'repeated_call': {
      if (last === undefined) return undefined;
      const r = clone(truth);
      const step = r[withCalls[0]!]![0]!;
      step.push(step[step.length - 1]!);
      return r;
    }
    case 'fewer_turns':
      return truth.length > 1 ? clone(truth).slice(0, -1) : undefined;
    case 'calls_in_empty_turn': {
      const empty = entry.groundTruth.findIndex((c) => c.length === 0);
      if (empty < 0 || last === undefined) return undefined;
      const r = clone(truth);
      r[empty] = [[entry.groundTruth[last]![0]!]];
      return r;
    }
    case 'swapped_calls': {
      const t = withCalls.find((i) => entry.groundTruth[i]!.length >= 2);
      if (t === undefined) return undefined;
      const r = clone(truth);
      r[t]![0]!.reverse();
      return r;
    }
  }
}

export interface CrossCheckRow {
  id: string;
  kind: Perturbation;
  result: MultiTurnResult;
}

/** Every applicable perturbation of every entry; ids are the entries' (one file per kind, as BFCL wants one row per id). */
export function crossCheckRows(entries: readonly MultiTurnEntry[], kinds: readonly Perturbation[] = PERTURBATIONS): CrossCheckRow[] {
  const rows: CrossCheckRow[] = [];
  for (const kind of kinds) {
    for (const e of entries) {
      const result = perturb(e, kind);
      if (result) rows.push({ id: e.id, kind, result });
    }
  }
  return rows;
}

/** bfcl-eval's verdicts on rows of one kind (ids unique), from its own runner in a fresh process. */
export function bfclVerdicts(python: string, rows: readonly { id: string; result: MultiTurnResult }[]): Record<string, { valid: boolean; error_type: string }> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cm2-crosscheck-'));
  try {
    const input = path.join(dir, 'in.jsonl');
    const output = path.join(dir, 'out.json');
    writeFileSync(input, rows.map((r) => JSON.stringify({ id: r.id, result: r.result })).join('\n') + '\n');
    const script = path.resolve(__dirname, '..', '..', 'python', 'bfcl_bridge', 'crosscheck.py');
    execFileSync(python, [script, input, output], { stdio: ['ignore', 'ignore', 'pipe'], cwd: dir, maxBuffer: 256 * 1024 * 1024, env: { PATH: process.env['PATH'] ?? '', HOME: process.env['HOME'] ?? dir } });
    return JSON.parse(readFileSync(output, 'utf8')) as Record<string, { valid: boolean; error_type: string }>;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
