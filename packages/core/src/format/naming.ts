import { numel } from "../state/dtypes.js";
import { type KeyPath, displayKey, isForbiddenKey } from "../state/state-dict.js";

/** The one rule for naming data files: unique per save attempt, so a writer that loses a race never overwrites the winner's files. */
export function dataFileName(rank: number, index: number, attempt: string): string {
  return `data-r${rank}-${index}-${attempt}.safetensors`;
}

/** Whether `name` was written by save attempt `attempt` (see `dataFileName`). */
export function isFileOfAttempt(name: string, attempt: string): boolean {
  return name.endsWith(`-${attempt}.safetensors`);
}

/**
 * A data file name as `metadata.json` may list it: one path segment (no `/`, `.` or `..`, no
 * NUL), and none of the keys that reach a prototype. Writers check their planners' names with it.
 */
export function isDataFileName(name: string): boolean {
  return name.length > 0 && name !== "." && name !== ".." && !/[/\\\0]/.test(name) && !isForbiddenKey(name);
}

/**
 * A chunk's name in its data file's safetensors header: the dotted key, plus the chunk's offsets
 * if it is a part of the tensor. `dotted` is `displayKey(key)` when the caller has it already.
 */
export function tensorName(
  key: KeyPath,
  shape: readonly number[],
  chunk: { readonly offsets: readonly number[]; readonly sizes: readonly number[] },
  dotted?: string,
): string {
  let whole = true;
  for (let d = 0; d < chunk.sizes.length && whole; d++) whole = chunk.sizes[d] === shape[d];
  if (whole && chunk.sizes.length !== shape.length) whole = numel(chunk.sizes) === numel(shape);
  const name = dotted ?? displayKey(key);
  return whole ? name : `${name}@${chunk.offsets.join(",")}`;
}
