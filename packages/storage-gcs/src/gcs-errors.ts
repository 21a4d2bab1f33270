import { CheckpointError, isCheckpointError } from "@cairn/core";
import { TRANSIENT_NETWORK_CODES, alreadyExists, cancelledError, notFound } from "@cairn/core/storage";

/** What the adapter was doing, for messages: `[gs] read gs://bucket/object: …`. */
export interface GcsErrorSite {
  readonly operation: "read" | "write" | "stat" | "list" | "delete";
  /** The path relative to the adapter's root, as the caller gave it. */
  readonly path: string;
  /** `gs://bucket/object`, the full object name. */
  readonly object: string;
  readonly root: string;
  readonly signal?: AbortSignal;
}

// Connection-level failures (core's list) and the SDK's upload checksum check: the bytes were
// damaged on the way, so a new transfer may be clean (the SDK has already deleted the damaged object).
const TRANSIENT_CODES = new Set([...TRANSIENT_NETWORK_CODES, "FILE_NO_UPLOAD"]);

const TRANSIENT_STATUSES = new Set([408, 429, 500, 502, 503, 504]);

interface SdkErrorLike {
  code?: unknown;
  status?: unknown;
  type?: unknown;
  message?: unknown;
  response?: { status?: unknown; data?: unknown };
}

// The resumable upload reports a failure it judged retryable (408, 429, 5xx, a reset) as a plain
// Error "Retry limit exceeded - status: 503 - …" once its retries (none: autoRetry is off) are spent.
const RESUMABLE_RETRYABLE = /^Retry (?:total time )?limit exceeded/;

/** The HTTP status of an SDK error: `ApiError.code` is a number, `GaxiosError` carries `response.status`. */
export function httpStatus(error: unknown): number | undefined {
  const e = error as SdkErrorLike | undefined;
  if (typeof e?.code === "number") return e.code;
  if (typeof e?.response?.status === "number") return e.response.status;
  if (typeof e?.status === "number") return e.status;
  if (typeof e?.code === "string" && /^\d{3}$/.test(e.code)) return Number(e.code);
  const resumable =
    typeof e?.message === "string" && RESUMABLE_RETRYABLE.test(e.message) ? /status: (\d{3})/.exec(e.message) : null;
  return resumable ? Number(resumable[1]) : undefined;
}

function isTransientFailure(error: unknown, status: number | undefined): boolean {
  const e = error as SdkErrorLike | undefined;
  if (typeof e?.message === "string" && RESUMABLE_RETRYABLE.test(e.message)) return true;
  if (status !== undefined) return TRANSIENT_STATUSES.has(status);
  if (typeof e?.code === "string" && TRANSIENT_CODES.has(e.code)) return true;
  // node-fetch reports timeouts by `type`, and some resets only by message.
  if (e?.type === "request-timeout" || e?.type === "body-timeout") return true;
  return typeof e?.message === "string" && /socket hang up|premature close|timed? ?out/i.test(e.message);
}

/** GCS's own explanation in a JSON error body, which a `GaxiosError`'s message leaves out. */
function serverMessage(e: SdkErrorLike | undefined): string | undefined {
  const data = e?.response?.data as { error?: { message?: unknown } } | string | undefined;
  if (typeof data === "object" && typeof data?.error?.message === "string") return data.error.message;
  if (typeof data === "string" && data.startsWith("{")) {
    try {
      return serverMessage({ response: { data: JSON.parse(data) as unknown } });
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** The SDK's message, short and on one line; GCS messages name the object, never credentials. */
function reason(error: unknown, status: number | undefined): string {
  const e = error as SdkErrorLike | undefined;
  const message = serverMessage(e) ?? (typeof e?.message === "string" ? e.message : undefined);
  const text = message !== undefined ? message.replace(/\s+/g, " ").trim().slice(0, 300) : String(error);
  const code = typeof e?.code === "string" ? ` ${e.code}` : "";
  return status !== undefined ? `HTTP ${status}: ${text}` : `${text}${code}`;
}

/**
 * Translates an SDK failure into a `CheckpointError`: 401/403 → `permission_denied`, 404 →
 * `not_found` (the object on a read, else the bucket), 412 → `already_exists` (creates), an
 * aborted signal → `cancelled`, anything else → `storage` with `context.transient` set for
 * 408/429/5xx and connection failures. The SDK's error is kept as `cause`.
 */
export function toCheckpointError(error: unknown, site: GcsErrorSite): CheckpointError {
  if (isCheckpointError(error)) return error;
  if (site.signal?.aborted)
    return cancelledError(
      site.signal,
      `[gs] ${site.operation} of ${site.object}`,
      site.operation === "write" || site.operation === "delete" ? undefined : null,
    );
  const status = httpStatus(error);
  const context = { path: site.path, protocol: "gs" };
  if (status === 404 && site.operation === "read") {
    const e = notFound("gs", site.path, site.root);
    return new CheckpointError("not_found", `${e.message} (${site.object})`, { context: e.context, cause: error });
  }
  if (status === 412 && site.operation === "write") {
    const e = alreadyExists("gs", site.path, site.root);
    return new CheckpointError("already_exists", `${e.message} (${site.object})`, { context: e.context, cause: error });
  }
  const failed = `[gs] ${site.operation} ${site.object} failed: ${reason(error, status)}`;
  if (status === 401 || status === 403) {
    return new CheckpointError(
      "permission_denied",
      `${failed}; check the credentials and that they may use this bucket`,
      { context, cause: error },
    );
  }
  if (status === 404)
    return new CheckpointError("not_found", `${failed}; check that the bucket exists`, { context, cause: error });
  return new CheckpointError("storage", failed, {
    context: { ...context, transient: isTransientFailure(error, status) },
    cause: error,
  });
}

/** A body cut short or damaged on the way (`detail` says how): a new request may get it whole, so it is transient. */
export function damagedBody(site: GcsErrorSite, detail: string): CheckpointError {
  return new CheckpointError("storage", `[gs] ${site.operation} ${site.object} failed: ${detail}`, {
    context: { path: site.path, protocol: "gs", transient: true },
  });
}
