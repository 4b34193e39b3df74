/**
 * The safetensors format: 8-byte little-endian header length N, N bytes of JSON header
 * ({name: {dtype, shape, data_offsets: [begin, end]}, __metadata__?: {string: string}}), then the raw little-endian data.
 * Reading decodes F32, F16 and BF16 to Float32Array; writing produces F32 (tensors sorted by name, header padded with
 * spaces to a multiple of 8 — the bytes the `safetensors` library writes, so the same weights always give the same
 * bytes).
 *
 * Two ways in and out:
 * - in memory (`parseSafetensors`, `serializeSafetensors`) for small objects;
 * - streaming, for files of any size (a 0.5B model's AdamW state is 4 GB; Node cannot read a file over 2 GiB into one
 *   Buffer): `SafetensorsReader` reads the header, then one tensor at a time with positioned reads of at most
 *   `chunkBytes`; `writeSafetensors` writes the header from names and shapes, then asks each tensor for its values
 *   one at a time and writes them in chunks, hashing (sha256) as it goes. Either holds one tensor plus one chunk.
 * - shards as HF transformers writes them (`planShards`, `writeShardedSafetensors`): model-0000i-of-0000N.safetensors
 *   and model.safetensors.index.json ({metadata: {total_parameters, total_size}, weight_map}, sorted keys, 2-space
 *   indent), tensors assigned greedily in name order to shards of at most `maxShardSize` bytes of tensor data.
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, fstatSync, openSync, readdirSync, readSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { endianness } from 'node:os';
import { basename, join } from 'node:path';

export interface SafeTensor {
  shape: number[];
  data: Float32Array;
  /** dtype as stored in the file */
  dtype?: string;
}

export interface SafetensorsFile {
  tensors: Map<string, SafeTensor>;
  metadata?: Record<string, string>;
}

export interface HeaderEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

/** A tensor to write: its values are asked for only when it is written (one tensor in memory at a time). */
export interface TensorSource {
  name: string;
  shape: number[];
  data: () => Float32Array;
}

/** Bytes per element of the dtypes that are read. */
export const DTYPE_BYTES: Readonly<Record<string, number>> = { F32: 4, F16: 2, BF16: 2 };

/** Default size of one read or write (a multiple of 4). */
export const DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024;

/** The safetensors library refuses headers above 100 MB. */
const MAX_HEADER_BYTES = 100_000_000;

const LITTLE_ENDIAN = endianness() === 'LE';

/** IEEE half → float. */
export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

let f16Table: Float32Array | undefined;
/** All 65,536 halves as floats (decoding by table lookup). */
export function halfTable(): Float32Array {
  if (!f16Table) {
    f16Table = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) f16Table[h] = f16ToF32(h);
  }
  return f16Table;
}

const count = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);

/** Decodes `bytes` (little-endian `dtype` values) into out[at …]. */
function decodeInto(dtype: string, bytes: Uint8Array, out: Float32Array, at: number): void {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === 'F32') {
    const n = bytes.byteLength / 4;
    for (let i = 0; i < n; i++) out[at + i] = view.getFloat32(4 * i, true);
    return;
  }
  const n = bytes.byteLength / 2;
  if (LITTLE_ENDIAN && bytes.byteOffset % 2 === 0) {
    // Typed-array views: several times faster than DataView reads.
    const u16 = new Uint16Array(bytes.buffer, bytes.byteOffset, n);
    if (dtype === 'F16') {
      const table = halfTable();
      for (let i = 0; i < n; i++) out[at + i] = table[u16[i]!]!;
    } else {
      const u32 = new Uint32Array(out.buffer, out.byteOffset, out.length);
      for (let i = 0; i < n; i++) u32[at + i] = u16[i]! << 16;
    }
    return;
  }
  if (dtype === 'F16') {
    const table = halfTable();
    for (let i = 0; i < n; i++) out[at + i] = table[view.getUint16(2 * i, true)]!;
  } else {
    const u32 = new Uint32Array(out.buffer, out.byteOffset, out.length);
    for (let i = 0; i < n; i++) u32[at + i] = view.getUint16(2 * i, true) << 16;
  }
}

/**
 * Parses and checks a header: every tensor has a known-size shape, offsets inside `dataBytes`, and (for the dtypes
 * that are read) as many bytes as its shape needs. `where` names the file in errors.
 */
function parseHeader(json: string, dataBytes: number, where: string): { header: Map<string, HeaderEntry>; metadata?: Record<string, string> } {
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch (e) {
    throw new Error(`${where}: the safetensors header is not valid JSON (${(e as Error).message})`);
  }
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) throw new Error(`${where}: the safetensors header is not a JSON object`);
  const { __metadata__: metadata, ...entries } = raw as Record<string, unknown>;
  const header = new Map<string, HeaderEntry>();
  for (const [name, value] of Object.entries(entries)) {
    const e = value as Partial<HeaderEntry> | null;
    const bad = (why: string) => new Error(`${where}: tensor ${name}: ${why}`);
    if (!e || typeof e.dtype !== 'string' || !Array.isArray(e.shape) || !Array.isArray(e.data_offsets) || e.data_offsets.length !== 2) throw bad('header entry needs dtype, shape and data_offsets');
    if (!e.shape.every((d) => Number.isInteger(d) && d >= 0)) throw bad(`bad shape ${JSON.stringify(e.shape)}`);
    const [begin, end] = e.data_offsets;
    if (!Number.isInteger(begin) || !Number.isInteger(end) || begin < 0 || end < begin) throw bad(`bad data_offsets ${JSON.stringify(e.data_offsets)}`);
    if (end > dataBytes) throw bad(`data_offsets [${begin}, ${end}] lie outside the file's ${dataBytes} data bytes (truncated file?)`);
    const width = DTYPE_BYTES[e.dtype];
    if (width !== undefined && end - begin !== count(e.shape) * width) throw bad(`${end - begin} bytes for ${e.dtype} shape [${e.shape.join(', ')}], expected ${count(e.shape) * width}`);
    header.set(name, { dtype: e.dtype, shape: e.shape, data_offsets: [begin, end] });
  }
  return metadata ? { header, metadata: metadata as Record<string, string> } : { header };
}

function unsupported(where: string, name: string, dtype: string): Error {
  return new Error(`${where}: tensor ${name} has dtype ${dtype}; F32, F16 and BF16 are read`);
}

/** Only the header (names, dtypes, shapes) of in-memory bytes, e.g. to find tensors without decoding them. */
export function readSafetensorsHeader(buf: Uint8Array, where = 'safetensors'): { header: Record<string, HeaderEntry>; metadata?: Record<string, string>; dataStart: number } {
  if (buf.byteLength < 8) throw new Error(`${where}: too short for a safetensors file (${buf.byteLength} bytes)`);
  const n = Number(new DataView(buf.buffer, buf.byteOffset, buf.byteLength).getBigUint64(0, true));
  if (n > MAX_HEADER_BYTES || 8 + n > buf.byteLength) throw new Error(`${where}: header length ${n} exceeds the file (${buf.byteLength} bytes)`);
  const { header, metadata } = parseHeader(new TextDecoder().decode(buf.subarray(8, 8 + n)), buf.byteLength - 8 - n, where);
  return { header: Object.fromEntries(header), ...(metadata ? { metadata } : {}), dataStart: 8 + n };
}

/** All tensors of in-memory safetensors bytes (small files; see SafetensorsReader for large ones). */
export function parseSafetensors(buf: Uint8Array, where = 'safetensors'): SafetensorsFile {
  const { header, metadata, dataStart } = readSafetensorsHeader(buf, where);
  const tensors = new Map<string, SafeTensor>();
  for (const [name, e] of Object.entries(header)) {
    if (DTYPE_BYTES[e.dtype] === undefined) throw unsupported(where, name, e.dtype);
    const data = new Float32Array(count(e.shape));
    decodeInto(e.dtype, buf.subarray(dataStart + e.data_offsets[0], dataStart + e.data_offsets[1]), data, 0);
    tensors.set(name, { shape: e.shape, dtype: e.dtype, data });
  }
  return metadata ? { tensors, metadata } : { tensors };
}

/** Where a reader's bytes come from: a file (positioned reads) or memory. */
interface ByteSource {
  size: number;
  /** Fills `buf` with the bytes at `position`. */
  readAt(buf: Uint8Array, position: number): void;
  close(): void;
}

function fileSource(path: string): ByteSource {
  const fd = openSync(path, 'r');
  let open = true;
  try {
    return { size: fstatSync(fd).size, readAt: (buf, position) => readFully(fd, buf, position, path), close: () => { if (open) closeSync(fd); open = false; } };
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}

function memorySource(bytes: Uint8Array): ByteSource {
  return {
    size: bytes.byteLength,
    readAt: (buf, position) => {
      if (position + buf.byteLength > bytes.byteLength) throw new Error(`unexpected end of data at byte ${bytes.byteLength}`);
      buf.set(bytes.subarray(position, position + buf.byteLength));
    },
    close: () => undefined,
  };
}

/**
 * A safetensors file read one tensor at a time through positioned reads (any file size), or the same over bytes in
 * memory (`fromBytes`). Close it when done.
 *   const r = SafetensorsReader.open(path); r.names(); r.read(name); r.close();
 */
export class SafetensorsReader {
  private closed = false;

  private constructor(
    /** The file (or the name given to in-memory bytes), for messages. */
    readonly path: string,
    private readonly source: ByteSource,
    readonly header: ReadonlyMap<string, HeaderEntry>,
    readonly metadata: Record<string, string> | undefined,
    private readonly dataStart: number,
    readonly chunkBytes: number,
  ) {}

  static open(path: string, opts: { chunkBytes?: number } = {}): SafetensorsReader {
    return SafetensorsReader.over(fileSource(path), path, opts);
  }

  /** Over bytes already in memory (small objects); `where` names them in errors. */
  static fromBytes(bytes: Uint8Array, where: string, opts: { chunkBytes?: number } = {}): SafetensorsReader {
    return SafetensorsReader.over(memorySource(bytes), where, opts);
  }

  private static over(source: ByteSource, path: string, opts: { chunkBytes?: number }): SafetensorsReader {
    const chunkBytes = Math.max(4, Math.floor((opts.chunkBytes ?? DEFAULT_CHUNK_BYTES) / 4) * 4);
    try {
      const size = source.size;
      if (size < 8) throw new Error(`${path}: too short for a safetensors file (${size} bytes)`);
      const lenBuf = Buffer.alloc(8);
      source.readAt(lenBuf, 0);
      const n = Number(lenBuf.readBigUInt64LE(0));
      if (n > MAX_HEADER_BYTES || 8 + n > size) throw new Error(`${path}: header length ${n} exceeds the file (${size} bytes); not a safetensors file, or truncated`);
      const json = Buffer.alloc(n);
      source.readAt(json, 8);
      const { header, metadata } = parseHeader(json.toString('utf8'), size - 8 - n, path);
      return new SafetensorsReader(path, source, header, metadata, 8 + n, chunkBytes);
    } catch (e) {
      source.close();
      throw e;
    }
  }

  names(): string[] {
    return [...this.header.keys()];
  }

  has(name: string): boolean {
    return this.header.has(name);
  }

  entry(name: string): HeaderEntry {
    const e = this.header.get(name);
    if (!e) throw new Error(`${this.path}: no tensor ${name}`);
    return e;
  }

  /** The tensor's values as floats; with `shape`, checks that the file has that shape. */
  read(name: string, shape?: readonly number[]): Float32Array {
    if (this.closed) throw new Error(`${this.path}: read of ${name} after close`);
    const e = this.entry(name);
    if (shape && (shape.length !== e.shape.length || shape.some((d, i) => d !== e.shape[i]))) {
      throw new Error(`${this.path}: tensor ${name} has shape [${e.shape.join(', ')}], expected [${shape.join(', ')}]`);
    }
    const width = DTYPE_BYTES[e.dtype];
    if (width === undefined) throw unsupported(this.path, name, e.dtype);
    const out = new Float32Array(count(e.shape));
    const [begin, end] = e.data_offsets;
    const at = this.dataStart + begin;
    try {
      if (e.dtype === 'F32' && LITTLE_ENDIAN) {
        // Straight into the result's memory, a chunk per call.
        const bytes = new Uint8Array(out.buffer);
        for (let off = 0; off < bytes.byteLength; off += this.chunkBytes) {
          this.source.readAt(bytes.subarray(off, Math.min(off + this.chunkBytes, bytes.byteLength)), at + off);
        }
      } else {
        const scratch = Buffer.allocUnsafe(Math.min(this.chunkBytes, end - begin));
        for (let off = 0; off < end - begin; off += this.chunkBytes) {
          const len = Math.min(this.chunkBytes, end - begin - off);
          this.source.readAt(scratch.subarray(0, len), at + off);
          decodeInto(e.dtype, scratch.subarray(0, len), out, off / width);
        }
      }
    } catch (err) {
      throw new Error(`${this.path}: tensor ${name}: ${(err as Error).message}`);
    }
    return out;
  }

  close(): void {
    if (!this.closed) this.source.close();
    this.closed = true;
  }
}

/** Fills `buf` from `position` (a short read means the file ended early). */
function readFully(fd: number, buf: Uint8Array, position: number, path: string): void {
  let done = 0;
  while (done < buf.byteLength) {
    const n = readSync(fd, buf, done, buf.byteLength - done, position + done);
    if (n === 0) throw new Error(`${path}: unexpected end of file at byte ${position + done}`);
    done += n;
  }
}

/** The header bytes (JSON padded with spaces to a multiple of 8) and the data length, tensors sorted by name. */
function buildHeader(tensors: readonly { name: string; shape: readonly number[] }[], metadata: Record<string, string> | undefined, where: string): { sorted: { name: string; shape: readonly number[]; bytes: number }[]; header: Uint8Array; dataBytes: number } {
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
function f32Bytes(data: Float32Array): Uint8Array {
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
function planWrite(path: string, tensors: Iterable<TensorSource>, opts: { metadata?: Record<string, string>; chunkBytes?: number }) {
  const chunkBytes = Math.max(4, Math.floor((opts.chunkBytes ?? DEFAULT_CHUNK_BYTES) / 4) * 4);
  const sources = new Map<string, TensorSource>();
  for (const t of tensors) {
    if (sources.has(t.name)) throw new Error(`${path}: tensor ${t.name} appears twice`);
    sources.set(t.name, t);
  }
  return { chunkBytes, sources, ...buildHeader([...sources.values()], opts.metadata, path) };
}

/** One tensor's values, checked against the header's size; errors name the file and the tensor. */
function tensorData(path: string, sources: Map<string, TensorSource>, t: { name: string; shape: readonly number[]; bytes: number }): Float32Array {
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

const SIZE_UNITS: Record<string, number> = { TB: 1e12, GB: 1e9, MB: 1e6, KB: 1e3 };

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
function sortedJson(value: unknown): string {
  const sortKeys = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sortKeys);
    if (v && typeof v === 'object') return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortKeys((v as Record<string, unknown>)[k])]));
    return v;
  };
  return `${JSON.stringify(sortKeys(value), null, 2)}\n`;
}

const SHARD_FILE = /^model-\d{5}-of-\d{5}\.safetensors$/;

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
