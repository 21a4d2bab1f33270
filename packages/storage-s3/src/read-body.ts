import type { S3Attempt } from "./s3-call.js";

/** First and last byte and total size from `Content-Range: bytes 0-4/11`, when the server sent one that makes sense. */
export function parseContentRange(
  contentRange: string | undefined,
): { start: number; end: number; size: number } | undefined {
  const match = /^bytes (\d{1,16})-(\d{1,16})\/(\d{1,16})\s*$/.exec(contentRange ?? "");
  if (!match) return undefined;
  const start = Number(match[1]);
  const end = Number(match[2]);
  const size = Number(match[3]);
  if (!Number.isSafeInteger(size) || start > size) return undefined;
  // An empty object answers "bytes 0-0/0" (s3rver); otherwise the range lies inside the object.
  return size === 0 || (start <= end && end < size) ? { start, end, size } : undefined;
}

/** A response body as the SDK hands it over in Node: a readable stream. */
export type Body = AsyncIterable<Uint8Array> & { destroy?: (error?: Error) => void };

/**
 * Copies a response body into `into` from `skip` bytes in and returns the bytes copied, touching
 * the attempt's progress deadline per chunk and destroying the body when the attempt's signal
 * aborts (a stall, or the caller), so a body that stops never hangs the read. Bytes past `into`
 * are read and dropped rather than left unread: breaking off would destroy the socket instead
 * of returning it to the keep-alive pool.
 */
export async function readBody(
  body: Body | undefined,
  into: Uint8Array,
  skip: number,
  attempt: S3Attempt,
): Promise<number> {
  if (!body) return 0;
  const onAbort = (): void =>
    body.destroy?.(attempt.signal.reason instanceof Error ? attempt.signal.reason : new Error("aborted"));
  if (attempt.signal.aborted) onAbort();
  attempt.signal.addEventListener("abort", onAbort, { once: true });
  try {
    let at = 0;
    let toSkip = skip;
    attempt.touch();
    for await (const chunk of body) {
      attempt.touch();
      let piece = chunk;
      if (toSkip > 0) {
        const n = Math.min(toSkip, piece.byteLength);
        piece = piece.subarray(n);
        toSkip -= n;
      }
      const n = Math.min(piece.byteLength, into.byteLength - at);
      into.set(piece.subarray(0, n), at);
      at += n;
    }
    return at;
  } finally {
    attempt.signal.removeEventListener("abort", onAbort);
  }
}
