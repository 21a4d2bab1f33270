import { type DType, numel } from "../state/dtypes.js";
import { CheckpointError } from "../errors.js";
import { type KeyPath, isForbiddenKey } from "../state/state-dict.js";
import type { ChunkMetadata, DataFileMetadata, ValueEntry } from "./metadata.js";

/** Checks shared by every version's parser, on values a parser has already given their types. */

export function corrupt(where: string, problem: string): CheckpointError {
  return new CheckpointError("corrupt", `${where}: ${problem}; the checkpoint cannot be read`, {
    context: { path: where },
  });
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A whole number ≥ 0 as Cairn writes one: never `-0`, which reads as 0 and writes back as "0". */
export function isCount(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0 && !Object.is(value, -0);
}

export function isCounts(value: unknown): value is number[] {
  return Array.isArray(value) && value.every(isCount);
}

export function isKeyElement(value: unknown): value is string | number {
  return typeof value === "string" || isCount(value);
}

const SPECIALS: ReadonlySet<unknown> = new Set(["NaN", "Infinity", "-Infinity", "-0"]);

export function isSpecial(value: unknown): value is NonNullable<ValueEntry["special"]> {
  return SPECIALS.has(value);
}

/** What `save` stores inline: a JSON primitive, or an empty object or array. */
export function isStoredValue(value: unknown): boolean {
  if (value === null || value === undefined || ["string", "number", "boolean"].includes(typeof value)) return true;
  return typeof value === "object" && Object.keys(value).length === 0;
}

/** A key path is non-empty and holds no key that reaches a prototype. */
export function checkKey(key: KeyPath, where: string): void {
  if (key.length === 0) throw corrupt(where, "an entry has an empty key path");
  for (const k of key) {
    if (isForbiddenKey(k))
      throw corrupt(
        where,
        `entry ${key.join(".")} has the key ${JSON.stringify(k)}, which Cairn never writes (it would reach Object.prototype when loaded)`,
      );
  }
}

/** Throws `corrupt` if `value` holds, at any depth, an object key that reaches a prototype when merged. */
export function refuseForbiddenKeys(value: unknown, where: string): void {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const node = stack.pop();
    if (typeof node !== "object" || node === null) continue;
    if (Array.isArray(node)) {
      for (const item of node) if (typeof item === "object" && item !== null) stack.push(item);
      continue;
    }
    for (const key of Object.keys(node)) {
      if (isForbiddenKey(key))
        throw corrupt(where, `it holds the key ${JSON.stringify(key)}, which Cairn never writes`);
      stack.push((node as Record<string, unknown>)[key]);
    }
  }
}

/**
 * The chunks of a tensor: each inside the tensor's shape and inside its file's data section,
 * and together holding every element once by count (their checksums are counted as decoded).
 */
export function checkChunks(
  key: KeyPath,
  dtype: DType,
  shape: readonly number[],
  chunks: readonly ChunkMetadata[],
  files: Readonly<Record<string, DataFileMetadata>>,
  where: string,
): void {
  const name = (): string => key.join(".");
  let elements = 0;
  for (const chunk of chunks) {
    const { offsets, sizes } = chunk;
    if (
      offsets.length !== shape.length ||
      sizes.length !== shape.length ||
      shape.some((d, i) => offsets[i]! + sizes[i]! > d)
    ) {
      throw corrupt(where, `entry ${name()} has a chunk outside its shape ${JSON.stringify(shape)}`);
    }
    // Its checksums' count is checked where they are decoded: a lazily decoded chunk's are not decoded here.
    if (!Number.isSafeInteger(chunk.byteLength)) {
      throw corrupt(
        where,
        `entry ${name()} (${dtype}) has a chunk whose byte length or checksums do not match its sizes`,
      );
    }
    const file = files[chunk.file]!;
    if (
      chunk.byteLength > 0 &&
      (chunk.byteOffset < 8 + file.headerLength || chunk.byteOffset + chunk.byteLength > file.size)
    ) {
      throw corrupt(where, `entry ${name()} has a chunk outside the data section of ${chunk.file}`);
    }
    elements += numel(sizes);
  }
  if (elements !== numel(shape))
    throw corrupt(where, `entry ${name()}: its chunks hold ${elements} elements, not the ${numel(shape)} of its shape`);
}

/** A data file's record: its header fits in it. */
export function checkFile(name: string, file: DataFileMetadata, where: string): void {
  if (8 + file.headerLength > file.size)
    throw corrupt(where, `file ${JSON.stringify(name)} has a header longer than the file`);
}
