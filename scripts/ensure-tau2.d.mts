export const REQUIREMENTS: string;
export function tau2Wheel(): string;
export function tau2Python(env?: NodeJS.ProcessEnv): string | undefined;
export function ensureTau2(env?: NodeJS.ProcessEnv, log?: (line: string) => void): string | undefined;
