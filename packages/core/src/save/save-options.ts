import { type CheckpointOptions, checkOption, hasMembers, isPositiveInteger } from "../storage/checkpoint-location.js";
import { CheckpointError, describeValue } from "../errors.js";
import { DEFAULT_BLOCK_SIZE } from "../format/metadata.js";
import type { SavePlanner } from "../plan/save-planner.js";
import { MAX_STATE_DEPTH, isForbiddenKey } from "../state/state-dict.js";

export interface SaveOptions extends CheckpointOptions {
  /** User metadata stored in `metadata.json` (step, metrics, anything JSON). */
  readonly metadata?: Readonly<Record<string, unknown>>;
  readonly planner?: SavePlanner;
  /** Data files each rank writes in parallel (default 4). */
  readonly concurrency?: number;
  /** Bytes per CRC32C block (default 1 MiB). */
  readonly blockSize?: number;
  /**
   * Write only what changed since `base`, a committed checkpoint beside this one (its
   * directory's name, like "100"): chunks whose checksums equal the base's reference its bytes
   * (format 2.1, docs/incremental.md).
   */
  readonly incremental?: { readonly base: string };
}

/** What a save did, for logs. */
export interface SaveResult {
  /** Where the checkpoint was committed. */
  readonly checkpoint: string;
  /** Bytes this rank wrote into data files. */
  readonly bytes: number;
  /** Data files this rank wrote. */
  readonly files: number;
  /** Entries in the checkpoint (all ranks). */
  readonly entries: number;
  /** An incremental save's references: the files of sibling checkpoints it uses, as `<sibling>/<file>` (all ranks'). */
  readonly referenced?: readonly string[];
  readonly seconds: number;
  /**
   * Seconds the calling thread spent, after `staged`, copying tensors held by reference into
   * shared memory for the upload worker (reference staging's background copy: the memcpy
   * alone, so a lower bound on what that strategy costs the training thread); absent when
   * nothing was copied then.
   */
  readonly backgroundCopySeconds?: number;
}

/** Data files each rank writes, at once, when `SaveOptions.concurrency` is not given. */
export const DEFAULT_SAVE_CONCURRENCY = 4;

/**
 * Refuses save options of the wrong type before anything is staged or written: a `blockSize` or
 * `concurrency` that is not a positive whole number (a zero block size would never finish
 * checksumming), a planner without its methods, user metadata that is not plain JSON.
 */
export function checkSaveOptions(
  options: Pick<SaveOptions, "blockSize" | "concurrency" | "metadata" | "planner" | "incremental">,
  prefix = "",
): void {
  checkOption(
    options,
    "incremental",
    (v) => typeof v === "object" && v !== null && typeof (v as { base?: unknown }).base === "string",
    '{ base: "<name of a committed checkpoint beside this one>" }',
    prefix,
  );
  checkOption(
    options,
    "blockSize",
    isPositiveInteger,
    `a positive whole number (default ${DEFAULT_BLOCK_SIZE} bytes)`,
    prefix,
  );
  checkOption(
    options,
    "concurrency",
    isPositiveInteger,
    `a positive whole number (default ${DEFAULT_SAVE_CONCURRENCY} files)`,
    prefix,
  );
  checkOption(
    options,
    "planner",
    hasMembers(["createLocalPlan", "createGlobalPlan"]),
    "a SavePlanner (with createLocalPlan and createGlobalPlan)",
    prefix,
  );
  const { metadata } = options as { metadata?: unknown };
  if (metadata === undefined) return;
  if (typeof metadata !== "object" || metadata === null || Array.isArray(metadata)) {
    throw new CheckpointError(
      "invalid_argument",
      `${prefix}metadata must be a plain object of JSON values (step, metrics…), not ${describeValue(metadata)}`,
    );
  }
  checkUserMetadata(metadata, `${prefix}metadata`);
}

/**
 * User metadata is stored as JSON and read back by `readMetadata`: a plain object of JSON values
 * (anything with `toJSON`, like a Date, as JSON.stringify writes it), without keys that reach a prototype.
 */
function checkUserMetadata(value: unknown, where: string, ancestors = new Set<object>()): void {
  const refuse = (problem: string): CheckpointError =>
    new CheckpointError("invalid_argument", `${where}: ${problem}`, { context: { key: where } });
  if (typeof value === "bigint" || typeof value === "function" || typeof value === "symbol")
    throw refuse(`a ${typeof value} cannot be stored as JSON`);
  if (typeof value !== "object" || value === null || typeof (value as { toJSON?: unknown }).toJSON === "function")
    return;
  const proto: unknown = Object.getPrototypeOf(value);
  if (!Array.isArray(value) && proto !== Object.prototype && proto !== null)
    throw refuse("must be a plain object of JSON values");
  if (ancestors.has(value)) throw refuse("contains a cycle");
  if (ancestors.size >= MAX_STATE_DEPTH) throw refuse(`nests deeper than ${MAX_STATE_DEPTH} levels`);
  ancestors.add(value);
  for (const [key, child] of Object.entries(value)) {
    if (isForbiddenKey(key))
      throw new CheckpointError(
        "invalid_argument",
        `${where}.${key}: the key ${JSON.stringify(key)} is not allowed (read back into an object it would reach Object.prototype); rename it`,
        { context: { key: `${where}.${key}` } },
      );
    checkUserMetadata(child, `${where}.${key}`, ancestors);
  }
  ancestors.delete(value);
}
