import { GetObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { CheckpointError } from "@cairn/core";
import { parseContentRange } from "@cairn/core/storage";
import { type S3CallContext, s3Call } from "./s3-call.js";
import { httpStatusOf, s3CodeOf } from "./s3-error.js";
import { type Body, readBody } from "./read-body.js";

/** A ranged GET's answer: the bytes, the object's size and ETag, and whether the answer told the size. */
export interface RangedAnswer {
  readonly bytes: Uint8Array;
  readonly size: number;
  readonly told: boolean;
  readonly etag: string | undefined;
}

/**
 * One ranged GET, retried; `undefined` when the range starts at or past the end (416). With
 * `into`, the body is copied into it and must fill it exactly, and the object must still have
 * `etag`: a replaced object would otherwise mix two versions in one read.
 */
export async function rangedGet(
  client: S3Client,
  context: S3CallContext,
  { key, path }: { key: string; path: string },
  offset: number,
  length: number,
  target: { into: Uint8Array; etag: string | undefined } | undefined,
  signal: AbortSignal | undefined,
): Promise<RangedAnswer | undefined> {
  const bucket = context.bucket;
  return s3Call(
    context,
    { op: "reading", key, path },
    async (attempt) => {
      let response;
      try {
        response = await client.send(
          new GetObjectCommand({
            Bucket: bucket,
            Key: key,
            Range: `bytes=${offset}-${offset + length - 1}`,
            ...(target?.etag ? { IfMatch: target.etag } : {}),
          }),
          { abortSignal: attempt.signal },
        );
      } catch (error) {
        if (httpStatusOf(error) === 416 || s3CodeOf(error) === "InvalidRange") return undefined;
        if (target && (httpStatusOf(error) === 412 || s3CodeOf(error) === "PreconditionFailed")) {
          throw replacedWhileRead(bucket, key, path);
        }
        throw error;
      }
      const answered = parseContentRange(response.ContentRange);
      if (response.ContentRange !== undefined && answered === undefined) {
        (response.Body as { destroy?: () => void } | undefined)?.destroy?.();
        throw badRange(bucket, key, path, offset, response.ContentRange);
      }
      // Without Content-Range the server ignored Range and sent the whole object (200).
      const size = answered?.size ?? response.ContentLength ?? 0;
      const told = answered !== undefined || response.ContentLength !== undefined;
      const skip = offset - (answered?.start ?? 0);
      const expected = Math.max(0, Math.min(length, size - offset));
      if (answered && expected > 0 && answered.end < offset + expected - 1) {
        // The answer claims fewer bytes than its own total says the range holds.
        (response.Body as { destroy?: () => void } | undefined)?.destroy?.();
        throw badRange(bucket, key, path, offset, response.ContentRange);
      }
      if (expected === 0) {
        // Nothing to read, whatever the body claims: s3rver answers a Range on an empty
        // object with "bytes 0-0/0" and a Content-Length of 1 but never sends the byte.
        (response.Body as { destroy?: () => void } | undefined)?.destroy?.();
        return { bytes: new Uint8Array(0), size, told, etag: response.ETag };
      }
      if (skip < 0 || (target && target.into.byteLength !== expected)) {
        (response.Body as { destroy?: () => void } | undefined)?.destroy?.();
        if (target) throw replacedWhileRead(bucket, key, path);
        throw new CheckpointError(
          "storage",
          `[s3] reading s3://${bucket}/${key}: asked for bytes from ${offset}, the server answered ${response.ContentRange}`,
          {
            context: { path, protocol: "s3", transient: false },
          },
        );
      }
      const into = target?.into ?? new Uint8Array(expected);
      // A wider answer than asked is cut to the range (s3rver answers "bytes=0-0" with the whole object).
      const got = await readBody(response.Body as Body | undefined, into, skip, attempt);
      if (got !== expected) {
        throw new CheckpointError(
          "storage",
          `[s3] reading s3://${bucket}/${key}: the response ended after ${got} of ${expected} bytes`,
          {
            context: { path, protocol: "s3", transient: true },
          },
        );
      }
      return { bytes: into, size, told, etag: response.ETag };
    },
    { signal },
  );
}

/** A Content-Range that is malformed or disagrees with the range asked: retried, as a damaged answer. */
function badRange(
  bucket: string,
  key: string,
  path: string,
  offset: number,
  contentRange: string | undefined,
): CheckpointError {
  return new CheckpointError(
    "storage",
    `[s3] reading s3://${bucket}/${key}: asked for bytes from ${offset}, the answer's Content-Range is ${JSON.stringify(contentRange)}`,
    {
      context: { path, protocol: "s3", transient: true },
    },
  );
}

/** An object whose ETag changed between the GETs of one read: permanent, the read must start over. */
export function replacedWhileRead(bucket: string, key: string, path: string): CheckpointError {
  return new CheckpointError(
    "storage",
    `[s3] s3://${bucket}/${key} was replaced while it was being read; read it again`,
    {
      context: { path, protocol: "s3", transient: false },
    },
  );
}
