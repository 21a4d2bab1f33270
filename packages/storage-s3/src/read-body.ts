import type { S3Attempt } from "./s3-call.js";

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
