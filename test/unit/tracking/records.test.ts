/** What a run tells its experiment trackers (src/tracking/records.ts): series from the stages' rows, parameters, the cursor. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { advance, emptyCursor, metricKey, metricPoints, newPoints, numericLeaves, settingsParams, type TrackSources } from '../../../src/tracking/records';
import { trackerId } from '../../../src/run/trackingConfig';

const sources = (over: Partial<TrackSources> = {}): TrackSources => ({ sftSteps: [], rlRows: [], bfcl: [], tau2: [], links: {}, ...over });

test('every number of an RL row becomes a series under rl/ (eval rows under heldout/), identity fields do not', () => {
  const pts = metricPoints(sources({
    rlRows: [
      { step: 3, kind: 'step', granularity: 'turn', reward: { mean: 0.25, std: 0.1 }, kl: 2e-4, logprobGap: { mean: 1e-6, max: 3e-6 }, judge: { calls: 40, costUsd: 0.02 }, seconds: { rollout: 30 }, note: 'text' },
      { step: 4, kind: 'eval', rewardMean: 0.3, rewardSe: null, endReasons: { error_tool_call: 2 } },
    ],
  }));
  const keys = pts.map((p) => `${p.key}@${p.step}`).sort();
  assert.deepEqual(keys, [
    'heldout/endReasons/error_tool_call@4', 'heldout/rewardMean@4',
    'rl/judge/calls@3', 'rl/judge/costUsd@3', 'rl/kl@3', 'rl/logprobGap/max@3', 'rl/logprobGap/mean@3', 'rl/reward/mean@3', 'rl/reward/std@3', 'rl/seconds/rollout@3',
  ]);
});

test('SFT steps: loss, lr, gradient norm, tokens and tokens/s; BFCL and τ²-Bench per policy; non-finite values dropped', () => {
  const pts = metricPoints(sources({
    sftSteps: [{ step: 1, loss: 2.5, lr: 1e-3, gradNorm: Number.NaN, tokens: 3000, ms: 1500 }],
    bfcl: [{ label: 'rl', overall: { accuracy: 0.4 }, categories: { 'multi turn/base': { accuracy: 0.1 } } }],
    tau2: [{ label: 'sft', average: 12.5, domains: { airline: { avg_reward: 0.2, pass_hat_k: { '1': 0.2, '2': 0.1 } } } }],
  }));
  const by = Object.fromEntries(pts.map((p) => [p.key, p.value]));
  assert.equal(by['sft/loss'], 2.5);
  assert.equal(by['sft/tokens_per_s'], 2000);
  assert.equal(by['sft/grad_norm'], undefined, 'NaN is not sent');
  assert.equal(by['bfcl/rl/multi_turn/base'], 0.1, 'a key keeps to letters, digits, _ - . /');
  assert.equal(by['tau2/sft/airline/pass_hat_2'], 0.1);
  assert.equal(by['tau2/sft/average'], 12.5);
});

test('settings as dotted parameters; arrays as JSON; long values cut', () => {
  const p = settingsParams({ rl: { hp: { lr: 1e-4, granularity: 'turn' }, lora: null, targets: ['q_proj', 'v_proj'] }, empty: {}, long: 'x'.repeat(30) }, 20);
  assert.deepEqual(p, { 'rl.hp.lr': '0.0001', 'rl.hp.granularity': 'turn', 'rl.lora': 'null', 'rl.targets': '["q_proj","v_proj"]', empty: '{}', long: `${'x'.repeat(19)}…` });
});

test('the cursor: what a tracker lacks is every point past its last step per series; advancing is monotone', () => {
  const pts = [{ key: 'a', step: 1, value: 1 }, { key: 'a', step: 2, value: 2 }, { key: 'b', step: 0, value: 5 }];
  let c = emptyCursor();
  assert.equal(newPoints(pts, c).length, 3);
  c = advance(c, pts.slice(0, 1));
  assert.deepEqual(newPoints(pts, c).map((p) => `${p.key}${p.step}`), ['b0', 'a2']);
  c = advance(c, newPoints(pts, c));
  assert.deepEqual(newPoints(pts, c), []);
  assert.deepEqual(advance(c, [{ key: 'a', step: 1, value: 9 }]).sent, c.sent, 'an older step never moves a series back');
  assert.deepEqual(numericLeaves({ x: [1, 2], y: true }, ''), [['y', 1]]);
  assert.equal(metricKey('a b', 'c'), 'a_b/c');
});

test('a tracker\'s id is stable and tells trackers apart', () => {
  const a = trackerId({ kind: 'mlflow', uri: 'http://h:5000', experiment: 'cm2' });
  assert.equal(a, trackerId({ kind: 'mlflow', uri: 'http://h:5000', experiment: 'cm2' }));
  assert.notEqual(a, trackerId({ kind: 'mlflow', uri: 'http://h:5000', experiment: 'other' }));
  assert.match(trackerId({ kind: 'tensorboard', dir: 'runs/tb' }), /^tensorboard-[0-9a-f]{8}$/);
});
