/**
 * Where an evidence snippet may be found (issue 13 item 6): a snippet matches a part of a message when it occurs in
 * any faithful rendering of it (raw text, JSON-escaped, pretty-printed JSON), whitespace-normalised and
 * case-insensitive; locateSnippet says where a misplaced snippet does occur, for the repair prompt.
 */
import { EvidenceFrom } from './schema';
import { Message } from '../../kernel/schema';
import { normaliseWs, partTexts, rawPartTexts, type TurnSpan } from './steps';

/** Variants of a snippet worth trying: as written, and with JSON string escapes undone. */
export function snippetCandidates(snippet: string): string[] {
  const out = [snippet];
  if (snippet.includes('\\')) {
    try {
      const quoted = snippet.replace(/\s/g, ' ').replace(/(?<!\\)((?:\\\\)*)"/g, '$1\\"');
      const unescaped = JSON.parse(`"${quoted}"`) as unknown;
      if (typeof unescaped === 'string' && unescaped !== snippet) out.push(unescaped);
    } catch {
      // not a JSON-escaped string
    }
  }
  return out;
}

export const matchKey = (text: string): string => normaliseWs(text).toLowerCase();

/** `matchKey` without the whitespace around JSON punctuation, so `{"a": {"b": 1}}` and `{"a":{\n "b":1}}` compare equal. */
export const tightKey = (text: string): string => matchKey(text).replace(/\s*([{}[\],:])\s*/g, '$1');

/** True when the pieces of `snippet` (split at "..." / "…") occur in order in `hay`, both keyed by `key`. */
export function piecesOccur(hay: string, snippet: string, key: (text: string) => string): boolean {
  const pieces = matchKey(snippet)
    .split(/\s*(?:\.\.\.|…)\s*/)
    .map(key)
    .filter((p) => p.length > 0);
  if (pieces.length === 0) return false;
  let from = 0;
  for (const piece of pieces) {
    const at = hay.indexOf(piece, from);
    if (at < 0) return false;
    from = at + piece.length;
  }
  return true;
}

/**
 * True when `snippet` occurs in `text`: whitespace-normalised, case-insensitive, "..." / "…" elisions allowed; then
 * again ignoring whitespace around JSON punctuation (`{ } [ ] , :`), so one JSON layout quoted against another
 * still matches.
 */
export function snippetOccurs(text: string, snippet: string): boolean {
  const candidates = snippetCandidates(snippet);
  const loose = matchKey(text);
  if (candidates.some((c) => piecesOccur(loose, c, (p) => p))) return true;
  const tight = tightKey(text);
  return candidates.some((c) => piecesOccur(tight, c, tightKey));
}

/** True when `snippet` occurs in some rendering of the part (`partTexts`; the raw text first, as the cheap common case). */
export function snippetInPart(message: Message, from: EvidenceFrom, snippet: string): boolean {
  const occurs = (text: string): boolean => snippetOccurs(text, snippet);
  return rawPartTexts(message, from).some(occurs) || partTexts(message, from).some(occurs);
}

export const ASSISTANT_PARTS: readonly EvidenceFrom[] = ['assistant.tool_calls', 'assistant.content.thinking', 'assistant.content.user_visible_reply'];

/** The `from` values that can point into a message of this role. */
export function partsForRole(role: string): readonly EvidenceFrom[] {
  if (role === 'assistant') return ASSISTANT_PARTS;
  if (role === 'tool') return ['tool.content'];
  if (role === 'user') return ['user.content'];
  return [];
}

/**
 * Where a snippet does occur, for repair hints: the same message first, then the same turn, then the others; at most
 * `limit` places, each as `turn T step S (from)`.
 */
export function locateSnippet(messages: readonly Message[], spans: readonly TurnSpan[], snippet: string, near: { turn: number; step: number }, limit = 3): string[] {
  const found: { rank: number; text: string }[] = [];
  for (const span of spans) {
    for (let index = span.start; index <= span.end; index++) {
      const message = messages[index]!;
      const step = index - span.start;
      for (const from of partsForRole(message.role)) {
        if (!snippetInPart(message, from, snippet)) continue;
        const rank = span.turn === near.turn ? (step === near.step ? 0 : 1) : 2;
        const where = rank === 0 ? `this step's ${from}` : `turn ${span.turn} step ${step} (${from})`;
        found.push({ rank, text: step === 0 ? `${where}, the user message, which cannot be evidence` : where });
      }
    }
  }
  return found
    .sort((a, b) => a.rank - b.rank)
    .slice(0, limit)
    .map((f) => f.text);
}

export function whereHint(places: string[]): string {
  return places.length > 0 ? `; it occurs in ${places.join('; ')}` : '; it occurs nowhere in the dialogue';
}

