/** Weather domain: current conditions and a short forecast for the catalogue's cities. */
import { CITY_NAMES, currentWeather, findCity, forecast, toFahrenheit } from '../catalog';
import { fail, functionSchema, ok, type WorldTool } from '../types';

const cityParam = { type: 'string' as const, description: `City name, for example ${CITY_NAMES.slice(0, 3).join(', ')}` };
const unknownCity = (city: unknown) => fail('not_found', `unknown city "${String(city)}"`);

export const weatherTools: Record<string, WorldTool> = {
  get_weather: {
    domain: 'weather',
    schema: functionSchema(
      'get_weather',
      'Get the current weather in a city: condition, temperature and humidity.',
      {
        city: cityParam,
        unit: { type: 'string', description: 'Temperature unit', enum: ['celsius', 'fahrenheit'], default: 'celsius' },
      },
      ['city'],
    ),
    execute(args, seed) {
      const city = findCity(String(args.city));
      if (!city) return unknownCity(args.city);
      const w = currentWeather(seed, city);
      const fahrenheit = args.unit === 'fahrenheit';
      return ok({
        city,
        condition: w.condition,
        temperature: fahrenheit ? toFahrenheit(w.temperature) : w.temperature,
        unit: fahrenheit ? 'fahrenheit' : 'celsius',
        humidity: w.humidity,
      });
    },
  },
  get_forecast: {
    domain: 'weather',
    schema: functionSchema(
      'get_forecast',
      'Get the weather forecast for the next days in a city: condition, high and low temperature in celsius for each day.',
      {
        city: cityParam,
        days: { type: 'integer', description: 'Number of days, from 1 to 5', minimum: 1, maximum: 5 },
      },
      ['city', 'days'],
    ),
    execute(args, seed) {
      const city = findCity(String(args.city));
      if (!city) return unknownCity(args.city);
      const days = forecast(seed, city, Number(args.days)).map((d) => ({ day: d.day, condition: d.condition, high: d.high, low: d.low }));
      return ok({ city, unit: 'celsius', forecast: days });
    },
  },
};
