/**
 * `cm2 rl run|status|pause|resume|stop|set`: start and steer the RL workflow of a run. The same controls work with
 * the plain Temporal CLI (`temporal workflow signal|update execute|query --workflow-id cm2-<run>-rl`).
 */
import type { Cm2Config } from '../run/config';
import { connectClient } from '../infra/temporal';
import { rlStatusQuery, setHyperparametersUpdate, type RlStatus } from '../stages/rl/workflow';
import { pauseSignal, resumeSignal, stopSignal } from '../run/control';
import type { RlHyperparameters } from '../run/config';
import { type RlResult, runStageCommand, startRl } from './stages';
import { stageWorkflowId } from '../run/layout';
import { formatFailed, logprobGapLine } from '../kernel/heldOut';

export function rlRunCommand(cfg: Cm2Config, wait: boolean): Promise<void> {
  return runStageCommand<RlResult>(cfg, wait, startRl, printRlResult);
}

export function printRlResult(result: RlResult, cfg: Cm2Config): void {
  console.log(`RL: ${result.steps} steps${result.stopped ? ' (stopped)' : ''}, granularity ${result.hp.granularity}, lr ${result.hp.lr}, KL ${result.hp.klCoef}`);
  for (const e of result.evals) console.log(`  held-out mean checklist reward at step ${String(e.step).padStart(4)}: ${e.rewardMean.toFixed(3)} (± ${e.rewardStd.toFixed(3)}, ${e.rollouts} rollouts, ${e.failed} failed)`);
  const policy = result.policy.kind === 'ckpt' ? result.policy.manifestKey : result.policy.prefix;
  console.log(`policy:     s3://${cfg.s3.bucket}/${policy}`);
  console.log(`metrics:    s3://${cfg.s3.bucket}/runs/${cfg.run.id}/rl/metrics.jsonl`);
}

export async function rlControlCommand(cfg: Cm2Config, action: 'status' | 'pause' | 'resume' | 'stop' | 'set', patch?: Partial<RlHyperparameters>): Promise<void> {
  const client = await connectClient(cfg);
  const handle = client.workflow.getHandle(stageWorkflowId(cfg.run.id, 'rl'));
  if (action === 'pause') await handle.signal(pauseSignal);
  else if (action === 'resume') await handle.signal(resumeSignal);
  else if (action === 'stop') await handle.signal(stopSignal);
  else if (action === 'set') {
    const { fromStep, ...hp } = await handle.executeUpdate(setHyperparametersUpdate, { args: [patch ?? {}] });
    // Replies of workflows started before `fromStep` existed lack it.
    console.log(`hyperparameters from ${fromStep === undefined ? 'the next step' : `step ${fromStep}`}: ${JSON.stringify(hp)}`);
    return;
  }
  const s: RlStatus = await handle.query(rlStatusQuery);
  console.log(`step ${s.step}/${s.totalSteps}  phase ${s.phase}${s.paused ? '  PAUSED' : ''}${s.stopRequested ? '  stopping' : ''}`);
  console.log(`hyperparameters: ${JSON.stringify(s.hp)}`);
  for (const e of s.evals) console.log(`held-out reward at step ${e.step}: ${e.rewardMean.toFixed(3)}${formatFailed(e.failed, e.rollouts)}`);
  const reward = (s.last?.['reward'] as { mean?: number } | undefined)?.mean;
  if (reward !== undefined) console.log(`last step mean reward: ${reward.toFixed(3)}`);
  const gap = logprobGapLine(s.last);
  if (gap) console.log(gap);
}

