import type { Box } from "./box.js";
import { type DType, type TypedArray, bytesOf } from "./dtypes.js";
import { CheckpointError } from "../errors.js";
import { type JsonPrimitive, type KeyPath, displayKey } from "./state-dict.js";
import { type HostTensor, type TensorLike, checkHostData } from "./tensors.js";

/**
 * A leaf of a state dict, classified. Containers and `Stateful`s never appear here. A tensor's
 * `shape` is the shape of its data; a shard of a sharded tensor also says where it lies in
 * the global tensor (`shard`), and a sharded tensor is one leaf per shard, all with its key.
 */
export type Leaf =
  | {
      readonly kind: "tensor";
      readonly path: KeyPath;
      readonly dtype: DType;
      readonly shape: readonly number[];
      readonly source: TensorSource;
      readonly shard?: ShardPlacement;
      readonly staged?: StagedPlace;
      readonly stagedSums?: StagedSums;
    }
  | {
      readonly kind: "bytes";
      readonly path: KeyPath;
      readonly data: Uint8Array;
      readonly staged?: StagedPlace;
      readonly stagedSums?: StagedSums;
    }
  | { readonly kind: "value"; readonly path: KeyPath; readonly value: JsonPrimitive | EmptyContainer };

/**
 * Set by background staging on a leaf it copied into the staged memory of a planned data file
 * (its header, then its items back to back): the leaf is item `index` of the `count` items of
 * that file, whose memory is `segment` of that staging.
 */
export interface StagedPlace {
  readonly segment: number;
  readonly index: number;
  readonly count: number;
}

/**
 * The block CRC32Cs of a staged copy, computed once it was staged: the write computes them again
 * from the bytes it writes, and a difference means the copy changed in between.
 */
export interface StagedSums {
  readonly blockSize: number;
  readonly sums: readonly number[];
}

/** Where a shard lies in its global tensor. */
export interface ShardPlacement {
  readonly globalShape: readonly number[];
  readonly offsets: readonly number[];
}

/** The global shape of a tensor leaf and the box of it that the leaf's data holds. */
export function leafBox(leaf: Extract<Leaf, { kind: "tensor" }>): { globalShape: readonly number[]; box: Box } {
  if (leaf.shard)
    return { globalShape: leaf.shard.globalShape, box: { offsets: leaf.shard.offsets, sizes: leaf.shape } };
  return { globalShape: leaf.shape, box: { offsets: leaf.shape.map(() => 0), sizes: leaf.shape } };
}

/** An empty object or array has no leaves, so it is kept as a value to round-trip. */
export type EmptyContainer = Record<string, never> | readonly never[];

export type TensorSource =
  { readonly kind: "host"; readonly tensor: HostTensor } | { readonly kind: "tfjs"; readonly tensor: TensorLike };

/** tfjs dtypes that have a format v1 equivalent. */
const TFJS_DTYPES: ReadonlyMap<string, DType> = new Map([
  ["float32", "float32"],
  ["int32", "int32"],
  ["bool", "bool"],
]);

/** An `invalid_argument` error naming the state dict key. */
export function invalid(path: KeyPath, message: string): CheckpointError {
  return new CheckpointError("invalid_argument", `state dict key ${displayKey(path)}: ${message}`, {
    context: { key: displayKey(path) },
  });
}

/** "state dict key …", built only when a check fails. */
export function whereKey(path: KeyPath): () => string {
  return () => `state dict key ${displayKey(path)}`;
}

export function tfjsDType(tensor: TensorLike, path: KeyPath): DType {
  const dtype = TFJS_DTYPES.get(tensor.dtype);
  if (dtype === undefined) {
    throw invalid(
      path,
      `tfjs tensors of dtype ${JSON.stringify(tensor.dtype)} cannot be checkpointed; use float32, int32 or bool`,
    );
  }
  return dtype;
}

/** Where staging put a leaf's bytes in a planned file's memory, if it did. */
export function stagedPlaceOf(leaf: Leaf | undefined): StagedPlace | undefined {
  return leaf === undefined || leaf.kind === "value" ? undefined : leaf.staged;
}

/** What a leaf holds in host memory: a blob, or a host tensor's data; nothing for tfjs tensors and values. */
export function hostDataOf(leaf: Leaf): ArrayBufferView | undefined {
  if (leaf.kind === "bytes") return leaf.data;
  return leaf.kind === "tensor" && leaf.source.kind === "host" ? leaf.source.tensor.data : undefined;
}

/**
 * The bytes of a tensor leaf, read through the tfjs `data()` path for tfjs tensors (the values
 * may be on a device). Host tensors are returned as a view, without copying.
 */
export async function tensorBytes(leaf: Extract<Leaf, { kind: "tensor" }>): Promise<Uint8Array> {
  const { source } = leaf;
  if (source.kind === "host") return bytesOf(source.tensor.data);
  if (source.tensor.isDisposed === true) throw disposedBeforeSaved(leaf.path);
  let data: ArrayBufferView;
  try {
    data = await source.tensor.data();
  } catch (cause) {
    throw readFailed(leaf.path, cause);
  }
  checkHostData(leaf.dtype, leaf.shape, data, whereKey(leaf.path));
  return bytesOf(data as TypedArray);
}

export function disposedBeforeSaved(path: KeyPath): CheckpointError {
  return invalid(path, "the tfjs tensor was disposed before it was saved");
}

/** The error for a tfjs tensor whose `data()` failed. */
export function readFailed(path: KeyPath, cause: unknown): CheckpointError {
  return new CheckpointError(
    "invalid_argument",
    `state dict key ${displayKey(path)}: reading the tfjs tensor failed: ${(cause as Error).message}`,
    { cause, context: { key: displayKey(path) } },
  );
}
