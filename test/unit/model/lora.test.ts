/**
 * LoRA (src/model/net/lora.ts) against PEFT itself: adapters written by `peft` load here with PEFT's logits, ours load in
 * `peft` with ours (fixtures by scripts/make-peft-fixture.py and scripts/make-lora-fixture.ts); the projected gradient
 * is the chain rule through the merge; training moves only the adapter; a resumed run ends bit for bit where an
 * uninterrupted one does; bad adapter folders fail naming the file and the field.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync, cpSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { loadHfCheckpoint } from '../../../src/model/formats/checkpoint';
import { LoraAdapter, LoraSettings, ADAPTER_CONFIG, ADAPTER_WEIGHTS } from '../../../src/model/net/lora';
import { loraTrainable } from '../../../src/model/net/trainable';
import { modelLogitsCommand, modelMergeCommand } from '../../../src/cli/modelCommand';
import { SafetensorsReader } from '../../../src/model/formats/safetensors';
import { SftTrainer, type SftConfig, type TokenizedExample } from '../../../src/stages/sft/trainer';
import { FIXTURES } from '../../helpers/paths';
import { checkLogits, type LogitsFixture } from '../../helpers/logits';
import { activateBackend, skipBackend, type TestBackend } from '../../helpers/testBackend';

const fixture = (name: string, file: string): LogitsFixture => JSON.parse(readFileSync(join(FIXTURES, name, file), 'utf8')) as LogitsFixture;

const SFT: SftConfig = { epochs: 4, microBatch: 2, gradAccum: 1, peakLr: 5e-2, warmupRatio: 0, minLrRatio: 0.1, maxGradNorm: 1, weightDecay: 0.01, maxSeqLen: 16, seed: 3, padId: 0 };
const DATA: TokenizedExample[] = [
  { ids: [1, 5, 9, 2, 33, 60, 7, 12], lossMask: [0, 0, 0, 1, 1, 1, 1, 1] },
  { ids: [3, 3, 40, 41, 7, 63, 22, 8], lossMask: [0, 0, 1, 1, 1, 1, 1, 1] },
  { ids: [10, 20, 30, 40, 50, 60, 1, 2], lossMask: [0, 1, 1, 1, 1, 1, 1, 1] },
  { ids: [4, 8, 15, 16, 23, 42, 7, 5], lossMask: [0, 0, 0, 0, 1, 1, 1, 1] },
];

const valuesOf = (m: Map<string, tf.Variable>): Map<string, Float32Array> => new Map([...m].map(([k, v]) => [k, Float32Array.from(v.dataSync() as Float32Array)]));

for (const backend of ['cpu', 'native'] as TestBackend[]) {
  describe(`LoRA on ${backend}`, { skip: skipBackend(backend) }, () => {
    let previous = 'cpu';
    before(async () => {
      previous = await activateBackend(backend);
    });
    after(async () => {
      await tf.setBackend(previous);
    });

    for (const [name, base] of [['peft-llama-all', 'hf-tiny-llama-tied'], ['peft-qwen3-rs', 'hf-tiny-qwen3']] as const) {
      test(`an adapter written by peft (${name}) gives PeftModel's logits within 1e-4`, () => {
        const model = loadHfCheckpoint(join(FIXTURES, base));
        const adapter = LoraAdapter.load(model, join(FIXTURES, name));
        checkLogits(model, fixture(name, 'logits.json'), name);
        adapter.unmerge();
        checkLogits(model, fixture(base, 'logits.json'), `${base} after unmerge`);
        adapter.dispose();
        model.dispose();
      });
    }

    test('an adapter written here loads in peft with the same logits, and its files are reproduced byte for byte', () => {
      const model = loadHfCheckpoint(join(FIXTURES, 'hf-tiny-llama-tied'));
      const dir = join(FIXTURES, 'tfjs-lora-llama');
      const adapter = LoraAdapter.load(model, dir);
      checkLogits(model, fixture('tfjs-lora-llama', 'peft-logits.json'), 'tfjs-lora-llama in peft');
      assert.ok(Buffer.from(adapter.weightsBytes()).equals(readFileSync(join(dir, ADAPTER_WEIGHTS))), 'adapter_model.safetensors differs after a load → save');
      assert.deepEqual(adapter.configJson('hf-tiny-llama-tied'), JSON.parse(readFileSync(join(dir, ADAPTER_CONFIG), 'utf8')));
      adapter.dispose();
      model.dispose();
    });

    test('the projected gradient is the chain rule through the merge (finite differences)', () => {
      const model = loadHfCheckpoint(join(FIXTURES, 'hf-tiny-llama-tied'));
      const adapter = LoraAdapter.create(model, LoraSettings.parse({ rank: 2, alpha: 4, targets: ['q_proj', 'down_proj'], trainTokens: [5] }), 1);
      for (const v of adapter.params().values()) v.assign(tf.mul(tf.randomNormal(v.shape, 0, 1, 'float32', 7), 0.2));
      adapter.merge();
      const ids = [DATA[0]!.ids.slice(0, -1)];
      const targets = [DATA[0]!.ids.slice(1)];
      const mask = [DATA[0]!.lossMask.slice(1)];
      const lossValue = (): number => tf.tidy(() => model.loss(ids, targets, mask).dataSync()[0]!);
      const tape = adapter.tapeVariables();
      const { value, grads } = tf.variableGrads(() => model.loss(ids, targets, mask), [...tape.values()]);
      value.dispose();
      const byName = new Map([...tape].map(([n, v]) => [n, grads[v.name]!]));
      const projected = adapter.project(byName);
      const eps = 1e-2;
      for (const [name, v] of adapter.params()) {
        const g = projected.get(name)!.dataSync();
        const at = 1; // one entry per tensor
        const data = Float32Array.from(v.dataSync() as Float32Array);
        const probe = (delta: number): number => {
          const d = Float32Array.from(data);
          d[at] = d[at]! + delta;
          v.assign(tf.tensor(d, v.shape));
          adapter.merge();
          return lossValue();
        };
        const numeric = (probe(eps) - probe(-eps)) / (2 * eps);
        v.assign(tf.tensor(data, v.shape));
        adapter.merge();
        assert.ok(Math.abs(numeric - g[at]!) <= 2e-3 + 2e-2 * Math.abs(numeric), `${name}: projected ${g[at]} vs finite difference ${numeric}`);
      }
      tf.dispose([...byName.values(), ...projected.values()]);
      adapter.dispose();
      model.dispose();
    });

    for (const base of ['hf-tiny-llama-tied', 'hf-tiny-qwen3']) {
      test(`low-rank mode (${base}): the factors' gradients from the training graphs are the projected ones, for the SFT loss and for token log-probabilities; no training graph, no low-rank mode`, () => {
        const model = loadHfCheckpoint(join(FIXTURES, base));
        const adapter = LoraAdapter.create(model, LoraSettings.parse({ rank: 3, alpha: 6, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] }), 2);
        for (const v of adapter.params().values()) v.assign(tf.mul(tf.randomNormal(v.shape, 0, 1, 'float32', 5), 0.2));
        adapter.merge();
        const ids = DATA.map((d) => d.ids.slice(0, -1));
        const targets = DATA.map((d) => d.ids.slice(1));
        const mask = DATA.map((d) => d.lossMask.slice(1));
        const losses: [string, () => tf.Scalar][] = [
          ['loss', () => model.loss(ids, targets, mask)],
          ['tokenLogprobs', () => tf.sum(tf.mul(model.tokenLogprobs(ids, targets, undefined, 0.7), tf.tensor2d(mask.map((m, b) => m.map((x, t) => x * (1 + ((b + t) % 3)))))))],
        ];
        for (const [what, f] of losses) {
          const merged = loraTrainable(adapter, { lowRank: false });
          const g1 = tf.variableGrads(f, [...merged.tape.values()]);
          const want = merged.project(new Map([...merged.tape].map(([n, v]) => [n, g1.grads[v.name]!])));
          const low = loraTrainable(adapter);
          const lowRank = backend === 'native';
          assert.equal([...low.tape.keys()].every((k) => low.params.has(k)), lowRank, lowRank ? 'the tape watches A and B' : 'no training graph: the merged weights');
          const g2 = tf.variableGrads(f, [...low.tape.values()]);
          const got = low.project(new Map([...low.tape].map(([n, v]) => [n, g2.grads[v.name]!])));
          assert.ok(Math.abs(g1.value.dataSync()[0]! - g2.value.dataSync()[0]!) < 1e-5, `${what}: loss`);
          for (const [name, w] of want) {
            const a = w.dataSync();
            const b = got.get(name)!.dataSync();
            const scale = Math.max(1e-3, ...Array.from(a, Math.abs));
            a.forEach((x, i) => assert.ok(Math.abs(x - b[i]!) <= 1e-4 * scale, `${what} ${name}[${i}]: low-rank ${b[i]} vs projected ${x}`));
          }
          tf.dispose([g1.value, g2.value, ...Object.values(g1.grads), ...Object.values(g2.grads), ...want.values(), ...got.values()]);
        }
        adapter.dispose();
        model.dispose();
      });
    }

    test('SFT through LoRA moves only the adapter and resumes bit for bit', async () => {
      const settings = LoraSettings.parse({ rank: 2, alpha: 4, trainTokens: [7] });
      const run = async (steps: number, from?: { config: unknown; weights: Uint8Array; trainer: SftTrainer }) => {
        const model = loadHfCheckpoint(join(FIXTURES, 'hf-tiny-llama-tied'));
        const adapter = from
          ? LoraAdapter.fromPeft(model, { config: from.config, weights: SafetensorsReader.fromBytes(from.weights, 'resume'), where: 'resume' })
          : LoraAdapter.create(model, settings, 9);
        const trainer = new SftTrainer(model, DATA, SFT, loraTrainable(adapter));
        if (from) trainer.restore(from.trainer.state, from.trainer.optimizer.state());
        while (trainer.state.step < steps) await trainer.step();
        return { model, adapter, trainer };
      };
      const straight = await run(4);
      const before = loadHfCheckpoint(join(FIXTURES, 'hf-tiny-llama-tied'));
      // Only the adapter's weights moved: norms untouched, the embedding only in row 7.
      const w0 = before.namedWeights();
      const w1 = straight.model.namedWeights();
      assert.deepEqual(w1.get('model.norm.weight')!.data, w0.get('model.norm.weight')!.data);
      const e0 = w0.get('model.embed_tokens.weight')!.data;
      const e1 = w1.get('model.embed_tokens.weight')!.data;
      const H = 32;
      for (let r = 0; r < e0.length / H; r++) {
        const same = e0.subarray(r * H, (r + 1) * H).every((x, i) => x === e1[r * H + i]);
        assert.equal(same, r !== 7, `embedding row ${r} ${same ? 'did not move' : 'moved'}`);
      }
      assert.ok(straight.trainer.state.losses.at(-1)! < straight.trainer.state.losses[0]!, `loss ${straight.trainer.state.losses.join(' → ')}`);
      before.dispose();

      const half = await run(2);
      const weights = half.adapter.weightsBytes();
      const resumed = await run(4, { config: JSON.parse(JSON.stringify(half.adapter.configJson())), weights, trainer: half.trainer });
      const a = valuesOf(straight.adapter.params());
      const b = valuesOf(resumed.adapter.params());
      for (const [k, v] of a) assert.deepEqual(b.get(k), v, `${k} differs after resume`);
      for (const r of [straight, half, resumed]) {
        r.trainer.optimizer.dispose();
        r.adapter.dispose();
        r.model.dispose();
      }
    });
  });
}

test('bad adapter folders fail naming the file and the field', async () => {
  await tf.setBackend('cpu');
  const model = loadHfCheckpoint(join(FIXTURES, 'hf-tiny-llama-tied'));
  const src = join(FIXTURES, 'peft-llama-all');
  const withConfig = (edit: (c: Record<string, unknown>) => void): string => {
    const dir = mkdtempSync(join(tmpdir(), 'cm2-lora-'));
    cpSync(src, dir, { recursive: true });
    const c = JSON.parse(readFileSync(join(dir, ADAPTER_CONFIG), 'utf8')) as Record<string, unknown>;
    edit(c);
    writeFileSync(join(dir, ADAPTER_CONFIG), JSON.stringify(c));
    return dir;
  };
  assert.throws(() => LoraAdapter.load(model, withConfig((c) => { c['use_dora'] = true; })), /adapter_config\.json: field 'use_dora' is true/);
  assert.throws(() => LoraAdapter.load(model, withConfig((c) => { c['r'] = 0; })), /adapter_config\.json: field 'r' must be a positive number/);
  assert.throws(() => LoraAdapter.load(model, withConfig((c) => { c['r'] = 5; })), /lora_A\.weight has shape \[4, 32\], expected \[5, 32\]/);
  assert.throws(() => LoraAdapter.load(model, withConfig((c) => { c['target_modules'] = ['q_proj']; })), /adapter_model\.safetensors: tensors this adapter's config does not explain: base_model\.model\.model\.layers\.0\.mlp\.down_proj\.lora_A\.weight/);
  assert.throws(() => LoraAdapter.load(model, withConfig((c) => { c['target_modules'] = ['nothing']; })), /match no linear layer/);
  assert.throws(() => LoraAdapter.load(model, withConfig((c) => { c['peft_type'] = 'IA3'; })), /field 'peft_type' is "IA3"/);
  assert.throws(() => LoraSettings.parse({ rank: 4, alpha: 8, dropout: 0.1 }), /must be 0: the embedded engine trains LoRA through the merged weight/);
  model.dispose();
});

test('cm2 model merge writes an HF folder with the adapter merged (peft\'s logits); cm2 model logits --adapter prints the adapted logits', async () => {
  await tf.setBackend('cpu');
  const out = join(mkdtempSync(join(tmpdir(), 'cm2-merge-')), 'merged');
  const base = join(FIXTURES, 'hf-tiny-llama-tied');
  const adapterDir = join(FIXTURES, 'tfjs-lora-llama');
  const log = console.log;
  console.log = () => undefined;
  try {
    const { adapted } = modelMergeCommand({ checkpoint: base, adapter: adapterDir, out });
    assert.ok(adapted > 0);
    assert.throws(() => modelMergeCommand({ checkpoint: base, adapter: adapterDir, out }), /a checkpoint is already there/);
    const merged = loadHfCheckpoint(out);
    const ref = fixture('tfjs-lora-llama', 'peft-logits.json');
    checkLogits(merged, ref, 'merged folder');
    merged.dispose();
    const row = await modelLogitsCommand({ checkpoint: base, adapter: adapterDir, inputIds: ref.input_ids[0]!.join(','), backend: 'cpu' });
    const last = ref.logits[0]!.at(-1)!;
    assert.ok(row.every((x, i) => Math.abs(x - last[i]!) < 1e-4), 'logits --adapter equal peft\'s last-position logits');
  } finally {
    console.log = log;
  }
});
