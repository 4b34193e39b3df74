/**
 * What an RL prompt's tokens are spent on (issue 30 item 3): the first user turn of each demo-world example rendered
 * as the rollouts render it (`promptIds`: the system prompt with the tool list, the user turn, the generation prompt),
 * and the same without the tools, so the tool list's share is their difference. Also the tool list as compact JSON
 * (no whitespace between keys) and without descriptions, to size what a compact schema would save.
 *
 *   npx tsx bench/prompt-tokens.ts [--tokenizer models/smollm2] [--count 1000] [--seed 7]
 */
import { parseArgs } from 'node:util';
import path from 'node:path';
import { generateDemoDataset } from '../src/demo/generator';
import { loadChatTokenizer } from '../src/chat/tokenize';
import { promptIds } from '../src/chat/tokenize';
import { projectRoot } from '../src/infra/binaries';

const { values } = parseArgs({ options: { tokenizer: { type: 'string', default: 'models/smollm2' }, count: { type: 'string', default: '1000' }, seed: { type: 'string', default: '7' } } });
const tok = loadChatTokenizer(path.resolve(projectRoot, values.tokenizer));
const examples = generateDemoDataset({ seed: Number(values.seed), count: Number(values.count), brokenRate: 0 });

/** Drops `description` fields at every depth (what a schema without prose would keep). */
const bare = (v: unknown): unknown => (Array.isArray(v) ? v.map(bare) : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).filter(([k]) => k !== 'description').map(([k, x]) => [k, bare(x)])) : v);

const rows: { all: number; noTools: number; toolsJson: number; toolsBare: number; tools: number }[] = [];
for (const ex of examples) {
  const first = ex.messages.slice(0, ex.messages.findIndex((m) => m.role === 'user') + 1);
  const all = promptIds(first, ex.tools, tok).length;
  const noTools = promptIds(first, [], tok).length;
  rows.push({ all, noTools, tools: ex.tools.length, toolsJson: tok.encode(JSON.stringify(ex.tools)).length, toolsBare: tok.encode(JSON.stringify(bare(ex.tools))).length });
}
const stat = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return `${(xs.reduce((a, b) => a + b, 0) / xs.length).toFixed(0)} (median ${s[s.length >> 1]}, max ${s.at(-1)})`;
};
console.log(`${examples.length} demo-world examples (seed ${values.seed}), tokenizer ${values.tokenizer}; tokens per prompt (first user turn), mean (median, max):`);
console.log('| what | tokens |\n|---|---|');
console.log(`| prompt as rendered (system + tools + user + generation prompt) | ${stat(rows.map((r) => r.all))} |`);
console.log(`| the same without tools | ${stat(rows.map((r) => r.noTools))} |`);
console.log(`| tool list's share (difference) | ${stat(rows.map((r) => r.all - r.noTools))} |`);
console.log(`| tool list as compact JSON | ${stat(rows.map((r) => r.toolsJson))} |`);
console.log(`| tool list as compact JSON without descriptions | ${stat(rows.map((r) => r.toolsBare))} |`);
console.log(`| tools per example | ${stat(rows.map((r) => r.tools))} |`);
