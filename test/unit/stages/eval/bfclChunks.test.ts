/**
 * BFCL in chunks (src/stages/eval/bfcl/chunks.ts): chunks are a function of the data and the chunk size only, the
 * merge gives the results document of one pass, and a merge refuses missing or mismatched chunks.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { chunkExamples, mergeChunkFiles, planChunks, type BfclChunkFile } from '../../../../src/stages/eval/bfcl/chunks';
import { evaluateBfcl, ModelPolicy, ReferencePolicy } from '../../../../src/stages/eval/bfcl/runner';
import { bfclDataDir } from '../../../../src/infra/binaries';
import { loadChatTokenizer } from '../../../../src/chat/tokenize';
import { parseQwenConfig } from '../../../../src/model/net/qwenConfig';
import { QwenModel } from '../../../../src/model/net/qwen';
import { selectBackend } from '../../../../src/model/net/backend';
import { chunkCount } from '../../../../src/kernel/chunks';
import { TINY_POLICY } from '../../../helpers/rlFixture';
import type { BfclResults } from '../../../../src/stages/eval/bfcl/score';

const categories = ['simple_python', 'multiple', 'irrelevance'];
/** What must not depend on chunking: everything but the time stamps. */
const stable = (r: BfclResults) => ({ ...r, createdAt: '', seconds: 0 });

describe('chunk plan', () => {
  test('runs of at most chunkSize examples in evaluation order, cut at category boundaries', () => {
    const counts = [{ category: 'a', count: 5 }, { category: 'b', count: 0 }, { category: 'c', count: 3 }];
    const plan = planChunks(counts, 3);
    assert.deepEqual(plan, [
      { index: 0, segments: [{ category: 'a', start: 0, count: 3 }] },
      { index: 1, segments: [{ category: 'a', start: 3, count: 2 }, { category: 'c', start: 0, count: 1 }] },
      { index: 2, segments: [{ category: 'c', start: 1, count: 2 }] },
    ]);
    assert.deepEqual(plan.map(chunkExamples), [3, 3, 2]);
    assert.equal(plan.length, chunkCount(8, 3));
    // One chunk when it holds everything: each category in one piece, as an evaluation without chunks.
    assert.deepEqual(planChunks(counts, 100), [{ index: 0, segments: [{ category: 'a', start: 0, count: 5 }, { category: 'c', start: 0, count: 3 }] }]);
    assert.deepEqual(planChunks([{ category: 'a', count: 0 }], 4), []);
    assert.throws(() => planChunks(counts, 0), /positive integer/);
    assert.equal(chunkCount(0, 8), 0);
    assert.equal(chunkCount(24, 32), 1);
    assert.equal(chunkCount(33, 32), 2);
  });

  test('the merge refuses a missing chunk and results that do not match the segments', () => {
    const file = (index: number, category: string, n: number): BfclChunkFile => ({
      index, items: n, seconds: 1, startedAt: 1000 * index, finishedAt: 1000 * index + 500, worker: 'w',
      chunk: { index, segments: [{ category, start: 0, count: n }] },
      results: Array.from({ length: n }, (_, i) => ({ id: `${category}_${i}`, category, valid: i % 2 === 0 })),
    });
    const opts = { categories: ['a', 'b'], policy: { kind: 'reference' }, dataDir: '/d', createdAt: 'now' };
    const merged = mergeChunkFiles([file(1, 'b', 2), file(0, 'a', 3)], opts);
    assert.deepEqual(merged.examples.map((e) => e.id), ['a_0', 'a_1', 'a_2', 'b_0', 'b_1']);
    assert.deepEqual(merged.overall, { accuracy: 3 / 5, correct: 3, total: 5 });
    assert.equal(merged.seconds, 1.5, 'first start to last end');
    assert.throws(() => mergeChunkFiles([file(1, 'b', 2)], opts), /chunk 0 is missing/);
    const short = { ...file(0, 'a', 3), results: file(0, 'a', 2).results };
    assert.throws(() => mergeChunkFiles([short], opts), /result 2 is missing/);
    const wrong = { ...file(0, 'a', 2), results: file(0, 'b', 2).results };
    assert.throws(() => mergeChunkFiles([wrong], opts), /is of b, expected a/);
    const none = mergeChunkFiles([], opts);
    assert.equal(none.overall.total, 0);
    assert.equal(none.seconds, 0);
  });
});

describe('evaluation in chunks', () => {
  test('the reference policy: any chunk size gives the document of one pass', async () => {
    const dataDir = bfclDataDir();
    const one = await evaluateBfcl(new ReferencePolicy(), { categories, dataDir, limit: 7 });
    for (const chunkSize of [1, 4, 7, 21, 64]) {
      const chunked = await evaluateBfcl(new ReferencePolicy(), { categories, dataDir, limit: 7, chunkSize });
      assert.deepEqual(stable(chunked), stable(one), `chunkSize ${chunkSize}`);
    }
  });

  test('the project\'s model, greedy: chunks of the same size give the same outputs; batches of 1 those of one pass', async () => {
    await selectBackend('auto');
    const tok = loadChatTokenizer(path.join(__dirname, '..', '..', '..', '..', 'assets', 'demo-tokenizer'));
    const model = QwenModel.init(parseQwenConfig({ vocab_size: tok.vocabSize, eos_token_id: tok.special.imEnd, ...TINY_POLICY }), 3);
    try {
      const run = (batchSize: number, chunkSize?: number) =>
        evaluateBfcl(new ModelPolicy(model, tok, { kind: 'tiny' }, { maxNewTokens: 6, batchSize }), { categories, dataDir: bfclDataDir(), limit: 3, ...(chunkSize ? { chunkSize } : {}) });
      const a = await run(2, 4);
      const b = await run(2, 4);
      assert.deepEqual(stable(a), stable(b));
      assert.deepEqual(stable(await run(1, 4)), stable(await run(1)), 'batches of one: chunks change nothing');
      assert.deepEqual(stable(await run(2, 9)), stable(await run(2)), 'one chunk holding everything: one pass');
    } finally {
      model.dispose();
    }
  });
});
