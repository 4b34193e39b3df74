/** Calendar domain: list a day's events, find free time, create an event. */
import { clock, eventsOn, findDay, freeSlots, overlapping, parseClock, WORKDAY_END, WORKDAY_START } from '../catalog';
import { hash32 } from '../random';
import { defineTools, fail, notADay, ok, stringParam } from '../worldTypes';

const dayParam = stringParam('Day of the week, for example monday');
const durationParam = { type: 'integer' as const, description: 'Length of the event in minutes', minimum: 15, maximum: 240, default: 60 };

export const calendarTools = defineTools('calendar', {
  list_events: {
    description: 'List the events on the calendar on a day of the week, in time order.',
    parameters: { day: dayParam },
    execute(args, seed) {
      const day = findDay(String(args.day));
      if (!day) return notADay(args.day);
      return ok({ day, events: eventsOn(seed, day).map((e) => ({ ...e })) });
    },
  },
  find_free_slot: {
    description: `Find free start times on a day, on the hour between ${clock(WORKDAY_START)} and ${clock(WORKDAY_END)}, for an event of the given length. Returns at most 3 times, earliest first.`,
    parameters: { day: dayParam, duration_minutes: durationParam },
    execute(args, seed) {
      const day = findDay(String(args.day));
      if (!day) return notADay(args.day);
      const minutes = Number(args.duration_minutes);
      return ok({ day, duration_minutes: minutes, free_slots: freeSlots(seed, day, minutes) });
    },
  },
  create_event: {
    description: 'Add an event to the calendar. Fails if it overlaps an existing event.',
    parameters: {
      title: stringParam('Title of the event'),
      day: dayParam,
      time: stringParam('Start time as HH:MM, for example 14:00'),
      duration_minutes: durationParam,
    },
    execute(args, seed) {
      const day = findDay(String(args.day));
      if (!day) return notADay(args.day);
      const start = parseClock(String(args.time));
      if (start === undefined) return fail('invalid_arguments', `"${String(args.time)}" is not a time like 14:00`);
      const minutes = Number(args.duration_minutes);
      if (start < WORKDAY_START || start + minutes > WORKDAY_END) {
        return fail('invalid_arguments', `events must be between ${clock(WORKDAY_START)} and ${clock(WORKDAY_END)}`);
      }
      const clash = overlapping(seed, day, start, minutes);
      if (clash) return fail('conflict', `the time overlaps "${clash.title}" at ${clash.time}`);
      const title = String(args.title);
      return ok({
        event_id: `ev-${1000 + (hash32(seed, 'new-event', title.toLowerCase(), day, start) % 9000)}`,
        title,
        day,
        time: clock(start),
        duration_minutes: minutes,
        status: 'created',
      });
    },
  },
});
