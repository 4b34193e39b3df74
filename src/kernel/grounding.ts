/**
 * "Is this value grounded?" — the text test behind the offline LLM filter, shared with the generator so that a
 * deliberately hallucinated value is hallucinated by the same definition the filter checks.
 *
 * A value is *grounded* when it occurs in the text the assistant had seen before using it: the user's messages and
 * the tool results so far. Matching is case-insensitive and on word boundaries ("p-10" is not grounded by "p-101"),
 * allowing a plain plural ("lamps" grounds "lamp").
 * Numbers are compared by value and sign-blind ("42.5 EUR spent" is grounded by a transaction of -42.5).
 */

/** Word-like tokens: letters/digits joined by `.`, `:`, `-` or `_` ("ord-5123", "14:00", "24.99", "FL1234" are one token). */
export function tokensOf(text: string): string[] {
  return (text.match(/[A-Za-z0-9]+(?:[.:_-][A-Za-z0-9]+)*/g) ?? []).map((t) => t.toLowerCase());
}

/** A token that states a fact a reply could get wrong: anything with a digit (numbers, ids, times, seats). */
export const isFactToken = (token: string): boolean => /\d/.test(token);

const NUMBER_RE = /\d+(?:\.\d+)?/g;
const PURE_NUMBER_RE = /^-?\d+(?:\.\d+)?$/;

/** Absolute values of every number in the text (the digit runs of "14:00" count as 14 and 0). */
export const numbersIn = (text: string): number[] => (text.match(NUMBER_RE) ?? []).map(Number);

const isWordChar = (c: string | undefined): boolean => c !== undefined && /[a-z0-9]/.test(c);
const normalise = (text: string): string => text.toLowerCase().replace(/\s+/g, ' ').trim();

/** Everything the assistant has seen so far, indexed for the three grounding questions. */
export class GroundingContext {
  private text = '';
  private readonly tokens = new Set<string>();
  private readonly numbers = new Set<number>();

  /** Add a user message or tool result. */
  add(content: string): void {
    this.text += `\n${normalise(content)}`;
    for (const t of tokensOf(content)) this.tokens.add(t);
    for (const n of numbersIn(content)) this.numbers.add(n);
  }

  /** The phrase occurs (case-insensitive, whitespace-normalised, on word boundaries). */
  hasPhrase(value: string): boolean {
    const needle = normalise(value);
    if (needle === '') return true;
    for (let at = this.text.indexOf(needle); at >= 0; at = this.text.indexOf(needle, at + 1)) {
      if (isWordChar(this.text[at - 1])) continue;
      // A plain plural of the value counts too ("lamps" grounds "lamp"), as it would for a human reviewer.
      const end = at + needle.length;
      for (const suffix of ['', 's', 'es']) {
        if (this.text.startsWith(suffix, end) && !isWordChar(this.text[end + suffix.length])) return true;
      }
    }
    return false;
  }

  /** The number occurs by value, ignoring its sign. */
  hasNumber(value: number): boolean {
    return this.numbers.has(Math.abs(value));
  }

  /** A fact token of a reply occurs as a token, or, for a plain number, by value. */
  hasFactToken(token: string): boolean {
    const t = token.toLowerCase();
    if (this.tokens.has(t)) return true;
    return PURE_NUMBER_RE.test(t) && this.hasNumber(Number(t));
  }

  /** Grounding of one argument value (strings by phrase, numbers by value; other types are not judged). */
  hasValue(value: unknown): boolean {
    if (typeof value === 'string') return this.hasPhrase(value);
    if (typeof value === 'number') return this.hasNumber(value);
    return true;
  }
}

/** The visible reply of an assistant message: the text after the first `</think>` (all of it without a think block). */
export function visibleReply(content: string): string {
  const close = content.indexOf('</think>');
  if (close >= 0) return content.slice(close + '</think>'.length).trim();
  return content.includes('<think>') ? '' : content.trim();
}

/** The thinking of an assistant message: the text between the first `<think>` and the following `</think>`. */
export function thinkingOf(content: string): string {
  const open = content.indexOf('<think>');
  if (open < 0) return '';
  const start = open + '<think>'.length;
  const close = content.indexOf('</think>', start);
  return (close >= 0 ? content.slice(start, close) : content.slice(start)).trim();
}
