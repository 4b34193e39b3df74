/**
 * GGML tensor types as GGUF files store them, and their decoding to float32.
 *
 * A tensor is a sequence of blocks along its innermost dimension (ne[0]); a block of `blockSize` values takes
 * `typeSize` bytes. Plain types have blocks of one value (F32, F16, BF16). The quantized types, little-endian:
 *
 *   Q4_0  32 values, 18 B: d (f16), 16 B of nibbles: value j is low nibble of byte j, value j+16 the high nibble; x = (q - 8)·d
 *   Q4_1  32 values, 20 B: d, m (f16), 16 B of nibbles as Q4_0; x = q·d + m
 *   Q5_0  32 values, 22 B: d, qh (u32: bit j is the 5th bit of value j), nibbles as Q4_0; x = (q - 16)·d
 *   Q5_1  32 values, 24 B: d, m, qh, nibbles; x = q·d + m
 *   Q8_0  32 values, 34 B: d, 32 int8; x = q·d
 *   K-quants: 256-value super-blocks of 16 or 8 sub-blocks with their own scales:
 *   Q2_K  84 B: scales[16] (low nibble scale, high nibble min, one per 16 values), qs[64] (2 bits), d, dmin;
 *         x = d·sc·q - dmin·m
 *   Q3_K  110 B: hmask[32] (3rd bit, set = no offset), qs[64] (2 bits), scales[12] (16 six-bit scales, offset 32), d;
 *         x = d·(sc - 32)·(q - (hbit ? 0 : 4))
 *   Q4_K  144 B: d, dmin, scales[12] (8 six-bit scales and 8 six-bit mins), qs[128] (4 bits); x = d·sc·q - dmin·m
 *   Q5_K  176 B: as Q4_K plus qh[32] (5th bit of value l of sub-block s is bit s of qh[l]) before qs
 *   Q6_K  210 B: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8, one per 16 values), d; x = d·sc·(q - 32)
 *
 * The arithmetic is float32 step by step (Math.fround after each operation), in the order gguf-py's numpy code uses,
 * so the values are bit-identical to what `transformers` gets when it loads a GGUF file.
 */
import { halfTable } from './safetensors';

/** GGML type ids (ggml.h / gguf-py GGMLQuantizationType). */
export const GGML_TYPE = {
  F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q5_0: 6, Q5_1: 7, Q8_0: 8, Q8_1: 9, Q2_K: 10, Q3_K: 11, Q4_K: 12, Q5_K: 13, Q6_K: 14, Q8_K: 15,
  IQ2_XXS: 16, IQ2_XS: 17, IQ3_XXS: 18, IQ1_S: 19, IQ4_NL: 20, IQ3_S: 21, IQ2_S: 22, IQ4_XS: 23, I8: 24, I16: 25, I32: 26, I64: 27,
  F64: 28, IQ1_M: 29, BF16: 30, TQ1_0: 34, TQ2_0: 35, MXFP4: 39,
} as const;

/** Decodes `nBlocks` blocks from `src` into out[at …]. */
type Dequantizer = (src: Uint8Array, nBlocks: number, out: Float32Array, at: number) => void;

export interface GgmlTypeInfo {
  name: string;
  /** values per block */
  blockSize: number;
  /** bytes per block */
  typeSize: number;
  /** absent: the type is known (its size is), but not decoded here */
  dequantize?: Dequantizer;
}

const fr = Math.fround;

/** f16 bits → float, by the table safetensors decoding uses. */
const half = halfTable;

const u16 = (b: Uint8Array, o: number) => b[o]! | (b[o + 1]! << 8);
const i8 = (x: number) => (x << 24) >> 24;

const f32: Dequantizer = (src, n, out, at) => {
  const view = new DataView(src.buffer, src.byteOffset, src.byteLength);
  for (let i = 0; i < n; i++) out[at + i] = view.getFloat32(4 * i, true);
};

const f16: Dequantizer = (src, n, out, at) => {
  const h = half();
  for (let i = 0; i < n; i++) out[at + i] = h[u16(src, 2 * i)]!;
};

const bf16: Dequantizer = (src, n, out, at) => {
  const bits = new Uint32Array(out.buffer, out.byteOffset, out.length);
  for (let i = 0; i < n; i++) bits[at + i] = u16(src, 2 * i) << 16;
};

const q4_0: Dequantizer = (src, n, out, at) => {
  const h = half();
  for (let b = 0; b < n; b++) {
    const o = 18 * b;
    const d = h[u16(src, o)]!;
    const y = at + 32 * b;
    for (let j = 0; j < 16; j++) {
      const q = src[o + 2 + j]!;
      out[y + j] = d * ((q & 15) - 8);
      out[y + j + 16] = d * ((q >> 4) - 8);
    }
  }
};

const q4_1: Dequantizer = (src, n, out, at) => {
  const h = half();
  for (let b = 0; b < n; b++) {
    const o = 20 * b;
    const d = h[u16(src, o)]!;
    const m = h[u16(src, o + 2)]!;
    const y = at + 32 * b;
    for (let j = 0; j < 16; j++) {
      const q = src[o + 4 + j]!;
      out[y + j] = fr(d * (q & 15)) + m;
      out[y + j + 16] = fr(d * (q >> 4)) + m;
    }
  }
};

/** The 32 fifth bits of a Q5 block (u32 little-endian at o). */
const qhBits = (src: Uint8Array, o: number) => (src[o]! | (src[o + 1]! << 8) | (src[o + 2]! << 16) | (src[o + 3]! << 24)) >>> 0;

const q5_0: Dequantizer = (src, n, out, at) => {
  const h = half();
  for (let b = 0; b < n; b++) {
    const o = 22 * b;
    const d = h[u16(src, o)]!;
    const qh = qhBits(src, o + 2);
    const y = at + 32 * b;
    for (let j = 0; j < 16; j++) {
      const q = src[o + 6 + j]!;
      out[y + j] = d * (((q & 15) | (((qh >>> j) & 1) << 4)) - 16);
      out[y + j + 16] = d * (((q >> 4) | (((qh >>> (j + 16)) & 1) << 4)) - 16);
    }
  }
};

const q5_1: Dequantizer = (src, n, out, at) => {
  const h = half();
  for (let b = 0; b < n; b++) {
    const o = 24 * b;
    const d = h[u16(src, o)]!;
    const m = h[u16(src, o + 2)]!;
    const qh = qhBits(src, o + 4);
    const y = at + 32 * b;
    for (let j = 0; j < 16; j++) {
      const q = src[o + 8 + j]!;
      out[y + j] = fr(d * ((q & 15) | (((qh >>> j) & 1) << 4))) + m;
      out[y + j + 16] = fr(d * ((q >> 4) | (((qh >>> (j + 16)) & 1) << 4))) + m;
    }
  }
};

const q8_0: Dequantizer = (src, n, out, at) => {
  const h = half();
  for (let b = 0; b < n; b++) {
    const o = 34 * b;
    const d = h[u16(src, o)]!;
    const y = at + 32 * b;
    for (let j = 0; j < 32; j++) out[y + j] = d * i8(src[o + 2 + j]!);
  }
};

const q2_k: Dequantizer = (src, n, out, at) => {
  const h = half();
  for (let b = 0; b < n; b++) {
    const o = 84 * b;
    const qs = o + 16;
    const d = h[u16(src, o + 80)]!;
    const dmin = h[u16(src, o + 82)]!;
    const y = at + 256 * b;
    for (let v = 0; v < 256; v++) {
      const sc = src[o + (v >> 4)]!;
      const dl = fr(d * (sc & 15));
      const ml = fr(dmin * (sc >> 4));
      // value v: byte 32·(v / 128) + v % 32, bits 2·((v % 128) / 32)
      const q = (src[qs + 32 * (v >> 7) + (v & 31)]! >> (2 * ((v & 127) >> 5))) & 3;
      out[y + v] = fr(dl * q) - ml;
    }
  }
};

const q3_k: Dequantizer = (src, n, out, at) => {
  const h = half();
  const scales = new Float32Array(16);
  for (let b = 0; b < n; b++) {
    const o = 110 * b;
    const hm = o;
    const qs = o + 32;
    const sb = o + 96;
    const d = h[u16(src, o + 108)]!;
    for (let s = 0; s < 16; s++) {
      const low = (src[sb + (s & 7)]! >> (4 * (s >> 3))) & 15;
      const high = (src[sb + 8 + (s & 3)]! >> (2 * (s >> 2))) & 3;
      scales[s] = fr(d * ((low | (high << 4)) - 32));
    }
    const y = at + 256 * b;
    for (let v = 0; v < 256; v++) {
      const low = (src[qs + 32 * (v >> 7) + (v & 31)]! >> (2 * ((v & 127) >> 5))) & 3;
      const hbit = (src[hm + (v & 31)]! >> (v >> 5)) & 1;
      out[y + v] = scales[v >> 4]! * (low - (hbit ? 0 : 4));
    }
  }
};

/** The 6-bit scale and min of sub-block j (0…7) of a Q4_K/Q5_K block whose scale bytes start at s. */
function scaleMin(src: Uint8Array, s: number, j: number): [number, number] {
  if (j < 4) return [src[s + j]! & 63, src[s + j + 4]! & 63];
  return [(src[s + j + 4]! & 15) | ((src[s + j - 4]! >> 6) << 4), (src[s + j + 4]! >> 4) | ((src[s + j]! >> 6) << 4)];
}

const q4_k: Dequantizer = (src, n, out, at) => {
  const h = half();
  for (let b = 0; b < n; b++) {
    const o = 144 * b;
    const d = h[u16(src, o)]!;
    const dmin = h[u16(src, o + 2)]!;
    const y = at + 256 * b;
    for (let s = 0; s < 8; s++) {
      const [sc, m] = scaleMin(src, o + 4, s);
      const ds = fr(d * sc);
      const dm = fr(dmin * m);
      // sub-block s: 32 bytes at qs + 32·(s / 2), low nibbles for even s, high for odd
      const qs = o + 16 + 32 * (s >> 1);
      const shift = 4 * (s & 1);
      for (let l = 0; l < 32; l++) out[y + 32 * s + l] = fr(ds * ((src[qs + l]! >> shift) & 15)) - dm;
    }
  }
};

const q5_k: Dequantizer = (src, n, out, at) => {
  const h = half();
  for (let b = 0; b < n; b++) {
    const o = 176 * b;
    const d = h[u16(src, o)]!;
    const dmin = h[u16(src, o + 2)]!;
    const qh = o + 16;
    const y = at + 256 * b;
    for (let s = 0; s < 8; s++) {
      const [sc, m] = scaleMin(src, o + 4, s);
      const ds = fr(d * sc);
      const dm = fr(dmin * m);
      const qs = o + 48 + 32 * (s >> 1);
      const shift = 4 * (s & 1);
      for (let l = 0; l < 32; l++) {
        const q = ((src[qs + l]! >> shift) & 15) | (((src[qh + l]! >> s) & 1) << 4);
        out[y + 32 * s + l] = fr(ds * q) - dm;
      }
    }
  }
};

const q6_k: Dequantizer = (src, n, out, at) => {
  const h = half();
  const scales = new Float32Array(16);
  for (let b = 0; b < n; b++) {
    const o = 210 * b;
    const d = h[u16(src, o + 208)]!;
    for (let s = 0; s < 16; s++) scales[s] = fr(d * i8(src[o + 192 + s]!));
    const y = at + 256 * b;
    for (let v = 0; v < 256; v++) {
      // halves of 128 values: ql bytes 64·half + (v % 64), low nibble for v % 128 < 64; qh bytes 32·half + v % 32,
      // bits 2·((v % 128) / 32)
      const half128 = v >> 7;
      const w = v & 127;
      const ql = (src[o + 64 * half128 + (w & 63)]! >> (4 * (w >> 6))) & 15;
      const qh = (src[o + 128 + 32 * half128 + (w & 31)]! >> (2 * (w >> 5))) & 3;
      out[y + v] = scales[v >> 4]! * ((ql | (qh << 4)) - 32);
    }
  }
};

const QK_K = 256;

/** Every type a GGUF file may name, with its block geometry; `dequantize` where it is decoded here. */
export const GGML_TYPES: Readonly<Record<number, GgmlTypeInfo>> = {
  [GGML_TYPE.F32]: { name: 'F32', blockSize: 1, typeSize: 4, dequantize: f32 },
  [GGML_TYPE.F16]: { name: 'F16', blockSize: 1, typeSize: 2, dequantize: f16 },
  [GGML_TYPE.BF16]: { name: 'BF16', blockSize: 1, typeSize: 2, dequantize: bf16 },
  [GGML_TYPE.Q4_0]: { name: 'Q4_0', blockSize: 32, typeSize: 18, dequantize: q4_0 },
  [GGML_TYPE.Q4_1]: { name: 'Q4_1', blockSize: 32, typeSize: 20, dequantize: q4_1 },
  [GGML_TYPE.Q5_0]: { name: 'Q5_0', blockSize: 32, typeSize: 22, dequantize: q5_0 },
  [GGML_TYPE.Q5_1]: { name: 'Q5_1', blockSize: 32, typeSize: 24, dequantize: q5_1 },
  [GGML_TYPE.Q8_0]: { name: 'Q8_0', blockSize: 32, typeSize: 34, dequantize: q8_0 },
  [GGML_TYPE.Q8_1]: { name: 'Q8_1', blockSize: 32, typeSize: 40 },
  [GGML_TYPE.Q2_K]: { name: 'Q2_K', blockSize: QK_K, typeSize: 84, dequantize: q2_k },
  [GGML_TYPE.Q3_K]: { name: 'Q3_K', blockSize: QK_K, typeSize: 110, dequantize: q3_k },
  [GGML_TYPE.Q4_K]: { name: 'Q4_K', blockSize: QK_K, typeSize: 144, dequantize: q4_k },
  [GGML_TYPE.Q5_K]: { name: 'Q5_K', blockSize: QK_K, typeSize: 176, dequantize: q5_k },
  [GGML_TYPE.Q6_K]: { name: 'Q6_K', blockSize: QK_K, typeSize: 210, dequantize: q6_k },
  [GGML_TYPE.Q8_K]: { name: 'Q8_K', blockSize: QK_K, typeSize: 292 },
  [GGML_TYPE.IQ2_XXS]: { name: 'IQ2_XXS', blockSize: QK_K, typeSize: 66 },
  [GGML_TYPE.IQ2_XS]: { name: 'IQ2_XS', blockSize: QK_K, typeSize: 74 },
  [GGML_TYPE.IQ3_XXS]: { name: 'IQ3_XXS', blockSize: QK_K, typeSize: 98 },
  [GGML_TYPE.IQ1_S]: { name: 'IQ1_S', blockSize: QK_K, typeSize: 50 },
  [GGML_TYPE.IQ4_NL]: { name: 'IQ4_NL', blockSize: 32, typeSize: 18 },
  [GGML_TYPE.IQ3_S]: { name: 'IQ3_S', blockSize: QK_K, typeSize: 110 },
  [GGML_TYPE.IQ2_S]: { name: 'IQ2_S', blockSize: QK_K, typeSize: 82 },
  [GGML_TYPE.IQ4_XS]: { name: 'IQ4_XS', blockSize: QK_K, typeSize: 136 },
  [GGML_TYPE.I8]: { name: 'I8', blockSize: 1, typeSize: 1 },
  [GGML_TYPE.I16]: { name: 'I16', blockSize: 1, typeSize: 2 },
  [GGML_TYPE.I32]: { name: 'I32', blockSize: 1, typeSize: 4 },
  [GGML_TYPE.I64]: { name: 'I64', blockSize: 1, typeSize: 8 },
  [GGML_TYPE.F64]: { name: 'F64', blockSize: 1, typeSize: 8 },
  [GGML_TYPE.IQ1_M]: { name: 'IQ1_M', blockSize: QK_K, typeSize: 56 },
  [GGML_TYPE.TQ1_0]: { name: 'TQ1_0', blockSize: QK_K, typeSize: 54 },
  [GGML_TYPE.TQ2_0]: { name: 'TQ2_0', blockSize: QK_K, typeSize: 66 },
  [GGML_TYPE.MXFP4]: { name: 'MXFP4', blockSize: 32, typeSize: 17 },
};

/** The names of the types decoded here, for messages. */
export const DEQUANTIZED_TYPES: readonly string[] = Object.values(GGML_TYPES).filter((t) => t.dequantize).map((t) => t.name);

/** A type's name ("Q4_K"), or "type N" for an id this reader does not know. */
export function ggmlTypeName(type: number): string {
  return GGML_TYPES[type]?.name ?? `type ${type}`;
}

/** Throws, naming `what` (the tensor) and the type, unless `type` is decoded here. */
export function assertDequantizable(type: number, what = 'tensor'): GgmlTypeInfo & { dequantize: Dequantizer } {
  const info = GGML_TYPES[type];
  if (!info?.dequantize) {
    throw new Error(`${what}: GGML type ${ggmlTypeName(type)} cannot be dequantized here (supported: ${DEQUANTIZED_TYPES.join(', ')})`);
  }
  return info as GgmlTypeInfo & { dequantize: Dequantizer };
}

/**
 * Decodes whole blocks of `type` from `src` (its length a multiple of the block's bytes) into out[at …]. Throws for
 * a type that is not decoded here; `what` names the tensor in that message.
 */
export function dequantizeInto(type: number, src: Uint8Array, out: Float32Array, at: number, what = 'tensor'): void {
  const info = assertDequantizable(type, what);
  if (src.byteLength % info.typeSize !== 0) throw new Error(`${what}: ${src.byteLength} bytes is not a whole number of ${info.name} blocks (${info.typeSize} bytes each)`);
  const nBlocks = src.byteLength / info.typeSize;
  if (at + nBlocks * info.blockSize > out.length) throw new Error(`${what}: ${nBlocks * info.blockSize} values do not fit the output at ${at}`);
  info.dequantize(src, nBlocks, out, at);
}

/** Decodes `src` (whole blocks of `type`) into a new Float32Array. */
export function dequantize(type: number, src: Uint8Array, what = 'tensor'): Float32Array {
  const info = GGML_TYPES[type];
  const out = new Float32Array(info ? (src.byteLength / info.typeSize) * info.blockSize : 0);
  dequantizeInto(type, src, out, 0, what);
  return out;
}
