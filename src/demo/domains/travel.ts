/** Travel domain: flight search, booking, and flight status. */
import { CITY_NAMES, findCity, findDay, findFlight, flightsOn, flightStatus } from '../catalog';
import { hash32 } from '../random';
import { fail, functionSchema, ok, type WorldTool } from '../types';

const flightIdParam = { type: 'string' as const, description: 'Flight id, for example FL1234' };
const unknownFlight = (id: unknown) => fail('not_found', `unknown flight "${String(id)}"`);

export const travelTools: Record<string, WorldTool> = {
  search_flights: {
    domain: 'travel',
    schema: functionSchema(
      'search_flights',
      'Search the flights between two cities on a day of the week. Returns each flight with id, departure and arrival time, price in EUR and free seats.',
      {
        origin: { type: 'string', description: `City to fly from, for example ${CITY_NAMES[0]}` },
        destination: { type: 'string', description: `City to fly to, for example ${CITY_NAMES[2]}` },
        day: { type: 'string', description: 'Day of the week, for example friday' },
      },
      ['origin', 'destination', 'day'],
    ),
    execute(args, seed) {
      const origin = findCity(String(args.origin));
      if (!origin) return fail('not_found', `unknown city "${String(args.origin)}"`);
      const destination = findCity(String(args.destination));
      if (!destination) return fail('not_found', `unknown city "${String(args.destination)}"`);
      if (origin === destination) return fail('invalid_arguments', 'origin and destination must be different');
      const day = findDay(String(args.day));
      if (!day) return fail('invalid_arguments', `"${String(args.day)}" is not a day of the week`);
      const flights = flightsOn(seed, origin, destination, day).map((f) => ({
        flight_id: f.flight_id,
        depart: f.depart,
        arrive: f.arrive,
        price: f.price,
        seats_left: f.seats_left,
      }));
      return ok({ origin, destination, day, flights });
    },
  },
  book_flight: {
    domain: 'travel',
    schema: functionSchema(
      'book_flight',
      'Book a seat on a flight for one passenger. Returns the booking id, the seat and the price in EUR.',
      {
        flight_id: flightIdParam,
        passenger: { type: 'string', description: 'Full name of the passenger' },
      },
      ['flight_id', 'passenger'],
    ),
    execute(args, seed) {
      const f = findFlight(seed, String(args.flight_id));
      if (!f) return unknownFlight(args.flight_id);
      if (f.seats_left === 0) return fail('sold_out', `flight ${f.flight_id} has no free seats`);
      const passenger = String(args.passenger);
      const h = hash32(seed, 'booking', f.flight_id, passenger.toLowerCase());
      return ok({
        booking_id: `bk-${1000 + (h % 9000)}`,
        flight_id: f.flight_id,
        passenger,
        origin: f.origin,
        destination: f.destination,
        day: f.day,
        depart: f.depart,
        seat: `${1 + ((h >>> 8) % 30)}${'ABCDEF'[(h >>> 16) % 6]}`,
        price: f.price,
        status: 'booked',
      });
    },
  },
  get_flight_status: {
    domain: 'travel',
    schema: functionSchema('get_flight_status', 'Get the status of a flight today: on time, delayed or boarding, the gate and the delay in minutes.', {
      flight_id: flightIdParam,
    }, ['flight_id']),
    execute(args, seed) {
      const f = findFlight(seed, String(args.flight_id));
      if (!f) return unknownFlight(args.flight_id);
      return ok(flightStatus(seed, f));
    },
  },
};
