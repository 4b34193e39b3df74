/**
 * Who answers the policy's tool calls during RL, settled before the first rollout (issue 28, "no silent failure").
 *
 * The tool environment (./toolEnv.ts) answers a call that passes the call-error and schema checks with a replay of
 * a recorded reference call with the same arguments, else an executable (the demo world's tools, named by
 * `rl.executableTools`), else the simulator LLM (`llm.roles.simulator`). A replay answers only the reference's own
 * arguments, so every tool the policy may call needs an executable or the simulator: a run where some tool has
 * neither is a config error at start-up, and such a call at rollout time is a fatal error — never a rollout marked
 * failed and rewarded 0 (docs/decisions.md).
 *
 * The demo world's executables answer by tool name only, so they must never meet another dataset's tools:
 * `rl.executableTools: true` stands for them only when the data source is the demo world. Their names come from the
 * caller (`world`: src/demo/tools.ts's WORLD_TOOL_NAMES): method code does not import the demo world.
 */
import type { Example } from '../../../kernel/schema';
import { sampleToolNames } from './toolEnv';

/** `rl.executableTools`: `true`, `false`, or a list of demo-world tool names. */
export type ExecutableToolsSetting = boolean | readonly string[];

/**
 * The tool names `rl.executableTools` stands for: `true` = the demo world's tools when the data is the demo world's
 * (`data.source.kind: demo`), none otherwise; a list = those names; `false` = none.
 */
export function executableToolNames(setting: ExecutableToolsSetting, demoData: boolean, world: readonly string[]): string[] {
  if (setting === true) return demoData ? [...world] : [];
  if (setting === false) return [];
  return [...setting];
}

/** The names of a list that are not tools of the demo world (no executable exists for them). */
export const unknownExecutables = (names: readonly string[], world: readonly string[]): string[] => names.filter((n) => !world.includes(n));

/** What the config says about who answers tool calls, as config issues (`{path, message}`); empty when nothing is wrong. */
export function toolAnswerIssues(setting: ExecutableToolsSetting, demoData: boolean, simulatorOnline: boolean, world: readonly string[]): { path: string; message: string }[] {
  const issues: { path: string; message: string }[] = [];
  if (Array.isArray(setting)) {
    setting.forEach((name: string, i: number) => {
      if (unknownExecutables([name], world).length) issues.push({ path: `rl.executableTools[${i}]`, message: `"${name}" is not a tool of the demo world (${world.join(', ')})` });
    });
  }
  if (!simulatorOnline && executableToolNames(setting, demoData, world).length === 0) {
    const why = demoData ? 'rl.executableTools is off' : 'the data source is not the demo world, whose tools are the only executable ones';
    issues.push({ path: 'llm.roles.simulator.baseUrl', message: `RL needs a tool simulator: ${why}, and the simulator role has no endpoint, so the policy's tool calls could be answered only where they repeat a recorded call. ${FIX}` });
  }
  return issues;
}

/** The tools of `examples` that no executable answers, each with the number of examples offering it (order of first appearance). */
export function toolsNeedingSimulator(examples: readonly Example[], executable: ReadonlySet<string>): Map<string, number> {
  const out = new Map<string, number>();
  for (const ex of examples) {
    for (const name of new Set(sampleToolNames(ex))) if (!executable.has(name)) out.set(name, (out.get(name) ?? 0) + 1);
  }
  return out;
}

const FIX = 'Give llm.roles.simulator an endpoint (baseUrl and model), or, for the demo world\'s own tools, name them in rl.executableTools.';

/** The start-up error of RL data whose tools need a simulator that has no endpoint. */
export function missingSimulatorMessage(tools: ReadonlyMap<string, number>, examples: number): string {
  const shown = [...tools].slice(0, 8).map(([name, n]) => `${name} (${n} of ${examples} examples)`);
  const more = tools.size > shown.length ? `, and ${tools.size - shown.length} more` : '';
  return (
    `llm.roles.simulator has no endpoint, but the RL data offers tools that no executable answers: ${shown.join(', ')}${more}. ` +
    `Replays answer only a recorded call's own arguments; any other call of these tools needs the simulator. ${FIX}`
  );
}
