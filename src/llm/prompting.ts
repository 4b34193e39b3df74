/** What the LLM roles send: chat messages and structured-output schemas. */

/** A message of a chat request to an LLM role. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** The usual prompt of an LLM role: its system prompt, then one user message. */
export function systemThenUser(system: string, user: string): ChatMessage[] {
  return [
    { role: 'system', content: system },
    { role: 'user', content: user },
  ];
}

/**
 * A closed JSON-schema object for structured output: every property required, no others allowed (what OpenAI's
 * strict mode asks for).
 */
export function closedObject<P extends Record<string, unknown>>(properties: P) {
  return { type: 'object', properties, required: Object.keys(properties), additionalProperties: false } as const;
}
