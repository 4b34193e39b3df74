/**
 * The optimizer file's layout (issue 32, item 4; docs/decisions.md, "Optimizer state in HF layout"): AdamW moments are
 * written as HF holds the weights (a Linear weight's moment [out, in], `layout: "hf"` in the metadata), so the PyTorch
 * trainer reads and writes the same checkpoints; the trainers restore such a file into the model's own layout
 * ([in, out]), files written before the field (no `layout`: the internal layout) as they are, and refuse any other
 * value. The tiny Qwen3 has square q_proj and o_proj, whose layout its shape cannot tell. A file PyTorch wrote from
 * transformers' own AdamW restores to what the tfjs AdamW holds after the same update (skipped without the torch
 * environment: scripts/ensure-torch.mjs).
 */
import { before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { loadHfCheckpoint } from '../../../src/model/formats/checkpoint';
import { parseSafetensors } from '../../../src/model/formats/safetensors';
import { serializeSafetensors } from '../../../src/model/formats/safetensorsWrite';
import { LoraAdapter, LoraSettings } from '../../../src/model/net/lora';
import { paramSpecs } from '../../../src/model/net/params';
import { loraTrainable } from '../../../src/model/net/trainable';
import { AdamW, openAdamWState, parseAdamWState, serializeAdamWState, writeAdamWState, type AdamWSnapshot } from '../../../src/model/optim/adamw';
import { GrpoTrainer } from '../../../src/stages/rl/grpo';
import { SftTrainer, type SftConfig } from '../../../src/stages/sft/trainer';
import { writeCheckpointFiles } from '../../../src/storage/policyStore';
import { torchPython } from '../../../scripts/ensure-torch.mjs';
import { FIXTURES } from '../../helpers/paths';

before(async () => {
  await tf.setBackend('cpu');
});

const CONFIG = { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01 };
const SFT: SftConfig = { epochs: 1, microBatch: 1, gradAccum: 1, peakLr: 1e-3, warmupRatio: 0, minLrRatio: 1, maxGradNorm: 1, weightDecay: 0.01, maxSeqLen: 16, seed: 1, padId: 0 };
const tmp = () => mkdtempSync(join(tmpdir(), 'cm2-optlayout-'));

/** `steps` updates with seeded random gradients: moments that differ from their transposes. */
function train(opt: AdamW, params: ReadonlyMap<string, tf.Variable>, steps = 3): void {
  for (let i = 0; i < steps; i++) {
    const grads = new Map([...params].map(([k, v], j) => [k, tf.randomNormal(v.shape, 0, 1, 'float32', 100 * i + j)]));
    opt.apply(grads, 1e-3);
    tf.dispose([...grads.values()]);
  }
}

/** The raw safetensors header: tensor name → shape, and the metadata. */
function header(bytes: Uint8Array): { shapes: Map<string, number[]>; metadata: Record<string, string> | undefined } {
  const n = Number(Buffer.from(bytes).readBigUInt64LE(0));
  const json = JSON.parse(Buffer.from(bytes.subarray(8, 8 + n)).toString('utf8')) as Record<string, { shape: number[] } | Record<string, string>>;
  const shapes = new Map<string, number[]>();
  for (const [k, v] of Object.entries(json)) if (k !== '__metadata__') shapes.set(k, (v as { shape: number[] }).shape);
  return { shapes, metadata: json['__metadata__'] as Record<string, string> | undefined };
}

function assertSameState(got: AdamWSnapshot, want: AdamWSnapshot, names: Iterable<string>, what: string): void {
  assert.equal(got.step, want.step, `${what}: step`);
  for (const k of names) {
    assert.deepEqual(got.m.get(k), want.m.get(k), `${what}: m.${k}`);
    assert.deepEqual(got.v.get(k), want.v.get(k), `${what}: v.${k}`);
  }
}

/** The old writer, as it was: the moments in the variables' own layout and shapes, only the step in the metadata. */
function legacyBytes(state: AdamWSnapshot, variables: ReadonlyMap<string, { shape: number[] }>): Uint8Array {
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const [name, v] of variables) {
    tensors.set(`m.${name}`, { shape: [...v.shape], data: state.m.get(name)! });
    tensors.set(`v.${name}`, { shape: [...v.shape], data: state.v.get(name)! });
  }
  return serializeSafetensors(tensors, { step: String(state.step) });
}

for (const fixture of ['hf-tiny-qwen3', 'hf-tiny-llama-tied']) {
  test(`an optimizer file holds each Linear weight's moments [out, in] as model.safetensors does, "layout": "hf" in its metadata (${fixture})`, async () => {
    const model = loadHfCheckpoint(join(FIXTURES, fixture));
    const vars = model.namedVariables();
    const opt = new AdamW(vars, CONFIG, { layout: model });
    train(opt, vars);
    const dir = tmp();
    try {
      const path = join(dir, 'optimizer.safetensors');
      writeAdamWState(path, opt, { chunkBytes: 64 });
      const bytes = readFileSync(path);
      const { shapes, metadata } = header(bytes);
      assert.deepEqual(metadata, { step: '3', layout: 'hf' });
      const specs = paramSpecs(model.dims);
      assert.deepEqual([...shapes.keys()].sort(), specs.flatMap((s) => [`m.${s.name}`, `v.${s.name}`]).sort(), 'one m and one v per HF parameter (no lm_head when tied)');
      if (model.dims.tied) assert.ok(!shapes.has('m.lm_head.weight'));
      for (const s of specs) {
        assert.deepEqual(shapes.get(`m.${s.name}`), s.shape, `m.${s.name}: HF shape`);
        assert.deepEqual(shapes.get(`v.${s.name}`), s.shape, `v.${s.name}: HF shape`);
      }
      // The values: the internal moments in HF layout, as model.safetensors holds the weights.
      const file = parseSafetensors(bytes).tensors;
      const state = opt.state();
      for (const s of specs) {
        assert.deepEqual(file.get(`m.${s.name}`)!.data, model.toHfLayout(s.name, state.m.get(s.name)!), `m.${s.name}`);
        assert.deepEqual(file.get(`v.${s.name}`)!.data, model.toHfLayout(s.name, state.v.get(s.name)!), `v.${s.name}`);
      }
      // The same bytes in memory, and from the checkpoint writer with an optimizer made without a layout (the model's).
      assert.ok(bytes.equals(Buffer.from(serializeAdamWState(state, vars, model))));
      const bare = new AdamW(vars, CONFIG);
      bare.load(state);
      const files = await writeCheckpointFiles(dir, model, bare);
      assert.ok(readFileSync(files.optimizer.path).equals(bytes), 'writeCheckpointFiles writes HF layout');
      bare.dispose();
    } finally {
      rmSync(dir, { recursive: true, force: true });
      opt.dispose();
      model.dispose();
    }
  });
}

test('an HF-layout file restores exactly the moments it was written from, through the RL and SFT trainers (square q_proj, o_proj)', () => {
  const model = loadHfCheckpoint(join(FIXTURES, 'hf-tiny-qwen3'));
  const vars = model.namedVariables();
  for (const n of ['model.layers.0.self_attn.q_proj.weight', 'model.layers.0.self_attn.o_proj.weight']) {
    const [a, b] = vars.get(n)!.shape;
    assert.equal(a, b, `${n} is square`);
  }
  const opt = new AdamW(vars, CONFIG, { layout: model });
  train(opt, vars);
  const state = opt.state();
  const dir = tmp();
  const rl = new GrpoTrainer(model, undefined, 0.01);
  const sft = new SftTrainer(model, [], SFT);
  try {
    const path = join(dir, 'optimizer.safetensors');
    writeAdamWState(path, opt);
    const bytes = readFileSync(path);
    // A square matrix's file moment is not its internal one: restoring it untransposed would be wrong, not refused.
    const q = 'model.layers.0.self_attn.q_proj.weight';
    assert.notDeepEqual(parseSafetensors(bytes).tensors.get(`m.${q}`)!.data, state.m.get(q));

    const opened = openAdamWState(path, { chunkBytes: 8 });
    try {
      assert.equal(opened.state.layout, 'hf');
      rl.restore(opened.state);
    } finally {
      opened.close();
    }
    assertSameState(rl.optimizer.state(), state, vars.keys(), 'GrpoTrainer.restore (file)');
    sft.restore(sft.state, parseAdamWState(bytes, 'optimizer.safetensors'));
    assertSameState(sft.optimizer.state(), state, vars.keys(), 'SftTrainer.restore (bytes)');
    // Written again, the restored state gives the same bytes.
    assert.ok(Buffer.from(serializeAdamWState(rl.optimizer.state(), vars, model)).equals(bytes));
  } finally {
    rmSync(dir, { recursive: true, force: true });
    for (const o of [opt, rl.optimizer, sft.optimizer]) o.dispose();
    model.dispose();
  }
});

test('a file written before the layout field (the internal layout, no `layout`) still restores identically', () => {
  const model = loadHfCheckpoint(join(FIXTURES, 'hf-tiny-qwen3'));
  const vars = model.namedVariables();
  const opt = new AdamW(vars, CONFIG);
  train(opt, vars);
  const state = opt.state();
  const dir = tmp();
  const rl = new GrpoTrainer(model, undefined, 0.01);
  try {
    const legacy = legacyBytes(state, vars);
    assert.deepEqual(header(legacy).metadata, { step: '3' });
    // An optimizer made without a layout still writes exactly these bytes.
    const path = join(dir, 'legacy.safetensors');
    writeAdamWState(path, opt);
    assert.ok(readFileSync(path).equals(Buffer.from(legacy)));
    const opened = openAdamWState(path);
    try {
      assert.equal(opened.state.layout, 'internal');
      rl.restore(opened.state);
    } finally {
      opened.close();
    }
    assertSameState(rl.optimizer.state(), state, vars.keys(), 'legacy file');
    const fresh = new GrpoTrainer(model, undefined, 0.01);
    fresh.restore(parseAdamWState(legacy));
    assertSameState(fresh.optimizer.state(), state, vars.keys(), 'legacy bytes');
    fresh.optimizer.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
    opt.dispose();
    rl.optimizer.dispose();
    model.dispose();
  }
});

test('a LoRA adapter\'s optimizer file is in PEFT\'s layout as held (A [r, in], B [out, r]), says "layout": "hf", and restores from it and from a legacy file', () => {
  const model = loadHfCheckpoint(join(FIXTURES, 'hf-tiny-qwen3'));
  const adapter = LoraAdapter.create(model, LoraSettings.parse({ rank: 4, alpha: 8 }), 5);
  const trainer = new SftTrainer(model, [], SFT, loraTrainable(adapter, { lowRank: false }));
  const params = adapter.params();
  const restored = new SftTrainer(model, [], SFT, loraTrainable(adapter, { lowRank: false }));
  try {
    assert.equal(trainer.optimizer.layout, adapter);
    train(trainer.optimizer, params);
    const state = trainer.optimizer.state();
    const bytes = serializeAdamWState(state, params, adapter);
    const { shapes, metadata } = header(bytes);
    assert.deepEqual(metadata, { step: '3', layout: 'hf' });
    const a = 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight';
    const b = 'base_model.model.model.layers.0.mlp.down_proj.lora_B.weight';
    assert.deepEqual(shapes.get(`m.${a}`), [4, 32]);
    assert.deepEqual(shapes.get(`m.${b}`), [32, 4]);
    for (const [name, v] of params) assert.deepEqual(shapes.get(`m.${name}`), v.shape, `m.${name}: as held`);
    const legacy = legacyBytes(state, params);
    assert.ok(Buffer.from(bytes).subarray(Number(Buffer.from(bytes).readBigUInt64LE(0)) + 8).equals(Buffer.from(legacy).subarray(Number(Buffer.from(legacy).readBigUInt64LE(0)) + 8)), 'the same tensor bytes as before');
    restored.restore(restored.state, parseAdamWState(bytes));
    assertSameState(restored.optimizer.state(), state, params.keys(), 'LoRA, HF layout');
    restored.restore(restored.state, parseAdamWState(legacy));
    assertSameState(restored.optimizer.state(), state, params.keys(), 'LoRA, legacy');
  } finally {
    trainer.optimizer.dispose();
    restored.optimizer.dispose();
    adapter.dispose();
    model.dispose();
  }
});

test('a layout other than "hf" is refused naming the file and the value; an HF state needs an optimizer that knows its layout', () => {
  const dir = tmp();
  try {
    const bytes = serializeSafetensors(new Map([['m.x', { shape: [2, 2], data: new Float32Array(4) }], ['v.x', { shape: [2, 2], data: new Float32Array(4) }]]), { step: '1', layout: 'torch-fsdp' });
    const path = join(dir, 'weird.safetensors');
    writeFileSync(path, bytes);
    assert.throws(() => openAdamWState(path), /weird\.safetensors: optimizer state layout "torch-fsdp" is not known/);
    assert.throws(() => parseAdamWState(bytes, 'runs/r/rl/checkpoints/step-00000001: optimizer.safetensors'), /step-00000001: optimizer\.safetensors: optimizer state layout "torch-fsdp" is not known/);

    const x = tf.variable(tf.zeros([2, 2]));
    const opt = new AdamW(new Map([['x', x]]));
    const hf = parseAdamWState(serializeSafetensors(new Map([['m.x', { shape: [2, 2], data: new Float32Array(4) }], ['v.x', { shape: [2, 2], data: new Float32Array(4) }]]), { step: '1', layout: 'hf' }));
    assert.throws(() => opt.load(hf), /in HF layout, but the optimizer was made without its parameters' layout/);
    opt.dispose();
    x.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const py = torchPython();

test('a file PyTorch writes from torch.optim.AdamW on transformers\' model restores to the moments of the same tfjs update', { skip: py ? false : 'no PyTorch environment (node scripts/ensure-torch.mjs makes it)', timeout: 180_000 }, () => {
  const src = join(FIXTURES, 'hf-tiny-qwen3');
  const ids = [1, 5, 9, 2, 33, 60, 7, 12, 40];
  const dir = tmp();
  const out = join(dir, 'optimizer.safetensors');
  const script = `
import sys, json, torch
from transformers import AutoModelForCausalLM
from safetensors.torch import save_file
src, out, ids = sys.argv[1], sys.argv[2], torch.tensor([json.loads(sys.argv[3])])
model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
logits = model(ids[:, :-1]).logits
torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).backward()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
opt.step()
t = {}
for n, p in model.named_parameters():
    t['m.' + n] = opt.state[p]['exp_avg'].contiguous()
    t['v.' + n] = opt.state[p]['exp_avg_sq'].contiguous()
save_file(t, out, metadata={'step': str(int(opt.state[p]['step'])), 'layout': 'hf'})
`;
  const r = spawnSync(py!, ['-c', script, src, out, JSON.stringify(ids)], { encoding: 'utf8', env: { ...process.env, OMP_NUM_THREADS: '1' }, timeout: 170_000 });
  assert.equal(r.status, 0, `python exited ${r.status}:\n${r.stderr}`);

  const model = loadHfCheckpoint(src);
  const vars = model.namedVariables();
  const ours = new AdamW(vars, CONFIG, { layout: model });
  const trainer = new GrpoTrainer(model, undefined, 0.01);
  try {
    const mask = [ids.slice(1).map(() => 1)];
    const { grads } = tf.variableGrads(() => model.loss([ids.slice(0, -1)], [ids.slice(1)], mask), [...vars.values()]);
    const named = new Map([...vars].map(([k, v]) => [k, grads[v.name]!]));
    ours.apply(named, 1e-3);
    tf.dispose(Object.values(grads));
    const opened = openAdamWState(out);
    try {
      trainer.restore(opened.state);
    } finally {
      opened.close();
    }
    const got = trainer.optimizer.state();
    const want = ours.state();
    assert.equal(got.step, 1);
    for (const k of vars.keys()) {
      for (const kind of ['m', 'v'] as const) {
        const a = got[kind].get(k)!;
        const b = want[kind].get(k)!;
        let scale = 0;
        for (const x of b) scale = Math.max(scale, Math.abs(x));
        let worst = 0;
        for (let i = 0; i < b.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!) / (1e-4 * scale + 1e-3 * Math.abs(b[i]!)));
        assert.ok(worst <= 1, `${kind}.${k}: PyTorch's moment restored is not tfjs's (worst ${worst.toFixed(2)} × tolerance)`);
      }
    }
    // The test tells the layouts apart: q_proj's moment is far from its own transpose.
    const q = 'model.layers.0.self_attn.q_proj.weight';
    const qm = want.m.get(q)!;
    const flipped = model.toHfLayout(q, qm);
    let far = 0;
    let scale = 0;
    for (let i = 0; i < qm.length; i++) {
      far = Math.max(far, Math.abs(flipped[i]! - qm[i]!));
      scale = Math.max(scale, Math.abs(qm[i]!));
    }
    assert.ok(far > 0.1 * scale, 'q_proj\'s moment is nearly symmetric: the test would not see a missing transpose');
  } finally {
    rmSync(dir, { recursive: true, force: true });
    ours.dispose();
    trainer.optimizer.dispose();
    model.dispose();
  }
});
