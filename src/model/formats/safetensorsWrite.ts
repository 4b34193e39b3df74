/**
 * Writing safetensors (the format: safetensors.ts): F32, tensors sorted by name, the header padded with spaces to a
 * multiple of 8 (the bytes the `safetensors` library writes). In memory (`serializeSafetensors`), streamed to a file
 * one tensor at a time in chunks while hashing (`writeSafetensors`), and in shards as HF transformers writes them
 * (`planShards`, `writeShardedSafetensors`: model-0000i-of-0000N.safetensors and model.safetensors.index.json).
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { count, DEFAULT_CHUNK_BYTES, LITTLE_ENDIAN, type TensorSource } from './safetensors';

/** The header bytes (JSON padded with spaces to a multiple of 8) and the data length, tensors sorted by name. */
export function buildHeader(tensors: readonly { name: string; shape: readonly number[] }[], metadata: Record<string, string> | undefined, where: string): { sorted: { name: string; shape: readonly number[]; bytes: number }[]; header: Uint8Array; dataBytes: number } {
  const sorted = [...tensors].map((t) => ({ name: t.name, shape: t.shape, bytes: 4 * count(t.shape) })).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const json: Record<string, unknown> = {};
  if (metadata) json.__metadata__ = metadata;
  let offset = 0;
  for (const [i, t] of sorted.entries()) {
    if (t.name === '__metadata__') throw new Error(`${where}: a tensor cannot be named __metadata__`);
    if (i > 0 && sorted[i - 1]!.name === t.name) throw new Error(`${where}: tensor ${t.name} appears twice`);
    json[t.name] = { dtype: 'F32', shape: t.shape, data_offsets: [offset, offset + t.bytes] };
    offset += t.bytes;
  }
  let text = JSON.stringify(json);
  text += ' '.repeat((8 - (Buffer.byteLength(text) % 8)) % 8);
  return { sorted, header: Buffer.from(text, 'utf8'), dataBytes: offset };
}

/** The little-endian F32 bytes of `data` (a view when the machine is little-endian). */
export function f32Bytes(data: Float32Array): Uint8Array {
  if (LITTLE_ENDIAN) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const out = new Uint8Array(data.byteLength);
  const view = new DataView(out.buffer);
  for (let i = 0; i < data.length; i++) view.setFloat32(4 * i, data[i]!, true);
  return out;
}

/** F32 safetensors bytes, in memory (small tensors; see writeSafetensors for large ones). */
export function serializeSafetensors(tensors: Map<string, { shape: number[]; data: Float32Array }>, metadata?: Record<string, string>): Uint8Array {
  return serializeTensors([...tensors].map(([name, t]) => ({ name, shape: t.shape, data: () => t.data })), metadata);
}

/** The bytes `writeSafetensors` writes, in memory (for small objects: no file in between). */
export function serializeTensors(tensors: Iterable<TensorSource>, metadata?: Record<string, string>, where = 'safetensors'): Uint8Array {
  const sources = new Map<string, TensorSource>();
  for (const t of tensors) {
    if (sources.has(t.name)) throw new Error(`${where}: tensor ${t.name} appears twice`);
    sources.set(t.name, t);
  }
  const { sorted, header, dataBytes } = buildHeader([...sources.values()], metadata, where);
  const out = new Uint8Array(8 + header.byteLength + dataBytes);
  new DataView(out.buffer).setBigUint64(0, BigInt(header.byteLength), true);
  out.set(header, 8);
  let pos = 8 + header.byteLength;
  for (const t of sorted) {
    const data = sources.get(t.name)!.data();
    if (data.length * 4 !== t.bytes) throw new Error(`${where}: tensor ${t.name} has ${data.length} values for shape [${t.shape.join(', ')}]`);
    out.set(f32Bytes(data), pos);
    pos += t.bytes;
  }
  return out;
}

export interface WrittenFile {
  path: string;
  bytes: number;
  sha256: string;
}

/** What both writers do before the first byte: the chunk size, the sources by name (each once) and the header. */
export function planWrite(path: string, tensors: Iterable<TensorSource>, opts: { metadata?: Record<string, string>; chunkBytes?: number }) {
  const chunkBytes = Math.max(4, Math.floor((opts.chunkBytes ?? DEFAULT_CHUNK_BYTES) / 4) * 4);
  const sources = new Map<string, TensorSource>();
  for (const t of tensors) {
    if (sources.has(t.name)) throw new Error(`${path}: tensor ${t.name} appears twice`);
    sources.set(t.name, t);
  }
  return { chunkBytes, sources, ...buildHeader([...sources.values()], opts.metadata, path) };
}

/** One tensor's values, checked against the header's size; errors name the file and the tensor. */
export function tensorData(path: string, sources: Map<string, TensorSource>, t: { name: string; shape: readonly number[]; bytes: number }): Float32Array {
  let data: Float32Array;
  try {
    data = sources.get(t.name)!.data();
  } catch (e) {
    throw new Error(`${path}: tensor ${t.name}: ${(e as Error).message}`);
  }
  if (data.length * 4 !== t.bytes) throw new Error(`${path}: tensor ${t.name} has ${data.length} values for shape [${t.shape.join(', ')}]`);
  return data;
}

/**
 * Writes an F32 safetensors file tensor by tensor (`data()` is called once per tensor, in name order, and the array is
 * dropped after it is written): the same bytes as `serializeSafetensors`, in memory one tensor plus one chunk at a
 * time. Written to `<path>.partial` and renamed, so `path` is either the whole file or absent. Returns size and sha256.
 */
export function writeSafetensors(path: string, tensors: Iterable<TensorSource>, opts: { metadata?: Record<string, string>; chunkBytes?: number } = {}): WrittenFile {
  const { chunkBytes, sources, sorted, header, dataBytes } = planWrite(path, tensors, opts);
  const hash = createHash('sha256');
  const partial = `${path}.partial`;
  const fd = openSync(partial, 'w');
  let pos = 0;
  const put = (bytes: Uint8Array) => {
    for (let off = 0; off < bytes.byteLength; off += chunkBytes) {
      const chunk = bytes.subarray(off, Math.min(off + chunkBytes, bytes.byteLength));
      let done = 0;
      while (done < chunk.byteLength) done += writeSync(fd, chunk, done, chunk.byteLength - done, pos + done);
      hash.update(chunk);
      pos += chunk.byteLength;
    }
  };
  try {
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(header.byteLength));
    put(len);
    put(header);
    for (const t of sorted) {
      const data = tensorData(path, sources, t);
      put(f32Bytes(data));
    }
    closeSync(fd);
  } catch (e) {
    closeSync(fd);
    rmSync(partial, { force: true });
    throw e;
  }
  renameSync(partial, path);
  if (pos !== 8 + header.byteLength + dataBytes) throw new Error(`${path}: wrote ${pos} bytes, expected ${8 + header.byteLength + dataBytes}`);
  return { path, bytes: pos, sha256: hash.digest('hex') };
}

/**
 * `writeSafetensors` for async callers (the activities): the same bytes, but each chunk's write runs in libuv's thread
 * pool while this thread hashes it, so hashing (~0.6 GB/s) and disk writes overlap instead of adding up. The tensors'
 * arrays must not change until it resolves.
 */
export async function writeSafetensorsAsync(path: string, tensors: Iterable<TensorSource>, opts: { metadata?: Record<string, string>; chunkBytes?: number } = {}): Promise<WrittenFile> {
  const { chunkBytes, sources, sorted, header, dataBytes } = planWrite(path, tensors, opts);
  const hash = createHash('sha256');
  const partial = `${path}.partial`;
  const fh = await open(partial, 'w');
  let pos = 0;
  const put = async (bytes: Uint8Array) => {
    for (let off = 0; off < bytes.byteLength; off += chunkBytes) {
      const chunk = bytes.subarray(off, Math.min(off + chunkBytes, bytes.byteLength));
      const at = pos;
      const written = (async () => {
        let done = 0;
        while (done < chunk.byteLength) done += (await fh.write(chunk, done, chunk.byteLength - done, at + done)).bytesWritten;
      })();
      hash.update(chunk);
      await written;
      pos += chunk.byteLength;
    }
  };
  try {
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(header.byteLength));
    await put(len);
    await put(header);
    for (const t of sorted) {
      const data = tensorData(path, sources, t);
      await put(f32Bytes(data));
    }
    await fh.close();
  } catch (e) {
    await fh.close().catch(() => undefined);
    rmSync(partial, { force: true });
    throw e;
  }
  renameSync(partial, path);
  if (pos !== 8 + header.byteLength + dataBytes) throw new Error(`${path}: wrote ${pos} bytes, expected ${8 + header.byteLength + dataBytes}`);
  return { path, bytes: pos, sha256: hash.digest('hex') };
}

// ---------------------------------------------------------------------------------------------------------------
// Shards, as HF transformers writes them

/** transformers' `save_pretrained` default (transformers 5.x). */
export const DEFAULT_MAX_SHARD_SIZE = '50GB';

export const SIZE_UNITS: Record<string, number> = { TB: 1e12, GB: 1e9, MB: 1e6, KB: 1e3 };

/** "5GB" → 5,000,000,000 (decimal units TB, GB, MB, KB, as huggingface_hub's parse_size_to_int); a number is bytes. */
export function parseShardSize(size: number | string): number {
  if (typeof size === 'number') {
    if (!Number.isFinite(size) || size <= 0) throw new Error(`max shard size ${size}: expected a positive number of bytes`);
    return Math.floor(size);
  }
  const s = size.trim();
  const mult = SIZE_UNITS[s.slice(-2).toUpperCase()];
  const value = Number(s.slice(0, -2).trim());
  if (mult === undefined || s.slice(0, -2).trim() === '' || !Number.isFinite(value) || value <= 0) {
    throw new Error(`max shard size '${size}': expected a number of bytes or a size like "5GB" (units TB, GB, MB, KB)`);
  }
  return Math.floor(value * mult);
}

export interface ShardPlan {
  /** Shard file → tensor names, in writing order. */
  files: { file: string; names: string[] }[];
  /** Tensor → shard file (only meaningful when there is more than one shard). */
  weightMap: Record<string, string>;
  /** Bytes of tensor data in all shards. */
  totalSize: number;
}

/**
 * huggingface_hub's `split_state_dict_into_shards`: tensors in the given order go into the current shard until the
 * next would tip it over `maxShardSize` bytes; a tensor bigger than the limit gets a shard of its own. One shard is
 * `model.safetensors`; N shards are `model-0000i-of-0000N.safetensors`.
 */
export function planShards(tensors: readonly { name: string; bytes: number }[], maxShardSize: number): ShardPlan {
  const shards: string[][] = [];
  let current: string[] = [];
  let currentSize = 0;
  let totalSize = 0;
  for (const t of tensors) {
    totalSize += t.bytes;
    if (t.bytes > maxShardSize) {
      shards.push([t.name]);
      continue;
    }
    if (currentSize + t.bytes > maxShardSize) {
      shards.push(current);
      current = [];
      currentSize = 0;
    }
    current.push(t.name);
    currentSize += t.bytes;
  }
  if (current.length > 0) shards.push(current);
  const n = shards.length;
  const pad = (i: number) => String(i).padStart(5, '0');
  const files = shards.map((names, i) => ({ file: n === 1 ? 'model.safetensors' : `model-${pad(i + 1)}-of-${pad(n)}.safetensors`, names }));
  const weightMap: Record<string, string> = {};
  for (const f of files) for (const name of f.names) weightMap[name] = f.file;
  return { files, weightMap, totalSize };
}

/** JSON with object keys sorted at every level and 2-space indent (Python's json.dumps(indent=2, sort_keys=True)). */
export function sortedJson(value: unknown): string {
  const sortKeys = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sortKeys);
    if (v && typeof v === 'object') return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]));
    return v;
  };
  return `${JSON.stringify(sortKeys(value), null, 2)}\n`;
}

export const SHARD_FILE = /^model-\d{5}-of-\d{5}\.safetensors$/;

/**
 * Writes tensors into `dir` as transformers' save_pretrained does: one `model.safetensors`, or shards plus
 * `model.safetensors.index.json` when the data exceeds `maxShardSize` (default 50GB). Tensors are assigned in name
 * order (the order transformers uses for a model it loaded with from_pretrained). Shard files of an earlier save that
 * this one does not overwrite are removed, and so is the single file or the index of the other layout, so the folder
 * holds one checkpoint. Returns the files written (index last), each with size and sha256.
 */
export function writeShardedSafetensors(
  dir: string,
  tensors: Iterable<TensorSource>,
  opts: { maxShardSize?: number | string; metadata?: Record<string, string>; totalParameters?: number; chunkBytes?: number } = {},
): WrittenFile[] {
  const max = parseShardSize(opts.maxShardSize ?? DEFAULT_MAX_SHARD_SIZE);
  const byName = new Map<string, TensorSource>();
  for (const t of tensors) {
    if (byName.has(t.name)) throw new Error(`${dir}: tensor ${t.name} appears twice`);
    byName.set(t.name, t);
  }
  const names = [...byName.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const plan = planShards(names.map((name) => ({ name, bytes: 4 * count(byName.get(name)!.shape) })), max);
  const keep = new Set(plan.files.map((f) => f.file));
  for (const f of existsSync(dir) ? readdirSync(dir) : []) {
    const stale = (SHARD_FILE.test(f) && !keep.has(f)) || (f === 'model.safetensors' && !keep.has(f)) || (f === 'model.safetensors.index.json' && plan.files.length === 1);
    if (stale) rmSync(join(dir, f), { force: true });
  }
  const written: WrittenFile[] = [];
  for (const f of plan.files) {
    written.push(writeSafetensors(join(dir, f.file), f.names.map((n) => byName.get(n)!), { metadata: opts.metadata ?? { format: 'pt' }, ...(opts.chunkBytes ? { chunkBytes: opts.chunkBytes } : {}) }));
  }
  if (plan.files.length > 1) {
    const total = opts.totalParameters ?? names.reduce((n, name) => n + count(byName.get(name)!.shape), 0);
    const text = sortedJson({ metadata: { total_parameters: total, total_size: plan.totalSize }, weight_map: plan.weightMap });
    const path = join(dir, 'model.safetensors.index.json');
    writeFileSync(path, text);
    written.push({ path, bytes: Buffer.byteLength(text), sha256: createHash('sha256').update(text).digest('hex') });
  }
  return written;
}

/** Shard file name → the names it holds, from an index's weight_map (files in sorted order). */
export function shardsOfIndex(weightMap: Record<string, string>): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const [name, file] of Object.entries(weightMap)) {
    if (basename(file) !== file) throw new Error(`weight_map: ${name} points to ${file}, outside the checkpoint folder`);
    out.set(file, [...(out.get(file) ?? []), name]);
  }
  return new Map([...out].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}
