/**
 * advanceRollouts on a tiny random policy (issue 29): a group's prompt is prefilled once, each episode's tokens are
 * what `generate` samples from its own context with its own seed, and a segment holds exactly the tokens the policy
 * sampled (the `<|im_end|>` added to a cut generation and the `\n` after it are context, not policy tokens).
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { loadChatTokenizer } from '../../../../src/chat/tokenize';
import { generateDemoDataset } from '../../../../src/demo/generator';
import { parseQwenConfig } from '../../../../src/model/net/qwenConfig';
import { generate } from '../../../../src/model/net/generate';
import { QwenModel } from '../../../../src/model/net/qwen';
import { advanceRollouts, episodeSeed, initRollouts, type RolloutLimits, type ToolExecutor } from '../../../../src/stages/rl/rollout';
import type { DecodeCounts } from '../../../../src/model/net/decodeSession';
import { REPO } from '../../../helpers/paths';
import { TINY_POLICY } from '../../../helpers/rlFixture';

const tok = loadChatTokenizer(path.join(REPO, 'assets', 'demo-tokenizer'));
const env: ToolExecutor = { execute: async () => ({ text: '{"ok": true}', success: true, source: 'replay' }) };

before(async () => {
  await tf.setBackend('cpu');
});

test('advanceRollouts: one prefill per prompt, generate\'s tokens per episode, segments of sampled tokens only', async () => {
  const model = QwenModel.init(parseQwenConfig({ vocab_size: tok.vocabSize, eos_token_id: tok.special.imEnd, ...TINY_POLICY }), 5);
  const examples = generateDemoDataset({ seed: 5, count: 3, brokenRate: 0 });
  const G = 3;
  const rollouts = initRollouts(examples, G, tok);
  const prompts = rollouts.map((r) => [...r.tokens]);
  const limits: RolloutLimits = { maxNewTokens: 10, maxModelLen: 4096, maxAssistantTurns: 4, maxUserTurns: 4, temperature: 1, topP: 1 };
  let counts: DecodeCounts | undefined;
  await advanceRollouts(rollouts, new Map(examples.map((e) => [e.uuid, e])), model, tok, env, {
    limits, seed: 99, salt: 't', episodeSeeds: true, onCounts: (c) => (counts = c),
  });
  // Each episode's first generation: generate on its own prompt with its own seed.
  const want = generate(model, prompts, { maxNewTokens: 10, stopTokens: [...tok.stopIds], seeds: rollouts.map((r) => episodeSeed(99, r.id, 0)), padId: tok.special.pad });
  rollouts.forEach((r, b) => {
    const seg = r.segments[0]!;
    const sampled = want.tokens[b]!;
    assert.deepEqual(r.tokens.slice(seg.start, seg.end), sampled, `${r.id}: the segment is what was sampled`);
    assert.equal(seg.start, prompts[b]!.length);
    const after = r.tokens.slice(seg.end, seg.end + 2);
    if (!tok.stopIds.includes(sampled[sampled.length - 1]!)) assert.deepEqual(after, [tok.special.imEnd, tok.newlineId], 'a cut generation gets <|im_end|>\\n as context');
    else assert.equal(after[0], tok.newlineId);
    assert.equal(r.logprobs.length, r.segments.reduce((n, s) => n + s.end - s.start, 0), 'one logprob per policy token');
  });
  // The first round prefilled each prompt once (all but its last token), not G times.
  const once = examples.reduce((n, _, i) => n + prompts[i * G]!.length - 1, 0);
  assert.ok(counts, 'counts reported');
  assert.equal(counts!.shared, (G - 1) * once);
  assert.ok(counts!.prefilled >= once);
  model.dispose();
});
