import { constants } from "node:fs";
import { pageAlignedAvailable, pageAlignedSharedBytes } from "@cairn/core/storage";
import { type FileHandleLike, MAX_CALL_BYTES } from "./fs-like.js";
import { WrittenMark } from "./written-mark.js";

/**
 * File offsets, lengths and buffer addresses of direct writes are multiples of this. Linux asks
 * for the device's logical block size (512 or 4096); the page size covers both.
 */
const ALIGN = 4096;
/** Bytes per direct write. */
const BUFFER_BYTES = 4 << 20;
/**
 * Buffers per file: one fills while the others are written. Four keep 16 MiB in flight, as the
 * buffered path's window does, for the same reason: on a training thread each completion waits
 * for the loop to yield, so what is in flight is what a save advances per training step.
 */
const BUFFERS_PER_FILE = 4;
/** Buffers kept for the next writes: enough for the four files a save writes at once. */
const KEEP_FREE = 4 * BUFFERS_PER_FILE;

const free: Uint8Array[] = [];

/** Whether this platform can write with O_DIRECT from aligned memory (Linux, with WebAssembly). */
export const directIoAvailable = constants.O_DIRECT !== undefined && pageAlignedAvailable;

/** Flags for creating a temp file to be written with O_DIRECT (exclusive, as the buffered path's "wx"). */
export function directCreateFlags(): number {
  return constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_DIRECT!;
}

/** A page-aligned buffer (core's WebAssembly memory), as O_DIRECT wants. */
function takeBuffer(): Uint8Array {
  return free.pop() ?? pageAlignedSharedBytes(BUFFER_BYTES);
}

function giveBack(buffers: readonly Uint8Array[]): void {
  for (const buffer of buffers) if (free.length < KEEP_FREE) free.push(buffer);
}

/** Whether open flags ask for O_DIRECT. */
export function opensDirect(flags: string | number): boolean {
  return typeof flags === "number" && constants.O_DIRECT !== undefined && (flags & constants.O_DIRECT) !== 0;
}

/** Writes `length` bytes of `buffer` at `position`, however many writes the file system takes for them. */
export async function writeFully(
  handle: FileHandleLike,
  buffer: Uint8Array,
  length: number,
  position: number,
): Promise<void> {
  let done = 0;
  while (done < length)
    done += (await handle.write(buffer, done, Math.min(length - done, MAX_CALL_BYTES), position + done)).bytesWritten;
}

const roundUp = (n: number): number => Math.ceil(n / ALIGN) * ALIGN;

/**
 * The write, marked handled: it may fail while the body is still being read, long before it is
 * awaited (when its buffer comes round again, or at the end), which must not count as an
 * unhandled rejection.
 */
function handled(write: Promise<void>): Promise<void> {
  write.catch(() => undefined);
  return write;
}

/**
 * Writes a body into a file opened with O_DIRECT, so its bytes go from memory to the device
 * without being copied into the page cache: that copy, not the disk, is what a big buffered
 * write costs in kernel CPU, which a training thread then has to share. The body's parts are copied into aligned buffers and
 * written in whole blocks, several at a time; the last block is padded and the file truncated to
 * the body's length.
 *
 * With `inPlace` (the body's memory is page-aligned: `WriteOptions.pageAligned`), a part that
 * starts on a page boundary while no copied bytes are pending is written straight from its own
 * memory, all but its last partial page, without the copy: a background save staged in the data
 * files' layout (core's staging) is written this way.
 *
 * If the file system refuses the first direct write (EINVAL: no O_DIRECT there, or a stricter
 * alignment), the file is reopened through `reopenBuffered` and written through the page cache
 * instead. Takes over `handle`: returns the handle the caller syncs and closes (`handle`, or the
 * reopened one after closing `handle`), and on failure closes it before rejecting.
 */
export async function writeDirect(
  handle: FileHandleLike,
  body: Iterable<Uint8Array> | AsyncIterable<Uint8Array>,
  check: () => void,
  reopenBuffered: () => Promise<FileHandleLike>,
  inPlace = false,
  /** `WriteOptions.onWritten`. */
  onWritten?: (bytes: number) => void,
): Promise<FileHandleLike> {
  const buffers = Array.from({ length: BUFFERS_PER_FILE }, takeBuffer);
  const pending: (Promise<void> | undefined)[] = buffers.map(() => undefined);
  let direct = true;
  let current = 0;
  let filled = 0;
  let position = 0;
  let pulled = 0;
  const mark = new WrittenMark(onWritten);
  /** Writes `length` bytes of `source` (an aligned buffer, or page-aligned memory of the body's) at `at`. */
  const flush = async (source: Uint8Array, length: number, at: number): Promise<void> => {
    // The first write, the one at 0, probes whether the file system takes direct writes.
    if (at === 0) {
      try {
        await writeFully(handle, source, roundUp(length), at);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EINVAL") throw error;
        direct = false;
        const refused = handle;
        handle = await reopenBuffered();
        await refused.close().catch(() => undefined);
        await writeFully(handle, source, length, at);
      }
      return;
    }
    await writeFully(handle, source, direct ? roundUp(length) : length, at);
  };
  /** Starts writing `length` bytes of `source` from slot `current`, then waits until the next slot is free. */
  const start = async (source: Uint8Array, length: number, fromBody = false): Promise<void> => {
    const settled = fromBody ? mark.writing(position) : undefined;
    const write = settled ? flush(source, length, position).finally(settled) : flush(source, length, position);
    pending[current] = handled(write);
    // The first write decides direct or buffered before any other is started.
    if (position === 0) await write;
    position += length;
    current = (current + 1) % buffers.length;
    await pending[current];
  };
  // Every write started has settled before this returns or throws: the caller closes the handle.
  const settle = async (): Promise<void> => {
    const results = await Promise.allSettled(pending);
    const failed = results.find((r) => r.status === "rejected");
    if (failed) throw failed.reason;
  };
  try {
    for await (const part of body) {
      check();
      let taken = 0;
      if (inPlace && filled === 0 && part.byteOffset % ALIGN === 0) {
        const whole = part.byteLength - (part.byteLength % ALIGN);
        while (taken < whole) {
          const n = Math.min(whole - taken, BUFFER_BYTES);
          await start(part.subarray(taken, taken + n), n, true);
          taken += n;
          check();
        }
      }
      while (taken < part.byteLength) {
        const n = Math.min(part.byteLength - taken, BUFFER_BYTES - filled);
        buffers[current]!.set(part.subarray(taken, taken + n), filled);
        taken += n;
        filled += n;
        if (filled === BUFFER_BYTES) {
          filled = 0;
          await start(buffers[current]!, BUFFER_BYTES);
        }
      }
      pulled += part.byteLength;
      mark.pulled(pulled);
    }
    if (filled > 0) {
      pending[current] = handled(flush(buffers[current]!, filled, position));
      position += filled;
    }
    await settle();
    if (direct && position % ALIGN !== 0) await handle.truncate(position);
    return handle;
  } catch (error) {
    await Promise.allSettled(pending);
    await handle.close().catch(() => undefined);
    throw error;
  } finally {
    giveBack(buffers);
  }
}
