/** Calendar dialogues: a day's events (one day, or two in parallel), find-a-slot-then-create (sequential), create at a time. */
import { DAYS, NEW_EVENT_TITLES, overlapping, parseClock, clock, type Day } from '../catalog';
import { listText, resultOf, scenarioKit, type DraftTurn, type Scenario, type TurnContext } from './scenarioKit';

interface EventRow {
  event_id: string;
  title: string;
  time: string;
  duration_minutes: number;
}
interface Created {
  event_id: string;
  time: string;
  duration_minutes: number;
}

const eventsText = (events: EventRow[]): string => listText(events.map((e) => `${e.title} at ${e.time} for ${e.duration_minutes} minutes`));

function dayText(day: Day, events: EventRow[]): string {
  return events.length === 0 ? `you have nothing planned on ${day}` : `on ${day} you have ${eventsText(events)}`;
}

const capitalise = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1);

/** A create_event turn at a time the user chose: it either works or meets a real conflict error. */
function createAtTurn(ctx: TurnContext, title: string, day: Day, time: string, user: string, intent: string): DraftTurn {
  const call = ctx.call('create_event', { title, day, time });
  ctx.memory.day = day;
  const turn: DraftTurn = {
    intent,
    goal: `Add ${title} on ${day} at ${time} with create_event and confirm it, or explain why it is not possible.`,
    user,
    steps: [{ think: ctx.think(`The user wants ${title} on ${day} at ${time}.`, `I will call create_event with title ${title}, day ${day} and time ${time}.`), calls: [call] }],
    replyThink: '',
    reply: '',
    answerFacts: [],
    requiresTool: true,
  };
  if (call.outcome.ok) {
    const r = call.outcome.result as unknown as Created;
    turn.replyThink = ctx.reflect(`The event was created with id ${r.event_id}.`);
    turn.reply = `I added ${title} on ${day} at ${r.time} for ${r.duration_minutes} minutes. The event id is ${r.event_id}.`;
    turn.answerFacts = [r.event_id];
  } else {
    const clash = overlapping(ctx.worldSeed, day, parseClock(time) ?? 0, 60);
    turn.goal = `Try to add ${title} on ${day} at ${time} and tell the user it overlaps an existing event.`;
    turn.replyThink = ctx.reflect(`The calendar says: ${call.outcome.error.message}.`, 'I will tell the user.');
    turn.reply = `I could not add ${title} on ${day} at ${time}: ${call.outcome.error.message}.`;
    turn.answerFacts = clash ? [clash.title, clash.time] : [];
  }
  return turn;
}

const { opener, followup } = scenarioKit('calendar');

export const calendarScenarios: Scenario[] = [
  opener('calendar.list', (ctx) => {
    const day = ctx.rng.pick(DAYS);
    const call = ctx.call('list_events', { day });
    const events = resultOf<{ events: EventRow[] }>(call).events;
    ctx.memory.day = day;
    return [
      {
        intent: 'calendar.list',
        goal: `List the events on ${day} with their times.`,
        user: ctx.rng.pick([`What is on my calendar on ${day}?`, `Do I have anything planned on ${day}?`]),
        steps: [{ think: ctx.think(`The user asks about ${day}.`, `I will call list_events with day ${day}.`), calls: [call] }],
        replyThink: ctx.reflect(events.length === 0 ? `There are no events on ${day}.` : `There are events at ${listText(events.map((e) => e.time))}.`),
        reply: `${capitalise(dayText(day, events))}.`,
        answerFacts: events.flatMap((e) => [e.title, e.time]),
        requiresTool: true,
      },
    ];
  }),
  opener('calendar.two_days', (ctx) => {
    const [a, b] = ctx.rng.sample(DAYS, 2) as [Day, Day];
    const calls = [ctx.call('list_events', { day: a }), ctx.call('list_events', { day: b })];
    const [ea, eb] = calls.map((c) => resultOf<{ events: EventRow[] }>(c).events) as [EventRow[], EventRow[]];
    return [
      {
        intent: 'calendar.two_days',
        goal: `List the events on ${a} and on ${b} with their times.`,
        user: ctx.rng.pick([`What do I have on ${a} and ${b}?`, `Show me my calendar for ${a} and ${b}.`]),
        steps: [{ think: ctx.think(`I need the events of two days: ${a} and ${b}.`, 'I will call list_events for both days at the same time.'), calls }],
        replyThink: ctx.reflect('I have both days.', 'I will answer day by day.'),
        reply: `${capitalise(dayText(a, ea))}, and ${dayText(b, eb)}.`,
        answerFacts: [...ea, ...eb].flatMap((e) => [e.title, e.time]),
        requiresTool: true,
      },
    ];
  }),
  opener('calendar.schedule', (ctx) => {
    const title = ctx.rng.pick(NEW_EVENT_TITLES);
    const day = ctx.rng.pick(DAYS);
    const minutes = ctx.rng.pick([30, 60, 90]);
    ctx.memory.day = day;
    // 60 minutes is the tools' default: the user does not need to say it, and the assistant need not send it.
    const saysLength = minutes !== 60 || ctx.rng.chance(0.5);
    const find = ctx.call('find_free_slot', saysLength ? { day, duration_minutes: minutes } : { day });
    const slots = resultOf<{ free_slots: string[] }>(find).free_slots;
    const turn: DraftTurn = {
      intent: 'calendar.schedule',
      goal: `Find the first free time on ${day} for ${minutes} minutes with find_free_slot, then add ${title} there with create_event and confirm the time and event id.`,
      user: saysLength ? `Please add ${title} on ${day} for ${minutes} minutes at the first free time.` : `Please put ${title} on my calendar on ${day}, at the first free hour.`,
      steps: [
        {
          think: ctx.think(`I need a free time on ${day} first.`, `I will call find_free_slot with day ${day}${saysLength ? ` and duration_minutes ${minutes}` : ''}.`),
          calls: [find],
        },
      ],
      replyThink: '',
      reply: '',
      answerFacts: [],
      requiresTool: true,
    };
    const first = slots[0];
    if (first === undefined) {
      turn.goal = `Look for free time on ${day} and tell the user there is none.`;
      turn.replyThink = ctx.reflect(`There is no free time on ${day}.`);
      turn.reply = `Sorry, there is no free time on ${day} for ${minutes} minutes.`;
      return [turn];
    }
    const create = ctx.call('create_event', saysLength ? { title, day, time: first, duration_minutes: minutes } : { title, day, time: first });
    const r = resultOf<Created>(create);
    turn.steps.push({ think: ctx.think(`The first free time is ${first}.`, `I will call create_event with title ${title}, day ${day} and time ${first}.`), calls: [create] });
    turn.replyThink = ctx.reflect(`The event ${r.event_id} is on the calendar at ${r.time}.`);
    turn.reply = `I added ${title} on ${day} at ${r.time} for ${r.duration_minutes} minutes. The event id is ${r.event_id}.`;
    turn.answerFacts = [r.time, r.event_id];
    return [turn];
  }),
  opener('calendar.create_at', (ctx) => {
    const title = ctx.rng.pick(NEW_EVENT_TITLES);
    const day = ctx.rng.pick(DAYS);
    const time = clock(ctx.rng.int(9, 16) * 60 + ctx.rng.pick([0, 30]));
    return [createAtTurn(ctx, title, day, time, ctx.rng.pick([`Add ${title} on ${day} at ${time}.`, `Please put ${title} on ${day} at ${time} on my calendar.`]), 'calendar.create_at')];
  }),
  followup('calendar.create_same_day', (m) => m.day !== undefined, (ctx) => {
    const title = ctx.rng.pick(NEW_EVENT_TITLES);
    const time = clock(ctx.rng.int(9, 16) * 60 + ctx.rng.pick([0, 30]));
    return [createAtTurn(ctx, title, ctx.memory.day as Day, time, ctx.rng.pick([`Add ${title} at ${time} that day.`, `Then please add ${title} at ${time} on the same day.`]), 'calendar.create_same_day')];
  }),
];
