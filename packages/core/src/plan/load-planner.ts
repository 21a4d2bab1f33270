import type { Box } from "../state/box.js";
import type { DType } from "../state/dtypes.js";
import type { CheckpointMetadata, ChunkMetadata } from "../format/metadata.js";
import type { KeyPath } from "../state/state-dict.js";

/** What one rank asks for: a key and the box of the global tensor it holds (the whole tensor unless sharded). */
export interface LoadRequest {
  readonly key: KeyPath;
  readonly kind: "tensor" | "bytes" | "value";
  /** For tensors: what the target holds, checked against the checkpoint. */
  readonly dtype?: DType;
  readonly shape?: readonly number[];
  readonly box?: Box;
}

/** Copy `region` (global coordinates) of a saved chunk into request `request`'s buffer. */
export interface ReadItem {
  readonly request: number;
  readonly chunk: ChunkMetadata;
  readonly region: Box;
}

export interface LoadPlan {
  readonly items: readonly ReadItem[];
  /** Requests the checkpoint does not hold, skipped because partial loading was asked for. */
  readonly missing: readonly number[];
}

/**
 * Decides which saved bytes fill which requested ones, as DCP's `LoadPlanner` does. Every
 * rank calls `createLoadPlan` with the checkpoint's metadata and its own requests; no
 * collective is needed. Throws `mismatch` naming the key, what was expected and what was
 * found, and `corrupt` when the saved chunks do not cover a requested box.
 */
export interface LoadPlanner {
  createLoadPlan(
    metadata: CheckpointMetadata,
    requests: readonly LoadRequest[],
    options: { readonly partial: boolean },
  ): LoadPlan;
}
