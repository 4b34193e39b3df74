/** Travel domain: flight search, booking, and flight status. */
import { CITY_NAMES, findCity, findDay, findFlight, flightsOn, flightStatus } from '../catalog';
import { hash32 } from '../random';
import { defineTools, fail, notADay, notFound, ok, stringParam } from '../worldTypes';

const flightIdParam = stringParam('Flight id, for example FL1234');

export const travelTools = defineTools('travel', {
  search_flights: {
    description: 'Search the flights between two cities on a day of the week. Returns each flight with id, departure and arrival time, price in EUR and free seats.',
    parameters: {
      origin: stringParam(`City to fly from, for example ${CITY_NAMES[0]}`),
      destination: stringParam(`City to fly to, for example ${CITY_NAMES[2]}`),
      day: stringParam('Day of the week, for example friday'),
    },
    execute(args, seed) {
      const origin = findCity(String(args.origin));
      if (!origin) return notFound('city', args.origin);
      const destination = findCity(String(args.destination));
      if (!destination) return notFound('city', args.destination);
      if (origin === destination) return fail('invalid_arguments', 'origin and destination must be different');
      const day = findDay(String(args.day));
      if (!day) return notADay(args.day);
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
    description: 'Book a seat on a flight for one passenger. Returns the booking id, the seat and the price in EUR.',
    parameters: {
      flight_id: flightIdParam,
      passenger: stringParam('Full name of the passenger'),
    },
    execute(args, seed) {
      const f = findFlight(seed, String(args.flight_id));
      if (!f) return notFound('flight', args.flight_id);
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
    description: 'Get the status of a flight today: on time, delayed or boarding, the gate and the delay in minutes.',
    parameters: {
      flight_id: flightIdParam,
    },
    execute(args, seed) {
      const f = findFlight(seed, String(args.flight_id));
      if (!f) return notFound('flight', args.flight_id);
      return ok(flightStatus(seed, f));
    },
  },
});
