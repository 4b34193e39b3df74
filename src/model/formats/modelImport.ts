/**
 * `cm2 model import`: a pretrained model → the HF checkpoint folder the pipeline uses (config.json, F32
 * model.safetensors — or shards + model.safetensors.index.json above the shard size, as transformers —,
 * tokenizer.json, tokenizer_config.json with the chat template).
 *
 * Sources:
 * - a GGUF file (llama.cpp; architectures llama, qwen2, qwen3): the config from the `<arch>.*` metadata, every tensor
 *   dequantized (ggufQuant.ts) and renamed to HF's names; for llama, the q/k projection rows are put back in HF's
 *   order (llama.cpp's converter interleaves the two rotary halves of each head, HF keeps them apart); the tokenizer
 *   built from the tokenizer metadata (ggufTokenizer.ts).
 * - an HF folder (config.json + model.safetensors or shards, F32/BF16/F16): config checked and copied, weights
 *   converted to F32 and re-sharded, tokenizer files copied (a chat_template.jinja folded into
 *   tokenizer_config.json, where loadChatTokenizer reads it).
 * Tensors are read, converted and written one at a time (never two copies of the model in memory), with positioned
 * reads, so files of any size work. Unsupported architectures, tensors or types are refused naming the file and the
 * field or tensor.
 *
 * With `format: 'cm2'` (the default) the folder also gets CM2's chat format (src/model/formats/cm2Format.ts): the chat tags the
 * vocabulary lacks added as tokens, embed_tokens (and an untied lm_head) grown with §4.1-initialised rows, CM2's chat
 * template and eos `<|im_end|>`. `format: 'own'` keeps the model's tokenizer and template as they are.
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { z } from 'zod';
import { HF_ARCHITECTURES, HfWeights } from './checkpoint';
import { cm2FormatSummary, formatCm2Summary, missingCm2Tokens, planCm2Format, withCm2Rows, type ChatFormat, type Cm2FormatPlan, type Cm2FormatSummary } from './cm2Format';
import { parseQwenConfig, qwenDims, type QwenConfig, type QwenDims } from '../net/qwenConfig';
import { GgufFile } from './gguf';
import { tokenizerFromGguf, type GgufTokenizer } from './ggufTokenizer';
import { type TensorSource } from './safetensors';
import { paramSpecs } from '../net/params';
import { ggufHfConfig, ggufTensorSources, type ModelType, sameShape, zodIssues } from './ggufToHf';
import { writeShardedSafetensors, type WrittenFile } from './safetensorsWrite';

export const SUPPORTED_MODEL_TYPES = Object.keys(HF_ARCHITECTURES) as ModelType[];

export interface ImportOptions {
  /** Largest shard (bytes, or "5GB"); default transformers' 50GB. */
  maxShardSize?: number | string;
  /** Write into a folder that already holds a checkpoint (its files are replaced). */
  force?: boolean;
  /** 'cm2' (default): give the model CM2's chat format (tokens, rows, template); 'own': keep its tokenizer and template. */
  format?: ChatFormat;
  /** Seed of the §4.1 noise of added rows (embed_tokens `seed`, an untied lm_head `seed + 1`); default 0. */
  seed?: number;
  /** §4.1's rescaling of added rows to their source rows' mean norm (default true; false: mean + noise). */
  alignNorm?: boolean;
}

export interface ImportSummary {
  source: string;
  format: 'gguf' | 'hf';
  out: string;
  /** general.name of a GGUF file */
  name?: string;
  modelType: ModelType;
  architecture: string;
  layers: number;
  hidden: number;
  heads: number;
  kvHeads: number;
  /** rows of the embedding written (the model's own plus any CM2 tokens added) */
  vocab: number;
  tied: boolean;
  parameters: number;
  chatFormat: ChatFormat;
  /** what the CM2 format changed (absent with format 'own' or without a tokenizer) */
  cm2?: Cm2FormatSummary;
  /** source tensors by stored type, e.g. { Q4_1: 210, F32: 61, Q8_0: 1 } */
  sourceTypes: Record<string, number>;
  /** dtype written */
  dtype: 'F32';
  tokenizer?: GgufTokenizer['summary'] | { copied: string[]; rewritten?: string[]; notCopied?: string[] };
  files: { path: string; bytes: number }[];
  seconds: number;
  warnings: string[];
}

/** The summary fields both importers fill the same way: what was written, from the config and the CM2 plan. */
function modelFields(
  config: QwenConfig,
  d: QwenDims,
  plan: Cm2FormatPlan | undefined,
  rest: Pick<ImportSummary, 'parameters' | 'chatFormat' | 'sourceTypes' | 'cm2'>,
): Pick<ImportSummary, 'modelType' | 'architecture' | 'layers' | 'hidden' | 'heads' | 'kvHeads' | 'vocab' | 'tied' | 'parameters' | 'chatFormat' | 'cm2' | 'sourceTypes' | 'dtype'> {
  return {
    modelType: config.model_type,
    architecture: HF_ARCHITECTURES[config.model_type],
    layers: d.layers,
    hidden: d.hidden,
    heads: d.heads,
    kvHeads: d.kvHeads,
    vocab: plan?.rows.to ?? d.vocab,
    tied: d.tied,
    ...rest,
    dtype: 'F32',
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Writing

const CHECKPOINT_FILES = /^(config\.json|model\.safetensors|model\.safetensors\.index\.json|model-\d{5}-of-\d{5}\.safetensors|tokenizer\.json|tokenizer_config\.json)$/;

/** Refuses an output folder that is the source or (without `force`) already holds a checkpoint; writes nothing. */
function checkOut(out: string, source: string, force: boolean): void {
  if (resolve(source) === resolve(out)) throw new Error(`--out ${out} is the source itself; choose another folder`);
  if (existsSync(out)) {
    if (!statSync(out).isDirectory()) throw new Error(`--out ${out} exists and is not a folder`);
    const clash = readdirSync(out).filter((f) => CHECKPOINT_FILES.test(f));
    if (clash.length > 0 && !force) throw new Error(`--out ${out} already holds a checkpoint (${clash.slice(0, 3).join(', ')}${clash.length > 3 ? ', …' : ''}); pass --force to replace it`);
  }
}

function writeJson(path: string, value: unknown): { path: string; bytes: number } {
  const text = `${JSON.stringify(value, null, 2)}\n`;
  writeFileSync(path, text);
  return { path, bytes: Buffer.byteLength(text) };
}

const written = (files: WrittenFile[]) => files.map((f) => ({ path: f.path, bytes: f.bytes }));

/** The CM2 plan for a tokenizer (format 'cm2'), or a warning when the model keeps a format the pipeline cannot use. */
function chatFormatPlan(format: ChatFormat, tokenizer: { json: Record<string, unknown>; config: Record<string, unknown> } | undefined, rows: number, where: string, warnings: string[]): Cm2FormatPlan | undefined {
  if (!tokenizer) {
    if (format === 'cm2') warnings.push('no tokenizer, so CM2\'s chat format (tokens, rows, template) was not applied');
    return undefined;
  }
  if (format === 'cm2') return planCm2Format(tokenizer.json, tokenizer.config, rows, where);
  const missing = missingCm2Tokens(tokenizer.json);
  if (missing.length > 0) warnings.push(`the tokenizer lacks ${missing.join(' ')} as single tokens: the pipeline's chat tokenizer needs them (import with --format cm2, the default)`);
  return undefined;
}

/** config.json after the CM2 format: the grown vocabulary, and `<|im_end|>` as eos. */
function cm2Config(raw: Record<string, unknown>, plan: Cm2FormatPlan | undefined): Record<string, unknown> {
  return plan ? { ...raw, vocab_size: plan.rows.to, eos_token_id: plan.eos.id } : raw;
}

/** GGUF file → HF checkpoint folder. */
export function importGguf(path: string, out: string, opts: ImportOptions = {}): ImportSummary {
  const t0 = performance.now();
  checkOut(out, path, opts.force ?? false);
  const g = GgufFile.open(path);
  try {
    const { config, raw } = ggufHfConfig(g.metadata, (n) => g.has(n), path);
    const d = qwenDims(config);
    const warnings: string[] = [];
    const tok = g.metadata.has('tokenizer.ggml.model') ? tokenizerFromGguf(g.metadata, path, { contextLength: config.max_position_embeddings }) : undefined;
    if (!tok) warnings.push(`${path} carries no tokenizer (no tokenizer.ggml.model): no tokenizer.json written, and the pipeline needs one beside the weights`);
    else warnings.push(...tok.warnings);
    if (tok && tok.summary.vocab > d.vocab) throw new Error(`${path}: tokenizer.ggml.tokens has ${tok.summary.vocab} tokens, more than the model's vocabulary (${d.vocab})`);
    const chatFormat = opts.format ?? 'cm2';
    const seed = opts.seed ?? 0;
    const plan = chatFormatPlan(chatFormat, tok && { json: tok.tokenizerJson, config: tok.tokenizerConfig }, d.vocab, path, warnings);
    const tensors = ggufTensorSources(g, config);
    const { sourceTypes } = tensors;
    const cm2 = plan ? withCm2Rows(tensors.sources, plan, seed, opts.alignNorm ?? true) : undefined;
    const sources = cm2?.sources ?? tensors.sources;
    mkdirSync(out, { recursive: true });
    const parameters = sources.reduce((n, s) => n + s.shape.reduce((a, b) => a * b, 1), 0);
    const files = written(writeShardedSafetensors(out, sources, {
      metadata: { format: 'pt' },
      totalParameters: parameters,
      ...(opts.maxShardSize !== undefined ? { maxShardSize: opts.maxShardSize } : {}),
    }));
    if (tok) {
      files.push(writeJson(join(out, 'tokenizer.json'), plan?.tokenizerJson ?? tok.tokenizerJson));
      files.push(writeJson(join(out, 'tokenizer_config.json'), plan?.tokenizerConfig ?? tok.tokenizerConfig));
    }
    // config.json last: a folder with a config is a whole checkpoint.
    files.push(writeJson(join(out, 'config.json'), cm2Config(raw, plan)));
    const name = g.metadata.get('general.name');
    return {
      source: path,
      format: 'gguf',
      out,
      ...(typeof name === 'string' ? { name } : {}),
      ...modelFields(config, d, plan, { parameters, chatFormat, ...(plan && cm2 ? { cm2: cm2FormatSummary(plan, cm2.norms, seed, opts.alignNorm ?? true) } : {}), sourceTypes }),
      ...(tok ? { tokenizer: tok.summary } : {}),
      files,
      seconds: (performance.now() - t0) / 1000,
      warnings,
    };
  } finally {
    g.close();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// HF folder → HF checkpoint

/** "field a.b: message; field c: message" for a zod error. */
/** config.json of an HF folder, checked: a supported model_type and architectures, then every field the model uses. */
export function readImportableHfConfig(dir: string): { config: QwenConfig; file: string } {
  const file = join(dir, 'config.json');
  if (!existsSync(file)) throw new Error(`${dir}: no config.json (not an HF model folder)`);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${file}: not valid JSON (${(e as Error).message})`);
  }
  const head = z.looseObject({ model_type: z.string().optional(), architectures: z.array(z.string()).optional() }).safeParse(raw);
  if (!head.success) throw new Error(`${file}: ${zodIssues(head.error)}`);
  const modelType = head.data.model_type;
  if (modelType === undefined) throw new Error(`${file}: field model_type is missing`);
  if (!(SUPPORTED_MODEL_TYPES as string[]).includes(modelType)) throw new Error(`${file}: field model_type '${modelType}' is not supported (supported: ${SUPPORTED_MODEL_TYPES.join(', ')})`);
  const expected = HF_ARCHITECTURES[modelType as ModelType];
  const archs = head.data.architectures;
  if (archs && archs.length > 0 && !archs.includes(expected)) throw new Error(`${file}: field architectures ${JSON.stringify(archs)} is not supported (a ${modelType} model must be ${expected})`);
  try {
    return { config: parseQwenConfig(raw), file };
  } catch (e) {
    throw new Error(`${file}: ${e instanceof z.ZodError ? zodIssues(e) : (e as Error).message.replace(/^config\.json: /, '')}`);
  }
}

/** Tokenizer and generation files copied from an HF folder when present. */
const TOKENIZER_FILES = ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'added_tokens.json', 'vocab.json', 'merges.txt', 'generation_config.json', 'chat_template.jinja'];

/** Files a CM2-format import leaves out: tokenizer.json and tokenizer_config.json supersede them. */
const CM2_SUPERSEDED = ['special_tokens_map.json', 'added_tokens.json', 'vocab.json', 'merges.txt', 'chat_template.jinja'];

/** generation_config.json with `<|im_end|>` among its eos ids (generation stops at the end of an assistant message). */
function cm2GenerationConfig(file: string, imEnd: number): Record<string, unknown> {
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch (e) {
    throw new Error(`${file}: not valid JSON (${(e as Error).message})`);
  }
  const eos = raw['eos_token_id'];
  const ids = (Array.isArray(eos) ? eos : eos === undefined || eos === null ? [] : [eos]).filter((x) => x !== imEnd);
  return { ...raw, eos_token_id: ids.length === 0 ? imEnd : [imEnd, ...ids] };
}

const tokenizerConfigSchema = z.looseObject({ chat_template: z.union([z.string(), z.array(z.looseObject({ name: z.string(), template: z.string() }))]).optional() });

/** HF folder (single file or shards; F32, BF16, F16) → HF checkpoint folder with F32 weights. */
export function importHfFolder(dir: string, out: string, opts: ImportOptions = {}): ImportSummary {
  const t0 = performance.now();
  checkOut(out, dir, opts.force ?? false);
  const { config } = readImportableHfConfig(dir);
  const d = qwenDims(config);
  const warnings: string[] = [];
  const weights = HfWeights.open(dir);
  try {
    const specs = paramSpecs(d);
    const sourceTypes: Record<string, number> = {};
    for (const spec of specs) {
      if (!weights.has(spec.name)) throw new Error(`${dir}: weight ${spec.name} is missing`);
      const e = weights.entry(spec.name);
      if (!sameShape(e.shape, spec.shape)) throw new Error(`${e.file}: tensor ${spec.name} has shape [${e.shape.join(', ')}], expected [${spec.shape.join(', ')}] (config.json)`);
      if (!['F32', 'BF16', 'F16'].includes(e.dtype)) throw new Error(`${e.file}: tensor ${spec.name} has dtype ${e.dtype}; F32, BF16 and F16 are read`);
      sourceTypes[e.dtype] = (sourceTypes[e.dtype] ?? 0) + 1;
    }
    const known = new Set(specs.map((s) => s.name));
    const extra = weights.names().filter((n) => !known.has(n) && !(d.tied && n === 'lm_head.weight') && !n.endsWith('rotary_emb.inv_freq'));
    if (extra.length > 0) throw new Error(`${weights.entry(extra[0]!).file}: tensors a ${config.model_type} model with this config.json does not have: ${extra.slice(0, 5).join(', ')}${extra.length > 5 ? ', …' : ''}`);

    // Tokenizer files, read and checked before anything is written.
    const copied = TOKENIZER_FILES.filter((f) => existsSync(join(dir, f)));
    if (!copied.includes('tokenizer.json')) warnings.push(`${dir} has no tokenizer.json: the pipeline needs one beside the weights`);
    let tokConfig: Record<string, unknown> | undefined;
    if (copied.includes('tokenizer_config.json')) {
      const file = join(dir, 'tokenizer_config.json');
      let raw: unknown;
      try {
        raw = JSON.parse(readFileSync(file, 'utf8'));
      } catch (e) {
        throw new Error(`${file}: not valid JSON (${(e as Error).message})`);
      }
      const parsed = tokenizerConfigSchema.safeParse(raw);
      if (!parsed.success) throw new Error(`${file}: ${zodIssues(parsed.error)}`);
      tokConfig = parsed.data;
    }
    const jinja = copied.includes('chat_template.jinja') ? readFileSync(join(dir, 'chat_template.jinja'), 'utf8') : undefined;
    if (jinja !== undefined && typeof tokConfig?.chat_template !== 'string') tokConfig = { ...(tokConfig ?? {}), chat_template: jinja };
    const chatFormat = opts.format ?? 'cm2';
    const seed = opts.seed ?? 0;
    let tokenizerJson: Record<string, unknown> | undefined;
    if (copied.includes('tokenizer.json')) {
      const file = join(dir, 'tokenizer.json');
      try {
        tokenizerJson = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
      } catch (e) {
        throw new Error(`${file}: not valid JSON (${(e as Error).message})`);
      }
    }
    const plan = chatFormatPlan(chatFormat, tokenizerJson && { json: tokenizerJson, config: tokConfig ?? {} }, d.vocab, join(dir, 'tokenizer.json'), warnings);
    if (!plan && tokConfig && tokConfig.chat_template === undefined) warnings.push('no chat template (tokenizer_config.json chat_template, chat_template.jinja)');
    // With CM2's format, tokenizer.json and tokenizer_config.json say everything; files that would contradict them
    // (the slow tokenizer's vocabulary and added tokens, the old special-token map and template) are left out.
    const superseded = plan ? copied.filter((f) => CM2_SUPERSEDED.includes(f)) : [];

    mkdirSync(out, { recursive: true });
    const read = specs.map((spec): TensorSource => ({ name: spec.name, shape: [...spec.shape], data: () => weights.read(spec.name, spec.shape) }));
    const cm2 = plan ? withCm2Rows(read, plan, seed, opts.alignNorm ?? true) : undefined;
    const sources = cm2?.sources ?? read;
    const parameters = sources.reduce((n, s) => n + s.shape.reduce((a, b) => a * b, 1), 0);
    const files = written(writeShardedSafetensors(out, sources, {
      metadata: { format: 'pt' },
      totalParameters: parameters,
      ...(opts.maxShardSize !== undefined ? { maxShardSize: opts.maxShardSize } : {}),
    }));
    const rewritten: string[] = [];
    for (const f of copied) {
      if (f === 'tokenizer_config.json' && tokConfig) continue;
      if (superseded.includes(f)) continue;
      if (plan && f === 'tokenizer.json') {
        files.push(writeJson(join(out, f), plan.tokenizerJson));
        rewritten.push(f);
        continue;
      }
      if (plan && f === 'generation_config.json') {
        files.push(writeJson(join(out, f), cm2GenerationConfig(join(dir, f), plan.eos.id)));
        rewritten.push(f);
        continue;
      }
      copyFileSync(join(dir, f), join(out, f));
      files.push({ path: join(out, f), bytes: statSync(join(out, f)).size });
    }
    if (plan) {
      files.push(writeJson(join(out, 'tokenizer_config.json'), plan.tokenizerConfig));
      rewritten.push('tokenizer_config.json');
    } else if (tokConfig) files.push(writeJson(join(out, 'tokenizer_config.json'), tokConfig));
    const { torch_dtype: _old, ...rest } = config as QwenConfig & { torch_dtype?: unknown };
    files.push(writeJson(join(out, 'config.json'), cm2Config({ ...rest, architectures: config.architectures ?? [HF_ARCHITECTURES[config.model_type]], dtype: 'float32' }, plan)));
    return {
      source: dir,
      format: 'hf',
      out,
      ...modelFields(config, d, plan, { parameters, chatFormat, ...(plan && cm2 ? { cm2: cm2FormatSummary(plan, cm2.norms, seed, opts.alignNorm ?? true) } : {}), sourceTypes }),
      tokenizer: plan
        ? { copied: copied.filter((f) => !superseded.includes(f) && !rewritten.includes(f)), rewritten, ...(superseded.length > 0 ? { notCopied: superseded } : {}) }
        : { copied: [...copied, ...(jinja !== undefined && !copied.includes('tokenizer_config.json') ? ['tokenizer_config.json (from chat_template.jinja)'] : [])] },
      files,
      seconds: (performance.now() - t0) / 1000,
      warnings,
    };
  } finally {
    weights.close();
  }
}

/** A .gguf file or an HF folder (by what `source` is). */
export function importModel(source: string, out: string, opts: ImportOptions = {}): ImportSummary {
  if (!existsSync(source)) throw new Error(`${source}: no such file or folder`);
  if (statSync(source).isDirectory()) {
    const ggufs = readdirSync(source).filter((f) => f.endsWith('.gguf'));
    if (!existsSync(join(source, 'config.json')) && ggufs.length > 0) {
      throw new Error(`${source}: a folder without config.json but with GGUF files (${ggufs.slice(0, 3).join(', ')}); name the .gguf file to import`);
    }
    return importHfFolder(source, out, opts);
  }
  return importGguf(source, out, opts);
}

const size = (n: number) => (n < 1e6 ? `${(n / 1e3).toFixed(1)} kB` : `${(n / 1e6).toFixed(n < 1e7 ? 1 : 0)} MB`);

/** The lines `cm2 model import` prints. */
export function formatImportSummary(s: ImportSummary): string[] {
  const types = Object.entries(s.sourceTypes).sort((a, b) => b[1] - a[1]).map(([t, n]) => `${n} ${t}`).join(', ');
  const lines = [
    `imported ${basename(s.source)} (${s.format === 'gguf' ? 'GGUF' : 'HF folder'}${s.name ? `, "${s.name}"` : ''}) → ${s.out} in ${s.seconds.toFixed(1)} s`,
    `  architecture: ${s.modelType} (${s.architecture}), ${s.layers} layers, hidden ${s.hidden}, ${s.heads}/${s.kvHeads} heads, vocab ${s.vocab}, ${s.tied ? 'tied' : 'untied'} head`,
    `  parameters: ${s.parameters.toLocaleString('en-US')} (${(s.parameters / 1e6).toFixed(1)}M)`,
    `  source tensors: ${types} → ${s.dtype}`,
  ];
  const tok = s.tokenizer;
  if (tok && 'copied' in tok) {
    lines.push(`  tokenizer files copied: ${tok.copied.join(', ') || 'none'}${tok.rewritten ? `; rewritten: ${tok.rewritten.join(', ')}` : ''}${tok.notCopied ? `; left out (superseded by tokenizer.json and tokenizer_config.json): ${tok.notCopied.join(', ')}` : ''}`);
  } else if (tok) {
    lines.push(`  tokenizer: ${tok.model}, ${tok.vocab} tokens, ${tok.merges} merges, ${tok.special} special + ${tok.userDefined} user-defined added tokens, pre-tokenizer '${tok.pre}'${tok.bos ? `, bos ${tok.bos}` : ''}${tok.eos ? `, eos ${tok.eos}` : ''}, chat template ${tok.chatTemplate ? 'yes' : 'no'}`);
  }
  if (s.cm2) lines.push(...formatCm2Summary(s.cm2));
  else if (s.chatFormat === 'own') lines.push("  chat format: the model's own (tokenizer and template unchanged)");
  lines.push(`  wrote: ${s.files.map((f) => `${basename(f.path)} (${size(f.bytes)})`).join(', ')}`);
  for (const w of s.warnings) lines.push(`  warning: ${w}`);
  return lines;
}
