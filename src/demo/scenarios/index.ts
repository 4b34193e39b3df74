/** All scenarios, plus the domain-free closing turn. */
import type { Domain } from '../worldTypes';
import { bankingScenarios } from './banking';
import { calendarScenarios } from './calendar';
import { shoppingScenarios } from './shopping';
import { travelScenarios } from './travel';
import { noToolTurn, type Scenario } from './scenarioKit';
import { weatherScenarios } from './weather';

export * from './scenarioKit';

/** "Thanks, that is all": a last turn that a correct assistant answers without any tool. */
export const closingScenario: Scenario = {
  intent: 'general.thanks',
  domain: 'general',
  role: 'closing',
  turns: 1,
  build: (ctx) => [
    noToolTurn({
      intent: 'general.thanks',
      goal: 'Answer the thanks politely, without calling a tool and without new facts.',
      user: ctx.rng.pick(['Thanks, that is all.', 'Great, thank you!', 'Perfect, thanks for the help.']),
      replyThink: ctx.reflect('The user is done and only says thanks.', 'No tool is needed.'),
      reply: ctx.rng.pick(['You are welcome! Let me know if you need anything else.', 'Glad I could help. Have a nice day!']),
    }),
  ],
};

export const SCENARIOS: Readonly<Record<Domain, readonly Scenario[]>> = {
  weather: weatherScenarios,
  shopping: shoppingScenarios,
  banking: bankingScenarios,
  travel: travelScenarios,
  calendar: calendarScenarios,
};
