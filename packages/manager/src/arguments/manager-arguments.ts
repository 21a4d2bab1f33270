import { CheckpointError, type LoadOptions, type StateDict, describeValue } from "@cairn/core";
import { type ManagerEventName, isManagerEventName } from "../events/manager-events.js";

/** Per-call options of `save` and `saveAsync`. */
export interface SaveStepOptions {
  /** Save whatever the interval says. */
  readonly force?: boolean;
  /** Replace a committed step: it is un-committed (its metadata.json deleted) first. */
  readonly overwrite?: boolean;
  /** JSON stored with the step, returned by `metadata(step)`. */
  readonly metadata?: Readonly<Record<string, unknown>>;
  /** Finite numbers stored with the step; `bestFn` ranks steps by them. */
  readonly metrics?: Readonly<Record<string, number>>;
}

/** Per-call options of `restore`. */
export type RestoreOptions = Pick<LoadOptions, "partial" | "signal">;

export function invalid(what: string, expected: string, value: unknown, cause?: unknown): CheckpointError {
  return new CheckpointError(
    "invalid_argument",
    `${what} must be ${expected}, got ${describeValue(value)}`,
    cause === undefined ? {} : { cause },
  );
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (!isObject(value)) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** A state dict is an object of named entries; what each leaf may be is checked by save and load. */
/** Checks a `save` or `saveAsync` call's state dict and options. */
export function checkSaveArguments(stateDict: unknown, options: unknown): void {
  checkStateDict(stateDict);
  checkSaveStepOptions(options);
}

/** Refuses what a read-only manager cannot do. */
export function checkWritable(readOnly: boolean | undefined, what: string): void {
  if (readOnly) throw new CheckpointError("invalid_argument", `this CheckpointManager is read-only; it cannot ${what}`);
}

export function checkStateDict(stateDict: unknown, what = "the state dict"): asserts stateDict is StateDict {
  if (!isObject(stateDict)) throw invalid(what, "an object of named tensors and values", stateDict);
}

export function checkSaveStepOptions(options: unknown): asserts options is SaveStepOptions {
  if (!isObject(options)) throw invalid("save options", "an object", options);
  for (const name of ["force", "overwrite"] as const) {
    if (options[name] !== undefined && typeof options[name] !== "boolean")
      throw invalid(`save option ${name}`, "a boolean", options[name]);
  }
  const { metadata, metrics } = options;
  if (metadata !== undefined) {
    if (!isPlainObject(metadata)) throw invalid("save option metadata", "a plain object of JSON values", metadata);
    try {
      JSON.stringify(metadata);
    } catch (cause) {
      throw invalid("save option metadata", "JSON-serialisable (no cycles, no BigInt)", metadata, cause);
    }
  }
  if (metrics !== undefined) {
    if (!isPlainObject(metrics)) throw invalid("save option metrics", "a plain object of finite numbers", metrics);
    for (const [name, value] of Object.entries(metrics)) {
      if (typeof value !== "number" || !Number.isFinite(value))
        throw invalid(`save option metrics.${name}`, "a finite number", value);
    }
  }
}

export function checkRestoreArguments(target: unknown, options: unknown): void {
  if (target !== undefined) checkStateDict(target, "the restore target");
  if (!isObject(options)) throw invalid("restore options", "an object", options);
  if (options.partial !== undefined && typeof options.partial !== "boolean")
    throw invalid("restore option partial", "a boolean", options.partial);
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal))
    throw invalid("restore option signal", "an AbortSignal", options.signal);
}

/** Options of `latestStep`. */
export interface LatestStepOptions {
  /** The newest step whose bytes pass a full `verify`, skipping damaged ones. */
  readonly verified?: boolean;
  readonly signal?: AbortSignal;
}

export function checkLatestOptions(options: unknown): void {
  if (!isObject(options)) throw invalid("latestStep options", "an object", options);
  if (options.verified !== undefined && typeof options.verified !== "boolean")
    throw invalid("latestStep option verified", "a boolean", options.verified);
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal))
    throw invalid("latestStep option signal", "an AbortSignal", options.signal);
}

export function checkListener(event: unknown, listener: unknown): asserts event is ManagerEventName {
  if (!isManagerEventName(event))
    throw invalid(
      "the event",
      '"staged", "committed", "replicated", "error", "preemption", "skipped", "stale" or "lossBudget"',
      event,
    );
  if (typeof listener !== "function") throw invalid(`the listener for ${event}`, "a function", listener);
}
