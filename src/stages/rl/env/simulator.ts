/** The tool simulator's prompt, sampling defaults and answer parsing (spec §6.3 step 5). */
import { isPyObject, parsePyJson, pyDumps, type PyJson, pyTypeName } from '../../../kernel/pyjson';
import { stripLoneSurrogates } from '../../../chat/toolCalls';
import { LlmConfig, withSamplingDefaults } from '../../../llm/llmConfig';

/** Our wording of the paper's "Prompt for Tool Simulation" (§6.3). */
export const SIMULATOR_SYSTEM_PROMPT = [
  'You stand in for a software tool: you produce the result the tool would return for a call, learning how the tool behaves from recorded calls.',
  '',
  'You receive:',
  "- the tool's input definition (JSON Schema);",
  '- earlier calls of tools from the same session, each with the result it returned;',
  '- the new call and its arguments.',
  '',
  'How to answer:',
  '1) Take the OUTPUT FORMAT from the recorded results: the same structure, field names, value types and conventions.',
  '2) Stay FACTUALLY CONSISTENT with everything the recorded results already establish.',
  '3) For the new call:',
  '   - apply that format to the new arguments;',
  '   - if the arguments resemble a recorded call, adapt its result to the differences;',
  '   - if they differ a lot, make up a new, plausible result in the same format that agrees with the known facts;',
  '   - where a recorded result has an evident type slip or mistake, you may correct it.',
  '4) If the arguments are invalid or incomplete, return an error shaped like the errors in the recorded results.',
  '',
  'Constraints:',
  '- Behave like the tool itself: no explanations, advice or hints.',
  '- Never say how a call could be fixed or improved.',
  '- Never mention or compare with the recorded calls.',
  '- Errors carry the bare minimum of information, nothing instructive.',
  '',
  'Output:',
  '- First analyse briefly how to produce the result, then give the result itself as a JSON object or array.',
  '- No markdown and no code fences.',
  '- Keep the output structure of the recorded results and their facts.',
  'Format:',
  '{',
  '  "analysis": str,',
  '  "execution_result": JSON object or array',
  '}',
].join('\n');

/** The structured-output schema of the simulator's answer (§6.3). Not OpenAI-strict (open result object). */
export const SIMULATION_JSON_SCHEMA = {
  name: 'tool_execution_response',
  strict: false,
  schema: {
    type: 'object',
    required: ['analysis', 'execution_result'],
    additionalProperties: false,
    properties: {
      analysis: { type: 'string' },
      execution_result: {
        anyOf: [
          { type: 'object', minProperties: 1, additionalProperties: true },
          { type: 'array', items: {} },
        ],
      },
    },
  },
} as const;

/** The reference simulator's sampling (§6.3, §6.8). */
export const SIMULATOR_SAMPLING = { temperature: 0.6, topP: 0.8, maxTokens: 8000 } as const;

/** `config` with the simulator role's unset temperature / top_p / max tokens set to the reference values. */
export const withSimulatorDefaults = (config: LlmConfig): LlmConfig => withSamplingDefaults(config, 'simulator', SIMULATOR_SAMPLING);

/**
 * The tool text of a simulator answer: `json.dumps(answer["execution_result"], ensure_ascii=True)`. The answer
 * must be a JSON object whose `execution_result` is a non-empty object or an array (the requested schema); a
 * leading code fence is tolerated (servers without schema-guided decoding).
 */
export function parseSimulation(text: string): { ok: true; value: string } | { ok: false; error: string } {
  const clean = stripLoneSurrogates(text);
  let answer: PyJson;
  try {
    answer = parsePyJson(clean);
  } catch (e) {
    const fenced = /^\s*```[A-Za-z]*[ \t]*\n([\s\S]*?)\n?```\s*$/.exec(clean);
    if (!fenced) return { ok: false, error: (e as Error).message };
    try {
      answer = parsePyJson(fenced[1]!);
    } catch (e2) {
      return { ok: false, error: (e2 as Error).message };
    }
  }
  if (!isPyObject(answer)) return { ok: false, error: `the answer is a JSON ${pyTypeName(answer)}, not an object` };
  const result = answer.get('execution_result');
  if (result === undefined) return { ok: false, error: "the answer has no 'execution_result' key" };
  if (!(Array.isArray(result) || (isPyObject(result) && result.size > 0))) {
    return { ok: false, error: `execution_result must be a non-empty object or an array, got ${pyTypeName(result)}` };
  }
  return { ok: true, value: pyDumps(result) };
}

