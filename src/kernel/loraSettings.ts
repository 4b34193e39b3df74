/** `lora:` of the SFT and RL stages (zod only, so that loading a config does not load the tensor engine; see lora.ts). */
import { z } from 'zod';

/** The linear modules of a decoder layer that `lora.targets` may name (PEFT's module names). */
export const LORA_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;

/** LoRA instead of full fine-tuning: the adapter's shape and what it trains. */
export const LoraSettings = z.object({
  rank: z.number().int().positive().describe('Rank r of each adapter (A is r × in, B is out × r).'),
  alpha: z.number().positive().describe('Scale numerator: the update is (alpha / r)·B·A (alpha / √r with `rslora`).'),
  dropout: z.number().min(0).max(0, { message: 'must be 0: the embedded engine trains LoRA through the merged weight, which has no per-token dropout (docs/decisions.md)' }).default(0)
    .describe('LoRA dropout; must be 0 on the embedded engine, which trains through the merged weight (docs/decisions.md).'),
  /** module names, matched as PEFT does (the whole name or its last parts): q_proj, …, down_proj, lm_head */
  targets: z.array(z.string().min(1)).min(1).default([...LORA_MODULES])
    .describe('Modules that get adapters, matched as PEFT does (the module name or its last parts): q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head.'),
  /** alpha / √rank instead of alpha / rank (PEFT's use_rslora) */
  rslora: z.boolean().default(false).describe('Scale by alpha / √r (rank-stabilised LoRA, PEFT\'s use_rslora).'),
  /** token ids whose embedding rows are trained beside the adapters (PEFT's trainable_token_indices) */
  trainTokens: z.array(z.number().int().nonnegative()).default([])
    .describe('Token ids whose embedding rows are trained beside the adapters, e.g. the chat tags `cm2 model import` added (PEFT\'s trainable_token_indices).'),
}).strict();
export type LoraSettings = z.infer<typeof LoraSettings>;
