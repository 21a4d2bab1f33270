import { CheckpointError } from "../errors.js";
import { importOptional } from "#platform/storage/import-optional.js";
import type { TensorLike } from "../state/tensors.js";

/** The part of the `@tensorflow/tfjs-core` module Cairn calls, to make tensors when loading into tfjs targets. */
export interface TfjsModule {
  tensor(values: ArrayBufferView, shape: number[], dtype: string): TensorLike & { dispose(): void };
}

let cached: TfjsModule | undefined;

/** Any of these provides `tensor`; a strict (pnpm) layout may show only the one the user installed. */
const TFJS_PACKAGES = [
  "@tensorflow/tfjs-core",
  "@tensorflow/tfjs",
  "@tensorflow/tfjs-node-gpu",
  "@tensorflow/tfjs-node",
];

/**
 * Gives Cairn the tfjs module to use from now on. Node never needs it (tfjs is imported by name
 * on first use); a bundled page must, since it cannot import a package by name at run time:
 * `import * as tf from "@tensorflow/tfjs"; registerTfjs(tf);` before restoring into tfjs
 * tensors or using @cairn/tfjs. Throws `invalid_argument` for anything without `tensor`.
 */
export function registerTfjs(tf: TfjsModule): void {
  if (typeof (tf as Partial<TfjsModule> | null)?.tensor !== "function")
    throw new CheckpointError("invalid_argument", "registerTfjs takes the tfjs module (with a tensor function)");
  cached = tf;
}

/**
 * tfjs, imported on first use: only loads into tfjs tensors need it, so it stays an optional
 * peer dependency. tfjs keeps its engine in a global, so tensors made through any of its
 * packages work together. A `tf` passed by the caller wins, then a registered one.
 */
export async function tfjsModule(given?: TfjsModule): Promise<TfjsModule> {
  if (given) return given;
  for (const name of TFJS_PACKAGES) {
    if (cached) break;
    cached = await importOptional<TfjsModule>(name);
  }
  if (!cached) {
    throw new CheckpointError(
      "invalid_argument",
      "loading into tfjs tensors needs @tensorflow/tfjs-core: install it (or @tensorflow/tfjs), or pass { tf } in the load options; in a bundled page call registerTfjs(tf) first",
    );
  }
  return cached;
}
