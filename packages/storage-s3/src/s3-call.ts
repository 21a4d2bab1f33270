import { type RetryPolicy, withRetry } from "@cairn/core";
import { type S3ErrorSite, exhausted, s3Error } from "./s3-error.js";

/** What every S3 request of one adapter shares: the bucket and how transient failures are retried. */
export interface S3CallContext {
  readonly bucket: string;
  readonly retry: Partial<RetryPolicy>;
}

/**
 * Runs one idempotent S3 request under core's retry policy. Every failure is translated by
 * `s3Error`; transient ones are retried with backoff and jitter until the policy's bounds, and
 * the error that ends the retries is marked permanent (`exhausted`), so core, which wraps
 * adapter calls in `withRetry` too, does not multiply the attempts.
 */
export async function s3Call<T>(
  context: S3CallContext,
  site: Omit<S3ErrorSite, "bucket">,
  run: (attempt: number) => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  const full = { ...site, bucket: context.bucket };
  let attempts = 0;
  try {
    return await withRetry(
      async (attempt) => {
        attempts = attempt;
        try {
          return await run(attempt);
        } catch (error) {
          throw s3Error(error, full, signal);
        }
      },
      { policy: context.retry, ...(signal ? { signal } : {}) },
    );
  } catch (error) {
    throw exhausted(error, attempts);
  }
}

/** CRC32C as S3 wants it in `x-amz-checksum-crc32c`: the big-endian 32-bit value, base64. */
export function crc32cBase64(value: number): string {
  const out = Buffer.alloc(4);
  out.writeUInt32BE(value >>> 0);
  return out.toString("base64");
}
