/**
 * The building blocks of generated dialogues. A *scenario* writes one or two user turns of one domain: the user's
 * words, the assistant's steps (each step a thought plus one or more tool calls, executed for real against the
 * world), and the final reply built from the tool results the assistant saw. The generator strings scenarios
 * together into a dialogue and renders them as messages (src/demo/generator.ts).
 */
import type { Rng } from '../random';
import { executeTool } from '../tools';
import type { Domain, JsonValue, ToolOutcome } from '../worldTypes';
import type { CityName, Day } from '../catalog';

/** A tool call as the assistant made it, with the world's answer. */
export interface ExecutedCall {
  name: string;
  arguments: Record<string, JsonValue>;
  outcome: ToolOutcome;
}

/** One assistant message with tool calls (2+ calls = parallel calls); its tool messages follow in call order. */
export interface DraftStep {
  think: string;
  calls: ExecutedCall[];
}

/** One user turn: the user message, the tool-call steps, the final reply, and its ground truth. */
export interface DraftTurn {
  /** `domain.what`, e.g. `shopping.buy_cheapest`. */
  intent: string;
  /** What a correct assistant achieves in this turn, in plain words (for checklist writers and judges). */
  goal: string;
  user: string;
  steps: DraftStep[];
  replyThink: string;
  reply: string;
  /** Values the final reply must state (numbers, ids, names, conditions), as they appear in the reply. */
  answerFacts: string[];
  /** False for turns a correct assistant answers without any tool (asking back, saying goodbye). */
  requiresTool: boolean;
}

/** What earlier turns of the dialogue established, so follow-up turns can refer to it ("that account", "the 08:15 flight"). */
export interface Memory {
  city?: CityName;
  products?: { product_id: string; name: string; price: number; stock: number }[];
  account?: string;
  balance?: number;
  flights?: { flight_id: string; depart: string; price: number; seats_left: number }[];
  day?: Day;
  /** Intent and domain of the previous turn (set by the generator), for follow-ups that say "that" or "there". */
  lastIntent?: string;
  lastDomain?: ScenarioDomain;
}

export type ScenarioDomain = Domain | 'general';

export interface Scenario {
  intent: string;
  domain: ScenarioDomain;
  /** `opener` scenarios can start a dialogue; `followup` ones need what earlier turns put into memory. */
  role: 'opener' | 'followup' | 'closing';
  /** How many turns `build` writes (1, or 2 for "ask back, then answer"). */
  turns: number;
  applicable?(memory: Memory): boolean;
  build(ctx: TurnContext): DraftTurn[];
}

/** Filler sentences a wordy thought contains; the offline compressor is expected to drop them. */
const STEP_FILLERS = [
  'Let me think about what the user needs.',
  'I should use the right tool for this.',
  'I want to be careful and precise here.',
  'Let me make sure I understand the request.',
] as const;
const REPLY_FILLERS = [
  'The answer should be short and clear.',
  'Let me check the result once more.',
  'I want to be careful and precise here.',
  'I will not add anything the tools did not say.',
] as const;

/** What a scenario gets: a random stream, the world seed, the dialogue's memory, and a way to call tools. */
export class TurnContext {
  constructor(
    readonly rng: Rng,
    readonly worldSeed: number,
    readonly memory: Memory,
  ) {}

  /** Execute a tool call against the world (for real: the result is what `executeTool` returns). */
  call(name: string, args: Record<string, JsonValue>): ExecutedCall {
    return { name, arguments: args, outcome: executeTool(name, args, this.worldSeed) };
  }

  /** The thought of a tool-call step: the given sentences with 0–2 filler sentences mixed in (work for the compressor). */
  think(...sentences: string[]): string {
    return this.withFillers(sentences, STEP_FILLERS);
  }

  /** The thought before a final reply, with reply-style fillers. */
  reflect(...sentences: string[]): string {
    return this.withFillers(sentences, REPLY_FILLERS);
  }

  private withFillers(sentences: readonly string[], fillers: readonly string[]): string {
    const out = [...sentences];
    for (const f of this.rng.sample(fillers, this.rng.int(0, 2))) out.splice(this.rng.int(0, out.length), 0, f);
    return out.join(' ');
  }
}

/** Writes a scenario's turns. */
export type BuildTurns = (ctx: TurnContext) => DraftTurn[];

/** A two-turn "ask back, then answer" opener (`ScenarioKit.askBack`): the user leaves out a value a tool needs. */
export interface AskBack<T> {
  /** What a correct assistant does in the asking turn. */
  goal: string;
  /** What the user may say without the value. */
  users: readonly string[];
  /** The thought before asking: why the assistant cannot call the tool yet. */
  why: readonly string[];
  reply: string;
  /** The values the user may mean; one is drawn first, before the asking turn. */
  values: readonly T[];
  /** The second turn: the user gives `value` and the assistant does the task. */
  answer(ctx: TurnContext, value: T): DraftTurn;
}

/** Scenario records of one domain, so a scenario list says only what differs between its scenarios. */
export interface ScenarioKit {
  /** A one-turn scenario that can start a dialogue. */
  opener(intent: string, build: BuildTurns): Scenario;
  /** A one-turn scenario that needs what earlier turns put into memory (`applicable`). */
  followup(intent: string, applicable: (memory: Memory) => boolean, build: BuildTurns): Scenario;
  /** An opener whose first turn asks the user for a missing value (a no-tool turn of this intent), then answers. */
  askBack<T>(intent: string, ask: AskBack<T>): Scenario;
}

export function scenarioKit(domain: Domain): ScenarioKit {
  return {
    opener: (intent, build) => ({ intent, domain, role: 'opener', turns: 1, build }),
    followup: (intent, applicable, build) => ({ intent, domain, role: 'followup', turns: 1, applicable, build }),
    askBack: (intent, ask) => ({
      intent,
      domain,
      role: 'opener',
      turns: 2,
      build(ctx) {
        const value = ctx.rng.pick(ask.values);
        const asking = noToolTurn({ intent, goal: ask.goal, user: ctx.rng.pick(ask.users), replyThink: ctx.reflect(...ask.why), reply: ask.reply });
        return [asking, ask.answer(ctx, value)];
      },
    }),
  };
}

/** A turn a correct assistant answers without any tool (asking the user back, saying goodbye): no steps, no facts. */
export function noToolTurn(turn: Pick<DraftTurn, 'intent' | 'goal' | 'user' | 'replyThink' | 'reply'>): DraftTurn {
  return { intent: turn.intent, goal: turn.goal, user: turn.user, steps: [], replyThink: turn.replyThink, reply: turn.reply, answerFacts: [], requiresTool: false };
}

/** The result of a call that cannot fail in the scenario that makes it (a catalogue city, an id from a search). */
export function resultOf<T>(call: ExecutedCall): T {
  if (!call.outcome.ok) throw new Error(`world tool ${call.name} failed unexpectedly: ${call.outcome.error.message}`);
  return call.outcome.result as T;
}

/** Join a list for a reply: "a", "a and b", "a, b and c". */
export function listText(items: readonly string[]): string {
  if (items.length <= 1) return items.join('');
  return `${items.slice(0, -1).join(', ')} and ${items[items.length - 1]}`;
}
