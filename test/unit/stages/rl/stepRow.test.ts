/** The RL loop's parts that need no Temporal (src/stages/rl/workflow.ts): a step's metrics row. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { stepRow } from '../../../../src/stages/rl/workflow';
import type { RlAdvantagesResult, RlBatch, RlTrainResult } from '../../../../src/stages/rl/shapes';
import { zeroJudgeTotals } from '../../../../src/kernel/counts';

const ep: RlBatch = {
  rolloutsKey: 'runs/r/rl/steps/step-000003/phase-0002.json', lastPhase: 2, time: { rollout: 40, judge: 5 }, wall: 48,
  judgeStats: { ...zeroJudgeTotals(), calls: 3 }, generated: 900, chunks: 2, behaviour: { kind: 'ckpt', manifestKey: 'm2', step: 2 },
};
const adv: RlAdvantagesResult = {
  key: 'adv', rollouts: 16, rewardMean: 0.25, rewardStd: 0.1, failed: 1, advAbsMean: { trajectory: 0.1 }, advNonzero: { trajectory: 0.5 },
  endReasons: { final_turn: 16 }, toolSources: { replay: 4 }, policyTokens: 700, meanTurns: 1.5, passByFocus: {}, seconds: 2,
};
const train: RlTrainResult = {
  policy: { kind: 'ckpt', manifestKey: 'm3', step: 3 }, step: 3, reused: false, loss: 0.1, pgLoss: 0.09, kl: 0.01, clipFrac: 0, gradNorm: 1.2,
  policyTokens: 700, trainSeconds: 30, checkpointSeconds: 3, weightsSha256: 'abc',
};
const hp = { lr: 1e-4, klCoef: 1e-3, granularity: 'trajectory' as const };

test("a step's row: what it did and where the time went; chunk and one-step-off fields only when they apply", () => {
  const plain = stepRow(hp, ep, adv, train, { chunked: false, oneStepOff: false, staleness: 1, rolloutWait: 0, wall: 100 });
  assert.equal(plain['kind'], 'step');
  assert.deepEqual(plain['reward'], { mean: 0.25, std: 0.1 });
  assert.deepEqual(plain['tokens'], { policy: 700, generated: 900 });
  assert.deepEqual(plain['seconds'], { rollout: 40, judge: 5, advantages: 2, train: 30, checkpoint: 3, orchestration: 20, total: 100 });
  assert.ok(!('chunks' in plain) && !('staleness' in plain) && !('logprobGap' in plain));
  const async = stepRow(hp, ep, adv, { ...train, logprobGap: { mean: 1e-3, max: 1e-2, tokens: 700 } }, { chunked: true, oneStepOff: true, staleness: 1, rolloutWait: 4, wall: 60 });
  assert.equal(async['chunks'], 2);
  assert.equal(async['staleness'], 1);
  assert.deepEqual(async['logprobGap'], { mean: 1e-3, max: 1e-2, tokens: 700 });
  // The busy seconds (80) exceed the wall time when rollouts overlap training: orchestration is never negative.
  assert.deepEqual(async['seconds'], { rollout: 40, judge: 5, rolloutWall: 48, rolloutWait: 4, advantages: 2, train: 30, checkpoint: 3, orchestration: 0, total: 60 });
});
