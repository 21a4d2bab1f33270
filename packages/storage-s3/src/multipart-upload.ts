import {
  AbortMultipartUploadCommand,
  type CompletedPart,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  HeadObjectCommand,
  type S3Client,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { CheckpointError, cancelledError, crc32c } from "@cairn/core";
import { type S3CallContext, crc32cBase64, s3Call } from "./s3-call.js";
import { s3CodeOf } from "./s3-error.js";
import type { Semaphore } from "./semaphore.js";

/** S3 numbers parts 1 to 10,000. */
export const MAX_PARTS = 10_000;

export interface MultipartUploadOptions {
  readonly ifAbsent: boolean;
  /** Send each part's CRC32C and list them in CompleteMultipartUpload. */
  readonly checksums: boolean;
  readonly signal?: AbortSignal;
}

/** The parts of a body: the first already read (holding a permit), the rest still to pull. */
export interface PartSource {
  readonly first: { readonly bytes: Uint8Array; readonly release: () => void };
  readonly rest: AsyncGenerator<Uint8Array>;
}

/**
 * Uploads one object as a multipart upload: parts go up in parallel, each holding one of the
 * adapter's transfer permits from before it is read until it is stored, so memory stays
 * bounded by permits × part size whatever the object's size. Each part is buffered, so a
 * failed part is retried on its own (a streamed body cannot be replayed as a whole). The
 * object appears only when CompleteMultipartUpload succeeds, with `If-None-Match: *` there
 * for `ifAbsent`. On any failure (a part that exhausted its retries, the body's producer
 * throwing, an abort) in-flight parts are cancelled and the upload is aborted, so no orphaned
 * parts stay billed; the original error is rethrown.
 *
 * Called by `S3StorageAdapter.write` once a body proves larger than one part.
 */
export async function multipartUpload(
  client: S3Client,
  context: S3CallContext,
  limiter: Semaphore,
  site: { readonly key: string; readonly path: string },
  source: PartSource,
  options: MultipartUploadOptions,
): Promise<void> {
  const { bucket } = context;
  const { key, path, signal } = { ...site, signal: options.signal };
  const started = await s3Call(
    context,
    { op: "starting a multipart upload of", key, path },
    () =>
      client.send(
        new CreateMultipartUploadCommand({
          Bucket: bucket,
          Key: key,
          ContentType: "application/octet-stream",
          ...(options.checksums ? { ChecksumAlgorithm: "CRC32C" } : {}),
        }),
        { abortSignal: signal },
      ),
    signal,
  ).catch(async (error: unknown) => {
    source.first.release();
    await source.rest.return(undefined);
    throw error;
  });
  const uploadId = started.UploadId;
  if (!uploadId) {
    source.first.release();
    await source.rest.return(undefined);
    throw new CheckpointError("storage", `[s3] starting a multipart upload of s3://${bucket}/${key} returned no upload id`, {
      context: { path, protocol: "s3" },
    });
  }

  // Aborted on the first failure so sibling parts stop instead of uploading into a doomed upload.
  const stop = new AbortController();
  const onAbort = (): void => stop.abort(signal?.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  const parts: CompletedPart[] = [];
  const inflight = new Set<Promise<void>>();
  let failure: { error: unknown } | undefined;
  let total = 0;
  let launched = 0;

  const launch = (bytes: Uint8Array, release: () => void): void => {
    const partNumber = ++launched;
    total += bytes.byteLength;
    const task = uploadPart(client, context, { key, path, uploadId, partNumber }, bytes, options.checksums, stop.signal)
      .then(
        (part) => {
          parts.push(part);
        },
        (error: unknown) => {
          failure ??= { error };
          stop.abort(error);
        },
      )
      .finally(() => {
        release();
        inflight.delete(task);
      });
    inflight.add(task);
  };

  try {
    launch(source.first.bytes, source.first.release);
    for (;;) {
      if (failure) break;
      const release = await limiter.acquire(stop.signal);
      let next: IteratorResult<Uint8Array>;
      try {
        next = await source.rest.next();
      } catch (error) {
        release();
        throw error;
      }
      if (next.done) {
        release();
        break;
      }
      if (launched >= MAX_PARTS) {
        release();
        throw new CheckpointError(
          "invalid_argument",
          `[s3] writing s3://${bucket}/${key}: the body needs more than ${MAX_PARTS} parts of ${bytes(next.value.byteLength)}; raise partSize, or pass the body's size so the adapter can pick one`,
          { context: { path, protocol: "s3" } },
        );
      }
      launch(next.value, release);
    }
    await Promise.all(inflight);
    if (failure) throw failure.error;
    if (signal?.aborted) throw cancelledError(signal, `writing s3://${bucket}/${key}`);
    parts.sort((a, b) => a.PartNumber! - b.PartNumber!);
    await complete(client, context, { key, path, uploadId }, parts, total, options);
  } catch (error) {
    stop.abort(error);
    // Lets the producer's generator run its cleanup; it is idle here, waiting for the next pull.
    await source.rest.return(undefined).catch(() => undefined);
    await Promise.allSettled(inflight);
    await abortUpload(client, context, { key, path, uploadId });
    // The first part to fail says why; what failed after it (waits, siblings) was only cancelled by it.
    throw failure ? failure.error : error;
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}

async function uploadPart(
  client: S3Client,
  context: S3CallContext,
  part: { key: string; path: string; uploadId: string; partNumber: number },
  bytes: Uint8Array,
  checksums: boolean,
  signal: AbortSignal,
): Promise<CompletedPart> {
  const checksum = checksums ? crc32cBase64(crc32c(bytes)) : undefined;
  const result = await s3Call(
    context,
    { op: `uploading part ${part.partNumber} of`, key: part.key, path: part.path },
    () =>
      client.send(
        new UploadPartCommand({
          Bucket: context.bucket,
          Key: part.key,
          UploadId: part.uploadId,
          PartNumber: part.partNumber,
          Body: bytes,
          ContentLength: bytes.byteLength,
          ...(checksum ? { ChecksumAlgorithm: "CRC32C", ChecksumCRC32C: checksum } : {}),
        }),
        { abortSignal: signal },
      ),
    signal,
  );
  return { PartNumber: part.partNumber, ETag: result.ETag, ...(checksum ? { ChecksumCRC32C: checksum } : {}) };
}

async function complete(
  client: S3Client,
  context: S3CallContext,
  upload: { key: string; path: string; uploadId: string },
  parts: CompletedPart[],
  total: number,
  options: MultipartUploadOptions,
): Promise<void> {
  await s3Call(
    context,
    { op: "completing the multipart upload of", key: upload.key, path: upload.path, ifAbsent: options.ifAbsent },
    async (attempt) => {
      try {
        await client.send(
          new CompleteMultipartUploadCommand({
            Bucket: context.bucket,
            Key: upload.key,
            UploadId: upload.uploadId,
            MultipartUpload: { Parts: parts },
            ...(options.ifAbsent ? { IfNoneMatch: "*" } : {}),
          }),
          { abortSignal: options.signal },
        );
      } catch (error) {
        // A retry after a lost response finds the upload already completed: the object is ours.
        if (attempt > 1 && s3CodeOf(error) === "NoSuchUpload" && (await sizeOf(client, context.bucket, upload.key)) === total) return;
        throw error;
      }
    },
    options.signal,
  );
}

async function sizeOf(client: S3Client, bucket: string, key: string): Promise<number | undefined> {
  try {
    return (await client.send(new HeadObjectCommand({ Bucket: bucket, Key: key }))).ContentLength;
  } catch {
    return undefined;
  }
}

/**
 * Best effort: a failure to abort must not hide why the write failed. A bucket lifecycle rule
 * (AbortIncompleteMultipartUpload) is the backstop for uploads nobody could abort.
 */
async function abortUpload(client: S3Client, context: S3CallContext, upload: { key: string; path: string; uploadId: string }): Promise<void> {
  await s3Call(context, { op: "aborting the multipart upload of", key: upload.key, path: upload.path }, () =>
    client.send(new AbortMultipartUploadCommand({ Bucket: context.bucket, Key: upload.key, UploadId: upload.uploadId })),
  ).catch(() => undefined);
}

function bytes(n: number): string {
  return n >= 1 << 20 ? `${Math.round(n / (1 << 20))} MiB` : `${n} bytes`;
}
