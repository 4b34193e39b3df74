import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { applyRuleFilters, DEFAULT_ENABLED_FILTERS, duplicateToolsByName, duplicateToolsBySchema, noToolResponseInAssistantMessage, nonEmptyContent, resolveEnabledFilters, roleOrder, RULE_FILTER_NAMES, RULE_FILTERS, thinkTags, toolArgumentTypes, toolCallResponseMatch, toolResponseJsonValid, toolSchema, type RuleFilter } from '../../../../src/stages/prepare/filters';
import { canonicalJson } from '../../../../src/kernel/canonicalJson';
import { runRuleFilterReport } from '../../../../src/stages/prepare/filterReport';
import type { Example, Message } from '../../../../src/kernel/schema';
import { assistant, call, directReplyExample, goodExample, timeTool, tool, user, weatherTool, withMessage } from '../../../fixtures/dialogues';
import { checkArgumentType, isBlankLikePython, parseJsonLikePython } from '../../../../src/stages/prepare/filterParts';

/** Assert that `filter` rejects `ex` with reasons of its own code, and that one detail matches `pattern`. */
function assertFails(filter: RuleFilter, ex: Example, code: string, pattern: RegExp, messageIndex?: number): void {
  const reasons = filter(ex);
  assert.ok(reasons.length > 0, `expected ${code} to fail`);
  for (const r of reasons) assert.equal(r.code, code);
  const hit = reasons.find((r) => pattern.test(r.detail));
  assert.ok(hit, `no detail matches ${pattern}: ${JSON.stringify(reasons)}`);
  if (messageIndex !== undefined) assert.equal(hit.messageIndex, messageIndex);
}

const withTools = (tools: unknown[], base: Example = goodExample()): Example => ({ ...base, tools });
const withMessages = (messages: Message[], base: Example = goodExample()): Example => ({ ...base, messages });

describe('registry', () => {
  test('every filter is registered under its reference name', () => {
    assert.deepEqual(Object.keys(RULE_FILTERS).sort(), [...RULE_FILTER_NAMES].sort());
    for (const name of RULE_FILTER_NAMES) {
      const reasons = RULE_FILTERS[name]({ uuid: 'x', messages: [assistant('<think>a</think>b')], tools: [{ type: 'nope' }, { type: 'nope' }] });
      for (const r of reasons) assert.equal(r.code, name);
    }
  });

  test('defaults are the reference run: all but duplicate_tools_by_schema (and our opt-in type check)', () => {
    assert.equal(DEFAULT_ENABLED_FILTERS.length, 8);
    assert.ok(!(DEFAULT_ENABLED_FILTERS as readonly string[]).includes('duplicate_tools_by_schema'));
    assert.ok(!(DEFAULT_ENABLED_FILTERS as readonly string[]).includes('tool_argument_types'));
  });

  test('a good trajectory passes every filter, opt-in ones included', () => {
    for (const name of RULE_FILTER_NAMES) assert.deepEqual(RULE_FILTERS[name](goodExample()), [], name);
    assert.deepEqual(applyRuleFilters(goodExample(), RULE_FILTER_NAMES), { kept: true, reasons: [] });
    assert.deepEqual(applyRuleFilters(directReplyExample()), { kept: true, reasons: [] });
  });

  test('unknown filter names are a usage error', () => {
    assert.throws(() => resolveEnabledFilters(['tool_schema', 'bogus']), /unknown rule filter\(s\): bogus/);
    assert.throws(() => applyRuleFilters(goodExample(), ['nope']), /unknown rule filter/);
    assert.deepEqual(resolveEnabledFilters(undefined), [...DEFAULT_ENABLED_FILTERS]);
    assert.deepEqual(resolveEnabledFilters(['think_tags', 'think_tags']), ['think_tags']);
  });
});

describe('tool_schema', () => {
  const code = 'tool_schema';
  test('tool list entries must be function tools with a name', () => {
    assertFails(toolSchema, withTools([weatherTool, { type: 'retrieval' }]), code, /tools\[1\] is not a function tool/);
    assertFails(toolSchema, withTools([{ type: 'function' }]), code, /tools\[0\] is not a function tool/);
    assertFails(toolSchema, withTools([{ type: 'function', function: { description: 'no name' } }]), code, /tools\[0\]\.function\.name/);
    assertFails(toolSchema, withTools([{ type: 'function', function: { name: '' } }]), code, /function\.name/);
    assertFails(toolSchema, withTools([{ type: 'function', function: 'get_weather' }]), code, /tools\[0\]\.function is not an object/);
    assertFails(toolSchema, withTools(['get_weather']), code, /not a function tool/);
  });

  test('calls must name a candidate tool', () => {
    const ex = withTools([weatherTool]); // get_time is no longer a candidate
    assertFails(toolSchema, ex, code, /messages\[3\]\.tool_calls\[0\] \(get_time\): tool "get_time" is not among the candidate tools/, 3);
    assert.equal(toolSchema(ex).length, 2, 'one reason per offending call');
  });

  test('call type must be "function"', () => {
    const bad = { ...call('get_weather', { city: 'Paris' }), type: 'code_interpreter' };
    assertFails(toolSchema, withMessage(1, assistant('<think>x</think>', [bad])), code, /type is "code_interpreter"/, 1);
  });

  test('arguments must decode to a JSON object', () => {
    assertFails(toolSchema, withMessage(1, assistant('<think>x</think>', [call('get_weather', '{"city": ')])), code, /not valid JSON/, 1);
    assertFails(toolSchema, withMessage(1, assistant('<think>x</think>', [call('get_weather', '["Paris"]')])), code, /not a JSON object/, 1);
    assertFails(toolSchema, withMessage(1, assistant('<think>x</think>', [call('get_weather', '"Paris"')])), code, /not a JSON object/, 1);
  });

  test('required parameters must be present', () => {
    assertFails(toolSchema, withMessage(1, assistant('<think>x</think>', [call('get_weather', {})])), code, /required parameter "city" is missing/, 1);
  });

  test('undeclared parameters fail', () => {
    assertFails(toolSchema, withMessage(1, assistant('<think>x</think>', [call('get_weather', { city: 'Paris', country: 'FR' })])), code, /parameter "country" is not declared/, 1);
  });

  test('the parameter schema must be an object schema', () => {
    const stringTool = { type: 'function', function: { name: 'get_weather', parameters: { type: 'string' } } };
    assertFails(toolSchema, withTools([stringTool, timeTool]), code, /parameter schema type is "string", not "object"/);
    const badProps = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: [], required: ['city'] } } };
    assertFails(toolSchema, withTools([badProps, timeTool]), code, /"properties" is not an object/);
    const badRequired = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: {} }, required: 'city' } } };
    assertFails(toolSchema, withTools([badRequired, timeTool]), code, /"required" is not an array/);
  });

  test('missing or empty parameters mean "no parameters"', () => {
    for (const parameters of [undefined, null, {}]) {
      const noParams = { type: 'function', function: { name: 'ping', ...(parameters === undefined ? {} : { parameters }) } };
      const ok = withMessages([user('ping'), assistant('<think>x</think>', [call('ping', {})]), tool('{}'), assistant('<think>y</think>\n\npong')], withTools([noParams]));
      assert.deepEqual(toolSchema(ok), []);
      const withArg = withMessage(1, assistant('<think>x</think>', [call('ping', { host: 'a' })]), ok);
      assertFails(toolSchema, withArg, code, /parameter "host" is not declared/);
    }
  });

  test('a name with several schemas passes if any schema accepts the call', () => {
    const alt = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { zip: { type: 'string' } }, required: ['zip'] } } };
    const ex = withTools([weatherTool, alt, timeTool]);
    assert.deepEqual(toolSchema(ex), []);
    const byZip = withMessage(1, assistant('<think>x</think>', [call('get_weather', { zip: '75001' })]), ex);
    assert.deepEqual(toolSchema(byZip), []);
    assertFails(toolSchema, withMessage(1, assistant('<think>x</think>', [call('get_weather', {})]), ex), code, /"city" is missing.*\|.*"zip" is missing/);
  });

  test('arguments given as an object (OpenAI JSONL) are accepted', () => {
    const objCall = { type: 'function', function: { name: 'get_weather', arguments: { city: 'Paris' } } };
    assert.deepEqual(toolSchema(withMessage(1, assistant('<think>x</think>', [objCall]))), []);
  });

  test('[QUIRK] argument types are not checked by tool_schema, and unknown types do not crash', () => {
    assert.deepEqual(toolSchema(withMessage(1, assistant('<think>x</think>', [call('get_weather', { city: 42, days: 'two' })]))), []);
    const oddType = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'dict' } } } } };
    assert.deepEqual(toolSchema(withTools([oddType, timeTool])), []);
  });

  test('Python json.loads constants (NaN, Infinity) are accepted in arguments', () => {
    const nanTool = { type: 'function', function: { name: 'score', parameters: { type: 'object', properties: { x: { type: 'number' } } } } };
    const ex = withMessages([user('s'), assistant('<think>x</think>', [call('score', '{"x": NaN}')]), tool('{}'), assistant('<think>y</think>\n\nok')], withTools([nanTool]));
    assert.deepEqual(toolSchema(ex), []);
  });
});

describe('tool_argument_types (opt-in)', () => {
  const code = 'tool_argument_types';
  const typedTool = {
    type: 'function',
    function: {
      name: 'typed',
      parameters: {
        type: 'object',
        properties: {
          s: { type: 'string' }, i: { type: 'integer' }, n: { type: 'number' }, b: { type: 'boolean' },
          a: { type: 'array' }, o: { type: 'object' }, z: { type: 'null' }, u: { type: ['string', 'null'] },
          free: { description: 'no type' }, odd: { type: 'dict' },
        },
      },
    },
  };
  const typed = (args: Record<string, unknown> | string): Example =>
    withMessages([user('t'), assistant('<think>x</think>', [call('typed', args)]), tool('{}'), assistant('<think>y</think>\n\nok')], withTools([typedTool]));

  test('values of the declared types pass', () => {
    assert.deepEqual(toolArgumentTypes(typed({ s: 'a', i: 3, n: 2.5, b: false, a: [1], o: { k: 1 }, z: null, u: null, free: [1, 'x'] })), []);
    assert.deepEqual(toolArgumentTypes(typed({ n: 3, u: 'text' })), [], 'integers are numbers; either listed type is fine');
  });

  test('mismatches fail, one reason per call naming the parameter', () => {
    assertFails(toolArgumentTypes, typed({ s: 1 }), code, /parameter "s": expected string, got 1/, 1);
    assertFails(toolArgumentTypes, typed({ i: 1.5 }), code, /parameter "i": expected integer/);
    assertFails(toolArgumentTypes, typed({ i: true }), code, /parameter "i": expected integer, got true/);
    assertFails(toolArgumentTypes, typed({ n: '3' }), code, /parameter "n": expected number/);
    assertFails(toolArgumentTypes, typed({ n: false }), code, /parameter "n": expected number/);
    assertFails(toolArgumentTypes, typed({ b: 'true' }), code, /parameter "b": expected boolean/);
    assertFails(toolArgumentTypes, typed({ a: { 0: 1 } }), code, /parameter "a": expected array/);
    assertFails(toolArgumentTypes, typed({ o: [1] }), code, /parameter "o": expected object/);
    assertFails(toolArgumentTypes, typed({ z: 0 }), code, /parameter "z": expected null/);
    assertFails(toolArgumentTypes, typed({ u: 5 }), code, /parameter "u": expected one of \["string","null"\]/);
    const both = toolArgumentTypes(typed({ s: 1, b: 0 }));
    assert.equal(both.length, 1);
    assert.match(both[0]!.detail, /"s".*"b"/);
  });

  test('an unknown declared type name fails instead of crashing', () => {
    assertFails(toolArgumentTypes, typed({ odd: {} }), code, /unknown schema type "dict"/);
  });

  test('JSON 1.0 is indistinguishable from 1 in JavaScript, so it passes an integer check (documented deviation)', () => {
    assert.deepEqual(toolArgumentTypes(typed('{"i": 1.0}')), []);
  });

  test('structural problems are left to tool_schema; the default run ignores types', () => {
    assert.deepEqual(toolArgumentTypes(typed({ s: 'a', nope: 1 })), []);
    assert.deepEqual(toolArgumentTypes(withTools([{ type: 'x' }])), []);
    assert.deepEqual(applyRuleFilters(typed({ s: 1 })).kept, true);
    assert.equal(applyRuleFilters(typed({ s: 1 }), [...DEFAULT_ENABLED_FILTERS, 'tool_argument_types']).kept, false);
  });

  test('checkArgumentType', () => {
    assert.equal(checkArgumentType('x', undefined), undefined);
    assert.equal(checkArgumentType(1, ['string', 'integer']), undefined);
    assert.match(checkArgumentType(1, { weird: true }) ?? '', /unknown schema type/);
    assert.match(checkArgumentType(1, ['dict']) ?? '', /expected one of/);
  });
});

describe('role_order', () => {
  const code = 'role_order';
  test('a leading system message followed by user is fine', () => {
    assert.deepEqual(roleOrder(withMessages([{ role: 'system', content: 'be nice' }, ...goodExample().messages])), []);
  });

  test('empty dialogue', () => {
    assertFails(roleOrder, withMessages([]), code, /empty/);
  });

  test('system only at index 0, and then followed by user', () => {
    const late = withMessages([user('a'), assistant('<think>x</think>\n\nb'), { role: 'system', content: 's' }, user('c'), assistant('<think>y</think>\n\nd')]);
    assertFails(roleOrder, late, code, /system message at index 2/, 2);
    assertFails(roleOrder, withMessages([{ role: 'system', content: 's' }, assistant('<think>x</think>\n\nb')]), code, /after the system message must be user/, 1);
    assertFails(roleOrder, withMessages([{ role: 'system', content: 's' }]), code, /followed by a user message/);
  });

  test('first message must be user (or system)', () => {
    assertFails(roleOrder, withMessages([assistant('<think>x</think>\n\nhi'), user('a'), assistant('<think>x</think>\n\nb')]), code, /first message must be user or system, got "assistant"/, 0);
  });

  test('user must be followed by assistant', () => {
    assertFails(roleOrder, withMessages([user('a'), user('b'), assistant('<think>x</think>\n\nc')]), code, /user at index 0 must be followed by assistant, got "user"/, 0);
    assertFails(roleOrder, withMessages([user('a'), tool('{}'), assistant('<think>x</think>\n\nc')]), code, /user at index 0/, 0);
  });

  test('assistant must be followed by tool or user', () => {
    const ex = withMessages([user('a'), assistant('<think>x</think>\n\nb'), assistant('<think>y</think>\n\nc')]);
    assertFails(roleOrder, ex, code, /assistant at index 1 must be followed by tool or user, got "assistant"/, 1);
  });

  test('an assistant with tool calls must be followed by tool, one without must not', () => {
    const m = goodExample().messages;
    assertFails(roleOrder, withMessages([m[0]!, m[1]!, user('again'), assistant('<think>x</think>\n\ny')]), code, /has tool calls but is followed by "user"/, 1);
    assertFails(roleOrder, withMessages([user('a'), assistant('<think>x</think>\n\nb'), tool('{}'), assistant('<think>x</think>\n\nc')]), code, /no tool calls but is followed by tool/, 1);
  });

  test('tool must be followed by tool or assistant', () => {
    const m = goodExample().messages;
    assertFails(roleOrder, withMessages([m[0]!, m[1]!, m[2]!, user('hm'), assistant('<think>x</think>\n\ny')]), code, /tool at index 2 must be followed by tool or assistant/, 2);
  });

  test('unknown roles fail', () => {
    assertFails(roleOrder, withMessages([user('a'), assistant('<think>x</think>\n\nb'), { role: 'developer', content: 'd' }, assistant('<think>x</think>\n\nc')]), code, /unknown role "developer" at index 2/, 2);
  });

  test('the last message must be an assistant without tool calls', () => {
    const m = goodExample().messages;
    assertFails(roleOrder, withMessages(m.slice(0, 8)), code, /last message must be assistant, got "user"/, 7);
    assertFails(roleOrder, withMessages(m.slice(0, 3)), code, /last message must be assistant, got "tool"/, 2);
    assertFails(roleOrder, withMessages(m.slice(0, 2)), code, /last message \(index 1\) must not have tool calls/, 1);
  });

  test('at least one user→assistant adjacency', () => {
    assertFails(roleOrder, withMessages([user('a')]), code, /no complete turn/);
  });
});

describe('tool_call_response_match', () => {
  const code = 'tool_call_response_match';
  const m = goodExample().messages;
  test('too few tool messages', () => {
    assertFails(toolCallResponseMatch, withMessages([m[0]!, m[1]!, m[2]!, m[3]!, m[4]!, m[6]!]), code, /index 3 has 2 tool call\(s\) but is followed by 1 tool message/, 3);
  });
  test('too many tool messages', () => {
    assertFails(toolCallResponseMatch, withMessages([m[0]!, m[1]!, m[2]!, tool('{}'), m[6]!]), code, /index 1 has 1 tool call\(s\) but is followed by 2/, 1);
  });
  test('no tool message at all', () => {
    assertFails(toolCallResponseMatch, withMessages([m[0]!, m[1]!, m[6]!]), code, /followed by 0 tool message/, 1);
  });
  test('tool-call ids are ignored (matching is by count only)', () => {
    const ex = withMessage(2, { role: 'tool', content: '{"temperature": 18}', tool_call_id: 'some-other-id' });
    assert.deepEqual(toolCallResponseMatch(ex), []);
  });
});

describe('no_tool_response_in_assistant_message', () => {
  const code = 'no_tool_response_in_assistant_message';
  test('opening tag', () => {
    assertFails(noToolResponseInAssistantMessage, withMessage(6, assistant('<think>x</think>\n\n<tool_response>{"a":1}')), code, /index 6 contains <tool_response>/, 6);
  });
  test('closing tag', () => {
    assertFails(noToolResponseInAssistantMessage, withMessage(8, assistant('<think>x</think>\n\ndone</tool_response>')), code, /index 8 contains <\/tool_response>/, 8);
  });
  test('the tags are allowed in other roles', () => {
    assert.deepEqual(noToolResponseInAssistantMessage(withMessage(7, user('what is <tool_response>?'))), []);
  });
});

describe('tool_response_json_valid', () => {
  const code = 'tool_response_json_valid';
  test('empty tool content', () => {
    assertFails(toolResponseJsonValid, withMessage(2, tool('')), code, /index 2 is empty/, 2);
  });
  test('whitespace-only and plain text are not JSON', () => {
    assertFails(toolResponseJsonValid, withMessage(2, tool('   ')), code, /index 2 is not valid JSON/, 2);
    assertFails(toolResponseJsonValid, withMessage(4, tool('The time is 14:00')), code, /index 4 is not valid JSON/, 4);
    assertFails(toolResponseJsonValid, withMessage(5, tool('{"time": "14:00"')), code, /index 5 is not valid JSON/, 5);
  });
  test('any JSON value is fine, including Python json constants', () => {
    for (const content of ['42', '"ok"', 'null', '[1, 2]', '{"score": NaN, "max": Infinity, "min": -Infinity}']) {
      assert.deepEqual(toolResponseJsonValid(withMessage(2, tool(content))), [], content);
    }
  });
  test('parseJsonLikePython leaves constants inside strings alone', () => {
    assert.deepEqual(parseJsonLikePython('{"a": "NaN", "b": NaN}'), { ok: true, value: { a: 'NaN', b: null } });
    assert.equal(parseJsonLikePython('{"a": nan}').ok, false);
    assert.equal(parseJsonLikePython('{"a": "x\\"NaN"}').ok, true);
  });
});

describe('duplicate_tools_by_name', () => {
  const code = 'duplicate_tools_by_name';
  test('the same name twice fails, even with different schemas', () => {
    const variant = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {} } } };
    assertFails(duplicateToolsByName, withTools([weatherTool, timeTool, variant]), code, /"get_weather" appears 2 times .*tools\[0\], tools\[2\]/);
  });
  test('one reason per repeated name', () => {
    assert.equal(duplicateToolsByName(withTools([weatherTool, timeTool, weatherTool, timeTool, weatherTool])).length, 2);
  });
  test('non-function entries are skipped, not a crash (tool_schema reports them)', () => {
    assert.deepEqual(duplicateToolsByName(withTools([weatherTool, { type: 'x' }, 'junk', null])), []);
  });
});

describe('duplicate_tools_by_schema (opt-in)', () => {
  const code = 'duplicate_tools_by_schema';
  test('same name and schema, differing only in descriptions', () => {
    const copy = structuredClone(weatherTool);
    copy.function.description = 'another description';
    copy.function.parameters.properties.city.description = 'changed';
    assertFails(duplicateToolsBySchema, withTools([weatherTool, timeTool, copy]), code, /"get_weather" appears with an identical schema at tools\[0\], tools\[2\]/);
  });
  test('key order does not matter; missing and empty parameters are the same schema', () => {
    const reordered = { type: 'function', function: { name: 'get_time', parameters: { required: ['city'], properties: { city: { type: 'string' } }, type: 'object' } } };
    assertFails(duplicateToolsBySchema, withTools([timeTool, reordered]), code, /get_time/);
    const a = { type: 'function', function: { name: 'ping' } };
    const b = { type: 'function', function: { name: 'ping', parameters: {} } };
    const c = { type: 'function', function: { name: 'ping', parameters: { type: 'object', properties: {}, required: [] } } };
    assertFails(duplicateToolsBySchema, withTools([a, b, c]), code, /tools\[0\], tools\[1\], tools\[2\]/);
  });
  test('same name with different schemas passes this filter (but not duplicate_tools_by_name)', () => {
    const variant = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { zip: { type: 'string' } } } } };
    const ex = withTools([weatherTool, timeTool, variant]);
    assert.deepEqual(duplicateToolsBySchema(ex), []);
    assert.equal(duplicateToolsByName(ex).length, 1);
  });
  test('disabled by default', () => {
    assert.equal(applyRuleFilters(withTools([timeTool, timeTool]), ['duplicate_tools_by_schema']).kept, false);
    assert.ok(!applyRuleFilters(withTools([timeTool, timeTool])).reasons.some((r) => r.code === code));
  });
  test('canonicalJson sorts keys recursively', () => {
    assert.equal(canonicalJson({ b: [{ d: 1, c: 2 }], a: null }), '{"a":null,"b":[{"c":2,"d":1}]}');
  });
});

describe('non_empty_content', () => {
  const code = 'non_empty_content';
  test('empty user, whitespace-only assistant, empty tool', () => {
    assertFails(nonEmptyContent, withMessage(7, user('')), code, /index 7 \("user"\) has empty content/, 7);
    assertFails(nonEmptyContent, withMessage(1, assistant(' \n\t', [call('get_weather', { city: 'Paris' })])), code, /index 1/, 1);
    assertFails(nonEmptyContent, withMessage(2, tool('')), code, /index 2/, 2);
  });
  test('applies to system messages too', () => {
    assertFails(nonEmptyContent, withMessages([{ role: 'system', content: '  ' }, ...goodExample().messages]), code, /index 0/, 0);
  });
  test('blankness follows Python str.strip()', () => {
    assert.equal(isBlankLikePython('\u001f\u0085\u3000'), true);
    assert.equal(isBlankLikePython('\ufeff'), false);
    assertFails(nonEmptyContent, withMessage(7, user('\u001c')), code, /index 7/);
    assert.deepEqual(nonEmptyContent(withMessage(7, user('\ufeff'))), []);
  });
});

describe('think_tags', () => {
  const code = 'think_tags';
  test('user and tool messages must not contain think tags', () => {
    assertFails(thinkTags, withMessage(7, user('please <think> harder')), code, /user message at index 7 contains a think tag/, 7);
    assertFails(thinkTags, withMessage(2, tool('{"x": "</think>"}')), code, /tool message at index 2/, 2);
  });
  test('assistant messages need exactly one <think> and one </think>', () => {
    assertFails(thinkTags, withMessage(8, assistant('You are welcome.')), code, /index 8 has 0 <think> and 0 <\/think>/, 8);
    assertFails(thinkTags, withMessage(8, assistant('<think>a</think><think>b</think> hi')), code, /has 2 <think> and 2 <\/think>/, 8);
    assertFails(thinkTags, withMessage(8, assistant('<think>unterminated')), code, /has 1 <think> and 0 <\/think>/, 8);
    assertFails(thinkTags, withMessage(8, assistant('reply</think>')), code, /has 0 <think> and 1 <\/think>/, 8);
  });
  test('the opening tag must come first', () => {
    assertFails(thinkTags, withMessage(8, assistant('</think>oops<think>')), code, /<\/think> before <think>/, 8);
  });
  test('system messages are not checked', () => {
    assert.deepEqual(thinkTags(withMessages([{ role: 'system', content: 'use <think>' }, ...goodExample().messages])), []);
  });
});

describe('applyRuleFilters', () => {
  test('every enabled check runs and reasons overlap', () => {
    const ex = withTools([weatherTool], withMessage(8, assistant('no tags </tool_response>')));
    const { kept, reasons } = applyRuleFilters(ex);
    assert.equal(kept, false);
    assert.deepEqual([...new Set(reasons.map((r) => r.code))], ['tool_schema', 'no_tool_response_in_assistant_message', 'think_tags']);
  });

  test('filters run in the reference order whatever the order of `enabled`', () => {
    const ex = withTools([weatherTool], withMessage(8, assistant('x')));
    const codes = applyRuleFilters(ex, ['think_tags', 'tool_schema']).reasons.map((r) => r.code);
    assert.deepEqual([...new Set(codes)], ['tool_schema', 'think_tags']);
  });

  test('never throws on weird input', () => {
    const weird: unknown[] = [
      { uuid: 'w1', messages: null, tools: 'nope' },
      { uuid: 'w2', messages: [42, null, 'x', { role: 7, content: 3, tool_calls: 'yes' }], tools: [null, 1, { type: 'function', function: null }] },
      { uuid: 'w3', messages: [user('a'), { role: 'assistant', content: null, tool_calls: [null, 5, { type: 'function', function: { name: 3 } }] }], tools: [] },
      { uuid: 'w4', messages: [user('a'), assistant('<think>x</think>', [call('t', '{}')])], tools: [{ type: 'function', function: { name: 't', parameters: 'oops' } }] },
      { uuid: 'w5', messages: [user('a'), assistant('<think>x</think>', [call('t', '{"a": 1}')])], tools: [{ type: 'function', function: { name: 't', parameters: { type: 'object', properties: { a: 'not a schema' } } } }] },
      null,
      undefined,
    ];
    for (const ex of weird) {
      const result = applyRuleFilters(ex as Example, RULE_FILTER_NAMES);
      assert.equal(result.kept, false);
      for (const r of result.reasons) assert.ok(RULE_FILTER_NAMES.includes(r.code as never));
    }
  });
});

describe('runRuleFilterReport', () => {
  test('counts, rejected records with origin, import errors and kept examples in order', () => {
    const bad = withTools([weatherTool], withMessage(8, assistant('no think')));
    bad.uuid = 'bad-1';
    bad.meta = { origin: { file: 'in.jsonl', line: 2, kind: 'line' } };
    const importErrors = [{ file: 'in.jsonl', line: 4, kind: 'line' as const, field: 'messages[0].role', message: 'missing' }];
    const { report, kept } = runRuleFilterReport(
      [{ example: goodExample() }, { example: bad }, { example: directReplyExample(), origin: { file: 'in.jsonl', line: 3, kind: 'line' } }],
      importErrors,
    );
    assert.deepEqual(kept.map((e) => e.uuid), ['good-1', 'direct-1']);
    assert.equal(report.total, 3);
    assert.equal(report.kept, 2);
    assert.equal(report.dropped, 1);
    assert.equal(report.reasons.tool_schema, 1, 'an example counts once per code even with several reasons');
    assert.equal(report.reasons.think_tags, 1);
    assert.equal(report.reasons.role_order, 0);
    assert.ok(!('duplicate_tools_by_schema' in report.reasons));
    assert.equal(report.rejected.length, 1);
    const rejected = report.rejected[0]!;
    assert.equal(rejected.uuid, 'bad-1');
    assert.equal(rejected.file, 'in.jsonl');
    assert.equal(rejected.line, 2);
    assert.ok(rejected.reasons.some((r) => r.code === 'think_tags' && r.messageIndex === 8));
    assert.deepEqual(report.importErrors, importErrors);
    assert.deepEqual(report.enabled, [...DEFAULT_ENABLED_FILTERS]);
  });

  test('honours the enabled list', () => {
    const { report } = runRuleFilterReport([{ example: withTools([timeTool, timeTool]) }], [], ['duplicate_tools_by_schema']);
    assert.deepEqual(report.reasons, { duplicate_tools_by_schema: 1 });
    assert.equal(report.dropped, 1);
  });
});
