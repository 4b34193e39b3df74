import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { loadChatTokenizer } from '../../../../src/chat/tokenize';
import { toStoredVariant, type ChecklistVariant } from '../../../../src/stages/checklist/schema';
import type { Example } from '../../../../src/kernel/schema';
import { judgePending, pendingJudgements, type StepJudge } from '../../../../src/stages/rl/judge/phase';
import { applyTurnDecisions, episodeSeed, initRollouts, mixSeed, promptMessages, type RolloutLimits } from '../../../../src/stages/rl/rollout';
import { chunkRanges } from '../../../../src/kernel/chunks';
import type { Rollout } from '../../../../src/stages/rl/rolloutSchema';
import { zeroJudgeTotals } from '../../../../src/kernel/counts';
import { offlineChecklist } from '../../../../src/demo/checklist';
import { generateDemoDataset } from '../../../../src/demo/generator';
import { REPO } from '../../../helpers/paths';

const tok = loadChatTokenizer(path.join(REPO, 'assets', 'demo-tokenizer'));
const limits: RolloutLimits = { maxNewTokens: 16, maxModelLen: 4096, maxAssistantTurns: 30, maxUserTurns: 30, temperature: 1, topP: 1 };
const twoTurn = (): Example => generateDemoDataset({ seed: 3, count: 40, brokenRate: 0 }).find((e) => e.messages.filter((m) => m.role === 'user').length >= 2)!;

/** Puts a generated assistant step (a final reply) on a rollout, as the rollout loop would. */
function reply(r: Rollout, text: string): void {
  r.segments.push({ message: r.messages.length, turn: r.turns - 1, start: r.tokens.length, end: r.tokens.length + 3 });
  r.tokens.push(1, 2, 3);
  r.messages.push({ role: 'assistant', content: text });
  r.generations++;
  r.status = 'judge';
}

/** A judge that answers every item with `pass`, and records what it was asked. */
const stubJudge = (pass: (item: string) => boolean): StepJudge & { asked: string[] } => {
  const asked: string[] = [];
  return {
    asked,
    async judgeStep(view, items) {
      asked.push(`${view.current.length}:${items.map((i) => i.id).join(',')}`);
      return { verdicts: items.map((i) => ({ pass: pass(i.id), ok: true })), stats: { ...zeroJudgeTotals(), calls: 1 } };
    },
  };
};

describe('rollout bookkeeping', () => {
  test('G episodes per prompt, cut after the first user message, with the reference turn count', () => {
    const ex = twoTurn();
    const rs = initRollouts([ex, ex], 3, tok);
    assert.equal(rs.length, 6);
    assert.deepEqual(rs.map((r) => [r.group, r.member]), [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]);
    assert.deepEqual(rs[0]!.messages, promptMessages(ex));
    assert.equal(rs[0]!.messages[rs[0]!.messages.length - 1]!.role, 'user');
    assert.equal(rs[0]!.refTurns, ex.messages.filter((m) => m.role === 'user').length);
    assert.ok(rs[0]!.tokens.length > 10 && rs.every((r) => r.status === 'generate' && r.turns === 1));
  });

  test('the judge sees each step of the current turn with each item; turn control continues or ends the episode', async () => {
    const ex = twoTurn();
    const variants: ChecklistVariant[] = [toStoredVariant(offlineChecklist(ex), 0)];
    const checklists = new Map([[ex.uuid, variants]]);
    const examples = new Map([[ex.uuid, ex]]);
    const [good, bad] = initRollouts([ex], 2, tok);
    reply(good!, '<think>x</think>done');
    reply(bad!, '<think>y</think>nope');
    const items0 = variants[0]![0]!.map((i) => i.id);
    assert.equal(pendingJudgements([good!, bad!], checklists).length, 2);

    // `good` passes everything; `bad` fails every item (required ones included).
    const judge: StepJudge = {
      async judgeStep(view, items) {
        const isGood = view.current.some((m) => m.content.includes('done'));
        return { verdicts: items.map(() => ({ pass: isGood, ok: true })), stats: { ...zeroJudgeTotals(), calls: 1 } };
      },
    };
    const stats = await judgePending([good!, bad!], checklists, judge, { concurrency: 2, salt: 't' });
    assert.equal(stats.calls, 2);
    assert.equal(good!.verdicts![0]![0]!.steps[0]!.length, items0.length);
    applyTurnDecisions([good!, bad!], checklists, examples, limits);
    const hasRequired = variants[0]![0]!.some((i) => i.required_for_next_turn);
    assert.equal(good!.status, 'generate');
    assert.equal(good!.turns, 2);
    assert.equal(good!.messages[good!.messages.length - 1]!.content, ex.messages.filter((m) => m.role === 'user')[1]!.content, 'the next reference user message, verbatim');
    if (hasRequired) {
      assert.equal(bad!.status, 'done');
      assert.equal(bad!.ended, 'turn_control');
    }
  });

  test('a judge failure ends the episode; the last reference turn ends it as final_turn', async () => {
    const ex = twoTurn();
    const variants: ChecklistVariant[] = [toStoredVariant(offlineChecklist(ex), 0)];
    const checklists = new Map([[ex.uuid, variants]]);
    const examples = new Map([[ex.uuid, ex]]);
    const [a, b] = initRollouts([ex], 2, tok);
    reply(a!, '<think>x</think>ok');
    reply(b!, '<think>x</think>ok');
    const failing: StepJudge = {
      async judgeStep(view, items) {
        return { verdicts: items.map(() => ({ pass: true, ok: view.current.length < 0 })), stats: { ...zeroJudgeTotals(), calls: 1, failed: items.length } };
      },
    };
    await judgePending([a!], checklists, failing, { concurrency: 1, salt: 't' });
    applyTurnDecisions([a!], checklists, examples, limits);
    assert.equal(a!.status, 'done');
    assert.equal(a!.ended, 'turn_control');

    // Walk b through every reference turn with a judge that passes everything.
    const pass = stubJudge(() => true);
    for (let t = 0; ; t++) {
      await judgePending([b!], checklists, pass, { concurrency: 1, salt: 't' });
      applyTurnDecisions([b!], checklists, examples, limits);
      if (b!.status === 'done') break;
      reply(b!, '<think>x</think>ok');
    }
    assert.equal(b!.ended, 'final_turn');
    assert.equal(b!.turns, b!.refTurns);
  });

  test('an episode that ended mid-turn is judged on its real steps, then done', async () => {
    const ex = twoTurn();
    const checklists = new Map([[ex.uuid, [toStoredVariant(offlineChecklist(ex), 0)]]]);
    const [r] = initRollouts([ex], 1, tok);
    reply(r!, '<think>x</think>\n<tool_call>\n{"name": 1}\n</tool_call>');
    r!.messages.push({ role: 'tool', content: '{"error_tool_call": {"code": "TOOL_CALL_PARSE_ERROR"}}' });
    r!.ended = 'error_tool_call';
    const judge = stubJudge(() => false);
    await judgePending([r!], checklists, judge, { concurrency: 1, salt: 't' });
    assert.equal(judge.asked.length, 1);
    assert.match(judge.asked[0]!, /^3:/, 'user, assistant and its tool message');
    applyTurnDecisions([r!], checklists, new Map([[ex.uuid, ex]]), limits);
    assert.equal(r!.status, 'done');
    assert.equal(r!.ended, 'error_tool_call');
  });

  test('seeds differ per round and are stable', () => {
    assert.equal(mixSeed(7, 0), mixSeed(7, 0));
    assert.notEqual(mixSeed(7, 0), mixSeed(7, 1));
    assert.notEqual(mixSeed(7, 0), mixSeed(8, 0));
  });

  test('fan-out: chunks of a step number their groups from the chunk\'s first prompt; per-episode seeds depend on (seed, id, generation) only', () => {
    const ex = twoTurn();
    const rs = initRollouts([ex], 2, tok, 3);
    assert.deepEqual(rs.map((r) => [r.group, r.member]), [[3, 0], [3, 1]]);
    assert.equal(episodeSeed(5, 'a#0', 0), episodeSeed(5, 'a#0', 0));
    const seeds = new Set([episodeSeed(5, 'a#0', 0), episodeSeed(5, 'a#1', 0), episodeSeed(5, 'a#0', 1), episodeSeed(6, 'a#0', 0)]);
    assert.equal(seeds.size, 4);
    assert.deepEqual(chunkRanges(5, 2), [[0, 2], [2, 4], [4, 5]]);
    assert.deepEqual(chunkRanges(0, 3), []);
    assert.throws(() => chunkRanges(3, 0), /positive/);
  });
});
