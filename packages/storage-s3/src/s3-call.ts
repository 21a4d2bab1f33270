import { type RetryPolicy } from "@cairn/core";
import { progressDeadline, withRetry } from "@cairn/core/storage";
import { type S3ErrorSite, s3Error } from "./s3-error.js";

/** What every S3 request of one adapter shares: the bucket, how transient failures are retried, the progress deadline. */
export interface S3CallContext {
  readonly bucket: string;
  readonly retry: Partial<RetryPolicy>;
  /** An attempt that makes no progress for this long is aborted and retried (`progressTimeoutMs`). */
  readonly progressTimeoutMs: number;
}

/** One attempt of a request, as `s3Call` hands it to the code that sends it. */
export interface S3Attempt {
  /** 1 for the first attempt. */
  readonly number: number;
  /** The SDK's `abortSignal`: aborts when the caller's signal does, or when the attempt stalls. */
  readonly signal: AbortSignal;
  /** Marks progress: a chunk of the response body arrived. */
  touch(): void;
}

export interface S3CallOptions {
  readonly signal?: AbortSignal | undefined;
  /**
   * "answer" (default): the attempt must answer, then keep its body moving, within the progress
   * timeout. "socket": only the socket's idle timeout watches it, for requests whose progress
   * the adapter cannot see: uploads, which send their body before any answer, and
   * CompleteMultipartUpload, which S3 may keep open for minutes while it assembles the parts.
   */
  readonly watch?: "answer" | "socket";
}

/**
 * Runs one idempotent S3 request under core's retry policy. Every failure is translated by
 * `s3Error`; transient ones (a stalled attempt included) are retried with backoff and jitter
 * until the policy's bounds, and the error that ends the retries is marked permanent
 * (`exhausted`), so core, which wraps adapter calls in `withRetry` too, does not multiply the
 * attempts.
 */
export async function s3Call<T>(
  context: S3CallContext,
  site: Omit<S3ErrorSite, "bucket">,
  run: (attempt: S3Attempt) => Promise<T>,
  options: S3CallOptions = {},
): Promise<T> {
  const full = { ...site, bucket: context.bucket };
  const { signal } = options;
  return withRetry(
    async (number) => {
      const deadline = progressDeadline(
        options.watch === "socket" ? Number.POSITIVE_INFINITY : context.progressTimeoutMs,
        {
          ...(signal ? { signal } : {}),
          what: `[s3] ${site.op} s3://${context.bucket}/${site.key}`,
          context: { path: site.path, protocol: "s3" },
        },
      );
      try {
        return await run({ number, signal: deadline.signal, touch: deadline.touch });
      } catch (error) {
        throw deadline.expired ? deadline.error : s3Error(error, full, signal);
      } finally {
        deadline.clear();
      }
    },
    { policy: context.retry, exhaust: true, ...(signal ? { signal } : {}) },
  );
}

/** CRC32C as S3 wants it in `x-amz-checksum-crc32c`: the big-endian 32-bit value, base64. */
export function crc32cBase64(value: number): string {
  const out = Buffer.alloc(4);
  out.writeUInt32BE(value >>> 0);
  return out.toString("base64");
}
