import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChecklistVariant, StoredItem } from '../../../../../src/stages/checklist/schema';
import { itemSatisfied, reachedTurns, rolloutFailed, trajectoryReward, turnDecision, turnReward, turnRewards } from '../../../../../src/stages/rl/algo/rewards';
import { computeAdvantages, stepAdvantages, trajectoryAdvantages, turnAdvantages, type GroupMember } from '../../../../../src/stages/rl/algo/advantages';
import type { RolloutVerdicts, TurnVerdicts, Verdict } from '../../../../../src/stages/rl/rolloutSchema';

// ---- fixtures -------------------------------------------------------------------------------------------------

function item(id: string, weight: number, opts: { deps?: string[]; required?: boolean } = {}): StoredItem {
  return {
    id,
    evidence: [],
    focus_on: 'tool.content',
    question: `is ${id} done?`,
    pass_condition: `${id} done`,
    failure_examples: [],
    required_for_next_turn: opts.required ?? false,
    dependence: opts.deps ?? [],
    weight,
    extra_info: { price_usd: 0 },
  };
}

/** Verdicts of one turn, one string per assistant step, one character per item: 1 pass, 0 fail, x failed call. */
function steps(...rows: string[]): Verdict[][] {
  return rows.map((row) => [...row].map((ch) => ({ pass: ch === '1', ok: ch !== 'x' })));
}

function turns(...perTurn: Verdict[][][]): TurnVerdicts[] {
  return perTurn.map((s, turn) => ({ turn, steps: s }));
}

/** A member whose segments are exactly its judged steps (one generation per judged step). */
function member(verdicts: RolloutVerdicts, refTurns: number, failed = false): GroupMember {
  const segmentTurns = (verdicts[0] ?? []).flatMap((tv) => tv.steps.map(() => tv.turn));
  return { failed, segmentTurns, verdicts, refTurns };
}

function assertClose(actual: number[][], expected: number[][], msg?: string): void {
  assert.equal(actual.length, expected.length, msg);
  actual.forEach((row, i) => {
    assert.equal(row.length, expected[i]!.length, `${msg ?? ''} member ${i} segment count`);
    row.forEach((x, k) => assert.ok(Math.abs(x - expected[i]![k]!) < 1e-12, `${msg ?? ''} member ${i} segment ${k}: ${x} ≠ ${expected[i]![k]}`));
  });
}

const close = (a: number, b: number) => assert.ok(Math.abs(a - b) < 1e-12, `${a} ≠ ${b}`);

// ---- rewards --------------------------------------------------------------------------------------------------

describe('turn rewards (spec §6.6)', () => {
  test('an item is satisfied when it is true at some step (OR over steps)', () => {
    const s = steps('10', '01', '00');
    assert.equal(itemSatisfied(s, 0), true);
    assert.equal(itemSatisfied(s, 1), true);
    assert.equal(itemSatisfied(steps('00', '00'), 0), false);
    assert.equal(itemSatisfied(s, 5), false, 'an index past the verdicts is not satisfied');
    assert.equal(itemSatisfied([], 0), false);
  });

  test('the turn reward is the weighted sum of satisfied items, without dependency gating', () => {
    const items = [item('a', 0.5), item('b', 0.3, { deps: ['a'] }), item('c', 0.2)];
    close(turnReward(items, steps('100', '001')), 0.7);
    close(turnReward(items, steps('010')), 0.3); // b counts although its dependency a never passed
    close(turnReward(items, steps('111')), 1);
    assert.equal(turnReward(items, []), 0);
  });

  test('per-turn rewards are averaged over variants (Σ / numVariants)', () => {
    const v1: ChecklistVariant = [[item('a', 0.6), item('b', 0.4)]];
    const v2: ChecklistVariant = [[item('x', 1)]];
    // variant 1: a only → 0.6; variant 2: x → 1; mean 0.8
    close(turnRewards([v1, v2], [turns(steps('10')), turns(steps('1'))])[0]!, 0.8);
  });

  test('the trajectory reward divides by the reference turn count, so early termination is penalised', () => {
    const variant: ChecklistVariant = [[item('a', 1)], [item('b', 1)], [item('c', 1)]];
    const all = [turns(steps('1'), steps('1'), steps('1'))];
    const two = [turns(steps('1'), steps('1'))];
    const one = [turns(steps('0', '1'))];
    close(trajectoryReward([variant], all, 3, false), 1);
    close(trajectoryReward([variant], two, 3, false), 2 / 3);
    close(trajectoryReward([variant], one, 3, false), 1 / 3);
    assert.equal(trajectoryReward([variant], all, 3, true), 0, 'failed ⇒ 0');
  });

  test('reached turns stop at the first turn without judged steps', () => {
    assert.equal(reachedTurns([turns(steps('1'), [], steps('1'))]), 1);
    assert.equal(reachedTurns([]), 0);
    const variant: ChecklistVariant = [[item('a', 1)], [item('b', 1)], [item('c', 1)]];
    assert.deepEqual(turnRewards([variant], [turns(steps('1'), [], steps('1'))]), [1]);
  });

  test('a rollout fails on a tool failure or any failed judge call', () => {
    const ok = [turns(steps('10'), steps('01'))];
    assert.equal(rolloutFailed(false, ok), false);
    assert.equal(rolloutFailed(true, ok), true);
    assert.equal(rolloutFailed(false, [turns(steps('1x'), steps('01'))]), true);
    assert.equal(rolloutFailed(false, [turns(steps('10')), turns(steps('0x'))]), true, 'any variant');
  });
});

describe('turn control (spec §6.5)', () => {
  const required: ChecklistVariant = [[item('r', 0.5, { required: true }), item('o', 0.5)], [item('z', 1)], [item('y', 1)]];

  test('continue when every required item was true at some step; an optional miss does not matter', () => {
    assert.deepEqual(turnDecision([required], [{ turn: 0, steps: steps('00', '10') }], 0, 3), { continue: true });
  });

  test('a required item true at no step terminates (single variant)', () => {
    assert.deepEqual(turnDecision([required], [{ turn: 0, steps: steps('01', '01') }], 0, 3), { continue: false, reason: 'turn_control' });
  });

  test('termination needs MORE than half the variants', () => {
    const pass = { turn: 0, steps: steps('11') };
    const miss = { turn: 0, steps: steps('01') };
    assert.deepEqual(turnDecision([required, required], [pass, miss], 0, 3), { continue: true }, '1 of 2 ⇒ continue');
    assert.deepEqual(turnDecision([required, required, required], [pass, miss, pass], 0, 3), { continue: true }, '1 of 3 ⇒ continue');
    assert.deepEqual(turnDecision([required, required, required], [miss, pass, miss], 0, 3), { continue: false, reason: 'turn_control' }, '2 of 3');
    assert.deepEqual(turnDecision([required, required], [miss, miss], 0, 3), { continue: false, reason: 'turn_control' }, '2 of 2');
  });

  test('any failed judge call terminates (and fails the rollout)', () => {
    const tv = { turn: 0, steps: steps('10', '1x') };
    assert.deepEqual(turnDecision([required, required, required], [{ turn: 0, steps: steps('11') }, tv, { turn: 0, steps: steps('11') }], 0, 3), {
      continue: false,
      reason: 'judge_failed',
    });
    assert.equal(rolloutFailed(false, [[tv]]), true);
  });

  test('the last reference turn ends the episode even when everything passed', () => {
    assert.deepEqual(turnDecision([required], [{ turn: 2, steps: steps('1') }], 2, 3), { continue: false, reason: 'final_turn' });
    assert.deepEqual(turnDecision([required], [{ turn: 0, steps: steps('11') }], 0, 1), { continue: false, reason: 'final_turn' });
    assert.deepEqual(turnDecision([required], [{ turn: 1, steps: steps('1') }], 1, 3), { continue: true });
  });
});

// ---- advantages -----------------------------------------------------------------------------------------------

describe('trajectory-level advantages (stock GRPO)', () => {
  const variant: ChecklistVariant = [[item('a', 0.5), item('b', 0.5)], [item('c', 1)]];

  test('A = R − group mean on every segment; a failed member counts with R = 0', () => {
    const group = [
      member([turns(steps('10', '01'), steps('1'))], 2), // R = (1 + 1) / 2 = 1
      member([turns(steps('10'))], 2), // R = 0.5 / 2 = 0.25
      member([turns(steps('11'), steps('1'))], 2, true), // failed ⇒ R = 0
    ];
    const out = trajectoryAdvantages(group, [variant]);
    assert.deepEqual(out.rewards, [1, 0.25, 0]);
    // mean = 1.25 / 3
    const m = 1.25 / 3;
    assertClose(out.advantages, [[1 - m, 1 - m, 1 - m], [0.25 - m], [-m, -m]]);
  });

  test('normByStd divides by the unbiased std + eps', () => {
    const group = [member([turns(steps('11'), steps('1'))], 2), member([turns(steps('00'))], 2)];
    const out = trajectoryAdvantages(group, [variant], { normByStd: true, eps: 0 });
    // R = [1, 0], mean 0.5, unbiased std = √0.5
    assertClose(out.advantages, [[0.5 / Math.SQRT1_2, 0.5 / Math.SQRT1_2], [-0.5 / Math.SQRT1_2]]);
  });

  test('a group of one has mean 0, so A = R', () => {
    const out = trajectoryAdvantages([member([turns(steps('10'))], 2)], [variant]);
    assertClose(out.advantages, [[0.25]]);
    assertClose(trajectoryAdvantages([member([turns(steps('10'))], 2)], [variant], { normByStd: true }).advantages, [[0.25 / (1 + 1e-6)]]);
  });
});

describe('turn-level advantages (spec §6.7)', () => {
  const variant: ChecklistVariant = [[item('a', 1, { required: true })], [item('b', 0.25), item('c', 0.75)]];

  test('a turn position with ≤ 4 holders gets 0; with 5 it is centred over the holders', () => {
    const four = [1, 1, 0, 0].map((x) => member([turns(steps(String(x)))], 2));
    assertClose(turnAdvantages(four, [variant]).advantages, [[0], [0], [0], [0]]);
    const five = [1, 1, 0, 0, 0].map((x) => member([turns(steps(String(x)))], 2));
    // mean 0.4
    assertClose(turnAdvantages(five, [variant]).advantages, [[0.6], [0.6], [-0.4], [-0.4], [-0.4]]);
    // failed members are not holders and get 0
    const withFailed = [...four, member([turns(steps('1'))], 2, true)];
    assertClose(turnAdvantages(withFailed, [variant]).advantages, [[0], [0], [0], [0], [0]]);
    assertClose(turnAdvantages(four, [variant], { minHolders: 3 }).advantages, [[0.5], [0.5], [-0.5], [-0.5]]);
  });

  test('each turn advantage goes on the segments of that turn; unreached turns have no holders', () => {
    const group: GroupMember[] = [
      // turn 0 R = 1 (three steps); turn 1 R = 0.25 + 0.75 (two steps)
      { failed: false, segmentTurns: [0, 0, 0, 1, 1], verdicts: [turns(steps('0', '0', '1'), steps('10', '01'))], refTurns: 2 },
      { failed: false, segmentTurns: [0, 1], verdicts: [turns(steps('1'), steps('10'))], refTurns: 2 }, // 1, 0.25
      { failed: false, segmentTurns: [0, 1], verdicts: [turns(steps('1'), steps('01'))], refTurns: 2 }, // 1, 0.75
      { failed: false, segmentTurns: [0, 1, 1], verdicts: [turns(steps('1'), steps('00', '00'))], refTurns: 2 }, // 1, 0 (partial)
      { failed: false, segmentTurns: [0, 1], verdicts: [turns(steps('1'), steps('11'))], refTurns: 2 }, // 1, 1
      { failed: false, segmentTurns: [0, 0], verdicts: [turns(steps('0', '0'))], refTurns: 2 }, // 0, ended
      { failed: true, segmentTurns: [0, 1], verdicts: [turns(steps('1'), steps('11'))], refTurns: 2 },
    ];
    const out = turnAdvantages(group, [variant]);
    // turn 0: 6 holders, values [1,1,1,1,1,0], mean 5/6. turn 1: 5 holders, values [1,.25,.75,0,1], mean 0.6.
    const a0 = 1 - 5 / 6;
    assertClose(out.advantages, [
      [a0, a0, a0, 0.4, 0.4],
      [a0, -0.35],
      [a0, 0.15],
      [a0, -0.6, -0.6],
      [a0, 0.4],
      [-5 / 6, -5 / 6],
      [0, 0],
    ]);
    assert.deepEqual(out.rewards, [1, 0.625, 0.875, 0.5, 1, 0, 0]);
  });

  test('turn rewards are divided by the number of variants (R_t / V)', () => {
    const half: ChecklistVariant = [[item('a', 1)], [item('b', 1)]];
    const five = [1, 1, 0, 0, 0].map((x) => member([turns(steps(String(x))), turns(steps(String(x)))], 2));
    // each variant gives 1 or 0 ⇒ R_t / V is the same as with one variant: mean 0.4
    assertClose(turnAdvantages(five, [half, half]).advantages, [[0.6], [0.6], [-0.4], [-0.4], [-0.4]]);
    const mixed = [1, 1, 0, 0, 0].map((x) => member([turns(steps(String(x))), turns(steps('0'))], 2));
    // variant 2 always 0 ⇒ R_t / V ∈ {0.5, 0}, mean 0.2
    assertClose(turnAdvantages(mixed, [half, half]).advantages, [[0.3], [0.3], [-0.2], [-0.2], [-0.2]]);
  });
});

describe('step-level advantages (spec §6.7)', () => {
  // One turn: a (no deps) and b (depends on a), weight 0.5 each.
  const variant: ChecklistVariant = [[item('a', 0.5), item('b', 0.5, { deps: ['a'] })]];
  const one = (...rows: string[]) => member([turns(steps(...rows))], 1);
  // Item values per member with eta = 0.5 (delay = s − s_dep − 1, s_dep = −1 without deps):
  //   m0 ['01','10','01']: a done at s1 (delay 1 → 0.5); b true at s0 but not eligible (a not done); b done at s2
  //                        (delay 2 − 1 − 1 = 0 → 1)
  //   m1 ['10','01']: a = 1; b done at s1 (delay 0) = 1
  //   m2 ['00','00']: a eligible, never done = 0; b never eligible (unset)
  //   m3 ['10','00']: a = 1; b eligible at s1, false = 0
  //   m4 ['00','10']: a done at s1 (delay 1) = 0.5; b eligible at s1, false = 0
  //   m5 ['10','01']: as m1
  const six = () => [one('01', '10', '01'), one('10', '01'), one('00', '00'), one('10', '00'), one('00', '10'), one('10', '01')];

  test('dependencies, delay (eta < 1) and backfill', () => {
    // a: values [.5, 1, 0, 1, .5, 1], n = 6, b = 2/3. b: values [1, 1, 0, 0, 1], n = 5, b = 0.6.
    const out = stepAdvantages(six(), [variant], { eta: 0.5 });
    const aHalf = 0.5 * (0.5 - 2 / 3); // a completed later (backfilled) with delay 1
    const aOne = 0.5 * (1 - 2 / 3);
    const aZero = 0.5 * (0 - 2 / 3);
    assertClose(out.advantages, [
      // s0, s1: E = {a} (b's dependency a is not done before s0/s1 — b is not eligible although true at s0); a completes
      // at s1, so s0 is credited too. s2: E = {b}, done at s2 with delay 0.
      [aHalf, aHalf, 0.5 * (1 - 0.6)],
      [aOne, 0.5 * (1 - 0.6)],
      [aZero, aZero],
      [aOne, 0.5 * (0 - 0.6)],
      // a done at s1 (delay 1): both steps get eta^1; b is in no E (a not done before s1)
      [aHalf, aHalf],
      [aOne, 0.5 * (1 - 0.6)],
    ]);
  });

  test('items with n ≤ minCount contributing members use r̃ = b, i.e. contribute 0', () => {
    // Without m5: b has 4 contributing members ⇒ its steps are exactly 0; a: [.5, 1, 0, 1, .5], n = 5, b = 0.6.
    const out = stepAdvantages(six().slice(0, 5), [variant], { eta: 0.5 });
    const d = (r: number) => 0.5 * (r - 0.6);
    assertClose(out.advantages, [[d(0.5), d(0.5), 0], [d(1), 0], [d(0), d(0)], [d(1), 0], [d(0.5), d(0.5)]]);
    // minCount 5: now a (n = 5) is below the threshold too ⇒ all zero
    assertClose(stepAdvantages(six().slice(0, 5), [variant], { eta: 0.5, minCount: 5 }).advantages, [[0, 0, 0], [0, 0], [0, 0], [0, 0], [0, 0]]);
  });

  test('a step whose eligible set is empty gets 0; failed members get 0 and are left out of the statistics', () => {
    const single: ChecklistVariant = [[item('a', 1)]];
    const group = [
      one('1', '1'), // s1: a already done ⇒ E empty
      one('0'),
      one('0'),
      one('0'),
      one('0'),
      { ...one('1'), failed: true },
    ];
    // a values [1, 0, 0, 0, 0] (the failed member does not count): b = 0.2, n = 5
    assertClose(stepAdvantages(group, [single]).advantages, [[0.8, 0], [-0.2], [-0.2], [-0.2], [-0.2], [0]]);
  });

  test('step indices restart at each turn; statistics are per turn', () => {
    const twoTurns: ChecklistVariant = [[item('a', 1)], [item('c', 1)]];
    const group = [
      member([turns(steps('1'), steps('0', '1'))], 2), // turn 1: c done at local step 1 (backfill to step 0)
      ...[0, 1, 2, 3].map(() => member([turns(steps('1'), steps('0', '0'))], 2)),
    ];
    // turn 0: a always 1 ⇒ b = 1 ⇒ 0. turn 1: c values [1, 0, 0, 0, 0], b = 0.2.
    assertClose(stepAdvantages(group, [twoTurns]).advantages, [[0, 0.8, 0.8], [0, -0.2, -0.2], [0, -0.2, -0.2], [0, -0.2, -0.2], [0, -0.2, -0.2]]);
  });

  test('variants are summed, not averaged; normInAdv divides by the eligible weight', () => {
    const single = stepAdvantages(six(), [variant], { eta: 0.5 }).advantages;
    const twice = six().map((m) => ({ ...m, verdicts: [m.verdicts[0]!, m.verdicts[0]!] }));
    assertClose(stepAdvantages(twice, [variant, variant], { eta: 0.5 }).advantages, single.map((row) => row.map((x) => 2 * x)));
    // Σ w over E is 0.5 at every step here
    assertClose(stepAdvantages(six(), [variant], { eta: 0.5, normInAdv: true }).advantages, single.map((row) => row.map((x) => x / 0.5)));
  });

  test('reproduced quirk: a dependency completed earlier in the same step gives delay −1 (value eta^−1)', () => {
    const same = [0, 1, 2, 3, 4].map(() => one('11')); // b done with a at s0 ⇒ 0.5^−1 = 2
    const group = [...same, one('10', '01')]; // b done at s1 after a at s0 ⇒ delay 0 ⇒ 1
    // b: values [2, 2, 2, 2, 2, 1], n = 6, b = 11/6; a: all 1 ⇒ 0. Only the last member has b in some E.
    const out = stepAdvantages(group, [variant], { eta: 0.5 });
    assertClose(out.advantages, [[0], [0], [0], [0], [0], [0, 0.5 * (1 - 11 / 6)]]);
  });
});

describe('computeAdvantages', () => {
  test('dispatches on the granularity and always returns the trajectory rewards', () => {
    const variant: ChecklistVariant = [[item('a', 0.5), item('b', 0.5, { deps: ['a'] })]];
    const group = [['01', '10', '01'], ['10', '01'], ['00', '00'], ['10', '00'], ['00', '10'], ['10', '01']].map((rows) => member([turns(steps(...rows))], 1));
    const opts = { eta: 0.5 };
    const rewards = group.map((m) => trajectoryReward([variant], m.verdicts, 1, false));
    assert.deepEqual(computeAdvantages('trajectory', group, [variant], opts), trajectoryAdvantages(group, [variant]));
    assert.deepEqual(computeAdvantages('turn', group, [variant], opts), turnAdvantages(group, [variant]));
    assert.deepEqual(computeAdvantages('step', group, [variant], opts), stepAdvantages(group, [variant], opts));
    for (const g of ['trajectory', 'turn', 'step'] as const) assert.deepEqual(computeAdvantages(g, group, [variant], opts).rewards, rewards);
    assert.deepEqual(rewards, [1, 1, 0, 0.5, 0.5, 1]);
  });
});
