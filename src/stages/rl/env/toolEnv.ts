/**
 * The RL tool environment (spec §6.3, §8.1, §8.2): what a policy's tool call gets back during a rollout.
 *
 * Per call, in this order (reference `verl/tools/mcp_checklist_tool.py::execute`):
 * 1. **Call errors** — unknown uuid, a tool that is not one of this sample's tools, or arguments that are not a JSON
 *    object → `{"error_tool_call": {"code", "message", "details"}}`, success false (source `unknown_tool` /
 *    `bad_arguments`). The rollout ends on any `error_tool_call` text (§6.2); it checks that text before `success`,
 *    so these end the episode without marking the sample failed, as the reference's rollout-level "tool name not
 *    found" answer does.
 * 2. **Replay** — a recorded reference call of the same tool in the same sample (any position) whose canonical
 *    arguments equal the new ones → the recorded tool message, verbatim (lone surrogates stripped).
 * 3. **Schema check** — required keys, primitive types, extra keys (unless the function has a falsy `strict`;
 *    absent = strict), `enum` membership (Python `in`, so `1 == 1.0 == true`) →
 *    `{"error_tool_call": {"code": "SCHEMA_VALIDATION_FAILED", …, "details": {"errors": […], …}}}`, success true.
 * 4. **Executable tool** (our addition) — when an executable is registered under the name (the demo world's tools,
 *    `demoWorldExecutables`, only for the demo world's data or the tools `rl.executableTools` names: ./answers.ts),
 *    its result text, success true. A real environment instead of a simulated one.
 * 5. **LLM simulation** — the sample's recorded tool I/O as few-shot, the tool's full schema and the arguments; the
 *    `execution_result` of the answer, re-serialised as Python's `json.dumps(…, ensure_ascii=True)`. An answer that
 *    is still unusable after the simulator role's `maxParseAttempts` → `{"error": <message>}` (not valid JSON, as in
 *    the reference), success false: the rollout ends and the sample is failed (§6.6). Transport errors from the
 *    client are thrown, so Temporal retries the activity; the cache salt is derived from `ctx.salt`, so a retried
 *    activity replays the answers it already paid for. Simulated results are never remembered (no state, §8.2).
 *    Without a simulator endpoint the call throws `LlmFatalError` (the activity fails, not retried), as the judge
 *    does: a failed result would be rewarded 0 and RL would train on zeros. RL checks at start-up that every tool of
 *    its data has an executable or a simulator (./answers.ts), so this is a last line of defence.
 *
 * Python JSON semantics (int vs float, §8.1): src/kernel/pyjson.ts.
 *
 * Cost: the index is built once, O(total messages + total tools), without reading any tool's parameters; a call
 * costs O(1) in the number of tools (Map lookups by uuid and name). Per (uuid, tool) the replay table, the schema
 * checker and the rendered schema are built on first use; the few-shot block once per uuid on its first simulation.
 *
 * Sampling (§6.3: temperature 0.6, top_p 0.8, 8000 max tokens): the LLM client only sends what the role config
 * sets, so those defaults live in the config — `withSimulatorDefaults(llmConfig)` fills whichever are unset.
 */
import type { Usage } from '../../../kernel/roleContracts';
import type { Example } from '../../../kernel/schema';
import { stripLoneSurrogates } from '../../../chat/toolCalls';
import type { LlmAsk } from '../../../llm/client';
import { isOnline } from '../../../llm/llmConfig';
import { LlmFatalError } from '../../../llm/errors';
import { withParseRetries } from '../../../llm/parseRetries';
import { canonical, fromJs, hasOwn, isPyObject, isRecord, pyDumps, type PyJson, type PyObject, pyTypeName, toJs } from '../../../kernel/pyjson';
import { type Checker, compileChecker, RawArguments, readArguments, type ToolArguments } from './arguments';
import { parseSimulation, SIMULATION_JSON_SCHEMA, SIMULATOR_SYSTEM_PROMPT } from './simulator';
import { systemThenUser } from '../../../llm/prompting';

export type ToolSource = 'replay' | 'executable' | 'simulated' | 'schema_error' | 'unknown_tool' | 'bad_arguments' | 'failed';

export interface ToolResult {
  /** The tool message text the policy sees. */
  text: string;
  /** The reference's metrics `success`: false ends the rollout and fails the sample (unless the text is an `error_tool_call`). */
  success: boolean;
  source: ToolSource;
  /** LLM usage of a simulation (summed over parse attempts). */
  usage?: Usage;
}

/** An executable tool: decoded arguments (JS values) → the tool message text. */
export type Executable = (args: Record<string, unknown>) => string;

export interface ToolEnvironmentOptions {
  /** Client for the `simulator` role; without it (or with the role offline) a call that needs it throws `LlmFatalError`. */
  llm?: LlmAsk;
  /** Tools executed for real, by name (used after replay and the schema check). */
  executables?: Readonly<Record<string, Executable>>;
}

export interface ExecuteContext {
  /** Unique per call and stable across retries of the activity (e.g. `<rollout id>/<step>/c<k>`). */
  salt: string;
  signal?: AbortSignal;
}

/** One recorded reference call: arguments as stored (JSON text or object) and the paired tool message. */
interface RecordedCall {
  name: string;
  args: string | Record<string, unknown>;
  response: string;
}

interface ToolEntry {
  /** The OpenAI function tool (a bare `{name, …}` wrapped), as in `extra_info.tools`. */
  tool: Record<string, unknown>;
  /** Built on first use: canonical args → recorded response (first recorded call wins). */
  replay?: Map<string, string>;
  checker?: Checker;
  /** `json.dumps(tool, ensure_ascii=True, indent=0)`, surrogates stripped. */
  schemaText?: string;
}

interface SampleIndex {
  tools: Map<string, ToolEntry>;
  /** Recorded calls by tool name, names in order of first appearance (the reference's few-shot order). */
  calls: Map<string, RecordedCall[]>;
  /** The few-shot block of the simulator prompt, built on first simulation. */
  fewShot?: string;
}

/** Arguments of a recorded call as PyJson, or undefined when they are not valid JSON (then never replayed or shown). */
function recordedArgs(call: RecordedCall): PyJson | undefined {
  const read = readArguments(typeof call.args === 'string' ? new RawArguments(call.args) : call.args);
  return read.ok ? read.value : undefined;
}

/** A tool list entry as an OpenAI function tool with its name, or undefined for entries without a usable name. */
function wrapTool(entry: unknown): { name: string; tool: Record<string, unknown> } | undefined {
  if (!isRecord(entry)) return undefined;
  if (hasOwn(entry, 'function')) {
    const fn = entry['function'];
    return isRecord(fn) && typeof fn['name'] === 'string' ? { name: fn['name'], tool: entry } : undefined;
  }
  return typeof entry['name'] === 'string' ? { name: entry['name'], tool: { type: 'function', function: entry } } : undefined;
}

/** The names of an example's tools (entries without a usable name skipped), in list order. */
export const sampleToolNames = (ex: Example): string[] => ex.tools.flatMap((entry) => wrapTool(entry)?.name ?? []);

/** Pair each call of assistant message `i` with a following tool message: by id when both have one, else by position. */
function pairCalls(messages: Example['messages'], i: number): RecordedCall[] {
  const calls = messages[i]!.tool_calls ?? [];
  const following: Example['messages'] = [];
  for (let j = i + 1; j < messages.length && messages[j]!.role === 'tool'; j++) following.push(messages[j]!);
  const byId = new Map<string, string>();
  for (const m of following) if (m.tool_call_id !== undefined && !byId.has(m.tool_call_id)) byId.set(m.tool_call_id, m.content);
  const out: RecordedCall[] = [];
  calls.forEach((call, k) => {
    const response = (call.id !== undefined ? byId.get(call.id) : undefined) ?? following[k]?.content;
    if (response !== undefined) out.push({ name: call.function.name, args: call.function.arguments, response });
  });
  return out;
}

/** `{"error_tool_call": {"code", "message", "details"}}` as the reference writes it (`json.dumps`, ensure_ascii). */
function errorToolCall(code: string, message: string, details: Record<string, PyJson>): string {
  const inner: PyObject = new Map<string, PyJson>([
    ['code', code],
    ['message', message],
    ['details', new Map(Object.entries(details))],
  ]);
  return pyDumps(new Map([['error_tool_call', inner]]));
}

/** The reference's failure text: `{"error": <message>}`, the message unquoted (not necessarily valid JSON). */
const failureText = (message: string): string => `{"error": ${message}}`;

export class ToolEnvironment {
  private readonly samples = new Map<string, SampleIndex>();
  private readonly executables: Map<string, Executable>;
  private readonly llm: LlmAsk | undefined;

  constructor(examples: readonly Example[], opts: ToolEnvironmentOptions = {}) {
    this.llm = opts.llm;
    this.executables = new Map(Object.entries(opts.executables ?? {}));
    for (const ex of examples) {
      const tools = new Map<string, ToolEntry>();
      for (const entry of ex.tools) {
        const w = wrapTool(entry);
        if (w) tools.set(w.name, { tool: w.tool }); // a repeated name: the last entry wins, as in the reference's dict
      }
      const calls = new Map<string, RecordedCall[]>();
      ex.messages.forEach((m, i) => {
        if (m.role !== 'assistant' || !m.tool_calls?.length) return;
        for (const c of pairCalls(ex.messages, i)) {
          let list = calls.get(c.name);
          if (!list) calls.set(c.name, (list = []));
          list.push(c);
        }
      });
      this.samples.set(ex.uuid, { tools, calls });
    }
  }

  /** Sizes of the index, for logs. */
  summary(): { samples: number; tools: number; recordedCalls: number } {
    let tools = 0;
    let recordedCalls = 0;
    for (const s of this.samples.values()) {
      tools += s.tools.size;
      for (const list of s.calls.values()) recordedCalls += list.length;
    }
    return { samples: this.samples.size, tools, recordedCalls };
  }

  /** Answer one tool call of a rollout of sample `uuid` (see the module comment for the order of the steps). */
  async execute(uuid: string, name: string, args: ToolArguments, ctx: ExecuteContext): Promise<ToolResult> {
    const sample = this.samples.get(uuid);
    if (!sample) {
      return { text: errorToolCall('INDEX_NOT_FOUND', `original_index ${uuid} not found`, { original_index: uuid }), success: false, source: 'unknown_tool' };
    }
    const entry = sample.tools.get(name);
    if (!entry) {
      const text = errorToolCall('TOOL_NOT_AVAILABLE', `tool ${name} not available for original_index ${uuid}`, { tool: name, original_index: uuid });
      return { text, success: false, source: 'unknown_tool' };
    }
    const read = readArguments(args);
    if (!read.ok || !isPyObject(read.value)) {
      const type = read.ok ? pyTypeName(read.value) : 'str';
      const text = errorToolCall('INVALID_PARAMETERS', "'parameters' is missing, empty, or not a JSON object.", { tool: name, parameters_type: type });
      return { text, success: false, source: 'bad_arguments' };
    }
    const params = read.value;

    const replayed = this.replayTable(sample, entry, name).get(canonical(params));
    if (replayed !== undefined) return { text: stripLoneSurrogates(replayed), success: true, source: 'replay' };

    const errors = (entry.checker ??= compileChecker(entry.tool))(params);
    if (errors.length > 0) {
      const text = errorToolCall('SCHEMA_VALIDATION_FAILED', 'parameters do not conform to the tool schema', { errors, tool: name, original_index: uuid });
      return { text, success: true, source: 'schema_error' };
    }

    const executable = this.executables.get(name);
    if (executable) {
      try {
        return { text: executable(toJs(params) as Record<string, unknown>), success: true, source: 'executable' };
      } catch (e) {
        return { text: failureText(`executable tool ${name} threw: ${(e as Error).message}`), success: false, source: 'failed' };
      }
    }
    return this.simulate(uuid, sample, entry, name, params, ctx);
  }

  private replayTable(sample: SampleIndex, entry: ToolEntry, name: string): Map<string, string> {
    if (entry.replay) return entry.replay;
    const table = new Map<string, string>();
    for (const call of sample.calls.get(name) ?? []) {
      const args = recordedArgs(call);
      if (args === undefined) continue;
      const key = canonical(args);
      if (!table.has(key)) table.set(key, call.response);
    }
    return (entry.replay = table);
  }

  private async simulate(uuid: string, sample: SampleIndex, entry: ToolEntry, name: string, params: PyObject, ctx: ExecuteContext): Promise<ToolResult> {
    const llm = this.llm;
    if (!llm || !isOnline(llm.roleConfig('simulator'))) {
      // A configuration error, not a bad rollout: a failed result would be rewarded 0 and the run would train on zeros.
      throw new LlmFatalError(
        `tool environment: a call of tool ${name} (sample ${uuid}) is neither a replay nor executable, and the simulator role has no endpoint ` +
          '(no llm.roles.simulator.baseUrl); give llm.roles.simulator an endpoint, or name the demo world\'s tools in rl.executableTools',
      );
    }
    const user = stripLoneSurrogates(
      `${this.fewShot(sample)}\n\n` +
        `Current tool name: ${name}\n` +
        `Current tool input schema (JSON Schema):\n${(entry.schemaText ??= stripLoneSurrogates(pyDumps(fromJs(entry.tool), { indent: 0 })))}\n` +
        `Current arguments (JSON):\n${pyDumps(params, { indent: 0 })}\n` +
        'Generate tool execution result in JSON format.',
    );
    const outcome = await withParseRetries(
      llm,
      llm.roleConfig('simulator').maxParseAttempts,
      {
        role: 'simulator',
        messages: systemThenUser(SIMULATOR_SYSTEM_PROMPT, user),
        jsonSchema: SIMULATION_JSON_SCHEMA,
        cacheSalt: `tool-sim/${ctx.salt}`,
        ...(ctx.signal ? { signal: ctx.signal } : {}),
      },
      parseSimulation,
    );
    if (outcome.ok) return { text: outcome.value, success: true, source: 'simulated', usage: outcome.usage };
    return { text: failureText(outcome.reason), success: false, source: 'failed', usage: outcome.usage };
  }

  /** Every recorded call of the sample as a few-shot block (all tools, grouped by tool in order of first use). */
  private fewShot(sample: SampleIndex): string {
    if (sample.fewShot !== undefined) return sample.fewShot;
    const lines = ['Previous tool calls and results (few-shot):'];
    for (const [name, list] of sample.calls) {
      for (const call of list) {
        const args = recordedArgs(call);
        if (args === undefined) continue;
        lines.push(
          `Tool name:\n${stripLoneSurrogates(name)}\nTool arguments:\n${pyDumps(args, { indent: 0 })}\nTool execution result:\n${stripLoneSurrogates(call.response)}\n`,
        );
      }
    }
    return (sample.fewShot = lines.join('\n'));
  }
}
