// Types of scripts/lint-rules.mjs (plain Node, loaded by eslint.config.mjs), for TypeScript importers.
import type { ESLint } from 'eslint';
export const FLOORS: string[][];
export const OUTSIDE: Record<string, string[]>;
export function roomOf(rel: string): string | undefined;
export function layerViolation(fromRel: string, toRel: string): string | undefined;
export function resolveImport(fromFile: string, spec: string): string | undefined;
export function circlesOf(srcDir: string): Map<string, string[]>;
export const cm2Plugin: ESLint.Plugin;
