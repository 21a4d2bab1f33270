import { type ByteRange, type ReadOptions, ReadTarget } from "@cairn/core/storage";
import { type FileHandleLike, MAX_CALL_BYTES } from "./fs-like.js";

/** How many bytes of a file of `size` bytes `range` covers (a range past the end is cut there). */
export function rangeLength(size: number, range: ByteRange | undefined): number {
  const start = Math.min(range?.offset ?? 0, size);
  return Math.max(0, Math.min(range ? range.length : size, size - start));
}

/** Reads `range` of an open file of `size` bytes into the buffers `options` gives (see `ReadTarget`). */
export async function readRange(
  handle: FileHandleLike,
  size: number,
  range: ByteRange | undefined,
  options: ReadOptions | undefined,
): Promise<Uint8Array> {
  const start = Math.min(range?.offset ?? 0, size);
  const length = rangeLength(size, range);
  const target = new ReadTarget(length, options);
  let filled = 0;
  while (filled < length) {
    const slot = target.slot(filled, length);
    const { bytesRead } = await handle.read(slot, 0, Math.min(slot.byteLength, MAX_CALL_BYTES), start + filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return target.result(filled);
}

/** Reads from `position` into `parts` in order, however many readv calls that takes; resolves the bytes read. */
export async function readScattered(
  handle: FileHandleLike,
  position: number,
  parts: readonly Uint8Array[],
): Promise<number> {
  let rest = parts.filter((p) => p.byteLength > 0);
  let done = 0;
  while (rest.length > 0) {
    const { bytesRead } = await handle.readv(rest, position + done);
    if (bytesRead === 0) break;
    done += bytesRead;
    let left = bytesRead;
    while (rest.length > 0 && left >= rest[0]!.byteLength) left -= rest.shift()!.byteLength;
    if (left > 0) rest = [rest[0]!.subarray(left), ...rest.slice(1)];
  }
  return done;
}
