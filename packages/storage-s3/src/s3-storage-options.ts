import { CheckpointError, type RetryPolicy } from "@cairn/core";
import { DEFAULT_PROGRESS_TIMEOUT_MS } from "@cairn/core/storage";

/** The smallest part S3 accepts for any part but the last. */
export const MIN_PART_SIZE = 5 << 20;

/** How the adapter moves bytes; every field has a default that is right for AWS S3. */
export interface S3StorageAdapterOptions {
  /**
   * Bytes per part of a multipart upload and per ranged GET (default 8 MiB, at least 5 MiB).
   * A body that fits in one part is sent with one PutObject. When a write passes its size, the
   * part size grows as needed to stay within S3's 10,000 parts.
   */
  readonly partSize?: number;
  /** Part uploads and ranged GETs in flight at once, across all calls on this adapter (default 8). */
  readonly concurrency?: number;
  /**
   * CRC32C sent with the data, so the server verifies the bytes before storing them (default on
   * for both). `put`: on PutObject. `multipart`: on every UploadPart, with each part's checksum
   * listed in CompleteMultipartUpload as AWS requires for such uploads.
   */
  readonly checksums?: { readonly put?: boolean; readonly multipart?: boolean };
  /**
   * Bounds for retrying transient failures (core's `DEFAULT_RETRY_POLICY` otherwise). The
   * adapter retries each request itself; an error it gave up on reaches core as permanent.
   */
  readonly retry?: Partial<RetryPolicy>;
  /**
   * A request that makes no progress for this long is aborted and retried as a transient
   * failure (default 30 s): a GET, HEAD, LIST or DELETE that does not answer, a body that stops
   * arriving. It is an idle deadline, never a total one, so a large part on a slow link is not
   * cut off while it moves. Uploads and CompleteMultipartUpload, whose progress only the socket
   * sees, are watched by the socket timeout of the client the adapter builds (set to this value);
   * a `client` passed in should set `requestHandler: { socketTimeout }` itself.
   */
  readonly progressTimeoutMs?: number;
}

const DEFAULT_PART_SIZE = 8 << 20;
const DEFAULT_CONCURRENCY = 8;
/** The options' part size, concurrency and progress timeout, defaulted and checked (`invalid_argument`). */
export function checkS3Options(options: S3StorageAdapterOptions): {
  partSize: number;
  concurrency: number;
  progressTimeoutMs: number;
} {
  const partSize = options.partSize ?? DEFAULT_PART_SIZE;
  const concurrency = options.concurrency ?? DEFAULT_CONCURRENCY;
  const progressTimeoutMs = options.progressTimeoutMs ?? DEFAULT_PROGRESS_TIMEOUT_MS;
  if (!Number.isSafeInteger(partSize) || partSize < MIN_PART_SIZE) {
    throw new CheckpointError(
      "invalid_argument",
      `[s3] partSize must be a whole number of bytes of at least 5 MiB (S3's minimum part), not ${partSize}`,
    );
  }
  if (!(progressTimeoutMs > 0)) {
    throw new CheckpointError(
      "invalid_argument",
      `[s3] progressTimeoutMs must be a positive number of milliseconds (Infinity for none), not ${progressTimeoutMs}`,
    );
  }
  if (!Number.isSafeInteger(concurrency) || concurrency < 1) {
    throw new CheckpointError(
      "invalid_argument",
      `[s3] concurrency must be a whole number of at least 1, not ${concurrency}`,
    );
  }
  return { partSize, concurrency, progressTimeoutMs };
}
