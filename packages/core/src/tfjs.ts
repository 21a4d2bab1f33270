import { CheckpointError } from "./errors.js";
import { importOptional } from "./import-optional.js";
import type { TensorLike } from "./state-dict.js";

/** The part of the `@tensorflow/tfjs-core` module Cairn calls, to make tensors when loading into tfjs targets. */
export interface TfjsModule {
  tensor(values: ArrayBufferView, shape: number[], dtype: string): TensorLike & { dispose(): void };
}

let cached: TfjsModule | undefined;

/**
 * `@tensorflow/tfjs-core`, imported on first use: only loads into tfjs tensors need it, so
 * it stays an optional peer dependency. A `tf` passed by the caller wins.
 */
export async function tfjsModule(given?: TfjsModule): Promise<TfjsModule> {
  if (given) return given;
  cached ??= await importOptional<TfjsModule>("@tensorflow/tfjs-core");
  if (!cached) {
    throw new CheckpointError(
      "invalid_argument",
      "loading into tfjs tensors needs @tensorflow/tfjs-core: install it (or @tensorflow/tfjs), or pass { tf } in the load options",
    );
  }
  return cached;
}
