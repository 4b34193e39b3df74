/**
 * A run's RL policy against its SFT policy on the same held-out prompts, paired per prompt: the rewards of the RL
 * stage's first held-out evaluation (step 0, the SFT policy) and of its last (or `--step`), read from the run's S3
 * (`runs/<run>/rl/eval/step-NNNNNN/advantages.json`). `cm2 status` prints the unpaired difference; this prints the paired
 * one (mean ± sd/√n of RL − SFT per prompt, prompts won/lost/tied), which is what a claim about one run should use.
 *
 *   npx tsx scripts/run-paired.ts --config config/smollm2.yaml --run smollm2-i30 [--step 8]
 *
 * Needs the run's S3 (the local infrastructure's while `cm2 infra up` runs, or the config's); no Temporal, no workers.
 */
import { parseArgs } from 'node:util';
import { useLocalInfraEnv } from '../src/infra/localInfra';
import { loadConfig } from '../src/run/config';
import { evalPromptRewards, heldOutSummary, readRlRows } from '../src/report/collect';
import { pairedRewards } from '../src/report/studyFile';
import { ObjectStore } from '../src/storage/store';

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { config: { type: 'string', short: 'c', default: 'config/demo.yaml' }, run: { type: 'string' }, step: { type: 'string' } } });
  if (!values.run) throw new Error('--run <run id> is required');
  const runId = values.run;
  useLocalInfraEnv();
  const cfg = loadConfig(values.config!);
  const store = ObjectStore.fromConfig(cfg.s3);
  const evals = heldOutSummary(await readRlRows(store, runId)).evals;
  if (!evals.length) throw new Error(`${runId}: no held-out evaluation in runs/${runId}/rl/metrics.jsonl (no such run in this S3, or its RL stage has not evaluated yet)`);
  if (!evals.some((e) => e.step === 0)) throw new Error(`${runId}: no step-0 held-out evaluation (the SFT policy's) in its RL metrics`);
  const step = values.step !== undefined ? Number(values.step) : evals.filter((e) => e.step > 0).at(-1)?.step;
  if (step === undefined || !evals.some((e) => e.step === step)) throw new Error(`${runId}: no held-out evaluation at step ${step ?? '> 0'} (evaluated: ${evals.map((e) => e.step).join(', ')})`);
  const sft = await evalPromptRewards(store, runId, 0);
  const rl = await evalPromptRewards(store, runId, step);
  const prompts = Object.keys(sft).filter((u) => u in rl);
  const missing = Object.keys(sft).length + Object.keys(rl).length - 2 * prompts.length;
  const p = pairedRewards(rl, sft, prompts);
  const sign = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(4)}`;
  console.log(`${runId}: RL (step ${step}) − SFT (step 0), paired over ${p.n} held-out prompts${missing ? ` (${missing} prompts in one evaluation only, left out)` : ''}:`);
  console.log(`  ${sign(p.diff)} ± ${p.se === null ? '–' : p.se.toFixed(4)} (${p.z === null ? 'no spread' : `${p.z >= 0 ? '+' : ''}${p.z.toFixed(2)} paired SE`}; unpaired ${p.unpairedZ === null ? '–' : `${p.unpairedZ >= 0 ? '+' : ''}${p.unpairedZ.toFixed(2)} SE`}); ${p.wins} won, ${p.losses} lost, ${p.ties} tied`);
}

main().catch((e: unknown) => {
  console.error((e as Error).message);
  process.exitCode = 1;
});
