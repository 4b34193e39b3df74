/**
 * Shared check of the chunked prefill (src/model/net/generate.ts), run on each backend by its test file: a long prompt fed
 * in pieces that continue the KV cache gives the tokens of one prefill call, and generateAsync turns the event loop
 * (with a heartbeat, step 0) after each piece.
 */
import assert from 'node:assert/strict';
import { generate, generateAsync } from '../../src/model/net/generate';
import type { QwenModel } from '../../src/model/net/qwen';

export async function assertPrefillInPieces(model: QwenModel): Promise<void> {
  const prompts = [Array.from({ length: 40 }, (_, i) => (i * 7 + 3) % 40), Array.from({ length: 25 }, (_, i) => (i * 5 + 1) % 40), [4, 5, 6]];
  const whole = generate(model, prompts, { maxNewTokens: 8, temperature: 0, prefillChunkTokens: 1e6 });
  // 48 tokens per call for 3 sequences: pieces of 16 positions (0–16, 16–32), then the last 8 with the first step
  const pieces = generate(model, prompts, { maxNewTokens: 8, temperature: 0, prefillChunkTokens: 48 });
  assert.deepEqual(pieces.tokens, whole.tokens);
  for (let b = 0; b < prompts.length; b++) for (let i = 0; i < 8; i++) assert.ok(Math.abs(pieces.logprobs[b]![i]! - whole.logprobs[b]![i]!) < 1e-5, `logprob ${b},${i}`);
  const steps: number[] = [];
  const async = await generateAsync(model, prompts, { maxNewTokens: 8, temperature: 0, prefillChunkTokens: 48, yieldEvery: 100, onStep: (s) => steps.push(s) });
  assert.deepEqual(async.tokens, pieces.tokens);
  assert.deepEqual(steps, [0, 0]);
}
