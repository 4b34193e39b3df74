/**
 * What a run on a serving engine (`rl.engine`, issue 33) can and cannot combine, as one pure check the workflow runs
 * before its first step (no imports: the workflow bundle loads it).
 */

/** The settings the rules read (RlSettings; inputs recorded before `engine` or `sync` existed lack them). */
export interface EngineRuleInput {
  engine?: { kind?: string; sync?: string };
  lora?: { trainTokens?: readonly number[] } | null;
  async?: string;
}

/** Why these RL settings cannot run, or undefined when they can. */
export function engineConfigProblem(rl: EngineRuleInput): string | undefined {
  const kind = rl.engine?.kind ?? 'embedded';
  if (kind === 'embedded') return undefined;
  const sync = rl.engine?.sync ?? 'weights';
  if (sync === 'adapter') {
    if (!rl.lora) return 'rl.engine.sync adapter needs rl.lora: the engine serves each version as a LoRA adapter over the run\'s fixed base';
    if ((rl.lora.trainTokens ?? []).length > 0) return `rl.engine.sync adapter: rl.lora.trainTokens trains embedding rows (${rl.lora.trainTokens!.length}), which ${kind}'s LoRA loader does not take; leave them out of RL's adapter or use sync: weights`;
    return undefined;
  }
  if (rl.async === 'one-step-off') return 'rl.async one-step-off with rl.engine.sync weights: the engine serves one set of weights at a time, and one-step-off needs two policies at once (the next step\'s rollouts and the update\'s evaluation); use rl.lora with rl.engine.sync adapter';
  return undefined;
}
