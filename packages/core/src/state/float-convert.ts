import { CheckpointError } from "../errors.js";
import { type DType, itemSize } from "./dtypes.js";

/** The floating dtypes, which `convertFloats` converts between (integers and bools are never converted). */
export const FLOAT_DTYPES: readonly DType[] = ["float16", "bfloat16", "float32", "float64"];

export function isFloatDType(dtype: DType): boolean {
  return FLOAT_DTYPES.includes(dtype);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

function bitsOf(value: number): number {
  f32[0] = value;
  return u32[0]!;
}

function fromBits(bits: number): number {
  u32[0] = bits;
  return f32[0]!;
}

function isNaNBits(bits: number): boolean {
  return (bits & 0x7fffffff) >>> 0 > 0x7f800000;
}

/** float32 bits → bfloat16 bits, rounding to nearest even; NaN becomes 0x7FC0 (torch's `round_to_nearest_even`). */
function bfloat16Bits(bits: number): number {
  if (isNaNBits(bits)) return 0x7fc0;
  return ((bits + (((bits >>> 16) & 1) + 0x7fff)) >>> 16) & 0xffff;
}

/**
 * float32 bits → IEEE half bits, rounding to nearest even, subnormals and overflow to infinity
 * included; NaN becomes 0x7E00 with its sign. The FP16 library's algorithm, which torch uses:
 * adding a power of two makes float32 arithmetic do the rounding (`fround` of a sum or product
 * of two float32 values is exactly the float32 result: double has over twice the bits).
 */
function halfBits(w: number): number {
  const base = Math.fround(Math.fround(fromBits(w & 0x7fffffff) * 2 ** 112) * 2 ** -110);
  const shl1 = (w * 2) >>> 0;
  const sign = (w & 0x80000000) >>> 16;
  let bias = (shl1 & 0xff000000) >>> 0;
  if (bias < 0x71000000) bias = 0x71000000;
  const rounded = bitsOf(Math.fround(fromBits(((bias >>> 1) + 0x07800000) >>> 0) + base));
  const nonsign = ((rounded >>> 13) & 0x7c00) + (rounded & 0x0fff);
  return sign | (shl1 > 0xff000000 ? 0x7e00 : nonsign);
}

/** IEEE half bits → float32 bits (exact; NaN keeps its sign and payload). */
function halfToFloatBits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exponent = (h >>> 10) & 0x1f;
  const mantissa = h & 0x3ff;
  if (exponent === 0x1f) return (sign | 0x7f800000 | (mantissa << 13)) >>> 0;
  const magnitude = exponent === 0 ? mantissa * 2 ** -24 : (1 + mantissa / 1024) * 2 ** (exponent - 15);
  return (sign | bitsOf(magnitude)) >>> 0;
}

/** float64 → float32 bits, rounding to nearest even as a C cast does; a NaN keeps its sign and the top of its payload. */
function doubleToFloatBits(view: DataView, at: number): number {
  const value = view.getFloat64(at, true);
  if (!Number.isNaN(value)) return bitsOf(Math.fround(value));
  const high = view.getUint32(at + 4, true);
  const low = view.getUint32(at, true);
  return ((high & 0x80000000) | 0x7fc00000 | ((high & 0xfffff) << 3) | (low >>> 29)) >>> 0;
}

function notFloat(dtype: DType): CheckpointError {
  return new CheckpointError(
    "invalid_argument",
    `convertFloats converts between ${FLOAT_DTYPES.join(", ")}, not ${dtype}`,
  );
}

/**
 * Elements of one floating dtype as another, little-endian in and out: what an export asked for
 * `bfloat16` writes. Values go through float32, as torch's `Tensor.to` does for the half types
 * (one rounding to nearest even per narrowing; widening is exact), so the bits are torch's,
 * NaN and infinities included. Throws `invalid_argument` for a dtype that is not floating.
 */
export function convertFloats(bytes: Uint8Array, from: DType, to: DType): Uint8Array {
  if (!isFloatDType(from)) throw notFloat(from);
  if (!isFloatDType(to)) throw notFloat(to);
  if (from === to) return bytes;
  const n = bytes.byteLength / itemSize(from);
  const input = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Uint8Array(n * itemSize(to));
  const output = new DataView(out.buffer);
  for (let i = 0; i < n; i++) {
    const bits =
      from === "float32"
        ? input.getUint32(i * 4, true)
        : from === "bfloat16"
          ? (input.getUint16(i * 2, true) << 16) >>> 0
          : from === "float16"
            ? halfToFloatBits(input.getUint16(i * 2, true))
            : doubleToFloatBits(input, i * 8);
    switch (to) {
      case "float32":
        output.setUint32(i * 4, bits, true);
        break;
      case "bfloat16":
        output.setUint16(i * 2, bfloat16Bits(bits), true);
        break;
      case "float16":
        output.setUint16(i * 2, halfBits(bits), true);
        break;
      default:
        if (isNaNBits(bits)) {
          // The payload shifted into place, as a widening conversion keeps it.
          output.setUint32(i * 8 + 4, ((bits & 0x80000000) | 0x7ff00000 | ((bits & 0x7fffff) >>> 3)) >>> 0, true);
          output.setUint32(i * 8, (bits << 29) >>> 0, true);
        } else {
          output.setFloat64(i * 8, fromBits(bits), true);
        }
    }
  }
  return out;
}
