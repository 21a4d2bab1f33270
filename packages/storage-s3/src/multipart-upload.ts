import {
  AbortMultipartUploadCommand,
  type CompletedPart,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  type S3Client,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { CheckpointError } from "@cairn/core";
import { type KnownCrc32c, cancelledError } from "@cairn/core/storage";
import { crc32c } from "@cairn/core/format";
import { type S3CallContext, crc32cBase64, s3Call } from "./s3-call.js";
import { isOwnUpload } from "./own-object.js";
import { isTransientS3Error, s3CodeOf } from "./s3-error.js";
import { releasePart } from "./slice-parts.js";
import { withUnsignedPayload } from "./unsigned-payload.js";

/** S3 numbers parts 1 to 10,000. */
export const MAX_PARTS = 10_000;

export interface MultipartUploadOptions {
  readonly ifAbsent: boolean;
  /** Send each part's CRC32C and list them in CompleteMultipartUpload. */
  readonly checksums: boolean;
  /** The body's CRC32Cs as its writer knows them (`WriteOptions.crc32c`): parts' checksums come from there. */
  readonly crc32c?: KnownCrc32c | undefined;
  readonly signal?: AbortSignal;
}

/** The parts of a body: the first already read (holding its room), the rest still to pull. */
export interface PartSource {
  readonly first: { readonly bytes: Uint8Array; readonly release: () => void };
  readonly rest: AsyncGenerator<Uint8Array>;
}

/**
 * Uploads one object as a multipart upload: parts go up in parallel, each holding room in the
 * adapter's transfer budget from before it is read until it is stored, so memory stays
 * bounded by the budget whatever the object's size. Each part is buffered, so a
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
  /** Room for one more part in flight, shared with the adapter's other calls; resolves its release. */
  room: (signal: AbortSignal) => Promise<() => void>,
  site: { readonly key: string; readonly path: string },
  source: PartSource,
  options: MultipartUploadOptions,
): Promise<void> {
  const { bucket } = context;
  const { key, path, signal } = { ...site, signal: options.signal };
  const started = await s3Call(
    context,
    { op: "starting a multipart upload of", key, path },
    (attempt) =>
      client.send(
        new CreateMultipartUploadCommand({
          Bucket: bucket,
          Key: key,
          ContentType: "application/octet-stream",
          ...(options.checksums ? { ChecksumAlgorithm: "CRC32C" } : {}),
        }),
        { abortSignal: attempt.signal },
      ),
    { signal },
  ).catch(async (error: unknown) => {
    source.first.release();
    await source.rest.return(undefined);
    throw error;
  });
  const uploadId = started.UploadId;
  if (!uploadId) {
    source.first.release();
    await source.rest.return(undefined);
    throw new CheckpointError(
      "storage",
      `[s3] starting a multipart upload of s3://${bucket}/${key} returned no upload id`,
      {
        context: { path, protocol: "s3" },
      },
    );
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
    const offset = total;
    total += bytes.byteLength;
    const checksum = options.checksums ? partChecksum(bytes, offset, options.crc32c) : undefined;
    const task = uploadPart(client, context, { key, path, uploadId, partNumber }, bytes, checksum, stop.signal)
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
        releasePart(bytes);
        inflight.delete(task);
      });
    inflight.add(task);
  };

  try {
    launch(source.first.bytes, source.first.release);
    for (;;) {
      if (failure) break;
      const release = await room(stop.signal);
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
    // The first part to fail says why; what failed after it (waits, siblings) was only cancelled by it.
    throw await abortUpload(client, context, { key, path, uploadId }, failure ? failure.error : error);
  } finally {
    signal?.removeEventListener("abort", onAbort);
  }
}

async function uploadPart(
  client: S3Client,
  context: S3CallContext,
  part: { key: string; path: string; uploadId: string; partNumber: number },
  bytes: Uint8Array,
  /** The part's CRC32C, base64, to send and list; none for servers that mishandle part checksums. */
  pending: Promise<string> | undefined,
  signal: AbortSignal,
): Promise<CompletedPart> {
  const checksum = await pending;
  const result = await s3Call(
    context,
    { op: `uploading part ${part.partNumber} of`, key: part.key, path: part.path },
    (attempt) =>
      client.send(
        withUnsignedPayload(
          new UploadPartCommand({
            Bucket: context.bucket,
            Key: part.key,
            UploadId: part.uploadId,
            PartNumber: part.partNumber,
            Body: bytes,
            ContentLength: bytes.byteLength,
            ...(checksum ? { ChecksumAlgorithm: "CRC32C", ChecksumCRC32C: checksum } : {}),
          }),
        ),
        { abortSignal: attempt.signal },
      ),
    { signal, watch: "socket" },
  );
  return { PartNumber: part.partNumber, ETag: result.ETag, ...(checksum ? { ChecksumCRC32C: checksum } : {}) };
}

/**
 * The CRC32C (base64) of the body's bytes `bytes` from `offset`: from the writer's own checksums
 * when it gave them (core's block CRC32Cs, combined: no pass over the bytes), else computed.
 */
export async function partChecksum(bytes: Uint8Array, offset: number, known: KnownCrc32c | undefined): Promise<string> {
  return crc32cBase64(known ? await known.of(bytes, offset) : crc32c(bytes));
}

/**
 * CompleteMultipartUpload, retried. An attempt whose answer never came (a reset, a timeout, a
 * 5xx) may still have completed the upload, and a retry then sees NoSuchUpload, 412 for
 * `ifAbsent`, or a 5xx from a server that cannot complete twice: before failing, the object
 * itself is asked whether it is this upload (`isOwnUpload`).
 */
async function complete(
  client: S3Client,
  context: S3CallContext,
  upload: { key: string; path: string; uploadId: string },
  parts: CompletedPart[],
  total: number,
  options: MultipartUploadOptions,
): Promise<void> {
  let ambiguous = false;
  try {
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
            { abortSignal: attempt.signal },
          );
        } catch (error) {
          if (isTransientS3Error(error)) ambiguous = true;
          throw error;
        }
      },
      { signal: options.signal, watch: "socket" },
    );
  } catch (error) {
    if (
      ambiguous &&
      !options.signal?.aborted &&
      (await isOwnUpload(client, context, upload, parts, total, options.ifAbsent))
    )
      return;
    throw error;
  }
}

/**
 * Aborts the upload after `failure` and returns the error to throw: `failure` itself, or, when
 * the abort fails too, the same error with the abort's failure beside it (cause: an
 * AggregateError of both), so the orphaned parts are reported without hiding why the write
 * failed. A bucket lifecycle rule (AbortIncompleteMultipartUpload) removes such uploads.
 */
async function abortUpload(
  client: S3Client,
  context: S3CallContext,
  upload: { key: string; path: string; uploadId: string },
  failure: unknown,
): Promise<unknown> {
  try {
    await s3Call(
      context,
      { op: "aborting the multipart upload of", key: upload.key, path: upload.path },
      ({ signal }) =>
        client.send(
          new AbortMultipartUploadCommand({ Bucket: context.bucket, Key: upload.key, UploadId: upload.uploadId }),
          { abortSignal: signal },
        ),
    );
    return failure;
  } catch (abortFailure) {
    // Gone already (completed, or aborted by a lifecycle rule): nothing is left behind.
    if (abortFailure instanceof CheckpointError && s3CodeOf(abortFailure.cause) === "NoSuchUpload") return failure;
    const original = failure instanceof CheckpointError ? failure : undefined;
    const why = abortFailure instanceof Error ? abortFailure.message : String(abortFailure);
    return new CheckpointError(
      original?.code ?? "storage",
      `${original?.message ?? `[s3] writing s3://${context.bucket}/${upload.key} failed: ${String(failure)}`}; aborting multipart upload ${upload.uploadId} failed too (${why}), so its parts stay stored until a lifecycle rule (AbortIncompleteMultipartUpload) removes them`,
      {
        cause: new AggregateError(
          [failure, abortFailure],
          "the write failed, then aborting its multipart upload failed",
        ),
        context: original?.context ?? { path: upload.path, protocol: "s3" },
      },
    );
  }
}

function bytes(n: number): string {
  return n >= 1 << 20 ? `${Math.round(n / (1 << 20))} MiB` : `${n} bytes`;
}
