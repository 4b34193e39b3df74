/**
 * The world's fixed catalogues and its seeded facts.
 *
 * Names (cities, products, accounts, ...) are fixed, short and few, so the world's vocabulary stays a few hundred
 * words. Everything that varies (temperatures, prices, stock, balances, flight times, calendar entries) is a pure
 * function of (world seed, key), computed on demand by `hash32`. The world is therefore *immutable*: an action
 * tool (place_order, transfer_money, book_flight, create_event) validates against the seed's state and returns a
 * deterministic confirmation, but does not change what later reads return. The dialogue generator never asks
 * for a read after a write of the same thing, so no dialogue exposes this.
 *
 * Both the tools (src/demo/domains) and the dialogue generator (src/demo/scenarios) read these functions, so a
 * generated dialogue always agrees with what `executeTool` returns.
 */
import { hash32, intHash, unitHash } from './random';
import { round2 } from './worldTypes';

// ----------------------------------------------------------------------------------------------------------------
// Shared vocabulary

export const DAYS = ['monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday', 'sunday'] as const;
export type Day = (typeof DAYS)[number];

/** Case-insensitive lookup of a day name; undefined when it is not one. */
export const findDay = (text: string): Day | undefined => DAYS.find((d) => d === text.trim().toLowerCase());

/** People's full names: account owners and passengers. */
export const PEOPLE = ['Anna Weber', 'Ben Novak', 'Clara Rossi', 'David Silva', 'Emma Berg', 'Felix Roth'] as const;

/** "HH:MM" from minutes after midnight. */
export const clock = (minutes: number): string =>
  `${String(Math.floor(minutes / 60)).padStart(2, '0')}:${String(minutes % 60).padStart(2, '0')}`;

/** Minutes after midnight from "HH:MM" (24 h), or undefined. */
export function parseClock(text: string): number | undefined {
  const m = /^(\d{1,2}):(\d{2})$/.exec(text.trim());
  if (!m) return undefined;
  const h = Number(m[1]);
  const min = Number(m[2]);
  if (h > 23 || min > 59) return undefined;
  return h * 60 + min;
}

// ----------------------------------------------------------------------------------------------------------------
// Weather

/** Cities with a base temperature in °C (a cold north, a warm south: the seed only adds variation). */
export const CITIES = [
  { name: 'Paris', base: 15 },
  { name: 'Lyon', base: 17 },
  { name: 'Rome', base: 21 },
  { name: 'Berlin', base: 12 },
  { name: 'Madrid', base: 23 },
  { name: 'Oslo', base: 5 },
  { name: 'Vienna', base: 13 },
  { name: 'Lisbon', base: 20 },
] as const;
export type CityName = (typeof CITIES)[number]['name'];
export const CITY_NAMES: readonly CityName[] = CITIES.map((c) => c.name);

export const findCity = (text: string): CityName | undefined => CITY_NAMES.find((c) => c.toLowerCase() === text.trim().toLowerCase());

const WARM_CONDITIONS = ['sunny', 'cloudy', 'rainy', 'windy', 'foggy'] as const;
const COLD_CONDITIONS = ['snowy', 'cloudy', 'foggy', 'windy'] as const;

function conditionFor(temperature: number, ...key: (string | number)[]): string {
  const list = temperature <= 2 ? COLD_CONDITIONS : WARM_CONDITIONS;
  return list[hash32(...key) % list.length] as string;
}

export interface CurrentWeather {
  city: CityName;
  condition: string;
  /** °C */
  temperature: number;
  humidity: number;
}

export function currentWeather(seed: number, city: CityName): CurrentWeather {
  const base = CITIES.find((c) => c.name === city)?.base ?? 15;
  const temperature = base + intHash(-6, 8, seed, 'temp', city);
  return {
    city,
    condition: conditionFor(temperature, seed, 'cond', city),
    temperature,
    humidity: intHash(30, 90, seed, 'hum', city),
  };
}

export const toFahrenheit = (celsius: number): number => Math.round((celsius * 9) / 5 + 32);

export interface ForecastDay {
  day: number;
  condition: string;
  high: number;
  low: number;
}

/** Forecast for days 1..n after today. */
export function forecast(seed: number, city: CityName, days: number): ForecastDay[] {
  const now = currentWeather(seed, city);
  const out: ForecastDay[] = [];
  for (let d = 1; d <= days; d++) {
    const high = now.temperature + intHash(-4, 5, seed, 'high', city, d);
    out.push({ day: d, condition: conditionFor(high, seed, 'fcond', city, d), high, low: high - intHash(4, 9, seed, 'low', city, d) });
  }
  return out;
}

// ----------------------------------------------------------------------------------------------------------------
// Shopping

/** Products: `kind` is the search word (the last word of the name); `base` is the typical price in EUR. */
export const PRODUCTS = [
  { id: 'p-101', name: 'desk lamp', kind: 'lamp', base: 25 },
  { id: 'p-102', name: 'floor lamp', kind: 'lamp', base: 60 },
  { id: 'p-103', name: 'reading lamp', kind: 'lamp', base: 18 },
  { id: 'p-104', name: 'office chair', kind: 'chair', base: 120 },
  { id: 'p-105', name: 'garden chair', kind: 'chair', base: 45 },
  { id: 'p-106', name: 'coffee mug', kind: 'mug', base: 9 },
  { id: 'p-107', name: 'travel mug', kind: 'mug', base: 15 },
  { id: 'p-108', name: 'rain jacket', kind: 'jacket', base: 70 },
  { id: 'p-109', name: 'wool jacket', kind: 'jacket', base: 95 },
  { id: 'p-110', name: 'running shoes', kind: 'shoes', base: 80 },
  { id: 'p-111', name: 'hiking shoes', kind: 'shoes', base: 110 },
] as const;
export type ProductEntry = (typeof PRODUCTS)[number];
export const PRODUCT_KINDS = ['lamp', 'chair', 'mug', 'jacket', 'shoes'] as const;

export interface ProductFacts {
  product_id: string;
  name: string;
  price: number;
  stock: number;
  rating: number;
}

export function productFacts(seed: number, p: ProductEntry): ProductFacts {
  const cents = [0, 0.5, 0.99][hash32(seed, 'cents', p.id) % 3] ?? 0;
  const price = round2(Math.floor(p.base * (0.8 + 0.4 * unitHash(seed, 'price', p.id))) + cents);
  // About one product in ten is out of stock, so "order" dialogues sometimes meet a real error.
  const stock = unitHash(seed, 'oos', p.id) < 0.1 ? 0 : intHash(1, 9, seed, 'stock', p.id);
  return { product_id: p.id, name: p.name, price, stock, rating: intHash(30, 50, seed, 'rating', p.id) / 10 };
}

export const findProduct = (id: string): ProductEntry | undefined => PRODUCTS.find((p) => p.id === id.trim().toLowerCase());

/** Products whose name contains every word of the query, cheapest first. */
export function searchProducts(seed: number, query: string, maxPrice?: number): ProductFacts[] {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean).map((w) => w.replace(/s$/, ''));
  return PRODUCTS.filter((p) => words.length > 0 && words.every((w) => p.name.split(' ').some((n) => n.replace(/s$/, '') === w)))
    .map((p) => productFacts(seed, p))
    .filter((f) => maxPrice === undefined || f.price <= maxPrice)
    .sort((a, b) => a.price - b.price || a.product_id.localeCompare(b.product_id));
}

export const ORDER_STATUSES = ['processing', 'shipped', 'delivered'] as const;

export interface OrderFacts {
  order_id: string;
  status: string;
  product_id: string;
  name: string;
  quantity: number;
  delivery_days: number;
}

/** Orders placed before the dialogue starts (ids ord-1000..ord-4999): four per world. */
export function existingOrders(seed: number): OrderFacts[] {
  const out: OrderFacts[] = [];
  const used = new Set<number>();
  for (let k = 0; out.length < 4; k++) {
    const n = intHash(1000, 4999, seed, 'order', k);
    if (used.has(n)) continue;
    used.add(n);
    const p = PRODUCTS[hash32(seed, 'order-product', k) % PRODUCTS.length] as ProductEntry;
    const status = ORDER_STATUSES[hash32(seed, 'order-status', k) % ORDER_STATUSES.length] as string;
    const deliveryDays = status === 'delivered' ? 0 : status === 'shipped' ? intHash(1, 3, seed, 'od', k) : intHash(3, 6, seed, 'od', k);
    out.push({ order_id: `ord-${n}`, status, product_id: p.id, name: p.name, quantity: intHash(1, 3, seed, 'oq', k), delivery_days: deliveryDays });
  }
  return out;
}

export const MAX_ORDER_QUANTITY = 9;

/**
 * Id of a new order of (product, quantity), in ord-5000..ord-9999. It is a bijection of (product, quantity) mixed
 * with the seed (37 is coprime with 5000), so `get_order_status` can find an order `place_order` confirmed without
 * any mutable state.
 */
export function newOrderId(seed: number, productIndex: number, quantity: number): string {
  const code = productIndex * 10 + quantity;
  return `ord-${5000 + ((code * 37 + (hash32(seed, 'order-offset') % 5000)) % 5000)}`;
}

export const deliveryDaysFor = (seed: number, productId: string): number => intHash(2, 5, seed, 'delivery', productId);

// ----------------------------------------------------------------------------------------------------------------
// Banking

export const ACCOUNTS = [
  { id: 'acc-101', owner: 'Anna Weber' },
  { id: 'acc-102', owner: 'Ben Novak' },
  { id: 'acc-103', owner: 'Clara Rossi' },
  { id: 'acc-104', owner: 'David Silva' },
  { id: 'acc-105', owner: 'Emma Berg' },
] as const;
export const ACCOUNT_IDS: readonly string[] = ACCOUNTS.map((a) => a.id);
export const findAccount = (id: string) => ACCOUNTS.find((a) => a.id === id.trim().toLowerCase());

export const balanceOf = (seed: number, accountId: string): number => round2(intHash(5000, 480000, seed, 'balance', accountId) / 100);

/** Transaction kinds: money in (positive) or out (negative), with a typical size. */
const TRANSACTION_KINDS = [
  { description: 'grocery store', sign: -1, base: 60 },
  { description: 'rent', sign: -1, base: 900 },
  { description: 'salary', sign: 1, base: 2400 },
  { description: 'coffee shop', sign: -1, base: 6 },
  { description: 'taxi', sign: -1, base: 25 },
  { description: 'book store', sign: -1, base: 30 },
  { description: 'refund', sign: 1, base: 40 },
] as const;

export interface TransactionFacts {
  day: string;
  description: string;
  amount: number;
}

/** The account's most recent transactions, newest first (at most 5). */
export function transactionsOf(seed: number, accountId: string): TransactionFacts[] {
  return [0, 1, 2, 3, 4].map((k) => {
    const kind = TRANSACTION_KINDS[hash32(seed, 'tx-kind', accountId, k) % TRANSACTION_KINDS.length] as (typeof TRANSACTION_KINDS)[number];
    const amount = round2(kind.sign * kind.base * (0.6 + 0.8 * unitHash(seed, 'tx-amount', accountId, k)));
    return { day: DAYS[(6 - k + 7 * 10) % 7] as string, description: kind.description, amount };
  });
}

/** Units of each currency per 1 EUR (fixed; the demo needs stable, checkable numbers). */
export const CURRENCIES = { EUR: 1, USD: 1.08, GBP: 0.85, CHF: 0.95 } as const;
export type Currency = keyof typeof CURRENCIES;
export const CURRENCY_CODES = Object.keys(CURRENCIES) as Currency[];

export const exchangeRate = (from: Currency, to: Currency): number => Math.round((CURRENCIES[to] / CURRENCIES[from]) * 10000) / 10000;

// ----------------------------------------------------------------------------------------------------------------
// Travel

export interface FlightFacts {
  flight_id: string;
  origin: CityName;
  destination: CityName;
  day: Day;
  depart: string;
  arrive: string;
  price: number;
  seats_left: number;
}

const FLIGHT_SLOTS = 3;
const FLIGHT_CODES = CITIES.length * CITIES.length * DAYS.length * FLIGHT_SLOTS; // 1344

/**
 * Flight ids FL1000..FL2343: a bijection of (origin, destination, day, slot) mixed with the seed (611 is coprime
 * with 1344), so `book_flight` and `get_flight_status` can decode any id `search_flights` returned.
 */
function flightNumber(seed: number, code: number): number {
  return 1000 + ((code * 611 + (hash32(seed, 'flight-offset') % FLIGHT_CODES)) % FLIGHT_CODES);
}

function flightCode(o: number, d: number, day: number, slot: number): number {
  return ((o * CITIES.length + d) * DAYS.length + day) * FLIGHT_SLOTS + slot;
}

function flightAt(seed: number, o: number, d: number, day: number, slot: number): FlightFacts {
  const origin = CITY_NAMES[o] as CityName;
  const destination = CITY_NAMES[d] as CityName;
  const dayName = DAYS[day] as Day;
  const key = [seed, origin, destination, dayName, slot];
  // Slots are spread over the day: morning, midday, evening.
  const depart = (6 + slot * 5) * 60 + intHash(0, 3, 'dep', ...key) * 15 + intHash(0, 2, 'deph', ...key) * 60;
  const duration = 90 + intHash(0, 6, seed, 'dur', origin, destination) * 15;
  return {
    flight_id: `FL${flightNumber(seed, flightCode(o, d, day, slot))}`,
    origin,
    destination,
    day: dayName,
    depart: clock(depart),
    arrive: clock(depart + duration),
    price: intHash(6, 32, 'price', ...key) * 10 - 1,
    seats_left: unitHash('sold', ...key) < 0.12 ? 0 : intHash(1, 9, 'seats', ...key),
  };
}

/** Flights of a route on a day (2 or 3), in departure order. */
export function flightsOn(seed: number, origin: CityName, destination: CityName, day: Day): FlightFacts[] {
  const o = CITY_NAMES.indexOf(origin);
  const d = CITY_NAMES.indexOf(destination);
  const dayIndex = DAYS.indexOf(day);
  const slots = 2 + (hash32(seed, 'slots', origin, destination, day) % 2);
  return Array.from({ length: slots }, (_, slot) => flightAt(seed, o, d, dayIndex, slot));
}

/** Decode a flight id of this world (any existing route/day/slot), or undefined. */
export function findFlight(seed: number, flightId: string): FlightFacts | undefined {
  const m = /^FL(\d{4})$/i.exec(flightId.trim());
  if (!m) return undefined;
  const n = Number(m[1]);
  for (let code = 0; code < FLIGHT_CODES; code++) {
    if (flightNumber(seed, code) !== n) continue;
    const slot = code % FLIGHT_SLOTS;
    const day = Math.floor(code / FLIGHT_SLOTS) % DAYS.length;
    const d = Math.floor(code / (FLIGHT_SLOTS * DAYS.length)) % CITIES.length;
    const o = Math.floor(code / (FLIGHT_SLOTS * DAYS.length * CITIES.length));
    if (o === d) return undefined;
    const flight = flightAt(seed, o, d, day, slot);
    // Slot 2 exists only on routes with 3 flights that day.
    return flightsOn(seed, flight.origin, flight.destination, flight.day).some((f) => f.flight_id === flight.flight_id) ? flight : undefined;
  }
  return undefined;
}

export const FLIGHT_STATUSES = ['on time', 'delayed', 'boarding', 'on time'] as const;

export function flightStatus(seed: number, flight: FlightFacts): { flight_id: string; status: string; gate: string; delay_minutes: number } {
  const status = FLIGHT_STATUSES[hash32(seed, 'fstatus', flight.flight_id) % FLIGHT_STATUSES.length] as string;
  const gate = `${'ABC'[hash32(seed, 'gate', flight.flight_id) % 3]}${intHash(1, 30, seed, 'gaten', flight.flight_id)}`;
  return { flight_id: flight.flight_id, status, gate, delay_minutes: status === 'delayed' ? intHash(3, 18, seed, 'delay', flight.flight_id) * 5 : 0 };
}

// ----------------------------------------------------------------------------------------------------------------
// Calendar

export const EVENT_TITLES = ['team meeting', 'dentist visit', 'project review', 'gym class', 'lunch with Ben', 'call with Clara'] as const;
/** Titles the user asks to add (distinct from the existing ones, so a new event is never confused with an old one). */
export const NEW_EVENT_TITLES = ['team lunch', 'book club', 'piano lesson', 'budget review', 'coffee with Anna', 'yoga class'] as const;

export const WORKDAY_START = 9 * 60;
export const WORKDAY_END = 18 * 60;

export interface EventFacts {
  event_id: string;
  title: string;
  time: string;
  duration_minutes: number;
}

/** Events already on the calendar that day (0–3), in time order, each on the hour between 09:00 and 16:00. */
export function eventsOn(seed: number, day: Day): EventFacts[] {
  const count = intHash(0, 3, seed, 'events', day);
  const hours = [9, 10, 11, 12, 13, 14, 15, 16];
  const chosen: number[] = [];
  for (let k = 0; chosen.length < count; k++) {
    const h = hours[hash32(seed, 'ev-hour', day, k) % hours.length] as number;
    if (!chosen.includes(h)) chosen.push(h);
  }
  chosen.sort((a, b) => a - b);
  return chosen.map((h, k) => ({
    event_id: `ev-${intHash(100, 999, seed, 'ev-id', day, k)}`,
    title: EVENT_TITLES[hash32(seed, 'ev-title', day, k) % EVENT_TITLES.length] as string,
    time: clock(h * 60),
    duration_minutes: hash32(seed, 'ev-dur', day, k) % 2 === 0 ? 30 : 60,
  }));
}

/** The existing event overlapping [start, start + minutes), if any. */
export function overlapping(seed: number, day: Day, start: number, minutes: number): EventFacts | undefined {
  return eventsOn(seed, day).find((e) => {
    const s = parseClock(e.time) ?? 0;
    return s < start + minutes && start < s + e.duration_minutes;
  });
}

/** Free start times on the hour within the working day (09:00–18:00), at most `limit`. */
export function freeSlots(seed: number, day: Day, minutes: number, limit = 3): string[] {
  const out: string[] = [];
  for (let start = WORKDAY_START; start + minutes <= WORKDAY_END && out.length < limit; start += 60) {
    if (!overlapping(seed, day, start, minutes)) out.push(clock(start));
  }
  return out;
}
