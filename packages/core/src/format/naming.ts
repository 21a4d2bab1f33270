import { CheckpointError } from "../errors.js";
import { numel } from "../state/dtypes.js";
import { type KeyPath, displayKey, isForbiddenKey } from "../state/state-dict.js";

/** The one rule for naming data files: unique per save attempt, so a writer that loses a race never overwrites the winner's files. */
export function dataFileName(rank: number, index: number, attempt: string): string {
  return `data-r${rank}-${index}-${attempt}.safetensors`;
}

/** A new save attempt's id for `dataFileName`: 12 random hex digits (Web Crypto, in Node and browsers). */
export function newAttemptId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(6));
  let hex = "";
  for (const b of bytes) hex += b.toString(16).padStart(2, "0");
  return hex;
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
 * THE path rule for data files: where the file `name` of the checkpoint at `checkpointDir`
 * (relative to the storage root) is. A file of format 2.1 with `dir` lives in that sibling
 * checkpoint; every reader, copier, verifier and deleter resolves files here.
 */
export function dataFilePath(
  checkpointDir: string,
  name: string,
  file?: { readonly dir?: string | undefined },
): string {
  if (file?.dir === undefined) return joinPath(checkpointDir, name);
  const parent = parentDir(checkpointDir);
  if (parent === undefined) {
    throw new CheckpointError(
      "not_found",
      `${name} is in the sibling checkpoint ${JSON.stringify(file.dir)}, but this checkpoint was opened at the storage's root, which has no siblings; open its parent location instead`,
      {
        context: { file: name },
      },
    );
  }
  return joinPath(parent, file.dir, name);
}

/** Path segments joined by "/", empty ones dropped (as storage's joinPath). */
function joinPath(...parts: string[]): string {
  return parts
    .flatMap((p) => p.split("/"))
    .filter((p) => p.length > 0)
    .join("/");
}

/** The directory holding `dir` ("" for a top-level one), undefined for the root itself. */
export function parentDir(dir: string): string | undefined {
  const path = joinPath(dir);
  if (path === "") return undefined;
  const slash = path.lastIndexOf("/");
  return slash < 0 ? "" : path.slice(0, slash);
}

/** The last segment of `dir` (a checkpoint's name among its siblings), "" for the root. */
export function baseName(dir: string): string {
  const path = joinPath(dir);
  return path.slice(path.lastIndexOf("/") + 1);
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
