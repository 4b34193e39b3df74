/** Weather domain: current conditions and a short forecast for the catalogue's cities. */
import { CITY_NAMES, currentWeather, findCity, forecast, toFahrenheit } from '../catalog';
import { defineTools, notFound, ok, stringParam } from '../worldTypes';

const cityParam = stringParam(`City name, for example ${CITY_NAMES.slice(0, 3).join(', ')}`);

export const weatherTools = defineTools('weather', {
  get_weather: {
    description: 'Get the current weather in a city: condition, temperature and humidity.',
    parameters: {
      city: cityParam,
      unit: { type: 'string', description: 'Temperature unit', enum: ['celsius', 'fahrenheit'], default: 'celsius' },
    },
    execute(args, seed) {
      const city = findCity(String(args.city));
      if (!city) return notFound('city', args.city);
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
    description: 'Get the weather forecast for the next days in a city: condition, high and low temperature in celsius for each day.',
    parameters: {
      city: cityParam,
      days: { type: 'integer', description: 'Number of days, from 1 to 5', minimum: 1, maximum: 5 },
    },
    execute(args, seed) {
      const city = findCity(String(args.city));
      if (!city) return notFound('city', args.city);
      const days = forecast(seed, city, Number(args.days)).map((d) => ({ day: d.day, condition: d.condition, high: d.high, low: d.low }));
      return ok({ city, unit: 'celsius', forecast: days });
    },
  },
});
