import { readBlockChecksums } from "@cairn/core/format";
import { type ByteRange, type ReadOptions, ReadTarget } from "@cairn/core/storage";
import { type FileHandleLike, MAX_CALL_BYTES } from "./fs-like.js";

/** Parts handed to one readv call: Linux's IOV_MAX, past which libuv reads only the first ones anyway. */
const READV_PARTS = 1024;

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

/**
 * `readRange` for a read that asks for its blocks' CRC32Cs (`ReadOptions.blockChecksums`): one
 * @cairn/crc32c-native call preads the range on libuv's threads and checksums each step's bytes
 * there while they are in the cache, instead of this thread hashing them after. Undefined, having
 * read nothing, without the addon, for a read with a head, or when no checksums are asked.
 */
export async function readRangeChecksummed(
  fd: number,
  size: number,
  range: ByteRange | undefined,
  options: ReadOptions | undefined,
): Promise<Uint8Array | undefined> {
  const request = options?.blockChecksums;
  if (!request || !readBlockChecksums || options.head) return undefined;
  const { blockSize } = request;
  if (!Number.isSafeInteger(blockSize) || blockSize < 1) return undefined;
  const length = rangeLength(size, range);
  const target = new ReadTarget(length, options);
  const sums = new Uint32Array(Math.ceil(length / blockSize));
  const filled = await readBlockChecksums(
    fd,
    target.slot(0, length),
    Math.min(range?.offset ?? 0, size),
    blockSize,
    sums,
  );
  // Exactly the blocks of the bytes returned: a short read at the end of the file has fewer.
  request.onChecksums(sums.subarray(0, Math.ceil(filled / blockSize)));
  return target.result(filled);
}

/** Reads from `position` into `parts` in order, however many readv calls that takes; resolves the bytes read. */
export async function readScattered(
  handle: FileHandleLike,
  position: number,
  parts: readonly Uint8Array[],
): Promise<number> {
  const rest = parts.filter((p) => p.byteLength > 0);
  // The next part to fill, and how many of its bytes are already read: a readv call fills at most IOV_MAX parts.
  let first = 0;
  let into = 0;
  let done = 0;
  while (first < rest.length) {
    const batch = rest.slice(first, first + READV_PARTS);
    if (into > 0) batch[0] = batch[0]!.subarray(into);
    const { bytesRead } = await handle.readv(batch, position + done);
    if (bytesRead === 0) break;
    done += bytesRead;
    let left = bytesRead + into;
    while (first < rest.length && left >= rest[first]!.byteLength) left -= rest[first++]!.byteLength;
    into = left;
  }
  return done;
}
