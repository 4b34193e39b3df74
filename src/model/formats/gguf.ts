/**
 * GGUF files (llama.cpp's model format, versions 2 and 3), read with positioned reads so a file of any size works
 * (only the header — metadata and tensor table — is parsed up front; tensors are read one at a time, in chunks).
 *
 * Layout, little-endian: magic "GGUF", version u32, tensor count u64, metadata count u64; metadata entries
 * (key: string, value type u32, value); tensor infos (name: string, n_dims u32, dims u64[n_dims] innermost first,
 * GGML type u32, offset u64 from the data section); padding to `general.alignment` (default 32); the data section.
 * A string is a u64 byte length and UTF-8 bytes; an array is an element type u32, a count u64 and the elements.
 *
 *   const g = GgufFile.open(path); g.metadata.get('general.architecture'); g.read('token_embd.weight'); g.close();
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { assertDequantizable, dequantizeInto, GGML_TYPES } from './ggufQuant';

export type GgufValue = number | bigint | boolean | string | GgufValue[];

export interface GgufTensorInfo {
  name: string;
  /** dims as the file lists them: dims[0] is the innermost (contiguous) one */
  dims: number[];
  /** the same dims outermost first, as PyTorch / safetensors write shapes */
  shape: number[];
  type: number;
  typeName: string;
  /** byte offset from the start of the data section */
  offset: number;
  bytes: number;
  elements: number;
}

const MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
const DEFAULT_ALIGNMENT = 32;
/** Bytes of stored tensor data per positioned read (each read is cut at a block boundary). */
const CHUNK_BYTES = 32 * 1024 * 1024;

enum ValueType { U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12 }

/** Sequential reads over a file descriptor through a buffer (the header of a GGUF can be tens of MB of vocabulary). */
class Cursor {
  private buf = Buffer.alloc(1 << 20);
  private bufStart = 0;
  private bufEnd = 0;
  pos = 0;
  private readonly decoder = new TextDecoder('utf-8');

  constructor(private readonly fd: number, private readonly size: number, private readonly where: string) {}

  /** Makes bytes [pos, pos + n) available in the buffer; returns their offset in it. */
  private need(n: number): number {
    if (this.pos + n > this.size) throw new Error(`${this.where}: unexpected end of file at byte ${this.pos} (the header needs ${n} more bytes; truncated file?)`);
    if (this.pos >= this.bufStart && this.pos + n <= this.bufEnd) return this.pos - this.bufStart;
    if (n > this.buf.byteLength) this.buf = Buffer.alloc(Math.max(n, 2 * this.buf.byteLength));
    const want = Math.min(this.buf.byteLength, this.size - this.pos);
    let done = 0;
    while (done < want) {
      const r = readSync(this.fd, this.buf, done, want - done, this.pos + done);
      if (r === 0) break;
      done += r;
    }
    if (done < n) throw new Error(`${this.where}: unexpected end of file at byte ${this.pos + done}`);
    this.bufStart = this.pos;
    this.bufEnd = this.pos + done;
    return 0;
  }

  u8(): number { const o = this.need(1); this.pos += 1; return this.buf[o]!; }
  i8(): number { const o = this.need(1); this.pos += 1; return this.buf.readInt8(o); }
  u16(): number { const o = this.need(2); this.pos += 2; return this.buf.readUInt16LE(o); }
  i16(): number { const o = this.need(2); this.pos += 2; return this.buf.readInt16LE(o); }
  u32(): number { const o = this.need(4); this.pos += 4; return this.buf.readUInt32LE(o); }
  i32(): number { const o = this.need(4); this.pos += 4; return this.buf.readInt32LE(o); }
  f32(): number { const o = this.need(4); this.pos += 4; return this.buf.readFloatLE(o); }
  f64(): number { const o = this.need(8); this.pos += 8; return this.buf.readDoubleLE(o); }
  u64(): bigint { const o = this.need(8); this.pos += 8; return this.buf.readBigUInt64LE(o); }
  i64(): bigint { const o = this.need(8); this.pos += 8; return this.buf.readBigInt64LE(o); }

  /** A u64 that must fit a JS number (counts, lengths, offsets); `what` names it in the error. */
  count(what: string): number {
    const v = this.u64();
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error(`${this.where}: ${what} ${v} at byte ${this.pos - 8} is not a plausible count (corrupt file?)`);
    return Number(v);
  }

  string(what: string): string {
    const n = this.count(`${what}: string length`);
    if (this.pos + n > this.size) throw new Error(`${this.where}: ${what}: a string of ${n} bytes at byte ${this.pos} runs past the end of the file`);
    const o = this.need(n);
    this.pos += n;
    return this.decoder.decode(this.buf.subarray(o, o + n));
  }
}

/** u64/i64 metadata as a number when it is exactly one, else a bigint. */
const int64 = (v: bigint): number | bigint => (v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v);

function readValue(c: Cursor, type: number, key: string): GgufValue {
  switch (type) {
    case ValueType.U8: return c.u8();
    case ValueType.I8: return c.i8();
    case ValueType.U16: return c.u16();
    case ValueType.I16: return c.i16();
    case ValueType.U32: return c.u32();
    case ValueType.I32: return c.i32();
    case ValueType.F32: return c.f32();
    case ValueType.F64: return c.f64();
    case ValueType.U64: return int64(c.u64());
    case ValueType.I64: return int64(c.i64());
    case ValueType.BOOL: {
      const b = c.u8();
      if (b > 1) throw new Error(`metadata ${key}: bool byte ${b} is neither 0 nor 1`);
      return b === 1;
    }
    case ValueType.STRING: return c.string(`metadata ${key}`);
    case ValueType.ARRAY: {
      const itemType = c.u32();
      const n = c.count(`metadata ${key}: array length`);
      const out: GgufValue[] = new Array<GgufValue>(n);
      for (let i = 0; i < n; i++) out[i] = readValue(c, itemType, `${key}[${i}]`);
      return out;
    }
    default:
      throw new Error(`metadata ${key}: unknown value type ${type}`);
  }
}

export class GgufFile {
  private closed = false;

  private constructor(
    /** the file, for messages */
    readonly path: string,
    private readonly fd: number,
    readonly size: number,
    readonly version: number,
    readonly metadata: ReadonlyMap<string, GgufValue>,
    /** in file order */
    readonly tensors: readonly GgufTensorInfo[],
    private readonly byName: ReadonlyMap<string, GgufTensorInfo>,
    readonly alignment: number,
    /** absolute byte offset of the data section */
    readonly dataStart: number,
  ) {}

  /** Parses the header and checks every tensor's type, size and place in the file. Close when done. */
  static open(path: string): GgufFile {
    const fd = openSync(path, 'r');
    try {
      const size = fstatSync(fd).size;
      const c = new Cursor(fd, size, path);
      if (size < 24) throw new Error(`${path}: too short for a GGUF file (${size} bytes)`);
      const magic = c.u32();
      if (magic !== MAGIC) throw new Error(`${path}: not a GGUF file (magic ${magic.toString(16).padStart(8, '0')}, expected "GGUF")`);
      const version = c.u32();
      if (version === 1) throw new Error(`${path}: GGUF version 1 (32-bit counts, 2023) is not supported; convert it again with a current llama.cpp`);
      if (version !== 2 && version !== 3) {
        throw new Error(`${path}: GGUF version ${version} is not supported (2 and 3 are)${version > 0xffff ? '; a big-endian file?' : ''}`);
      }
      const nTensors = c.count('tensor count');
      const nKv = c.count('metadata count');
      const metadata = new Map<string, GgufValue>();
      for (let i = 0; i < nKv; i++) {
        const key = c.string(`metadata key ${i}`);
        const type = c.u32();
        try {
          metadata.set(key, readValue(c, type, key));
        } catch (e) {
          throw new Error(`${path}: ${(e as Error).message}`);
        }
      }
      const alignValue = metadata.get('general.alignment');
      const alignment = alignValue === undefined ? DEFAULT_ALIGNMENT : alignValue;
      if (typeof alignment !== 'number' || !Number.isInteger(alignment) || alignment <= 0 || alignment % 8 !== 0) {
        throw new Error(`${path}: general.alignment ${String(alignValue)} must be a positive multiple of 8`);
      }
      const infos: GgufTensorInfo[] = [];
      for (let i = 0; i < nTensors; i++) {
        const name = c.string(`tensor ${i} name`);
        const nDims = c.u32();
        if (nDims > 8) throw new Error(`${path}: tensor ${name}: ${nDims} dimensions`);
        const dims: number[] = [];
        for (let k = 0; k < nDims; k++) dims.push(c.count(`tensor ${name} dimension`));
        const type = c.u32();
        const offset = c.count(`tensor ${name} offset`);
        const elements = dims.reduce((a, b) => a * b, 1);
        const info = GGML_TYPES[type];
        if (!info) throw new Error(`${path}: tensor ${name} has an unknown GGML type id ${type}`);
        if ((dims[0] ?? 1) % info.blockSize !== 0) throw new Error(`${path}: tensor ${name}: its rows of ${dims[0]} values are not whole ${info.name} blocks of ${info.blockSize}`);
        const bytes = (elements / info.blockSize) * info.typeSize;
        infos.push({ name, dims, shape: [...dims].reverse(), type, typeName: info.name, offset, bytes, elements });
      }
      const dataStart = Math.ceil(c.pos / alignment) * alignment;
      const byName = new Map<string, GgufTensorInfo>();
      for (const t of infos) {
        if (byName.has(t.name)) throw new Error(`${path}: tensor ${t.name} appears twice`);
        if (dataStart + t.offset + t.bytes > size) {
          throw new Error(`${path}: tensor ${t.name} (${t.typeName} [${t.shape.join(', ')}], ${t.bytes} bytes at data offset ${t.offset}) runs past the end of the file (${size} bytes); truncated?`);
        }
        byName.set(t.name, t);
      }
      return new GgufFile(path, fd, size, version, metadata, infos, byName, alignment, dataStart);
    } catch (e) {
      closeSync(fd);
      throw e;
    }
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  tensor(name: string): GgufTensorInfo {
    const t = this.byName.get(name);
    if (!t) throw new Error(`${this.path}: no tensor ${name}`);
    return t;
  }

  /** The stored bytes of a tensor, or `length` of them from `from` (positioned reads). */
  readBytes(name: string, from = 0, length?: number): Uint8Array {
    if (this.closed) throw new Error(`${this.path}: read of ${name} after close`);
    const t = this.tensor(name);
    const n = length ?? t.bytes - from;
    if (from < 0 || from + n > t.bytes) throw new Error(`${this.path}: tensor ${name}: bytes [${from}, ${from + n}) outside its ${t.bytes}`);
    const buf = Buffer.allocUnsafe(n);
    let done = 0;
    const at = this.dataStart + t.offset + from;
    while (done < n) {
      const r = readSync(this.fd, buf, done, n - done, at + done);
      if (r === 0) throw new Error(`${this.path}: tensor ${name}: unexpected end of file at byte ${at + done}`);
      done += r;
    }
    return buf;
  }

  /**
   * A tensor's values as float32 (dequantized), row-major over `shape` (the file's element order). Reads at most
   * `chunkBytes` of stored data at a time, cut at block boundaries.
   */
  read(name: string, opts: { chunkBytes?: number } = {}): Float32Array {
    const t = this.tensor(name);
    const what = `${this.path}: tensor ${name}`;
    const info = assertDequantizable(t.type, what);
    const blockChunk = Math.max(1, Math.floor((opts.chunkBytes ?? CHUNK_BYTES) / info.typeSize)) * info.typeSize;
    const out = new Float32Array(t.elements);
    for (let off = 0; off < t.bytes; off += blockChunk) {
      const len = Math.min(blockChunk, t.bytes - off);
      dequantizeInto(t.type, this.readBytes(name, off, len), out, (off / info.typeSize) * info.blockSize, what);
    }
    return out;
  }

  close(): void {
    if (!this.closed) closeSync(this.fd);
    this.closed = true;
  }
}

/** A readable one-line description of a metadata value (long arrays shortened). */
export function describeGgufValue(v: GgufValue | undefined): string {
  if (v === undefined) return 'missing';
  if (Array.isArray(v)) return `array of ${v.length}`;
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? `${v.slice(0, 57)}…` : v);
  return String(v);
}

