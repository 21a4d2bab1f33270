import { writeFully } from "./direct-write.js";
import type { FileHandleLike } from "./fs-like.js";
import { WrittenMark } from "./written-mark.js";

/** Waits for `WriteOptions.publishAfter`; its rejection is the write's, as it is (`fsError` keeps what is no file system error as the cause of one). */
export class NotPublished {
  constructor(readonly reason: unknown) {}
}

export async function published(after: Promise<unknown>): Promise<void> {
  try {
    await after;
  } catch (reason) {
    throw new NotPublished(reason);
  }
}

/** Bytes of positional writes a file keeps in flight while it pulls the next parts of its body. */
const WRITE_WINDOW_BYTES = 16 << 20;
/** Writes a file keeps in flight at most, whatever their size. */
const WRITE_WINDOW_COUNT = 32;

/**
 * Writes the body's parts at their positions with several writes in flight, instead of one
 * write at a time: each completion needs an event-loop turn, and a background save beside a
 * training loop may get one turn per training step, so one-at-a-time writes of small parts
 * would pace the save by the training loop. Every write has finished or failed when it returns.
 */
export async function writeWindowed(
  handle: FileHandleLike,
  body: Iterable<Uint8Array> | AsyncIterable<Uint8Array>,
  check: () => void,
  /** `WriteOptions.onWritten`. */
  onWritten?: (bytes: number) => void,
): Promise<void> {
  const mark = new WrittenMark(onWritten);
  const inflight = new Set<Promise<void>>();
  let inflightBytes = 0;
  let failure: { error: unknown } | undefined;
  try {
    let position = 0;
    for await (const part of body) {
      check();
      while (
        inflight.size >= WRITE_WINDOW_COUNT ||
        (inflight.size > 0 && inflightBytes + part.byteLength > WRITE_WINDOW_BYTES)
      )
        await Promise.race(inflight);
      if (failure) throw failure.error;
      const settled = mark.writing(position);
      const write = writeFully(handle, part, part.byteLength, position)
        .finally(settled)
        .catch((error: unknown) => {
          failure ??= { error };
        })
        .finally(() => {
          inflight.delete(write);
          inflightBytes -= part.byteLength;
        });
      inflight.add(write);
      inflightBytes += part.byteLength;
      position += part.byteLength;
      mark.pulled(position);
    }
  } finally {
    await Promise.all(inflight);
  }
  if (failure) throw failure.error;
}
