/**
 * The batch summary (src/stages/rl/algo/batch.ts): each rollout's rewards computed once (`scoreRollout`) and handed to
 * the estimators of every granularity, with the same rewards and advantages as the estimators computing them alone.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChecklistVariant, StoredItem } from '../../../../../src/stages/checklist/schema';
import { scoreRollout, trajectoryReward, turnRewards } from '../../../../../src/stages/rl/algo/rewards';
import { computeAdvantages } from '../../../../../src/stages/rl/algo/advantages';
import { summarise, summariseBatch } from '../../../../../src/stages/rl/algo/batch';
import { Granularity, RlConfig } from '../../../../../src/run/config';
import type { Rollout, RolloutVerdicts } from '../../../../../src/stages/rl/rolloutSchema';

const item = (id: string, weight: number, deps: string[] = []): StoredItem => ({
  id, evidence: [], focus_on: id === 'a' ? 'assistant.tool_calls' : 'assistant.content.user_visible_reply', question: `${id}?`, pass_condition: `${id}`, failure_examples: [],
  required_for_next_turn: false, dependence: deps, weight, extra_info: { price_usd: 0 },
});
const variant: ChecklistVariant = [[item('a', 0.5), item('b', 0.5, ['a'])], [item('c', 1)]];

/** One rollout of prompt `group`: per turn, one string per assistant step, one character per item (1 pass, 0 fail, x failed call). */
function rollout(group: number, member: number, perTurn: string[][], opts: { toolFailed?: boolean } = {}): Rollout {
  const verdicts: RolloutVerdicts = [perTurn.map((rows, turn) => ({ turn, steps: rows.map((row) => [...row].map((ch) => ({ pass: ch === '1', ok: ch !== 'x' }))) }))];
  const segments = perTurn.flatMap((rows, turn) => rows.map((_, k) => ({ message: 1 + k, turn, start: 0, end: 2 })));
  return {
    id: `p${group}#${member}`, uuid: `p${group}`, group, member, messages: [], tokens: [], logprobs: [], segments, turns: perTurn.length, refTurns: 2,
    status: 'done', generations: segments.length, toolFailed: opts.toolFailed ?? false, toolSources: {}, verdicts,
  };
}

const rollouts = [
  ...[[['10', '11'], ['1']], [['01'], ['0']], [['11'], ['1']], [['00']], [['10'], ['x']], [['11'], ['1']]].map((t, m) => rollout(0, m, t)),
  ...[[['11'], ['1']], [['10']], [['11'], ['0']], [['00'], ['1']], [['11'], ['1']], [['10'], ['1']]].map((t, m) => rollout(1, m, t, { toolFailed: m === 1 })),
];
const checklists = new Map([['p0', [variant]], ['p1', [variant]]]);
const rl = RlConfig.parse({});

test('a rollout is scored once: its reward and turn rewards as trajectoryReward and turnRewards give them; failed → 0 and no turns', () => {
  for (const r of rollouts) {
    const s = scoreRollout([variant], r.verdicts!, r.refTurns, r.toolFailed);
    assert.equal(s.reward, trajectoryReward([variant], r.verdicts!, r.refTurns, s.failed));
    assert.deepEqual(s.turnRewards, s.failed ? [] : turnRewards([variant], r.verdicts!));
  }
  assert.deepEqual(rollouts.map((r) => scoreRollout([variant], r.verdicts!, r.refTurns, r.toolFailed).failed), [false, false, false, false, true, false, false, true, false, false, false, false]);
});

test('the summary hands the scores to every granularity: the same advantages as the estimators computing the rewards themselves', () => {
  const summary = summarise(rollouts, checklists, rl);
  assert.deepEqual(summary.rewards, rollouts.map((r) => scoreRollout([variant], r.verdicts!, r.refTurns, r.toolFailed).reward));
  assert.equal(summary.failed, 2);
  for (const g of Granularity.options) {
    for (const group of [0, 1]) {
      const members = rollouts.filter((r) => r.group === group);
      const alone = computeAdvantages(g, members.map((r) => ({ failed: scoreRollout([variant], r.verdicts!, r.refTurns, r.toolFailed).failed, segmentTurns: r.segments.map((s) => s.turn), verdicts: r.verdicts!, refTurns: r.refTurns })), [variant], { normByStd: rl.normAdvByStd, eta: rl.eta, minHolders: rl.minGroupCount, minCount: rl.minGroupCount });
      assert.deepEqual(members.map((r) => summary.byGranularity[g]!.perRollout[rollouts.indexOf(r)]), alone.advantages, `${g}, group ${group}`);
    }
  }
  const batch = summariseBatch(rollouts, checklists, rl, 'trajectory');
  assert.deepEqual(batch.rows.map((r) => r.id), rollouts.map((r) => r.id));
  assert.equal(batch.metrics.failed, 2);
  assert.equal(batch.metrics.byPrompt.n, 2);
  assert.deepEqual(batch.metrics.passByFocus['assistant.tool_calls'], { passed: 9, total: 12 });
});
