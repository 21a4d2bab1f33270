import {
  type DType,
  type DTypeArrays,
  type TypedArray,
  allocate,
  arrayConstructorFor,
  isDType,
  matchesArrayType,
  numel,
  validateShape,
} from "./dtypes.js";
import { CheckpointError, describeValue } from "../errors.js";
import type { ShardedTensor } from "./sharded-tensor.js";

/**
 * A key path: the keys from the state dict's root to a leaf. Strings are object keys,
 * numbers are array indices. Paths are stored as arrays so every key round-trips exactly,
 * whatever characters it holds; `displayKey` is only for messages.
 */
export type KeyPath = readonly (string | number)[];

export type JsonPrimitive = string | number | boolean | null;

/** A tensor held in host memory: a known dtype, a shape, and the TypedArray dtype travels in. */
export interface HostTensor<D extends DType = DType> {
  readonly dtype: D;
  readonly shape: readonly number[];
  readonly data: DTypeArrays[D];
}

/**
 * The part of a tfjs-core `Tensor` Cairn uses. `data()` is async because the values may
 * live on a device; nothing here assumes they are on the host.
 */
export interface TensorLike {
  readonly shape: readonly number[];
  readonly dtype: string;
  readonly isDisposed?: boolean;
  data(): Promise<ArrayLike<unknown> & ArrayBufferView>;
}

/** A tfjs `Variable`: loading assigns new values to it in place. */
export interface VariableLike extends TensorLike {
  assign(value: TensorLike): void;
}

/**
 * An object that saves as the state dict it returns and restores from one, like
 * `torch.distributed.checkpoint.stateful.Stateful`. On save Cairn calls `stateDict()` and
 * saves what it returns; on load it calls `stateDict()` for a target, fills it, then calls
 * `loadStateDict(filled)`.
 */
export interface Stateful {
  stateDict(): StateDict | Promise<StateDict>;
  loadStateDict(stateDict: StateDict): void | Promise<void>;
}

export type StateValue =
  | TensorLike
  | ShardedTensor
  | HostTensor
  | Uint8Array
  | JsonPrimitive
  | Stateful
  | StateDict
  | readonly StateValue[];

export interface StateDict {
  [key: string]: StateValue;
}

export function displayKey(path: KeyPath): string {
  return path.length === 0 ? "<root>" : path.join(".");
}

/**
 * Keys no state dict, metadata.json or user metadata may hold: assigned or merged into an
 * ordinary object, they reach its prototype (and through it every object of the process).
 */
const FORBIDDEN_KEYS: ReadonlySet<string> = new Set(["__proto__", "constructor", "prototype"]);

export function isForbiddenKey(key: string | number): boolean {
  return typeof key === "string" && FORBIDDEN_KEYS.has(key);
}

/** A stable string for a key path, for maps and comparisons (not for display). */
export function pathId(path: KeyPath): string {
  return JSON.stringify(path);
}

/** Makes a host tensor, checking that `data` is the right TypedArray with one element per shape entry. */
export function hostTensor<D extends DType>(dtype: D, shape: readonly number[], data?: DTypeArrays[D]): HostTensor<D> {
  const where = `hostTensor(${JSON.stringify(dtype)}, ${JSON.stringify(shape)})`;
  if (!isDType(dtype)) throw unsupportedDType(dtype, where);
  const dims = validateShape(shape, where);
  const values = data ?? (allocate(dtype, numel(dims)));
  checkHostData(dtype, dims, values, where);
  return { dtype, shape: [...dims], data: values };
}

export function unsupportedDType(dtype: unknown, where: string): CheckpointError {
  return new CheckpointError(
    "invalid_argument",
    `${where}: dtype ${JSON.stringify(dtype)} is not supported; use one of float16, bfloat16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool`,
  );
}

export function checkHostData(dtype: DType, shape: readonly number[], data: unknown, where: string): asserts data is TypedArray {
  if (!matchesArrayType(dtype, data)) {
    const got = ArrayBuffer.isView(data) ? data.constructor.name : describeValue(data);
    throw new CheckpointError(
      "invalid_argument",
      `${where}: ${dtype} data must be a ${expectedArrayName(dtype)}, got ${got}`,
    );
  }
  const expected = numel(shape);
  if (data.length !== expected) {
    throw new CheckpointError(
      "invalid_argument",
      `${where}: shape ${JSON.stringify(shape)} needs ${expected} elements but data has ${data.length}`,
    );
  }
}

function expectedArrayName(dtype: DType): string {
  const name = arrayConstructorFor(dtype).name;
  if (dtype === "float16" || dtype === "bfloat16") return `${name} of the raw 16-bit patterns`;
  if (dtype === "bool") return `${name} of 0 and 1`;
  return name;
}
