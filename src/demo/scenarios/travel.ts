/** Travel dialogues: flight search (one way, or both ways in parallel), search-then-book, booking from results, status. */
import { CITY_NAMES, DAYS, flightsOn, PEOPLE, type CityName, type Day } from '../catalog';
import { listText, resultOf, scenarioKit, type DraftTurn, type ExecutedCall, type Scenario, type TurnContext } from './scenarioKit';

interface FlightRow {
  flight_id: string;
  depart: string;
  arrive: string;
  price: number;
  seats_left: number;
}
interface Booking {
  booking_id: string;
  flight_id: string;
  depart: string;
  seat: string;
  price: number;
}
interface Status {
  status: string;
  gate: string;
  delay_minutes: number;
}

function route(ctx: TurnContext): { origin: CityName; destination: CityName; day: Day } {
  const [origin, destination] = ctx.rng.sample(CITY_NAMES, 2) as [CityName, CityName];
  return { origin, destination, day: ctx.rng.pick(DAYS) };
}

const cheapestOf = (flights: FlightRow[]): FlightRow | undefined =>
  [...flights].sort((a, b) => a.price - b.price || a.depart.localeCompare(b.depart))[0];

function bookingReply(ctx: TurnContext, call: ExecutedCall, passenger: string): Pick<DraftTurn, 'replyThink' | 'reply' | 'answerFacts'> {
  const b = resultOf<Booking>(call);
  return {
    replyThink: ctx.reflect(`The booking ${b.booking_id} is confirmed, seat ${b.seat}.`),
    reply: `Done! ${passenger} is booked on flight ${b.flight_id}, leaving at ${b.depart}. The seat is ${b.seat}, the price is ${b.price} EUR and the booking id is ${b.booking_id}.`,
    answerFacts: [b.booking_id, b.flight_id, b.seat, String(b.price)],
  };
}

const { opener, followup } = scenarioKit('travel');

export const travelScenarios: Scenario[] = [
  opener('travel.search', (ctx) => {
    const { origin, destination, day } = route(ctx);
    const call = ctx.call('search_flights', { origin, destination, day });
    const flights = resultOf<{ flights: FlightRow[] }>(call).flights;
    ctx.memory.flights = flights;
    const rows = flights.map((f) => `${f.flight_id} at ${f.depart} for ${f.price} EUR${f.seats_left === 0 ? ' (sold out)' : ''}`);
    return [
      {
        intent: 'travel.search',
        goal: `Search the flights from ${origin} to ${destination} on ${day} and list them with departure times and prices.`,
        user: ctx.rng.pick([`Find flights from ${origin} to ${destination} on ${day}.`, `Which flights go from ${origin} to ${destination} on ${day}?`]),
        steps: [{ think: ctx.think(`The user wants flights from ${origin} to ${destination} on ${day}.`, `I will call search_flights with origin ${origin}, destination ${destination} and day ${day}.`), calls: [call] }],
        replyThink: ctx.reflect(`There are flights at ${listText(flights.map((f) => f.depart))}.`, 'I will list them with their prices.'),
        reply: `These flights go from ${origin} to ${destination} on ${day}: ${listText(rows)}.`,
        answerFacts: flights.flatMap((f) => [f.flight_id, String(f.price)]),
        requiresTool: true,
      },
    ];
  }),
  opener('travel.book_cheapest', (ctx) => {
    const { origin, destination, day } = route(ctx);
    const passenger = ctx.rng.pick(PEOPLE);
    const search = ctx.call('search_flights', { origin, destination, day });
    const flights = resultOf<{ flights: FlightRow[] }>(search).flights;
    ctx.memory.flights = flights;
    const pick = cheapestOf(flights.filter((f) => f.seats_left > 0));
    const turn: DraftTurn = {
      intent: 'travel.book_cheapest',
      goal: `Search the flights from ${origin} to ${destination} on ${day}, then book the cheapest one with free seats for ${passenger} and give the booking id, seat and price.`,
      user: ctx.rng.pick([`Book the cheapest flight from ${origin} to ${destination} on ${day} for ${passenger}.`, `Please get ${passenger} the cheapest flight from ${origin} to ${destination} on ${day}.`]),
      steps: [{ think: ctx.think(`First I must find the flights from ${origin} to ${destination} on ${day}.`, `I will call search_flights with origin ${origin}, destination ${destination} and day ${day}.`), calls: [search] }],
      replyThink: '',
      reply: '',
      answerFacts: [],
      requiresTool: true,
    };
    if (!pick) {
      turn.goal = `Search the flights from ${origin} to ${destination} on ${day} and tell the user that all of them are sold out.`;
      turn.replyThink = ctx.reflect('Every flight is sold out.', 'I cannot book and will tell the user.');
      turn.reply = `Sorry, all flights from ${origin} to ${destination} on ${day} are sold out.`;
      return [turn];
    }
    const book = ctx.call('book_flight', { flight_id: pick.flight_id, passenger });
    turn.steps.push({
      think: ctx.think(`The cheapest flight with free seats is ${pick.flight_id} at ${pick.price} EUR.`, `I will call book_flight with flight_id ${pick.flight_id} and passenger ${passenger}.`),
      calls: [book],
    });
    Object.assign(turn, bookingReply(ctx, book, passenger));
    return [turn];
  }),
  followup('travel.book_from_results', (m) => (m.flights ?? []).some((f) => f.seats_left > 0), (ctx) => {
    const flight = ctx.rng.pick((ctx.memory.flights ?? []).filter((f) => f.seats_left > 0));
    const passenger = ctx.rng.pick(PEOPLE);
    const book = ctx.call('book_flight', { flight_id: flight.flight_id, passenger });
    return [
      {
        intent: 'travel.book_from_results',
        goal: `Book flight ${flight.flight_id} (the ${flight.depart} flight from the earlier results) for ${passenger} and give the booking id and seat.`,
        user: ctx.rng.pick([`Please book the ${flight.depart} flight for ${passenger}.`, `I will take the flight at ${flight.depart}. The passenger is ${passenger}.`]),
        steps: [{ think: ctx.think(`The flight at ${flight.depart} is ${flight.flight_id}.`, `I will call book_flight with flight_id ${flight.flight_id} and passenger ${passenger}.`), calls: [book] }],
        ...bookingReply(ctx, book, passenger),
        requiresTool: true,
      },
    ];
  }),
  opener('travel.flight_status', (ctx) => {
    const { origin, destination, day } = route(ctx);
    const flight = ctx.rng.pick(flightsOn(ctx.worldSeed, origin, destination, day));
    const call = ctx.call('get_flight_status', { flight_id: flight.flight_id });
    const s = resultOf<Status>(call);
    const delay = s.delay_minutes > 0 ? `, with a delay of ${s.delay_minutes} minutes` : '';
    return [
      {
        intent: 'travel.flight_status',
        goal: `Look up flight ${flight.flight_id} and tell the user its status and gate${s.delay_minutes > 0 ? ' and the delay' : ''}.`,
        user: ctx.rng.pick([`Is flight ${flight.flight_id} on time?`, `What is the status of flight ${flight.flight_id}?`]),
        steps: [{ think: ctx.think(`The user asks about flight ${flight.flight_id}.`, `I will call get_flight_status with flight_id ${flight.flight_id}.`), calls: [call] }],
        replyThink: ctx.reflect(`Flight ${flight.flight_id} is ${s.status} at gate ${s.gate}.`),
        reply: `Flight ${flight.flight_id} is ${s.status} at gate ${s.gate}${delay}.`,
        answerFacts: [s.status, s.gate, ...(s.delay_minutes > 0 ? [String(s.delay_minutes)] : [])],
        requiresTool: true,
      },
    ];
  }),
  opener('travel.round_trip', (ctx) => {
    const { origin, destination } = route(ctx);
    const [out, back] = ctx.rng.sample(DAYS, 2) as [Day, Day];
    const calls = [
      ctx.call('search_flights', { origin, destination, day: out }),
      ctx.call('search_flights', { origin: destination, destination: origin, day: back }),
    ];
    const [fo, fb] = calls.map((c) => cheapestOf(resultOf<{ flights: FlightRow[] }>(c).flights) as FlightRow) as [FlightRow, FlightRow];
    return [
      {
        intent: 'travel.round_trip',
        goal: `Search the flights from ${origin} to ${destination} on ${out} and back on ${back}, and give the cheapest flight each way with time and price.`,
        user: ctx.rng.pick([`Find flights from ${origin} to ${destination} on ${out} and back on ${back}.`, `I want to fly from ${origin} to ${destination} on ${out} and come back on ${back}. What are the cheapest flights?`]),
        steps: [
          {
            think: ctx.think(`I need two searches: ${origin} to ${destination} on ${out}, and ${destination} to ${origin} on ${back}.`, 'They do not depend on each other, so I will call search_flights twice at the same time.'),
            calls,
          },
        ],
        replyThink: ctx.reflect(`The cheapest flight out is ${fo.flight_id} and the cheapest flight back is ${fb.flight_id}.`),
        reply: `The cheapest flight out on ${out} is ${fo.flight_id} at ${fo.depart} for ${fo.price} EUR, and the cheapest flight back on ${back} is ${fb.flight_id} at ${fb.depart} for ${fb.price} EUR.`,
        answerFacts: [fo.flight_id, String(fo.price), fb.flight_id, String(fb.price)],
        requiresTool: true,
      },
    ];
  }),
];
