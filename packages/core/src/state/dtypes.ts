import { CheckpointError } from "../errors.js";

/**
 * The element types of format v1. Node 20 has no Float16Array: float16 and bfloat16 travel
 * as raw bits in a Uint16Array; int64/uint64 as BigInt64Array/BigUint64Array; bool as a
 * Uint8Array of 0/1.
 */
export type DType =
  | "float16"
  | "bfloat16"
  | "float32"
  | "float64"
  | "int8"
  | "int16"
  | "int32"
  | "int64"
  | "uint8"
  | "uint16"
  | "uint32"
  | "uint64"
  | "bool";

export interface DTypeArrays {
  float16: Uint16Array;
  bfloat16: Uint16Array;
  float32: Float32Array;
  float64: Float64Array;
  int8: Int8Array;
  int16: Int16Array;
  int32: Int32Array;
  int64: BigInt64Array;
  uint8: Uint8Array;
  uint16: Uint16Array;
  uint32: Uint32Array;
  uint64: BigUint64Array;
  bool: Uint8Array;
}

export type TypedArray = DTypeArrays[DType];

type TypedArrayConstructor = {
  new (length: number): TypedArray;
  new (buffer: ArrayBufferLike, byteOffset: number, length: number): TypedArray;
  readonly BYTES_PER_ELEMENT: number;
  readonly name: string;
};

interface DTypeInfo {
  readonly itemSize: number;
  /** The dtype's name in a safetensors header. */
  readonly safetensors: string;
  /** numpy's dtype string for reading the raw little-endian bytes (see docs/format.md). */
  readonly numpy: string;
  readonly array: TypedArrayConstructor;
}

const DTYPES: Readonly<Record<DType, DTypeInfo>> = {
  float16: { itemSize: 2, safetensors: "F16", numpy: "<f2", array: Uint16Array },
  bfloat16: { itemSize: 2, safetensors: "BF16", numpy: "<u2", array: Uint16Array },
  float32: { itemSize: 4, safetensors: "F32", numpy: "<f4", array: Float32Array },
  float64: { itemSize: 8, safetensors: "F64", numpy: "<f8", array: Float64Array },
  int8: { itemSize: 1, safetensors: "I8", numpy: "<i1", array: Int8Array },
  int16: { itemSize: 2, safetensors: "I16", numpy: "<i2", array: Int16Array },
  int32: { itemSize: 4, safetensors: "I32", numpy: "<i4", array: Int32Array },
  int64: { itemSize: 8, safetensors: "I64", numpy: "<i8", array: BigInt64Array },
  uint8: { itemSize: 1, safetensors: "U8", numpy: "<u1", array: Uint8Array },
  uint16: { itemSize: 2, safetensors: "U16", numpy: "<u2", array: Uint16Array },
  uint32: { itemSize: 4, safetensors: "U32", numpy: "<u4", array: Uint32Array },
  uint64: { itemSize: 8, safetensors: "U64", numpy: "<u8", array: BigUint64Array },
  bool: { itemSize: 1, safetensors: "BOOL", numpy: "|b1", array: Uint8Array },
};

export const DTYPE_NAMES: readonly DType[] = Object.keys(DTYPES) as DType[];

export function isDType(value: unknown): value is DType {
  return typeof value === "string" && Object.hasOwn(DTYPES, value);
}

function info(dtype: DType): DTypeInfo {
  return DTYPES[dtype];
}

export function itemSize(dtype: DType): number {
  return info(dtype).itemSize;
}

export function safetensorsDType(dtype: DType): string {
  return info(dtype).safetensors;
}

export function numpyDType(dtype: DType): string {
  return info(dtype).numpy;
}

/** The TypedArray class that holds `dtype`'s elements on the host. */
export function arrayConstructorFor(dtype: DType): TypedArrayConstructor {
  return info(dtype).array;
}

export function allocate<D extends DType>(dtype: D, length: number): DTypeArrays[D] {
  return new (info(dtype).array)(length) as DTypeArrays[D];
}

/** Whether `data` is the TypedArray class `dtype` travels in (a Uint8Array is not a Uint8ClampedArray). */
export function matchesArrayType(dtype: DType, data: unknown): data is TypedArray {
  return ArrayBuffer.isView(data) && data.constructor === info(dtype).array;
}

export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

export function byteSize(dtype: DType, shape: readonly number[]): number {
  return numel(shape) * itemSize(dtype);
}

export function validateShape(shape: unknown, where: Where): readonly number[] {
  // A copy: the caller may change its array in place once a background save has staged.
  if (Array.isArray(shape)) shape = shape.slice();
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    throw new CheckpointError(
      "invalid_argument",
      `${whereText(where)}: shape must be an array of non-negative integers, got ${JSON.stringify(shape)}`,
    );
  }
  return shape as number[];
}

/** Where a checked value came from, for messages: text, or a function making it, so a check that passes builds no string. */
export type Where = string | (() => string);

export function whereText(where: Where): string {
  return typeof where === "string" ? where : where();
}

/** The bytes of a TypedArray, without copying. */
export function bytesOf(data: ArrayBufferView): Uint8Array {
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** The error for a dtype outside format v1's list. */
export function unsupportedDType(dtype: unknown, where: Where): CheckpointError {
  return new CheckpointError(
    "invalid_argument",
    `${whereText(where)}: dtype ${JSON.stringify(dtype)} is not supported; use one of float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool`,
  );
}
