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

/** An offending argument as a message shows it: its type, and its value when that is short. */
export function describeValue(value: unknown): string {
  if (value === null) return "null";
  if (value === undefined) return "undefined";
  if (typeof value === "string")
    return `the string ${JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value)}`;
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint")
    return `the ${typeof value} ${String(value)}`;
  if (typeof value === "function") return "a function";
  if (typeof value === "symbol") return "a symbol";
  if (Array.isArray(value)) return `an array of length ${value.length}`;
  const name = (Object.getPrototypeOf(value) as { constructor?: { name?: unknown } } | null)?.constructor?.name;
  return typeof name === "string" && name !== "Object" ? `a ${name}` : "an object";
}
