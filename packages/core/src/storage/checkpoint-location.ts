import { CheckpointError, describeValue } from "../errors.js";
import type { ProcessGroup } from "../process-group.js";
import { SingleProcessGroup } from "../process-group.js";
import type { RetryPolicy } from "./retry.js";
import type { StorageAdapter } from "./storage-adapter.js";
import { type StorageOptions, openStorage, storageUrl } from "./storage-registry.js";

/** Where a checkpoint is and how to reach it; shared by every entry point. */
export interface CheckpointOptions {
  /** A URL (`file://`, `memory://`, `s3://`, `gs://`) or a plain path. */
  readonly checkpointId?: string;
  /** An open adapter instead of a URL; the checkpoint lives at `path` under its root. */
  readonly storage?: StorageAdapter;
  readonly path?: string;
  /** Passed to the adapter factory when opening `checkpointId`. */
  readonly storageOptions?: StorageOptions;
  readonly processGroup?: ProcessGroup;
  /** Abort → the call rejects with `cancelled` and nothing is committed. */
  readonly signal?: AbortSignal;
  /** Bounds for retrying transient storage errors. */
  readonly retry?: Partial<RetryPolicy>;
}

export interface OpenedCheckpoint {
  readonly storage: StorageAdapter;
  /** Opened through `hf+`: `dir` names a Hugging Face safetensors layout, not a Cairn checkpoint. */
  readonly safetensors?: boolean;
  /** The checkpoint's directory relative to the adapter's root ("" for the root itself). */
  readonly dir: string;
  /** For messages: the URL or root and path. */
  readonly where: string;
  readonly group: ProcessGroup;
  /** Closes the adapter if this call opened it. */
  release(): Promise<void>;
}

/**
 * `hf+<storage URL>` names a Hugging Face safetensors layout where a checkpoint is read
 * (`hf+file:///models/llama`, `hf+s3://bucket/model`, any registered protocol): the directory
 * holding `model.safetensors.index.json` or `model.safetensors`, the index, or one file.
 */
export const SAFETENSORS_URL_PREFIX = "hf+";

/** The storage URL inside an `hf+` location, or undefined for any other. */
function safetensorsInner(checkpointId: string | undefined): string | undefined {
  return checkpointId?.startsWith(SAFETENSORS_URL_PREFIX)
    ? checkpointId.slice(SAFETENSORS_URL_PREFIX.length)
    : undefined;
}

/**
 * Every entry point takes a URL or path, or options: this makes options of either, and refuses
 * anything else, or options of the wrong types, with `invalid_argument` (`call` names the
 * entry point in messages). A call that writes (`access: "write"`) refuses an `hf+` location,
 * which is read-only.
 */
export function checkpointOptionsOf<T extends CheckpointOptions>(
  idOrOptions: string | T,
  call = "openCheckpoint",
  access: "read" | "write" = "read",
): T {
  if (typeof idOrOptions === "string") {
    if (idOrOptions === "") throw invalidArgument(`${call}: the checkpoint URL or path is empty`);
    return refuseWritingSafetensors({ checkpointId: idOrOptions } as T, call, access);
  }
  if (typeof idOrOptions !== "object" || idOrOptions === null || Array.isArray(idOrOptions)) {
    throw invalidArgument(
      `${call}: pass a checkpoint URL or path, or options with checkpointId (or storage and path), not ${describeValue(idOrOptions)}`,
    );
  }
  const prefix = `${call}: option `;
  checkOption(
    idOrOptions,
    "checkpointId",
    (v) => typeof v === "string" && v !== "",
    "a non-empty URL or path string",
    prefix,
  );
  checkOption(
    idOrOptions,
    "storage",
    hasMembers(["read", "write", "stat", "list", "delete", "close"], ["root", "protocol"]),
    "a StorageAdapter",
    prefix,
  );
  checkOption(idOrOptions, "path", (v) => typeof v === "string", "a string", prefix);
  checkOption(idOrOptions, "storageOptions", isObject, "an object", prefix);
  checkOption(
    idOrOptions,
    "processGroup",
    isProcessGroup,
    "a ProcessGroup (rank < worldSize, allGather, broadcast, barrier)",
    prefix,
  );
  checkOption(idOrOptions, "signal", (v) => v instanceof AbortSignal, "an AbortSignal", prefix);
  checkOption(
    idOrOptions,
    "retry",
    isRetryPolicy,
    "a partial RetryPolicy of non-negative numbers (maxAttempts at least 1)",
    prefix,
  );
  if (idOrOptions.checkpointId === undefined && idOrOptions.storage === undefined) {
    throw invalidArgument(
      `${call}: say where the checkpoint is: pass a URL or path, or { checkpointId }, or { storage, path }`,
    );
  }
  return refuseWritingSafetensors(idOrOptions, call, access);
}

function refuseWritingSafetensors<T extends CheckpointOptions>(options: T, call: string, access: "read" | "write"): T {
  if (access === "write" && safetensorsInner(options.checkpointId) !== undefined) {
    throw invalidArgument(
      `${call}: ${options.checkpointId} is a Hugging Face safetensors layout (${SAFETENSORS_URL_PREFIX}), which is read, never written; save a checkpoint and write the layout with cairn export <checkpoint> <dir> --hf`,
    );
  }
  return options;
}

function invalidArgument(message: string): CheckpointError {
  return new CheckpointError("invalid_argument", message);
}

/** Refuses an option that is set but not `expected` with `invalid_argument`, naming the option and the value it got. */
export function checkOption(
  options: object,
  name: string,
  valid: (value: unknown) => boolean,
  expected: string,
  prefix = "",
): void {
  const value = (options as Record<string, unknown>)[name];
  if (value !== undefined && !valid(value))
    throw invalidArgument(`${prefix}${name} must be ${expected}, not ${describeValue(value)}`);
}

export function isPositiveInteger(value: unknown): boolean {
  return typeof value === "number" && Number.isSafeInteger(value) && value > 0;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

/** An object with these methods (and these fields set): what duck-typed options are checked by. */
export function hasMembers(methods: readonly string[], fields: readonly string[] = []): (value: unknown) => boolean {
  return (value) =>
    isObject(value) &&
    methods.every((m) => typeof value[m] === "function") &&
    fields.every((f) => value[f] !== undefined);
}

function isProcessGroup(value: unknown): boolean {
  if (!hasMembers(["allGather", "broadcast", "barrier"])(value)) return false;
  const { rank, worldSize } = value as { rank: unknown; worldSize: unknown };
  return (
    isPositiveInteger(worldSize) &&
    Number.isSafeInteger(rank) &&
    (rank as number) >= 0 &&
    (rank as number) < (worldSize as number)
  );
}

function isRetryPolicy(value: unknown): boolean {
  if (!isObject(value)) return false;
  const numbers = ["maxAttempts", "baseDelayMs", "maxDelayMs", "maxElapsedMs"].every(
    (k) => value[k] === undefined || (typeof value[k] === "number" && (value[k] as number) >= 0),
  );
  return numbers && (value.maxAttempts === undefined || (value.maxAttempts as number) >= 1);
}

/**
 * Opens where a checkpoint is. An `hf+` location opens the storage inside it, with `safetensors`
 * set: `dir` then names the layout (see `readSafetensorsLayout`).
 */
export async function openCheckpoint(idOrOptions: string | CheckpointOptions): Promise<OpenedCheckpoint> {
  const options = checkpointOptionsOf(idOrOptions);
  const group = options.processGroup ?? new SingleProcessGroup();
  if (options.storage) {
    const dir = (options.path ?? "").replace(/^\/+|\/+$/g, "");
    return {
      storage: options.storage,
      dir,
      where: `${options.storage.root.replace(/\/$/, "")}/${dir}`,
      group,
      release: async () => undefined,
    };
  }
  const inner = safetensorsInner(options.checkpointId);
  const id = inner ?? options.checkpointId!;
  const scheme = inner === undefined ? "" : SAFETENSORS_URL_PREFIX;
  // Rooted at the parent, so the checkpoint's siblings (an incremental step's base, format 2.1) are in reach.
  const split = splitLastSegment(id);
  if (split) {
    const storage = await openStorage(split.parent, options.storageOptions);
    return {
      storage,
      safetensors: inner !== undefined,
      dir: split.name,
      where: `${scheme}${storage.root.replace(/\/$/, "")}/${split.segment}`,
      group,
      release: () => storage.close(),
    };
  }
  const storage = await openStorage(id, options.storageOptions);
  return {
    storage,
    safetensors: inner !== undefined,
    dir: "",
    where: `${scheme}${storage.root}`,
    group,
    release: () => storage.close(),
  };
}

/**
 * A location's parent URL and its last path segment (decoded), or undefined when it has none
 * (a bucket, a volume, `/`) or the segment is not one plain name.
 */
export function splitLastSegment(urlOrPath: string): { parent: string; name: string; segment: string } | undefined {
  const url = storageUrl(urlOrPath);
  const path = url.pathname.replace(/\/+$/, "");
  const slash = path.lastIndexOf("/");
  const segment = path.slice(slash + 1);
  let name: string;
  try {
    name = decodeURIComponent(segment);
  } catch {
    return undefined;
  }
  if (slash < 0 || segment === "" || name === "." || name === ".." || /[/\\\0]/.test(name)) return undefined;
  const parent = new URL(url.href);
  parent.pathname = path.slice(0, slash + 1);
  return { parent: parent.href, name, segment };
}
