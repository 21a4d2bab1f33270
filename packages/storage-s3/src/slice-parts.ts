import { giveBackReusableMemory, takeReusableMemory } from "@cairn/core/storage";

/** Memories of the parts `sliceParts` filled, not yet released. */
const filledParts = new WeakSet<ArrayBufferLike>();

/**
 * Regroups a stream of chunks of any size into parts of exactly `partSize` bytes (the last may
 * be shorter; an empty stream yields nothing). A chunk that covers a whole part is passed on
 * as a view, without a copy; smaller chunks are copied into a part buffer taken from the
 * process's reusable memory (fresh memory costs a page fault per 4 KiB), so at most one part is
 * being filled at a time and each yielded part belongs to the consumer, who hands it to
 * `releasePart` once sent. Chunks must not be modified after the producer yielded them (core's
 * save never does).
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
      // Reused memory: every byte of the part is overwritten before it is sent.
      buffer ??= filledPart(partSize);
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

function filledPart(partSize: number): Uint8Array {
  const part = takeReusableMemory(partSize);
  filledParts.add(part.buffer);
  return part;
}

/**
 * Gives a part `sliceParts` filled back to the process's reusable memory, once no request reads
 * it any more (its upload settled, retries included); a view of the body is left alone.
 */
export function releasePart(part: Uint8Array): void {
  if (filledParts.delete(part.buffer)) giveBackReusableMemory(part);
}
