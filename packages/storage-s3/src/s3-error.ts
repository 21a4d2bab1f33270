import { CheckpointError } from "@cairn/core";
import { TRANSIENT_NETWORK_CODES, cancelledError } from "@cairn/core/storage";

/** What an SDK error looks like where the adapter reads it: only fields every failure path may carry. */
interface SdkErrorShape {
  readonly name?: string;
  readonly message?: string;
  readonly code?: string;
  readonly Code?: string;
  readonly $metadata?: { readonly httpStatusCode?: number; readonly requestId?: string };
  readonly $retryable?: unknown;
}

/** S3 error codes worth another attempt although their status alone would not say so. */
const TRANSIENT_S3_CODES = new Set([
  "SlowDown",
  "InternalError",
  "ServiceUnavailable",
  "RequestTimeout",
  // The SDK corrects its clock offset from this error, so the next attempt is signed right.
  "RequestTimeTooSkewed",
  "ThrottlingException",
  "Throttling",
  "TooManyRequestsException",
  "RequestLimitExceeded",
  "BandwidthLimitExceeded",
  "OperationAborted",
]);

/** S3 error codes of refused credentials or permissions, whatever their HTTP status. */
const DENIED_S3_CODES = new Set([
  "AccessDenied",
  "InvalidAccessKeyId",
  "SignatureDoesNotMatch",
  "ExpiredToken",
  "InvalidToken",
  "AllAccessDisabled",
  "AccountProblem",
]);

const TRANSIENT_NAMES = new Set(["TimeoutError", "RequestTimeout", "RequestTimeoutException", "NetworkingError"]);

export function httpStatusOf(error: unknown): number | undefined {
  return (error as SdkErrorShape | undefined)?.$metadata?.httpStatusCode;
}

/** The S3 error code (`NoSuchKey`, `SlowDown`…), or the SDK's error name when the body had none. */
export function s3CodeOf(error: unknown): string {
  const e = error as SdkErrorShape | undefined;
  return e?.Code ?? e?.name ?? "Error";
}

/**
 * Whether retrying the same request may succeed: throttling, 5xx, request timeouts, and
 * network failures below HTTP (resets, refused connections, socket timeouts). Credentials,
 * permissions, missing buckets and malformed requests are permanent.
 */
export function isTransientS3Error(error: unknown): boolean {
  const e = error as SdkErrorShape | undefined;
  if (e === undefined || e === null) return false;
  if (e.name === "CredentialsProviderError") return false;
  const status = httpStatusOf(error);
  if (status !== undefined && (status >= 500 || status === 429)) return true;
  if (TRANSIENT_S3_CODES.has(s3CodeOf(error))) return true;
  if (e.code !== undefined && TRANSIENT_NETWORK_CODES.has(e.code)) return true;
  if (e.name !== undefined && TRANSIENT_NAMES.has(e.name)) return true;
  // A response cut mid-body surfaces with a status of 200 but no parseable body: the body was lost, not refused.
  if (status === undefined || status < 300)
    return /socket hang up|ECONNRESET|EPIPE|premature close|aborted|terminated/i.test(e.message ?? "");
  return false;
}

/** Where an S3 failure happened, for its message: the operation, and the object as an `s3://` URL. */
export interface S3ErrorSite {
  /** "reading", "writing", "listing", "deleting", "checking"… */
  readonly op: string;
  readonly bucket: string;
  /** The full object key (or listing prefix) in the bucket. */
  readonly key: string;
  /** The path relative to the adapter's root, for `context.path`. */
  readonly path: string;
  /** The request was a create-only write (`If-None-Match: *`): a 412 or 409 means the object exists. */
  readonly ifAbsent?: boolean;
}

/**
 * Translates any failure of an S3 call into a `CheckpointError` whose message starts with
 * `[s3]` and names the bucket and key, with the SDK's error as `cause`. An existing
 * `CheckpointError` passes through; an abort of `signal` becomes `cancelled`; a missing object
 * or bucket is `not_found`, a 412/409 of a create-only write `already_exists`, refused or
 * missing credentials `permission_denied`, a missing region `invalid_argument`; everything else
 * is `storage`, transient for throttling, 5xx and network failures. Never includes
 * credentials: only the SDK's error code, message, HTTP status and request id are quoted.
 */
export function s3Error(error: unknown, site: S3ErrorSite, signal?: AbortSignal): CheckpointError {
  if (error instanceof CheckpointError) return error;
  if (signal?.aborted)
    return cancelledError(
      signal,
      `${site.op} s3://${site.bucket}/${site.key}`,
      ["reading", "checking", "listing"].includes(site.op) ? null : undefined,
    );
  const status = httpStatusOf(error);
  const s3Code = s3CodeOf(error);
  const where = `s3://${site.bucket}/${site.key}`;
  const detail = describe(error, status, s3Code);
  const context = { path: site.path, protocol: "s3" };
  const transient = isTransientS3Error(error);
  if (
    site.ifAbsent &&
    (status === 412 || status === 409 || s3Code === "PreconditionFailed" || s3Code === "ConditionalRequestConflict")
  ) {
    return new CheckpointError("already_exists", `[s3] ${where} already exists and was not replaced (${detail})`, {
      cause: error,
      context,
    });
  }
  if (s3Code === "NoSuchKey" || (status === 404 && (s3Code === "NotFound" || s3Code === "Error"))) {
    return new CheckpointError("not_found", `[s3] ${where} does not exist`, { cause: error, context });
  }
  if (s3Code === "NoSuchBucket") {
    return new CheckpointError(
      "not_found",
      `[s3] ${site.op} ${where} failed: bucket ${site.bucket} does not exist (${detail}); create it or fix the URL`,
      { cause: error, context },
    );
  }
  if (status === undefined && /^Region is missing/i.test((error as SdkErrorShape | undefined)?.message ?? "")) {
    return new CheckpointError(
      "invalid_argument",
      `[s3] ${site.op} ${where}: no AWS region is configured; set storageOptions.s3.region, or AWS_REGION (or a region for AWS_PROFILE in ~/.aws/config)`,
      { cause: error, context },
    );
  }
  if ((error as SdkErrorShape | undefined)?.name === "CredentialsProviderError") {
    return new CheckpointError(
      "permission_denied",
      `[s3] ${site.op} ${where}: no AWS credentials were found (${detail}); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or pass storageOptions.s3.credentials`,
      { cause: error, context },
    );
  }
  if (!transient && (status === 403 || DENIED_S3_CODES.has(s3Code))) {
    return new CheckpointError(
      "permission_denied",
      `[s3] ${site.op} ${where} was refused: ${detail}; check the credentials and that they may ${site.op.replace(/ing$/, "")} in bucket ${site.bucket}`,
      { cause: error, context },
    );
  }
  return new CheckpointError("storage", `[s3] ${site.op} ${where} failed: ${detail}`, {
    cause: error,
    context: { ...context, transient },
  });
}

function describe(error: unknown, status: number | undefined, s3Code: string): string {
  const e = error as SdkErrorShape | undefined;
  const text = (e?.message ?? String(error)).split("\n")[0]!.trim();
  const parts = [s3Code !== "Error" && !text.startsWith(s3Code) ? `${s3Code}: ${text}` : text];
  if (status !== undefined) parts.push(`HTTP ${status}`);
  if (e?.code !== undefined && !text.includes(e.code)) parts.push(e.code);
  if (e?.$metadata?.requestId) parts.push(`request id ${e.$metadata.requestId}`);
  return parts.join(", ");
}
