/** Weather dialogues: current weather, comparing two cities (parallel calls), forecasts, and asking for the city. */
import { CITY_NAMES, type CityName } from '../catalog';
import { listText, resultOf, scenarioKit, type DraftTurn, type Scenario, type TurnContext } from './scenarioKit';

interface WeatherResult {
  city: string;
  condition: string;
  temperature: number;
  unit: string;
  humidity: number;
}
interface ForecastResult {
  city: string;
  forecast: { day: number; condition: string; high: number; low: number }[];
}

function currentTurn(ctx: TurnContext, city: CityName, fahrenheit: boolean, userText?: string): DraftTurn {
  const unitText = fahrenheit ? ' in fahrenheit' : '';
  const user =
    userText ??
    ctx.rng.pick([`What is the weather in ${city} right now${unitText}?`, `How warm is it in ${city} today${unitText}?`, `Can you check the weather in ${city}${unitText}?`]);
  const call = ctx.call('get_weather', fahrenheit ? { city, unit: 'fahrenheit' } : { city });
  const r = resultOf<WeatherResult>(call);
  ctx.memory.city = city;
  return {
    intent: 'weather.current',
    goal: `Tell the user the current weather in ${city}${unitText}: the condition and the temperature.`,
    user,
    steps: [
      {
        think: ctx.think(`The user wants the current weather in ${city}${unitText}.`, `I will call get_weather with city ${city}${fahrenheit ? ' and unit fahrenheit' : ''}.`),
        calls: [call],
      },
    ],
    replyThink: ctx.reflect(`The tool says ${city} is ${r.condition} at ${r.temperature} degrees ${r.unit}.`, 'I can answer the user now.'),
    reply: `It is ${r.condition} in ${city} with ${r.temperature} degrees ${r.unit} and ${r.humidity} percent humidity.`,
    answerFacts: [r.condition, String(r.temperature)],
    requiresTool: true,
  };
}

function forecastTurn(ctx: TurnContext, city: CityName, days: number, user: string): DraftTurn {
  const call = ctx.call('get_forecast', { city, days });
  const r = resultOf<ForecastResult>(call);
  ctx.memory.city = city;
  const parts = r.forecast.map((d) => `day ${d.day} will be ${d.condition} with a high of ${d.high} and a low of ${d.low}`);
  return {
    intent: 'weather.forecast',
    goal: `Give the user the forecast for ${city} for the next ${days} days: condition, high and low for each day.`,
    user,
    steps: [{ think: ctx.think(`The user asks for the forecast in ${city} for ${days} days.`, `I will call get_forecast with city ${city} and days ${days}.`), calls: [call] }],
    replyThink: ctx.reflect(`I have the forecast for ${days} days in ${city}.`, 'I will list each day with its high and low.'),
    reply: `Here is the forecast for ${city}: ${listText(parts)}.`,
    answerFacts: r.forecast.flatMap((d) => [String(d.high), String(d.low)]),
    requiresTool: true,
  };
}

const { opener, followup, askBack } = scenarioKit('weather');

export const weatherScenarios: Scenario[] = [
  opener('weather.current', (ctx) => [currentTurn(ctx, ctx.rng.pick(CITY_NAMES), ctx.rng.chance(0.25))]),
  opener('weather.compare', (ctx) => {
    const [a, b] = ctx.rng.sample(CITY_NAMES, 2) as [CityName, CityName];
    const calls = [ctx.call('get_weather', { city: a }), ctx.call('get_weather', { city: b })];
    const [ra, rb] = calls.map((c) => resultOf<WeatherResult>(c)) as [WeatherResult, WeatherResult];
    const verdict =
      ra.temperature === rb.temperature
        ? `Both cities have ${ra.temperature} degrees`
        : `${ra.temperature > rb.temperature ? a : b} is warmer`;
    return [
      {
        intent: 'weather.compare',
        goal: `Get the weather in ${a} and in ${b} and tell the user which city is warmer, with both temperatures.`,
        user: ctx.rng.pick([`Is it warmer in ${a} or in ${b} today?`, `Which is warmer right now, ${a} or ${b}?`]),
        steps: [
          {
            think: ctx.think(`I need the weather in both ${a} and ${b}.`, `The two calls do not depend on each other, so I will call get_weather for ${a} and for ${b} at the same time.`),
            calls,
          },
        ],
        replyThink: ctx.reflect(`${a} has ${ra.temperature} degrees and ${b} has ${rb.temperature} degrees.`, 'Now I can compare them.'),
        reply: `${verdict}: ${a} has ${ra.temperature} degrees and is ${ra.condition}, while ${b} has ${rb.temperature} degrees and is ${rb.condition}.`,
        answerFacts: [String(ra.temperature), String(rb.temperature), ...(ra.temperature === rb.temperature ? [] : [ra.temperature > rb.temperature ? a : b])],
        requiresTool: true,
      },
    ];
  }),
  opener('weather.forecast', (ctx) => {
    const city = ctx.rng.pick(CITY_NAMES);
    const days = ctx.rng.int(2, 4);
    return [forecastTurn(ctx, city, days, ctx.rng.pick([`What is the forecast for ${city} for the next ${days} days?`, `Will it be warm in ${city} in the next ${days} days?`]))];
  }),
  followup('weather.forecast', (m) => m.city !== undefined, (ctx) => {
    const city = ctx.memory.city as CityName;
    const days = ctx.rng.int(2, 4);
    return [forecastTurn(ctx, city, days, ctx.rng.pick([`And what about the next ${days} days there?`, `Thanks. What is the forecast there for ${days} days?`]))];
  }),
  askBack('weather.ask_city', {
    goal: 'Ask the user which city they mean, without calling a tool and without guessing a city.',
    users: ['What is the weather like today?', 'Is it cold outside today?'],
    why: ['The user did not say which city.', 'get_weather needs a city, so I must ask for it first.'],
    reply: 'Which city would you like the weather for?',
    values: CITY_NAMES,
    answer: (ctx, city) => currentTurn(ctx, city, false, ctx.rng.pick([`In ${city}, please.`, `I mean ${city}.`])),
  }),
];
