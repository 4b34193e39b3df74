// Build the demo policy's tokenizer and write it, with the chat template, into assets/:
//   assets/demo-tokenizer/tokenizer.json, assets/demo-tokenizer/tokenizer_config.json, assets/chat_template.jinja
// Deterministic: re-running it reproduces the committed files byte for byte.
//
// Run as: npx tsx scripts/make-demo-tokenizer.ts [--vocab-size N] [--count N] [--seed N]
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { CHAT_TEMPLATE } from '../src/chat/template';
import { ChatTokenizer } from '../src/chat/tokenize';
import { buildDemoTokenizer, demoCorpus, DEMO_TOKENIZER_DEFAULTS, DEMO_TOKENIZER_DIR } from '../src/demo/tokenizer';

function flag(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const v = i === -1 ? undefined : process.argv[i + 1];
  return v === undefined ? fallback : Number(v);
}

const vocabSize = flag('vocab-size', DEMO_TOKENIZER_DEFAULTS.vocabSize);
const corpusCount = flag('count', DEMO_TOKENIZER_DEFAULTS.corpusCount);
const corpusSeed = flag('seed', DEMO_TOKENIZER_DEFAULTS.corpusSeed);

const t0 = Date.now();
const { tokenizerJson, tokenizerConfig } = buildDemoTokenizer({ vocabSize, corpusCount, corpusSeed });
mkdirSync(DEMO_TOKENIZER_DIR, { recursive: true });
writeFileSync(path.join(DEMO_TOKENIZER_DIR, 'tokenizer.json'), `${JSON.stringify(tokenizerJson, null, 2)}\n`);
writeFileSync(path.join(DEMO_TOKENIZER_DIR, 'tokenizer_config.json'), `${JSON.stringify(tokenizerConfig, null, 2)}\n`);
writeFileSync(path.join(DEMO_TOKENIZER_DIR, '..', 'chat_template.jinja'), CHAT_TEMPLATE);

// Report: size and mean length on held-out dialogues (another seed).
const tok = new ChatTokenizer(tokenizerJson, tokenizerConfig);
const heldOut = demoCorpus(1, 300);
const lengths = heldOut.map((t) => tok.encode(t).length);
const chars = heldOut.reduce((s, t) => s + t.length, 0);
const tokens = lengths.reduce((s, n) => s + n, 0);
console.log(
  `demo tokenizer: ${tok.vocabSize} ids, trained on ${corpusCount} dialogues (seed ${corpusSeed}) in ${((Date.now() - t0) / 1000).toFixed(1)} s; ` +
    `held-out: ${(tokens / heldOut.length).toFixed(1)} tokens/dialogue (max ${Math.max(...lengths)}), ${(chars / tokens).toFixed(2)} chars/token`,
);
