import {
  type DType,
  type DTypeArrays,
  type TypedArray,
  allocate,
  arrayConstructorFor,
  isDType,
  matchesArrayType,
  numel,
  unsupportedDType,
  validateShape,
  type Where,
  whereText,
} from "./dtypes.js";
import { CheckpointError, describeValue } from "../errors.js";

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

/** Makes a host tensor, checking that `data` is the right TypedArray with one element per shape entry. */
export function hostTensor<D extends DType>(dtype: D, shape: readonly number[], data?: DTypeArrays[D]): HostTensor<D> {
  const where = `hostTensor(${JSON.stringify(dtype)}, ${JSON.stringify(shape)})`;
  if (!isDType(dtype)) throw unsupportedDType(dtype, where);
  const dims = validateShape(shape, where);
  const values = data ?? allocate(dtype, numel(dims));
  checkHostData(dtype, dims, values, where);
  return { dtype, shape: [...dims], data: values };
}

export function checkHostData(
  dtype: DType,
  shape: readonly number[],
  data: unknown,
  where: Where,
): asserts data is TypedArray {
  if (!matchesArrayType(dtype, data)) {
    const got = ArrayBuffer.isView(data) ? data.constructor.name : describeValue(data);
    throw new CheckpointError(
      "invalid_argument",
      `${whereText(where)}: ${dtype} data must be a ${expectedArrayName(dtype)}, got ${got}`,
    );
  }
  const expected = numel(shape);
  if (data.length !== expected) {
    throw new CheckpointError(
      "invalid_argument",
      `${whereText(where)}: shape ${JSON.stringify(shape)} needs ${expected} elements but data has ${data.length}`,
    );
  }
}

function expectedArrayName(dtype: DType): string {
  const name = arrayConstructorFor(dtype).name;
  if (dtype === "float16" || dtype === "bfloat16") return `${name} of the raw 16-bit patterns`;
  if (dtype === "bool") return `${name} of 0 and 1`;
  return name;
}
