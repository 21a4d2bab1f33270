import type { ReadOptions } from "./storage-adapter.js";

/**
 * Where a ranged read's bytes go, for adapters honouring `ReadOptions.head` and `into`: the
 * range's first bytes into `head`, the rest into `into` when it is long enough, else into a new
 * buffer. Positions are offsets into the range, whichever buffer holds them. An adapter makes
 * one per read, fills it with `slot` (to read straight into place) or `set` (to copy what
 * arrived), and returns `result`.
 */
export class ReadTarget {
  /** The range's length: head and body together. */
  readonly byteLength: number;
  readonly #head: Uint8Array;
  readonly #body: Uint8Array;

  constructor(length: number, options: ReadOptions = {}) {
    this.byteLength = length;
    this.#head = (options.head ?? new Uint8Array(0)).subarray(0, length);
    const bodyLength = length - this.#head.byteLength;
    this.#body =
      options.into && options.into.byteLength >= bodyLength
        ? options.into.subarray(0, bodyLength)
        : new Uint8Array(bodyLength);
  }

  /** How many of the range's first bytes go to `ReadOptions.head`. */
  get headLength(): number {
    return this.#head.byteLength;
  }

  /** The longest view of range bytes from `at` (before `end`) that lies in one buffer. */
  slot(at: number, end: number): Uint8Array {
    const head = this.#head.byteLength;
    return at < head ? this.#head.subarray(at, Math.min(end, head)) : this.#body.subarray(at - head, end - head);
  }

  /** Copies `bytes` to range offset `at`, across the head's end if they straddle it. */
  set(bytes: Uint8Array, at: number): void {
    for (let done = 0; done < bytes.byteLength;) {
      const slot = this.slot(at + done, at + bytes.byteLength);
      slot.set(bytes.subarray(done, done + slot.byteLength));
      done += slot.byteLength;
    }
  }

  /** What the read returns once the range's first `filled` bytes are in place: the body's share of them. */
  result(filled: number): Uint8Array {
    return this.#body.subarray(0, Math.max(0, filled - this.#head.byteLength));
  }
}

/** For a read that got the range's bytes in one buffer: copies the head's share into `head` and returns the rest. */
export function splitHead(bytes: Uint8Array, head: Uint8Array | undefined): Uint8Array {
  if (!head) return bytes;
  const length = Math.min(head.byteLength, bytes.byteLength);
  head.set(bytes.subarray(0, length));
  return bytes.subarray(length);
}
