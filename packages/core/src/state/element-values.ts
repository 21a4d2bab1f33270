import { type DType, arrayConstructorFor, itemSize } from "./dtypes.js";

/** A float16's value from its 16 bits (IEEE 754 binary16: subnormals, ±Infinity and NaN included). */
export function float16ToNumber(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24;
  if (exponent === 0x1f) return fraction === 0 ? sign * Infinity : NaN;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}

/** A bfloat16's value from its 16 bits: the top half of a float32. */
export function bfloat16ToNumber(bits: number): number {
  BF16_BITS[0] = (bits & 0xffff) << 16;
  return BF16_VALUE[0]!;
}

const BF16_BITS = new Uint32Array(1);
const BF16_VALUE = new Float32Array(BF16_BITS.buffer);

/** Every 16-bit pattern's value, built on first use (512 KiB each): a lookup per element instead of arithmetic. */
const HALF_TABLES: Partial<Record<"float16" | "bfloat16", Float64Array>> = {};

function halfTable(dtype: "float16" | "bfloat16"): Float64Array {
  let table = HALF_TABLES[dtype];
  if (!table) {
    const decode = dtype === "float16" ? float16ToNumber : bfloat16ToNumber;
    table = new Float64Array(1 << 16);
    for (let bits = 0; bits < table.length; bits++) table[bits] = decode(bits);
    HALF_TABLES[dtype] = table;
  }
  return table;
}

/**
 * The elements of little-endian `bytes` of `dtype` as numbers, written into `out` (grown when too
 * small; pass the previous result back to reuse it). int64 and uint64 beyond 2^53 round to the
 * nearest double; bool is 0 or 1. Returns the array and how many of its elements were written.
 */
export function elementValues(
  dtype: DType,
  bytes: Uint8Array,
  out?: Float64Array,
): { readonly values: Float64Array; readonly count: number } {
  const size = itemSize(dtype);
  const count = Math.floor(bytes.byteLength / size);
  const values = out && out.length >= count ? out : new Float64Array(count);
  // A typed-array view needs its offset aligned to the element size; anything else is copied once.
  const aligned = bytes.byteOffset % size === 0 ? bytes : bytes.slice(0, count * size);
  const View = arrayConstructorFor(dtype);
  const source = new View(aligned.buffer, aligned.byteOffset, count);
  if (dtype === "float16" || dtype === "bfloat16") {
    const table = halfTable(dtype);
    for (let i = 0; i < count; i++) values[i] = table[source[i] as number]!;
  } else if (dtype === "int64" || dtype === "uint64") {
    for (let i = 0; i < count; i++) values[i] = Number(source[i] as bigint);
  } else if (dtype === "bool") {
    for (let i = 0; i < count; i++) values[i] = source[i] === 0 ? 0 : 1;
  } else {
    for (let i = 0; i < count; i++) values[i] = source[i] as number;
  }
  return { values, count };
}
