/**
 * Every failure Cairn reports is a `CheckpointError`; callers branch on `code`, never on
 * the message. Adapters translate SDK errors into it and keep the original as `cause`.
 */
export type CheckpointErrorCode =
  | "not_found"
  | "not_committed"
  | "already_exists"
  | "corrupt"
  | "mismatch"
  | "invalid_argument"
  | "unsupported_version"
  | "unsupported_protocol"
  /** Storage refused the operation: read-only file system, missing permission, denied credentials. */
  | "permission_denied"
  /** Storage is full (ENOSPC, EDQUOT): nothing more can be written until space is freed. */
  | "no_space"
  | "storage"
  | "cancelled"
  | "timeout"
  /** A rank of the process group died, left, timed out or called other collectives: the group is broken. */
  | "process_group";

/** Where an error happened; every field is optional and only what is known is set. */
export interface CheckpointErrorContext {
  readonly path?: string;
  readonly key?: string;
  readonly step?: number;
  readonly rank?: number;
  readonly file?: string;
  readonly protocol?: string;
  /** For `storage` errors: whether retrying the same call may succeed. */
  readonly transient?: boolean;
}

export class CheckpointError extends Error {
  override readonly name = "CheckpointError";
  readonly code: CheckpointErrorCode;
  readonly context: CheckpointErrorContext;

  constructor(
    code: CheckpointErrorCode,
    message: string,
    options: { context?: CheckpointErrorContext; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.context = options.context ?? {};
  }

  /** True for storage errors an adapter classified as transient (worth retrying). */
  get transient(): boolean {
    return this.context.transient === true;
  }
}

export function isCheckpointError(error: unknown, code?: CheckpointErrorCode): error is CheckpointError {
  return error instanceof CheckpointError && (code === undefined || error.code === code);
}

/**
 * What a failure means for the caller's next move, one category per code: the thing asked for
 * is `gone`; what is stored is `damaged` (or of a newer format); the request was `refused`
 * (wrong arguments, a target that does not match, a name taken); the `storage` failed, not the
 * data; the operation was `interrupted` (cancelled, or the process group broke).
 */
type ErrorCategory = "gone" | "damaged" | "refused" | "storage" | "interrupted";

const CATEGORIES: Readonly<Record<CheckpointErrorCode, ErrorCategory>> = {
  not_found: "gone",
  not_committed: "gone",
  corrupt: "damaged",
  unsupported_version: "damaged",
  invalid_argument: "refused",
  mismatch: "refused",
  already_exists: "refused",
  unsupported_protocol: "refused",
  storage: "storage",
  timeout: "storage",
  permission_denied: "storage",
  no_space: "storage",
  cancelled: "interrupted",
  process_group: "interrupted",
};

/** Whether `value` is one of the codes above: for codes another rank or process sends, which nothing trusts unchecked. */
export function isCheckpointErrorCode(value: unknown): value is CheckpointErrorCode {
  return typeof value === "string" && Object.hasOwn(CATEGORIES, value);
}

function inCategory(error: unknown, ...categories: ErrorCategory[]): error is CheckpointError {
  return error instanceof CheckpointError && categories.includes(CATEGORIES[error.code]);
}

/** What was asked for is not there (`not_found`, `not_committed`): never written, deleted meanwhile, or never committed. */
export function isGone(error: unknown): error is CheckpointError {
  return inCategory(error, "gone");
}

/** What is stored cannot be used by this Cairn (`corrupt`, `unsupported_version`): damaged bytes or metadata, or a newer format. */
export function isDamaged(error: unknown): error is CheckpointError {
  return inCategory(error, "damaged");
}

/** This copy cannot be read whole: it is gone or damaged (`isGone`, `isDamaged`). Another copy of it may serve. */
export function isUnusable(error: unknown): error is CheckpointError {
  return inCategory(error, "gone", "damaged");
}

/**
 * The storage failed, not the data (`storage`, `timeout`, `permission_denied`, `no_space`): the
 * answer is unknown, and the same call may succeed once the outage ends.
 */
export function isStorageFailure(error: unknown): error is CheckpointError {
  return inCategory(error, "storage");
}

/** The operation was stopped before it finished (`cancelled`, `process_group`): nothing is known about the data. */
export function isInterrupted(error: unknown): error is CheckpointError {
  return inCategory(error, "interrupted");
}

/**
 * No retry mends it, now or after an outage: the data is gone or damaged, or the request itself
 * is wrong (`invalid_argument`, `mismatch`, `already_exists`, `unsupported_protocol`). Storage
 * failures, even those not worth an immediate retry, are not permanent: outages end.
 */
export function isPermanent(error: unknown): error is CheckpointError {
  return inCategory(error, "gone", "damaged", "refused");
}

/**
 * Worth retrying the same call now: a storage error its adapter marked transient (a reset, a
 * 429 or 5xx, a short body, a transfer stalled past its progress deadline).
 */
export function isTransient(error: unknown): error is CheckpointError {
  return isCheckpointError(error, "storage") && error.transient;
}

/**
 * The error to throw when an `AbortSignal` fired: `cancelled`, carrying the signal's reason.
 * `outcome` says what the cancelled operation left behind: a write committed nothing; a read
 * (`null`) has nothing to add.
 */
export function cancelledError(
  signal: AbortSignal,
  what: string,
  outcome: string | null = "nothing was committed",
): CheckpointError {
  return new CheckpointError(
    "cancelled",
    outcome === null ? `${what} was cancelled` : `${what} was cancelled; ${outcome}`,
    { cause: signal.reason },
  );
}

export function throwIfAborted(signal: AbortSignal | undefined, what: string, outcome?: string | null): void {
  if (signal?.aborted) throw cancelledError(signal, what, outcome);
}

/**
 * THE way a message shows an offending value: its type, and its value when that is a short
 * primitive; the class of an object ("a LayersModel"). Never throws, and never walks the value,
 * whatever it is.
 */
export function describeValue(value: unknown): string {
  if (value === null) return "null";
  if (value === undefined) return "undefined";
  if (typeof value === "string")
    return `the string ${JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value)}`;
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint")
    return `the ${typeof value} ${String(value)}`;
  if (typeof value === "function") return "a function";
  if (typeof value === "symbol") return "a symbol";
  try {
    if (Array.isArray(value)) return `an array of length ${value.length}`;
    const name = (Object.getPrototypeOf(value) as { constructor?: { name?: unknown } } | null)?.constructor?.name;
    return typeof name === "string" && name !== "Object" && name !== "" ? `a ${name}` : "an object";
  } catch {
    // A proxy whose traps throw: its type is all there is to say.
    return "an object";
  }
}
