/**
 * How the rows `cm2 model import` adds for CM2's chat tags behave on the real SmolLM2-135M-Instruct (tied head), with
 * §4.1 as the method has it and without its norm alignment (`--no-align-norm`): on a few clean demo-world dialogues,
 * the probability of the added tags at the first generated position, the mean loss on assistant tokens and on the
 * targets that are tags (before any training), and greedy generations.
 *
 *   npx tsx bench/cm2-format-init.ts [--dialogues N] [--seed S]      (docs/models.md "§4.1 on SmolLM2's tied head")
 *
 * The GGUF is found as the tests find it (scripts/ensure-smollm2.mjs).
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadChatTokenizer, promptIds, tokenizeForTraining } from '../src/chat/tokenize';
import { selectBackend } from '../src/model/net/backend';
import { loadHfCheckpoint } from '../src/model/formats/checkpoint';
import { generate } from '../src/model/net/generate';
import { importGguf } from '../src/model/formats/modelImport';
import { collate } from '../src/stages/sft/trainer';
import { generateDemoExample } from '../src/demo/generator';
import { smollm2Path } from '../scripts/ensure-smollm2.mjs';

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};

async function main(): Promise<void> {
  const gguf = smollm2Path();
  if (!existsSync(gguf)) throw new Error(`${gguf} is absent: node scripts/ensure-smollm2.mjs`);
  const n = arg('--dialogues', 4);
  const seed = arg('--seed', 101);
  const backend = await selectBackend('auto');
  const dir = mkdtempSync(join(tmpdir(), 'cm2-bench-format-'));
  try {
    for (const alignNorm of [true, false]) {
      const out = join(dir, alignNorm ? 'aligned' : 'plain');
      const s = importGguf(gguf, out, { alignNorm });
      const first = s.cm2!.rows.from;
      const tok = loadChatTokenizer(out);
      const model = loadHfCheckpoint(out);
      let loss = 0;
      let tagLoss = 0;
      let pTags = 0;
      const outputs: string[] = [];
      for (let i = 0; i < n; i++) {
        const ex = generateDemoExample(seed, i, { brokenRate: 0 });
        const b = collate([tokenizeForTraining(ex, tok)], 1 << 16, tok.special.pad);
        const tagMask = b.mask.map((row, r) => row.map((m, k) => (m === 1 && b.targets[r]![k]! >= first ? 1 : 0)));
        for (const [mask, add] of [[b.mask, (x: number) => { loss += x / n; }], [tagMask, (x: number) => { tagLoss += x / n; }]] as const) {
          const l = model.loss(b.ids, b.targets, mask);
          add(l.dataSync()[0]!);
          l.dispose();
        }
        const prompt = promptIds(ex.messages.slice(0, ex.messages.findIndex((m) => m.role === 'assistant')), ex.tools, tok);
        const last = model.forward([prompt], { lastOnly: true });
        const logits = Float32Array.from(last.dataSync());
        last.dispose();
        const max = Math.max(...logits);
        const z = logits.reduce((a, x) => a + Math.exp(x - max), 0);
        pTags += logits.subarray(first).reduce((a, x) => a + Math.exp(x - max), 0) / z / n;
        if (i < 2) outputs.push(tok.decode(generate(model, [prompt], { maxNewTokens: 24, temperature: 0, stopTokens: [tok.special.imEnd] }).tokens[0]!));
      }
      model.dispose();
      console.log(`${alignNorm ? '§4.1 (aligned to the source norm)' : 'mean + noise (--no-align-norm)'} on ${backend}, ${n} dialogues (seed ${seed}):`);
      console.log(`  P(added tags) at the first generated position ${pTags.toFixed(4)}; loss on assistant tokens ${loss.toFixed(3)}, on tag targets ${tagLoss.toFixed(3)}`);
      for (const o of outputs) console.log(`  greedy: ${JSON.stringify(o)}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
