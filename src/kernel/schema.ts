/**
 * Data shapes of CM2 trajectories (spec §1.2–1.3). zod schemas are the single source of truth;
 * TypeScript types are inferred from them.
 *
 * The structural schema here is deliberately permissive about *semantics* (a tool list entry that is not a
 * function, a call to an unknown tool, bad JSON in a tool message): catching those is the job of the rule
 * filters, which report a machine-readable reason instead of rejecting the row at import time. What the
 * importer rejects is a row that is not a dialogue at all (no messages array, a message without a role, ...).
 */
import { z } from 'zod';

/** Tool-call arguments: the reference stores a JSON *string*; OpenAI-style JSONL may carry an object. */
export const ToolCallArguments = z.union([z.string(), z.record(z.string(), z.unknown())]);

export const ToolCall = z.object({
  id: z.string().optional(),
  type: z.string().default('function'),
  function: z.object({
    name: z.string(),
    arguments: ToolCallArguments,
  }),
});
export type ToolCall = z.infer<typeof ToolCall>;

export const Role = z.enum(['system', 'user', 'assistant', 'tool']);
export type Role = z.infer<typeof Role>;

export const Message = z.object({
  /** Kept as a string so that the role_order filter, not the importer, reports unknown roles. */
  role: z.string(),
  /** `null` content (OpenAI style for pure tool-call turns) is normalised to "" by the importer. */
  content: z.string(),
  tool_calls: z.array(ToolCall).optional(),
  tool_call_id: z.string().optional(),
  name: z.string().optional(),
});
export type Message = z.infer<typeof Message>;

/** An OpenAI function tool. Entries that do not match are kept as-is (unknown) for the tool_schema filter. */
export const FunctionTool = z.object({
  type: z.literal('function'),
  function: z.object({
    name: z.string().min(1),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().optional(),
  }),
});
export type FunctionTool = z.infer<typeof FunctionTool>;

/** One dialogue: the unit that flows through every stage. */
export const Example = z.object({
  uuid: z.string().min(1),
  messages: z.array(Message).min(1),
  /** Candidate tools; entries are validated by the tool_schema filter, not here. */
  tools: z.array(z.unknown()),
  /** Free-form provenance (source file, line, generator labels). Never shown to LLMs or the policy. */
  meta: z.record(z.string(), z.unknown()).optional(),
});
export type Example = z.infer<typeof Example>;

/** Where a row came from, for error messages that name file, line and field. */
export interface RowOrigin {
  file: string;
  /** 1-based line (JSONL) or 0-based row index (parquet), see `kind`. */
  line: number;
  kind: 'line' | 'row';
}

/** A row that could not be imported. */
export const ImportError = z.object({
  file: z.string(),
  line: z.number().int(),
  kind: z.enum(['line', 'row']),
  field: z.string(),
  message: z.string(),
});
export type ImportError = z.infer<typeof ImportError>;

/** Machine-readable reason for dropping an example at any stage. */
export const DropReason = z.object({
  /** e.g. `tool_schema`, `role_order`, `llm_filter`, `cot_compression` */
  code: z.string(),
  /** Human-readable detail, naming the message index / field when it applies. */
  detail: z.string(),
  /** Message index the reason points at, when there is one. */
  messageIndex: z.number().int().optional(),
});
export type DropReason = z.infer<typeof DropReason>;

/** Record of a dropped example, stored in S3 next to the kept ones. */
export const DroppedRecord = z.object({
  uuid: z.string(),
  stage: z.string(),
  reasons: z.array(DropReason),
  origin: z.object({ file: z.string(), line: z.number().int(), kind: z.enum(['line', 'row']) }).optional(),
});
export type DroppedRecord = z.infer<typeof DroppedRecord>;

/** Parsed form of a function tool's name, tolerant of malformed entries (returns undefined). */
export function toolName(tool: unknown): string | undefined {
  const parsed = FunctionTool.safeParse(tool);
  return parsed.success ? parsed.data.function.name : undefined;
}

/** Decode tool-call arguments to an object, or return an error message. */
export function decodeArguments(args: z.infer<typeof ToolCallArguments>): { ok: true; value: unknown } | { ok: false; error: string } {
  if (typeof args !== 'string') return { ok: true, value: args };
  try {
    return { ok: true, value: JSON.parse(args) };
  } catch (e) {
    return { ok: false, error: `arguments are not valid JSON: ${(e as Error).message}` };
  }
}
