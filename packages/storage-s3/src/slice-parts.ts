/**
 * Regroups a stream of chunks of any size into parts of exactly `partSize` bytes (the last may
 * be shorter; an empty stream yields nothing). A chunk that covers a whole part is passed on
 * as a view, without a copy; smaller chunks are copied into a fresh part buffer, so at most one
 * part is being filled at a time and each yielded part belongs to the consumer. Chunks must not
 * be modified after the producer yielded them (core's save never does).
 */
export async function* sliceParts(
  body: Iterable<Uint8Array> | AsyncIterable<Uint8Array>,
  partSize: number,
): AsyncGenerator<Uint8Array> {
  let buffer: Uint8Array | undefined;
  let filled = 0;
  for await (const chunk of body) {
    let at = 0;
    while (at < chunk.byteLength) {
      if (filled === 0 && chunk.byteLength - at >= partSize) {
        yield chunk.subarray(at, at + partSize);
        at += partSize;
        continue;
      }
      // allocUnsafe: every byte of the part is overwritten before it is sent.
      buffer ??= Buffer.allocUnsafe(partSize);
      const n = Math.min(partSize - filled, chunk.byteLength - at);
      buffer.set(chunk.subarray(at, at + n), filled);
      filled += n;
      at += n;
      if (filled === partSize) {
        yield buffer;
        buffer = undefined;
        filled = 0;
      }
    }
  }
  if (buffer && filled > 0) yield buffer.subarray(0, filled);
}
