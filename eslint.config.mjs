// Lint: the recommended JS and TypeScript rules, and the source layout's floors; type errors are tsc's job (`npm run lint` runs both).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { cm2Plugin } from './scripts/lint-rules.mjs';

export default tseslint.config(
  { ignores: ['node_modules/', '.cm2/', '.tmp/', 'dist/', 'test/fixtures/*.parquet'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: 'readonly', console: 'readonly', __dirname: 'readonly', require: 'readonly', Buffer: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly', URL: 'readonly', AbortSignal: 'readonly', fetch: 'readonly' } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-require-imports': 'off',
    },
  },
  // The source layout's floors (scripts/lint-rules.mjs): imports go down, and no file imports itself round a circle.
  { files: ['src/**/*.ts'], plugins: { cm2: cm2Plugin }, rules: { 'cm2/layers': 'error', 'cm2/no-circles': 'error' } },
);
