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
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { endianness } from 'node:os';

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

export const LITTLE_ENDIAN = endianness() === 'LE';

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

export const count = (shape: readonly number[]) => shape.reduce((a, b) => a * b, 1);

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
