/**
 * The decoding session (src/model/net/decodeSession.ts) gives the tokens `generate` gives on the whole contexts, while it
 * prefills a group's shared prompt once and carries each row's KV cache into the next round: on wasm/cpu's op path
 * and on native TensorFlow (its op path and the decoding graph), sampled and greedy.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as tf from '@tensorflow/tfjs';
import type { QwenConfig } from '../../../src/model/net/qwenConfig';
import { DecodeSession, decodeAsync, type DecodeRequest } from '../../../src/model/net/decodeSession';
import { DecodePool } from '../../../src/model/net/decodePool';
import { kvBytesPerSlot } from '../../../src/model/net/kvCache';
import { CACHE_CHUNK } from '../../../src/model/net/nativeInference';
import { generate } from '../../../src/model/net/generate';
import { QwenModel } from '../../../src/model/net/qwen';
import { Rng } from '../../../src/model/net/random';
import { activateBackend, skipBackend } from '../../helpers/testBackend';

const config: QwenConfig = {
  model_type: 'qwen3', vocab_size: 48, hidden_size: 16, intermediate_size: 24, num_hidden_layers: 2, num_attention_heads: 4,
  num_key_value_heads: 2, head_dim: 4, rms_norm_eps: 1e-6, rope_theta: 10000, tie_word_embeddings: false,
  max_position_embeddings: 512, hidden_act: 'silu', initializer_range: 0.3,
};
const STOP = [3, 5];
const rng = new Rng(42);
const seq = (n: number) => Array.from({ length: n }, () => 6 + Math.floor(rng.next() * 40));

/** Three prompts (lengths 7, 19, 12), G = 3 samples each, per-request seeds. */
const prompts = [seq(7), seq(19), seq(12)];
const round0: DecodeRequest[] = prompts.flatMap((p, i) => [0, 1, 2].map((m) => ({ key: `p${i}#${m}`, tokens: p, maxNewTokens: 9, seed: 1000 + 10 * i + m })));

function plain(model: QwenModel, reqs: readonly DecodeRequest[], opts: { temperature?: number; seed?: number }) {
  const perRow = reqs.every((r) => r.seed !== undefined);
  const out = generate(model, reqs.map((r) => [...r.tokens]), { maxNewTokens: Math.max(...reqs.map((r) => r.maxNewTokens)), stopTokens: STOP, temperature: opts.temperature ?? 1, ...(perRow ? { seeds: reqs.map((r) => r.seed!) } : { seed: opts.seed ?? 0 }) });
  return { tokens: out.tokens.map((t, b) => t.slice(0, reqs[b]!.maxNewTokens)), logprobs: out.logprobs.map((l, b) => l.slice(0, reqs[b]!.maxNewTokens)) };
}

const close = (a: number[][], b: number[][], what: string) => a.forEach((row, i) => row.forEach((x, j) => assert.ok(Math.abs(x - b[i]![j]!) < 1e-3, `${what} [${i}][${j}]: ${x} vs ${b[i]![j]}`)));

for (const backend of ['cpu', 'native'] as const) {
  describe(`decoding session (${backend})`, { skip: skipBackend(backend) }, () => {
    let previous = 'cpu';
    let model: QwenModel;
    before(async () => {
      previous = await activateBackend(backend);
      model = QwenModel.init(config, 7);
    });
    after(async () => {
      model.dispose();
      await tf.setBackend(previous);
    });

    test('round 0: a group\'s prompt is prefilled once; the tokens are generate\'s on the whole contexts', async () => {
      const session = new DecodeSession(model);
      const got = await decodeAsync(session, round0, { stopTokens: STOP });
      const want = plain(model, round0, {});
      assert.deepEqual(got.tokens, want.tokens);
      close(got.logprobs, want.logprobs, 'logprobs');
      assert.equal(session.counts.prefilled, prompts.reduce((n, p) => n + p.length - 1, 0), 'each distinct prompt prefilled once (all but its last token)');
      assert.equal(session.counts.shared, 2 * prompts.reduce((n, p) => n + p.length - 1, 0));
      assert.equal(session.held().size, 9);
      session.dispose();
    });

    test('rounds: a row that goes on feeds only its new tokens; ended rows are dropped; a row that does not match is prefilled again', async () => {
      const session = new DecodeSession(model);
      const r0 = await decodeAsync(session, round0, { stopTokens: STOP });
      // Round 1: six rows go on with a tool result appended (different lengths); one row's context was rewritten.
      const round1: DecodeRequest[] = round0.slice(0, 7).map((q, b) => ({
        ...q,
        tokens: b === 6 ? [...q.tokens.slice(0, -1), 44, ...r0.tokens[b]!, 7, 8] : [...q.tokens, ...r0.tokens[b]!, 3, 4, ...seq(2 + 3 * b)],
        seed: q.seed! + 1,
        maxNewTokens: b === 2 ? 3 : 9,
      }));
      const before = { ...session.counts };
      const got = await decodeAsync(session, round1, { stopTokens: STOP });
      const want = plain(model, round1, {});
      assert.deepEqual(got.tokens, want.tokens);
      close(got.logprobs, want.logprobs, 'logprobs');
      assert.ok(got.tokens[2]!.length <= 3, 'a request\'s own maxNewTokens');
      const reusedRows = round1.slice(0, 6).reduce((n, q, b) => n + round0[b]!.tokens.length + r0.tokens[b]!.length - 1, 0);
      assert.equal(session.counts.reused - before.reused, reusedRows, 'the rows that go on keep what they held');
      const fed = round1.slice(0, 6).reduce((n, q, b) => n + q.tokens.length - 1 - (round0[b]!.tokens.length + r0.tokens[b]!.length - 1), 0);
      assert.equal(session.counts.prefilled - before.prefilled, fed + round1[6]!.tokens.length - 1, 'new tokens only, and the rewritten row whole');
      assert.deepEqual([...session.held().keys()], round1.map((q) => q.key));
      // Round 2 with a shared PRNG (no per-request seeds): generate's draws, in request order.
      const round2 = round1.slice(0, 4).map((q, b) => ({ key: q.key, tokens: [...q.tokens, ...got.tokens[b]!, 9], maxNewTokens: 6 }));
      const g2 = await decodeAsync(session, round2, { stopTokens: STOP, seed: 77 });
      assert.deepEqual(g2.tokens, plain(model, round2, { seed: 77 }).tokens);
      session.dispose();
    });

    test('greedy (temperature 0, the decoding graph on native): generate\'s tokens across two rounds', async () => {
      const session = new DecodeSession(model);
      const reqs = round0.filter((_, b) => b % 3 === 0).map((q) => ({ ...q, seed: undefined }));
      const a = await decodeAsync(session, reqs, { stopTokens: STOP, temperature: 0 });
      assert.deepEqual(a.tokens, plain(model, reqs, { temperature: 0 }).tokens);
      const next = reqs.map((q, b) => ({ ...q, tokens: [...q.tokens, ...a.tokens[b]!, 11, 12, 13] }));
      const b2 = await decodeAsync(session, next, { stopTokens: STOP, temperature: 0 });
      assert.deepEqual(b2.tokens, plain(model, next, { temperature: 0 }).tokens);
      assert.ok(session.counts.reused > 0);
      session.dispose();
    });

    test('a round stopped midway (a cancelled or killed activity) leaves the session empty; the next one is generate\'s again', async () => {
      const session = new DecodeSession(model);
      await decodeAsync(session, round0, { stopTokens: STOP });
      let steps = 0;
      await assert.rejects(decodeAsync(session, round0.map((q) => ({ ...q, tokens: [...q.tokens, 9] })), { stopTokens: STOP, yieldEvery: 1, onStep: () => {
        if (++steps === 3) throw new Error('cancelled');
      } }), /cancelled/);
      assert.equal(session.held().size, 0);
      const again = round0.map((q) => ({ ...q, tokens: [...q.tokens, 9, 10] }));
      assert.deepEqual((await decodeAsync(session, again, { stopTokens: STOP })).tokens, plain(model, again, {}).tokens);
      session.dispose();
    });

    test('rows that finish early leave the decoding batch (the live ones go on in a cache of their own); every row\'s cache is whole for the next round', async () => {
      const session = new DecodeSession(model);
      // Six of nine rows stop after 2 tokens, the rest run 14: the cache is compacted after the second step.
      const short = round0.map((q, b) => ({ ...q, maxNewTokens: b % 3 === 0 ? 14 : 2 }));
      for (const temperature of [1, 0]) {
        const a = await decodeAsync(session, short, { stopTokens: STOP, temperature });
        assert.deepEqual(a.tokens, plain(model, short, { temperature }).tokens);
        close(a.logprobs, plain(model, short, { temperature }).logprobs, 'logprobs');
        const next = short.map((q, b) => ({ ...q, tokens: [...q.tokens, ...a.tokens[b]!, 11, 12], maxNewTokens: 5 }));
        const before = { ...session.counts };
        const b2 = await decodeAsync(session, next, { stopTokens: STOP, temperature });
        assert.deepEqual(b2.tokens, plain(model, next, { temperature }).tokens, 'the parked rows\' caches are whole');
        assert.equal(session.counts.prefilled - before.prefilled, 2 * next.length, 'no row is prefilled again: each feeds its last sampled token and 11 (12 is decoding\'s first input)');
        // A shared PRNG is drawn in request order across a compaction: rows that stop early (half the ids stop).
        const wide = Array.from({ length: 24 }, (_, i) => 6 + i);
        const shared = round0.map((q) => ({ ...q, seed: undefined, maxNewTokens: 12 }));
        const c = await decodeAsync(new DecodeSession(model), shared, { stopTokens: wide, temperature, seed: 5 });
        const want = generate(model, shared.map((q) => [...q.tokens]), { maxNewTokens: 12, stopTokens: wide, temperature, seed: 5 });
        assert.deepEqual(c.tokens, want.tokens);
        // The compaction happened: five of nine rows had finished with more than four steps to go, one went on.
        const lengths = c.tokens.map((t) => t.length).sort((x, y) => x - y);
        assert.ok(lengths[4]! <= 7 && lengths[8]! > lengths[4]!, `lengths ${lengths}`);
        session.clear();
      }
      session.dispose();
    });

    test('pool: its estimate of a block is the cache decoding lays out (to a chunk of slots), so a budget of exactly that keeps the round in one loop, every row going on', async () => {
      const bps = kvBytesPerSlot(model.dims);
      const sized = new DecodePool(model, 1 << 30);
      const e0 = sized.estimate(round0);
      await sized.decode(round0, { stopTokens: STOP });
      const g0 = (sized as unknown as { sessions: DecodeSession[] }).sessions[0]!;
      assert.ok(e0 >= g0.bytes && e0 - g0.bytes < round0.length * CACHE_CHUNK * bps, `estimate ${e0} vs laid out ${g0.bytes}`);
      const r0 = await new DecodePool(model, 1 << 30).decode(round0, { stopTokens: STOP });
      const round1 = round0.map((q, b) => ({ ...q, tokens: [...q.tokens, ...r0.tokens[b]!, 3, 4, ...seq(1 + b)] }));
      const e1 = sized.estimate(round1, g0);
      await sized.decode(round1, { stopTokens: STOP });
      assert.ok(e1 >= g0.bytes && e1 - g0.bytes < round1.length * CACHE_CHUNK * bps, `round 1: estimate ${e1} vs laid out ${g0.bytes}`);
      // A pool whose budget is that estimate: one block both rounds, the second round prefilling only the new tokens.
      const tight = new DecodePool(model, Math.max(e0, e1));
      await tight.decode(round0, { stopTokens: STOP });
      const before = tight.counts.prefilled;
      const got = await tight.decode(round1, { stopTokens: STOP });
      assert.deepEqual(got.tokens, plain(model, round1, {}).tokens);
      assert.equal((tight as unknown as { sessions: DecodeSession[] }).sessions.length, 1, 'one loop');
      assert.equal(tight.counts.prefilled - before, round1.reduce((n, q, b) => n + q.tokens.length - round0[b]!.tokens.length - r0.tokens[b]!.length, 0), 'new tokens only');
      // Half that budget: two loops; the results stay generate's.
      const half = new DecodePool(model, Math.max(e0, e1) / 2);
      await half.decode(round0, { stopTokens: STOP });
      assert.deepEqual((await half.decode(round1, { stopTokens: STOP })).tokens, plain(model, round1, {}).tokens);
      assert.ok((half as unknown as { sessions: DecodeSession[] }).sessions.length >= 2);
      for (const p of [sized, tight, half]) p.dispose();
    });

    test('pool: the budget bounds every block\'s cache together; blocks that do not fit beside the next one let theirs go and are prefilled again', async () => {
      const total = (p: DecodePool) => (p as unknown as { sessions: DecodeSession[] }).sessions.reduce((n, s) => n + s.bytes, 0);
      const r0 = await new DecodePool(model, 1 << 30).decode(round0, { stopTokens: STOP });
      const round1 = round0.map((q, b) => ({ ...q, tokens: [...q.tokens, ...r0.tokens[b]!, 3, 4, ...seq(1 + b)] }));
      const round2 = round1.map((q) => ({ ...q, tokens: [...q.tokens, 7, 8, 9] }));
      // Room for about a third of the rows' caches: three or more blocks, of which one is kept from round to round.
      const pool = new DecodePool(model, Math.ceil(new DecodePool(model, 1 << 30).estimate(round1) / 3));
      const seen: number[] = [];
      const onBlock = () => void seen.push(total(pool));
      await pool.decode(round0, { stopTokens: STOP, onBlock });
      assert.ok(total(pool) <= pool.budgetBytes, `after round 0: ${total(pool)} > ${pool.budgetBytes}`);
      const got1 = await pool.decode(round1.map((q) => ({ ...q, maxNewTokens: 4 })), { stopTokens: STOP, onBlock });
      assert.ok(total(pool) <= pool.budgetBytes, `after round 1: ${total(pool)} > ${pool.budgetBytes}`);
      const got2 = await pool.decode(round2.map((q) => ({ ...q, maxNewTokens: 4 })), { stopTokens: STOP, onBlock });
      assert.ok((pool as unknown as { sessions: DecodeSession[] }).sessions.length >= 3, 'three blocks or more');
      assert.ok(pool.spilled > 0, 'some caches let go');
      assert.ok(seen.every((n) => n <= pool.budgetBytes), `held beside a block: ${seen}`);
      assert.deepEqual(got1.tokens, plain(model, round1.map((q) => ({ ...q, maxNewTokens: 4 })), {}).tokens);
      assert.deepEqual(got2.tokens, plain(model, round2.map((q) => ({ ...q, maxNewTokens: 4 })), {}).tokens);
      // The block kept last round goes first and reuses its rows: fewer tokens prefilled than all the contexts.
      assert.ok(pool.counts.reused > 0, 'a kept block went on');
      pool.dispose();
    });

    test('no tensors left behind; an empty round clears the session', async () => {
      const session = new DecodeSession(model);
      // The same rounds twice (native keeps a few constants per new shape, and a decoding graph session per batch size).
      // The second round compacts its batch (rows of 2 and of 12 new tokens), parking the finished rows.
      const next = round0.slice(0, 4).map((q, b) => ({ ...q, tokens: [...q.tokens, 9, 10], maxNewTokens: b ? 2 : 12 }));
      const after = round0.slice(0, 4).map((q) => ({ ...q, tokens: [...q.tokens, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24] }));
      const rounds = async () => {
        await decodeAsync(session, round0, { stopTokens: STOP });
        await decodeAsync(session, next, { stopTokens: STOP });
        await decodeAsync(session, after, { stopTokens: STOP });
      };
      await rounds();
      const held = tf.memory().numTensors;
      await rounds();
      assert.equal(tf.memory().numTensors, held, 'tensors after the same rounds again');
      await decodeAsync(session, [], {});
      assert.equal(session.held().size, 0);
      session.dispose();
    });
  });
}
