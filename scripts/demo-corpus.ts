/**
 * The demo base's pretraining corpus (scripts/make-demo-base.py runs this): demo-world dialogues rendered with the
 * CM2 chat template and tokenised with the demo tokenizer, one JSON line per dialogue:
 *   {"ids": [...], "assistant": [0/1 per token], "kind": [0-3 per token]}
 * `assistant` marks the assistant messages' own tokens (what SFT trains on); `kind` marks, among those, the tokens the
 * base's copy probe scores: 1 = a digit inside a tool call's arguments, 2 = a digit in a visible reply, 3 = the first
 * token of a word value in a tool call's arguments, 0 = anything else.
 *
 *   node --import tsx scripts/demo-corpus.ts SEED COUNT OUT.jsonl [TERSE_RATE]
 *
 * TERSE_RATE (default 0) is the generator's `terseRate`: give the base the demo run's demonstrator mix
 * (config/demo.yaml `data.source.terseRate`).
 *
 * The dataset seeds must differ from the demo run's (config/demo.yaml `data.source.seed`, 7), so the held-out prompts
 * of a demo run are never pretrained on.
 */
import { createWriteStream } from 'node:fs';
import { chatSegments } from '../src/chat/tokenize';
import { generateDemoExample } from '../src/demo/generator';
import { loadDemoTokenizer } from '../src/demo/tokenizer';

function main(): void {
  const [seedArg, countArg, out, terseArg] = process.argv.slice(2);
  const seed = Number(seedArg);
  const count = Number(countArg);
  const terseRate = Number(terseArg ?? 0);
  if (!Number.isInteger(seed) || !Number.isInteger(count) || count <= 0 || !out || !(terseRate >= 0 && terseRate <= 1)) {
    console.error('usage: node --import tsx scripts/demo-corpus.ts SEED COUNT OUT.jsonl [TERSE_RATE]');
    process.exit(2);
  }
  const tok = loadDemoTokenizer();
  const w = createWriteStream(out);
  let tokens = 0;
  for (let i = 0; i < count; i++) {
    const ex = generateDemoExample(seed, i, { brokenRate: 0, terseRate });
    const ids: number[] = [];
    const assistant: number[] = [];
    const kind: number[] = [];
    for (const seg of chatSegments(ex)) {
      let pos = 0;
      for (const id of tok.encode(seg.text)) {
        const piece = tok.decode([id]);
        const before = seg.text.slice(0, pos);
        pos += piece.length;
        let k = 0;
        if (seg.trained) {
          const open = before.lastIndexOf('<tool_call>');
          const inArgs = open > before.lastIndexOf('</tool_call>') && before.lastIndexOf('"arguments"') > open;
          const afterThink = before.includes('</think>') || !seg.text.includes('<think>');
          if (inArgs && /^\d$/.test(piece)) k = 1;
          else if (inArgs && /^[A-Za-z]/.test(piece) && /:\s*"$/.test(before)) k = 3;
          else if (!inArgs && open <= before.lastIndexOf('</tool_call>') && afterThink && /^\d$/.test(piece)) k = 2;
        }
        ids.push(id);
        assistant.push(seg.trained ? 1 : 0);
        kind.push(k);
      }
    }
    tokens += ids.length;
    w.write(`${JSON.stringify({ ids, assistant, kind })}\n`);
  }
  w.end();
  console.error(`demo corpus: seed ${seed}, ${count} dialogues (terse rate ${terseRate}), ${tokens} tokens → ${out}`);
}

main();
