/**
 * Tokenisation of chat text for the policy: a thin wrapper around an HF `tokenizer.json` (via
 * @huggingface/tokenizers), the training view of a dialogue (ids + loss mask), the generation prompt, and the
 * stored form of a generated assistant message (spec §6.2 step 2, §8.1).
 *
 * Text is passed through `stripLoneSurrogates` before encoding (a lone surrogate cannot be UTF-8 encoded and would
 * break the decode(encode(x)) === x round trip). Decoding keeps special tokens and never "cleans up" spaces.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import type { Message } from '../kernel/schema';
import {
  ASSISTANT_HEADER,
  CHAT_TEMPLATE,
  IM_END,
  IM_START,
  renderChat,
  THINK_END,
  THINK_START,
  TOOL_CALL_END,
  TOOL_CALL_START,
  type RenderOptions,
} from './template';
import { stripLoneSurrogates } from './toolCalls';

/** Ids of the chat special tokens. Every one must be a single token of the vocabulary. */
export interface SpecialTokenIds {
  imStart: number;
  imEnd: number;
  think: number;
  thinkEnd: number;
  toolCall: number;
  toolCallEnd: number;
  /** `eos_token` of tokenizer_config.json, else `<|im_end|>` (what ends an assistant message). */
  eos: number;
  /** `pad_token` of tokenizer_config.json, else `<|endoftext|>` if present, else eos. */
  pad: number;
}

/** A token as tokenizer_config.json writes it: a string or `{content: string, ...}`. */
type ConfigToken = string | { content?: string } | null | undefined;

export class ChatTokenizer {
  readonly special: SpecialTokenIds;
  /** Number of ids (model vocabulary plus added tokens): every id is in [0, vocabSize). */
  readonly vocabSize: number;
  /** The chat template of tokenizer_config.json, or this project's template when there is none. */
  readonly chatTemplate: string;
  /** Id of `\n` (a single token in any byte-level vocabulary); appended after `<|im_end|>`. */
  readonly newlineId: number;
  /**
   * Every id that ends a generation: `<|im_end|>`, the tokenizer's eos, generation_config.json's `eos_token_id`(s),
   * and `<|endoftext|>` where the vocabulary has it (the pretraining corpus' end of document in the Qwen and SmolLM
   * families; Qwen2.5's own generation_config lists it beside `<|im_end|>`). A policy that emits any of them has
   * ended its message: sampling past it only runs the generation to its cap.
   */
  readonly stopIds: readonly number[];
  private readonly tok: Tokenizer;

  constructor(tokenizerJson: object, tokenizerConfig: Record<string, unknown> = {}, generationConfig: Record<string, unknown> = {}) {
    // clean_up_tokenization_spaces would rewrite " ." to "." etc. on decode and break the round trip.
    this.tok = new Tokenizer(tokenizerJson, { ...tokenizerConfig, clean_up_tokenization_spaces: false });
    this.vocabSize = this.tok.get_vocab(true).size;
    const chatTemplate = tokenizerConfig['chat_template'];
    this.chatTemplate = typeof chatTemplate === 'string' ? chatTemplate : CHAT_TEMPLATE;
    const need = (token: string): number => {
      const id = this.tok.token_to_id(token);
      if (id === undefined) {
        const tag = [IM_START, IM_END, THINK_START, THINK_END, TOOL_CALL_START, TOOL_CALL_END].includes(token);
        throw new Error(`tokenizer has no token ${JSON.stringify(token)}${tag ? ": CM2's chat format needs it as a single token (`cm2 model import SOURCE --out DIR` adds the missing chat tags to a model)" : ''}`);
      }
      return id;
    };
    const fromConfig = (t: ConfigToken): string | undefined => (typeof t === 'string' ? t : (t?.content ?? undefined));
    const imEnd = need(IM_END);
    const eosName = fromConfig(tokenizerConfig['eos_token'] as ConfigToken);
    const eos = eosName !== undefined ? need(eosName) : imEnd;
    const padName = fromConfig(tokenizerConfig['pad_token'] as ConfigToken);
    const pad = padName !== undefined ? need(padName) : (this.tok.token_to_id('<|endoftext|>') ?? eos);
    this.special = {
      imStart: need(IM_START),
      imEnd,
      think: need(THINK_START),
      thinkEnd: need(THINK_END),
      toolCall: need(TOOL_CALL_START),
      toolCallEnd: need(TOOL_CALL_END),
      eos,
      pad,
    };
    const declared = generationConfig['eos_token_id'];
    const fromGeneration = (Array.isArray(declared) ? declared : [declared]).filter((x): x is number => Number.isInteger(x) && (x as number) >= 0 && (x as number) < this.vocabSize);
    const endOfText = this.tok.token_to_id('<|endoftext|>');
    this.stopIds = [...new Set([imEnd, eos, ...fromGeneration, ...(endOfText !== undefined ? [endOfText] : [])])];
    const nl = this.encode('\n');
    if (nl.length !== 1 || nl[0] === undefined) throw new Error('tokenizer does not encode "\\n" as one token');
    this.newlineId = nl[0];
  }

  /** Text → ids. Added tokens (`<|im_start|>`, `<think>`, …) found in the text become their single ids. */
  encode(text: string): number[] {
    const ids = this.tok.encode(stripLoneSurrogates(text), { add_special_tokens: false }).ids;
    for (const id of ids) {
      // A vocabulary without byte coverage maps unknown pieces to unk (or to nothing at all): refuse silently wrong ids.
      if (!Number.isInteger(id)) throw new Error('tokenizer produced an unknown token (no unk token in the vocabulary)');
    }
    return ids;
  }

  /** Ids → text, special tokens included (`skipSpecialTokens` drops the tokens marked special). */
  decode(ids: readonly number[], opts: { skipSpecialTokens?: boolean } = {}): string {
    if (ids.length === 0) return '';
    return this.tok.decode([...ids], { skip_special_tokens: opts.skipSpecialTokens ?? false, clean_up_tokenization_spaces: false });
  }

  tokenToId(token: string): number | undefined {
    return this.tok.token_to_id(token);
  }

  idToToken(id: number): string | undefined {
    return this.tok.id_to_token(id);
  }

  /** `ids` without a final stop id (what a generation said, without what ended it). */
  withoutStop(ids: readonly number[]): number[] {
    return ids.length > 0 && this.stopIds.includes(ids[ids.length - 1]!) ? ids.slice(0, -1) : [...ids];
  }

  /** The unknown token's id, if the vocabulary has one. */
  get unkId(): number | undefined {
    return (this.tok.model as unknown as { unk_token_id?: number } | null)?.unk_token_id ?? undefined;
  }
}

/** Load `tokenizer.json` (+ `tokenizer_config.json` and `generation_config.json` when present) from a checkpoint folder. */
export function loadChatTokenizer(dir: string): ChatTokenizer {
  const tokenizerJson = JSON.parse(readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')) as object;
  const optional = (name: string): Record<string, unknown> => {
    try {
      return JSON.parse(readFileSync(path.join(dir, name), 'utf8')) as Record<string, unknown>;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      return {};
    }
  };
  return new ChatTokenizer(tokenizerJson, optional('tokenizer_config.json'), optional('generation_config.json'));
}

// ---------------------------------------------------------------------------------------------------------------

/** A dialogue as the tokeniser needs it (an `Example` fits). */
export interface ChatDialogue {
  messages: readonly Message[];
  tools: readonly unknown[];
}

/** A piece of the rendered dialogue: `trained` pieces are the assistant messages' own tokens. */
export interface ChatSegment {
  text: string;
  trained: boolean;
}

export interface TrainingTokens {
  ids: number[];
  /** 1 exactly on assistant tokens (content + rendered tool calls + `<|im_end|>` + `\n`), 0 elsewhere. */
  lossMask: number[];
  /**
   * The segment-wise ids equal the ids of the whole rendered text. Always true for the demo tokenizer on
   * template output (every segment boundary is next to an added token, see `chatSegments`); false only for texts
   * whose assistant content starts with a blank like `\r\n` that the pre-tokenizer would join with the header's `\n`.
   * The reference's strict check zeroes such a sample's loss mask (§6.2 step 7); `tokenizeForTraining` leaves that
   * decision to the caller.
   */
  consistent: boolean;
}

/**
 * Split the rendered dialogue into untrained / trained pieces, using the template itself as the source of truth:
 * for assistant message i, the trained span runs from the end of `render(messages[:i], generation prompt)` to the
 * end of `render(messages[:i+1])`. The concatenated segments equal `renderChat(messages, tools)` (checked).
 */
export function chatSegments(dialogue: ChatDialogue): ChatSegment[] {
  const { messages, tools } = dialogue;
  const full = renderChat(messages, tools);
  const segments: ChatSegment[] = [];
  let done = 0;
  messages.forEach((m, i) => {
    if (m.role !== 'assistant') return;
    const head = renderChat(messages.slice(0, i), tools, { addGenerationPrompt: true });
    const upTo = renderChat(messages.slice(0, i + 1), tools);
    if (!upTo.startsWith(head) || !full.startsWith(upTo) || !head.endsWith(ASSISTANT_HEADER) || head.length < done) {
      throw new Error(`chat template is not prefix-stable at message ${i}; cannot locate the assistant tokens`);
    }
    if (head.length > done) segments.push({ text: full.slice(done, head.length), trained: false });
    segments.push({ text: full.slice(head.length, upTo.length), trained: true });
    done = upTo.length;
  });
  if (full.length > done) segments.push({ text: full.slice(done), trained: false });
  return segments;
}

/** Ids and loss mask of a whole dialogue for SFT-style training (assistant tokens only are trained). */
export function tokenizeForTraining(dialogue: ChatDialogue, tok: ChatTokenizer): TrainingTokens {
  const ids: number[] = [];
  const lossMask: number[] = [];
  const segments = chatSegments(dialogue);
  for (const seg of segments) {
    const segIds = tok.encode(seg.text);
    ids.push(...segIds);
    for (let k = 0; k < segIds.length; k++) lossMask.push(seg.trained ? 1 : 0);
  }
  const whole = tok.encode(segments.map((s) => s.text).join(''));
  const consistent = whole.length === ids.length && whole.every((id, k) => id === ids[k]);
  return { ids, lossMask, consistent };
}

/** Prompt ids for generating the next assistant message (template with generation prompt). */
export function promptIds(messages: readonly Message[], tools: readonly unknown[], tok: ChatTokenizer, opts: Omit<RenderOptions, 'addGenerationPrompt'> = {}): number[] {
  return tok.encode(renderChat(messages, tools, { ...opts, addGenerationPrompt: true }));
}

/**
 * The stored token sequence of a generated assistant message (§8.1): the generated ids + `<|im_end|>` (when the
 * generation did not end with it) + `\n`. All of them are trained.
 */
export function completeAssistantIds(generated: readonly number[], tok: ChatTokenizer): number[] {
  // A generation ended by another stop id (`<|endoftext|>`) keeps it (it was sampled) and gets `<|im_end|>` after it.
  const out = [...generated];
  if (out[out.length - 1] !== tok.special.imEnd) out.push(tok.special.imEnd);
  out.push(tok.newlineId);
  return out;
}

/**
 * The stored content of a generated assistant message: the decoded text with a trailing stop id (`<|im_end|>`,
 * `<|endoftext|>`, …) cut (special tokens otherwise kept, §6.2 step 2).
 */
export function assistantContentFromIds(generated: readonly number[], tok: ChatTokenizer): string {
  return tok.decode(tok.withoutStop(generated));
}
