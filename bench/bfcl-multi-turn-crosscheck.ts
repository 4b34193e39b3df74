/**
 * cm2's multi-turn verdicts beside bfcl-eval's own, on every entry of the four multi-turn categories (issue 34 item 4).
 *
 *   npx tsx bench/bfcl-multi-turn-crosscheck.ts [--limit N] [--kinds truth,drop_last_call,...]
 *
 * For each entry: its ground truth and each applicable perturbation (test/helpers/multiTurnCrossCheck.ts), scored
 * by cm2 (`--answers` scoring through the bridge, src/stages/eval/bfcl/multiTurn.ts) and by bfcl-eval's file-level
 * runner in a process of its own (python/bfcl_bridge/crosscheck.py). Prints, per kind and category, how many rows,
 * how many each side passed, and the rows where the verdict or BFCL's error type differ (there should be none).
 */
import { parseArgs } from 'node:util';
import { BfclBridge, bfclPythonPath } from '../src/infra/bfclBridge';
import { MULTI_TURN_CATEGORIES, scoreMultiTurnAnswers, type MultiTurnEntry } from '../src/stages/eval/bfcl/multiTurn';
import { bridgeBackend, bridgeInfo, loadMultiTurnCategory } from '../src/stages/eval/bfcl/multiTurnBridge';
import { bfclVerdicts, crossCheckRows, PERTURBATIONS, type Perturbation } from '../test/helpers/multiTurnCrossCheck';

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { limit: { type: 'string' }, kinds: { type: 'string' } } });
  const limit = values.limit ? Number(values.limit) : undefined;
  const kinds = (values.kinds ? values.kinds.split(',') : [...PERTURBATIONS]) as Perturbation[];
  const python = bfclPythonPath();
  const bridge = new BfclBridge({ python });
  const info = await bridgeInfo(bridge);
  console.log(`bfcl-eval ${info.bfclEval}, Python ${info.python}; ${new Date().toISOString()}`);
  const backend = bridgeBackend(bridge);
  const entries: MultiTurnEntry[] = [];
  for (const c of MULTI_TURN_CATEGORIES) entries.push(...(await loadMultiTurnCategory(bridge, c, limit)));
  const t0 = Date.now();
  let rowsAll = 0;
  let disagreements = 0;
  console.log('| kind | category | rows | cm2 valid | bfcl-eval valid | verdicts differ | error types differ |');
  console.log('|---|---|---|---|---|---|---|');
  for (const kind of kinds) {
    const rows = crossCheckRows(entries, [kind]);
    const theirs = bfclVerdicts(python, rows);
    const byId = new Map(entries.map((e) => [e.id, e]));
    const ours = await scoreMultiTurnAnswers(rows.map((r) => byId.get(r.id)!), new Map(rows.map((r) => [r.id, r.result])), backend);
    for (const c of MULTI_TURN_CATEGORIES) {
      const mine = ours.filter((r) => r.category === c);
      if (mine.length === 0) continue;
      const verdictDiff = mine.filter((r) => r.valid !== theirs[r.id]?.valid);
      const typeDiff = mine.filter((r) => !r.valid && theirs[r.id] && !theirs[r.id]!.valid && (r.bfcl ?? '') !== theirs[r.id]!.error_type);
      rowsAll += mine.length;
      disagreements += verdictDiff.length + typeDiff.length;
      console.log(`| ${kind} | ${c} | ${mine.length} | ${mine.filter((r) => r.valid).length} | ${mine.filter((r) => theirs[r.id]?.valid).length} | ${verdictDiff.length} | ${typeDiff.length} |`);
      for (const r of [...verdictDiff, ...typeDiff].slice(0, 3)) console.log(`  ${r.id}: cm2 ${r.valid ? 'valid' : r.bfcl}, bfcl-eval ${theirs[r.id]?.valid ? 'valid' : theirs[r.id]?.error_type}`);
    }
  }
  await bridge.close();
  console.log(`\n${rowsAll} rows, ${disagreements} disagreements, ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  if (disagreements > 0) process.exitCode = 1;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
