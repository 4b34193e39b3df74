/**
 * The safetensors format: 8-byte little-endian header length N, N bytes of JSON header
 * ({name: {dtype, shape, data_offsets: [begin, end]}, __metadata__?: {string: string}}), then the raw little-endian data.
 * Reading decodes F32, F16 and BF16 to Float32Array; writing produces F32 (tensors sorted by name, header padded with
 * spaces to a multiple of 8, so the same weights always give the same bytes).
 */

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

interface HeaderEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

/** IEEE half → float. */
export function f16ToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

function decode(dtype: string, bytes: Uint8Array, count: number, name: string): Float32Array {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(count);
  const width = dtype === 'F32' ? 4 : dtype === 'F16' || dtype === 'BF16' ? 2 : 0;
  if (width === 0) throw new Error(`safetensors: tensor ${name} has unsupported dtype ${dtype} (F32, F16, BF16 are read)`);
  if (bytes.byteLength !== count * width) throw new Error(`safetensors: tensor ${name} has ${bytes.byteLength} bytes, expected ${count * width}`);
  if (dtype === 'F32') for (let i = 0; i < count; i++) out[i] = view.getFloat32(4 * i, true);
  else if (dtype === 'F16') for (let i = 0; i < count; i++) out[i] = f16ToF32(view.getUint16(2 * i, true));
  else {
    const u32 = new Uint32Array(out.buffer);
    for (let i = 0; i < count; i++) u32[i] = view.getUint16(2 * i, true) << 16;
  }
  return out;
}

/** Only the header (names, dtypes, shapes), e.g. to find tensors without decoding them. */
export function readSafetensorsHeader(buf: Uint8Array): { header: Record<string, HeaderEntry>; metadata?: Record<string, string>; dataStart: number } {
  if (buf.byteLength < 8) throw new Error('safetensors: file too short');
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const n = Number(view.getBigUint64(0, true));
  if (8 + n > buf.byteLength) throw new Error('safetensors: header length exceeds the file');
  const json = JSON.parse(new TextDecoder().decode(buf.subarray(8, 8 + n))) as Record<string, unknown>;
  const { __metadata__: metadata, ...header } = json;
  return { header: header as Record<string, HeaderEntry>, metadata: metadata as Record<string, string> | undefined, dataStart: 8 + n };
}

export function parseSafetensors(buf: Uint8Array): SafetensorsFile {
  const { header, metadata, dataStart } = readSafetensorsHeader(buf);
  const tensors = new Map<string, SafeTensor>();
  for (const [name, e] of Object.entries(header)) {
    const count = e.shape.reduce((a, b) => a * b, 1);
    const [begin, end] = e.data_offsets;
    if (dataStart + end > buf.byteLength || begin > end) throw new Error(`safetensors: tensor ${name} lies outside the file`);
    tensors.set(name, { shape: e.shape, dtype: e.dtype, data: decode(e.dtype, buf.subarray(dataStart + begin, dataStart + end), count, name) });
  }
  return metadata ? { tensors, metadata } : { tensors };
}

/** F32 safetensors bytes. */
export function serializeSafetensors(tensors: Map<string, { shape: number[]; data: Float32Array }>, metadata?: Record<string, string>): Uint8Array {
  const names = [...tensors.keys()].sort();
  const header: Record<string, unknown> = {};
  if (metadata) header.__metadata__ = metadata;
  let offset = 0;
  for (const name of names) {
    const t = tensors.get(name)!;
    const count = t.shape.reduce((a, b) => a * b, 1);
    if (count !== t.data.length) throw new Error(`safetensors: tensor ${name} has ${t.data.length} values for shape [${t.shape.join(', ')}]`);
    header[name] = { dtype: 'F32', shape: t.shape, data_offsets: [offset, offset + 4 * count] };
    offset += 4 * count;
  }
  let json = JSON.stringify(header);
  const pad = (8 - (Buffer.byteLength(json) % 8)) % 8;
  json += ' '.repeat(pad);
  const headerBytes = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + headerBytes.byteLength + offset);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(headerBytes.byteLength), true);
  out.set(headerBytes, 8);
  let pos = 8 + headerBytes.byteLength;
  for (const name of names) {
    const data = tensors.get(name)!.data;
    for (let i = 0; i < data.length; i++, pos += 4) view.setFloat32(pos, data[i]!, true);
  }
  return out;
}
