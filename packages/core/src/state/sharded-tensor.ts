import { type Box, intersectBoxes } from "./box.js";
import { type DType, isDType, numel, unsupportedDType, validateShape } from "./dtypes.js";
import { CheckpointError } from "../errors.js";
import { type HostTensor, type TensorLike } from "./tensors.js";

/** Marks a sharded tensor; `Symbol.for` so two copies of this package still recognise each other's. */
const SHARDED_TENSOR: unique symbol = Symbol.for("@cairn/core.ShardedTensor");

/** One piece of a sharded tensor that this rank holds: where it starts in the global tensor, and its values. */
export interface Shard {
  /** Start of the shard in each dimension of the global shape; its extent is `tensor.shape`. */
  readonly offsets: readonly number[];
  /** A host tensor or a tfjs tensor (a `Variable` is assigned in place on load). */
  readonly tensor: HostTensor | TensorLike;
}

/**
 * A tensor of global shape `shape` of which this rank holds `shards`, like DCP's
 * `ShardedTensor`/`DTensor` with its local chunks. Any layout is allowed: rows, columns,
 * blocks, uneven splits; ranks may hold the same shard (it is written once). Together the
 * ranks' shards must cover the tensor exactly once, which the save checks.
 *
 * On load a sharded tensor asks for exactly its shards' boxes, whatever sharding the
 * checkpoint was saved with. Host shards are filled in place; an immutable tfjs shard is
 * replaced in `shards`.
 */
export interface ShardedTensor {
  readonly [SHARDED_TENSOR]: true;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly shards: Shard[];
}

export function isShardedTensor(value: unknown): value is ShardedTensor {
  return typeof value === "object" && value !== null && (value as Partial<ShardedTensor>)[SHARDED_TENSOR] === true;
}

/**
 * Makes a sharded tensor, checking that every shard lies inside `shape` and that this rank's
 * shards do not overlap. Shard tensors are checked (dtype, data size) when the state dict is
 * saved or loaded.
 */
export function shardedTensor(dtype: DType, shape: readonly number[], shards: readonly Shard[]): ShardedTensor {
  const where = `shardedTensor(${JSON.stringify(dtype)}, ${JSON.stringify(shape)})`;
  if (!isDType(dtype)) throw unsupportedDType(dtype, where);
  const global = validateShape(shape, where);
  if (!Array.isArray(shards))
    throw new CheckpointError("invalid_argument", `${where}: shards must be an array of { offsets, tensor }`);
  const sharded: ShardedTensor = { [SHARDED_TENSOR]: true, dtype, shape: [...global], shards: [...shards] };
  shardBoxes(sharded, where);
  return sharded;
}

/** The boxes of a sharded tensor's shards, checked against the global shape and each other. */
export function shardBoxes(sharded: ShardedTensor, where: string): Box[] {
  const rank = sharded.shape.length;
  const boxes = sharded.shards.map((shard, i): Box => {
    const at = `${where}, shard ${i}`;
    if (typeof shard !== "object" || shard === null || !("tensor" in shard)) {
      throw new CheckpointError("invalid_argument", `${at}: a shard must be { offsets, tensor }`);
    }
    const offsets = validateShape(shard.offsets, `${at} offsets`);
    const sizes = validateShape((shard.tensor as Partial<TensorLike> | null)?.shape, `${at} tensor`);
    if (offsets.length !== rank || sizes.length !== rank) {
      throw new CheckpointError(
        "invalid_argument",
        `${at}: offsets ${JSON.stringify(offsets)} and shard shape ${JSON.stringify(sizes)} must both have ${rank} dimensions, like the global shape`,
      );
    }
    sizes.forEach((size, d) => {
      if (offsets[d]! + size > sharded.shape[d]!) {
        throw new CheckpointError(
          "invalid_argument",
          `${at}: the shard at ${JSON.stringify(offsets)} of shape ${JSON.stringify(sizes)} reaches past the global shape ${JSON.stringify(sharded.shape)} in dimension ${d}`,
        );
      }
    });
    return { offsets, sizes };
  });
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const overlap = intersectBoxes(boxes[i]!, boxes[j]!);
      if (overlap && numel(overlap.sizes) > 0) {
        throw new CheckpointError(
          "invalid_argument",
          `${where}: shards ${i} and ${j} overlap; a rank's shards must be disjoint`,
        );
      }
    }
  }
  return boxes;
}
