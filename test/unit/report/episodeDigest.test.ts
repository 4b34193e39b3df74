import assert from 'node:assert/strict';
import test from 'node:test';
import { contrastOf, digestEpisodes, digestMarkdown, messageLine, passString, RunDigests, separatingItems, type PromptDigest } from '../../../src/report/episodeDigest';
import { StudyFile } from '../../../src/report/studyFile';
import type { ChecklistVariant } from '../../../src/stages/checklist/schema';

const tool = (name: string) => ({ type: 'function', function: { name, description: '', parameters: { type: 'object', properties: {} } } });
const item = (id: string, focus_on: string, question: string) => ({ id, focus_on, question, evidence: [], pass_condition: 'x', failure_examples: [], required_for_next_turn: false, dependence: [], weight: 0.5, extra_info: { price_usd: 0 } });
// two turns, two items each
const variant = [[item('c1', 'tool_call', 'Did it call get_weather with city Paris?'), item('c2', 'reply', 'Does the reply state 21 C?')], [item('c3', 'tool_call', 'Did it call get_forecast?'), item('c4', 'reply', 'Does it state tomorrow?')]] as unknown as ChecklistVariant;
const example = {
  uuid: 'u1',
  tools: [tool('get_forecast'), tool('get_weather')],
  messages: [
    { role: 'user' as const, content: 'Weather in Paris?' },
    { role: 'assistant' as const, content: '', tool_calls: [{ id: 'c', type: 'function' as const, function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
  ],
  checklists: [variant],
};
const call = (name: string, args: unknown) => `<think>\nI should look it up for the user now.\n</think>\n<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
const v = (pass: boolean) => ({ pass, ok: true });

test('a message as a digest line: calls with their arguments, replies, broken calls, tool results, user turns; the system prompt left out', () => {
  assert.equal(messageLine({ role: 'system', content: 'tools…' }), undefined);
  assert.equal(messageLine({ role: 'assistant', content: call('get_weather', { city: 'Paris' }) }), '[I should look it up for the user now.] get_weather {"city":"Paris"}');
  assert.equal(messageLine({ role: 'assistant', content: 'It is \t 21 C\nin Paris.' }), 'reply: It is 21 C in Paris.');
  assert.match(messageLine({ role: 'assistant', content: '\n<tool_call>\n{"name": "get_weather", "arguments": {\n</tool_call>' })!, /^broken: <tool_call>/);
  assert.equal(messageLine({ role: 'tool', content: '{"temp": 21}' }), '= {"temp": 21}');
  assert.equal(messageLine({ role: 'user', content: 'And tomorrow?' }), 'user: And tomorrow?');
  assert.ok(messageLine({ role: 'assistant', content: 'x'.repeat(500) })!.length <= 'reply: '.length + 160);
});

test('the pass string: an item passes at any step of its turn; turns not reached are dots; a failed judge call is not a pass', () => {
  assert.equal(passString(variant, [[{ turn: 0, steps: [[v(true), v(false)], [v(false), v(false)]] }]]), '+-..');
  assert.equal(passString(variant, [[{ turn: 0, steps: [[v(false), v(true)]] }, { turn: 1, steps: [[{ pass: true, ok: false }, v(true)]] }]]), '-+-+');
  assert.equal(passString(variant, undefined), '....');
});

test('what a group differed on: nothing, the first step, the ending, or something later', () => {
  const m = (reward: number, ended: string, firstStep?: 'right tool, same arguments' | 'wrong tool, another offered') => ({ reward, ended, ...(firstStep ? { firstStep } : {}) });
  assert.equal(contrastOf([m(0.5, 'final_turn'), m(0.5, 'error_tool_call')]), 'none');
  assert.equal(contrastOf([m(0.5, 'final_turn', 'right tool, same arguments'), m(0, 'final_turn', 'wrong tool, another offered')]), 'first step');
  assert.equal(contrastOf([m(0.5, 'final_turn', 'right tool, same arguments'), m(0.2, 'error_tool_call', 'right tool, same arguments')]), 'ending');
  assert.equal(contrastOf([m(0.5, 'final_turn', 'right tool, same arguments'), m(0.2, 'final_turn', 'right tool, same arguments')]), 'later');
});

test('digests of a step: grouped by prompt, members in order, rewards by rollout id, steps after the prompt, the contrast', () => {
  const ep = (member: number, content: string, pass: boolean, ended: string) => ({
    id: `u1#${member}`,
    uuid: 'u1',
    member,
    ended,
    messages: [{ role: 'system', content: 'tools' }, { role: 'user', content: 'Weather in Paris?' }, { role: 'assistant', content }, { role: 'tool', content: '{"temp": 21}' }],
    verdicts: [[{ turn: 0, steps: [[v(pass), v(false)]] }]],
  });
  const eps = [ep(1, call('get_forecast', {}), false, 'turn_control'), ep(0, call('get_weather', { city: 'Paris' }), true, 'turn_control')];
  const [d] = digestEpisodes(eps, new Map([['u1#0', 0.5], ['u1#1', 0]]), new Map([['u1', example]]), true);
  assert.equal(d!.contrast, 'first step');
  assert.deepEqual(d!.items, ['t0 tool_call: Did it call get_weather with city Paris?', 't0 reply: Does the reply state 21 C?', 't1 tool_call: Did it call get_forecast?', 't1 reply: Does it state tomorrow?']);
  assert.deepEqual(d!.members.map((m) => [m.member, m.reward, m.pass, m.firstStep]), [[0, 0.5, '+-..', 'right tool, same arguments'], [1, 0, '--..', 'wrong tool, the first offered']]);
  assert.deepEqual(d!.members[0]!.steps, ['[I should look it up for the user now.] get_weather {"city":"Paris"}', '= {"temp": 21}']);
  // an evaluation: no members, no contrast; a reward missing from the rows is null
  const [e] = digestEpisodes([eps[1]!], new Map(), new Map([['u1', example]]), false);
  assert.equal(e!.contrast, undefined);
  assert.equal(e!.members[0]!.member, undefined);
  assert.equal(e!.members[0]!.reward, null);
  // what the study file stores parses back
  const digests = RunDigests.parse(JSON.parse(JSON.stringify({ evalStep: 4, eval: [e], steps: [{ step: 1, groups: [d] }] })));
  assert.equal(digests.steps[0]!.groups[0]!.members.length, 2);
});

test('separating items: per focus, items passed more by a group’s better episodes (up) or its worse ones (down); groups without contrast skipped', () => {
  const g = (contrast: PromptDigest['contrast'], members: [number, string][]): PromptDigest => ({ uuid: 'u', items: ['t0 tool_call: a', 't0 reply: b'], contrast, members: members.map(([reward, pass]) => ({ reward, ended: 'final_turn', pass, steps: [] })) });
  assert.deepEqual(separatingItems([g('first step', [[1, '+-'], [0, '-+'], [0, '-+']]), g('none', [[0, '+-'], [0, '--']])]), { tool_call: { up: 1, down: 0 }, reply: { up: 0, down: 1 } });
});

test('the diagnosis: the step table, then the validation prompts lost and won against the baseline with both episodes', () => {
  const pd = (uuid: string, reward: number, steps: string[]): PromptDigest => ({ uuid, items: ['t0 tool_call: q'], members: [{ reward, ended: 'final_turn', pass: reward > 0 ? '+' : '-', steps }] });
  const base = { evalStep: 0, eval: [pd('a', 0.5, ['get_weather {"city":"Paris"}']), pd('b', 0, ['reply: hi']), pd('c', 0.2, [])], steps: [] };
  const run = {
    evalStep: 4,
    eval: [pd('a', 0, ['get_weather {"city":"paris"}']), pd('b', 0.5, ['get_weather {}']), pd('c', 0.2, [])],
    steps: [{ step: 1, groups: [{ ...pd('a', 1, []), contrast: 'first step' as const, members: [{ member: 0, reward: 1, ended: 'final_turn', pass: '+', steps: [] }, { member: 1, reward: 0, ended: 'error_tool_call', pass: '-', steps: [] }] }] }],
  };
  const md = digestMarkdown('search x', run, 'sft', base);
  assert.match(md, /\| 1 \| 1 \| 0\.500 \| 0 \| 1 \| 0 \| 0 \| tool_call 1\/0 \|/);
  assert.match(md, /1 lost, 1 won, 1 the same reward/);
  assert.ok(md.indexOf('### lost: a (0.500 → 0.000)') < md.indexOf('### won: b (0.000 → 0.500)'));
  assert.match(md, /sft: reward 0\.500, ended final_turn, items \+\n {2}get_weather \{"city":"Paris"\}\nsearch x: reward 0\.000/);
  assert.match(digestMarkdown('search x', run, 'sft', undefined), /No digests of sft/);
});

test('a study file keeps a search run’s digests', () => {
  const digests = { evalStep: 0, eval: [{ uuid: 'a', items: [], members: [{ reward: 0, ended: 'final_turn', pass: '', steps: [] }] }], steps: [] };
  const f = StudyFile.parse({ prompts: [], policies: {}, validationPrompts: ['a'], searches: { sft: { steps: 0, settings: {}, validation: { a: 0 }, digests } } });
  assert.deepEqual(f.searches.sft!.digests, digests);
});
