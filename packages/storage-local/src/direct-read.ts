import { constants, readFileSync, readSync } from "node:fs";
import { adviseHugePages, readThrough } from "@cairn/core/format";
import { type ByteRange, type ReadOptions, ReadTarget, pageAlignedSharedBytes } from "@cairn/core/storage";
import { directIoAvailable } from "./direct-write.js";
import type { FileHandleLike, FsPromisesLike } from "./fs-like.js";
import { errnoOf } from "./fs-errors.js";
import { rangeLength } from "./file-reads.js";

/** Reads of fewer bytes go through the page cache: bypassing it gains nothing at that size. */
const DIRECT_READ_MIN_BYTES = 1 << 20;
/** File offsets, lengths and buffer addresses of direct reads are multiples of this (see direct-write.ts). */
const ALIGN = 4096;
/** Bytes per direct read: a load's 8 MiB reads, wherever they start, fit one buffer. */
const SPAN_BYTES = 8 << 20;
const BUFFER_BYTES = SPAN_BYTES + 2 * ALIGN;
/** Direct reads in flight in the process at most (libuv runs four file requests at once); their buffers are kept for the next load. */
const MAX_BUFFERS = 4;
const PROBE_BYTES = ALIGN;
/** A transparent huge page (x86-64, aarch64 with 4 KiB pages): a buffer starts on one where it can. */
const HUGE_PAGE = 2 << 20;

const free: Uint8Array[] = [];
let made = 0;
const waiting: ((buffer: Uint8Array) => void)[] = [];
const probeBuffer = new Uint8Array(PROBE_BYTES);

function directReadFlags(): number {
  return constants.O_RDONLY | constants.O_DIRECT!;
}

export { directIoAvailable as directReadAvailable };

/** Bytes the kernel fetched from storage for this thread so far (Linux task I/O accounting), or undefined where it cannot say. */
function fetchedBytes(): number | undefined {
  try {
    const match = /^read_bytes: (\d+)$/m.exec(readFileSync("/proc/thread-self/io", "latin1"));
    return match ? Number(match[1]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether the file's page at `position` is in the page cache: read it on this thread and see
 * whether that made the kernel fetch anything from the device. (Timing the read would tell too,
 * but not on a busy machine, where a cached read can stall for milliseconds.) Where the kernel
 * does not count, the answer is yes: reads then go through the page cache, as they always did.
 */
function cachedAt(fd: number, position: number): boolean {
  const before = fetchedBytes();
  if (before === undefined) return true;
  readSync(fd, probeBuffer, 0, PROBE_BYTES, Math.floor(position / ALIGN) * ALIGN);
  return fetchedBytes() === before;
}

/**
 * A buffer for direct reads, in transparent huge pages where Linux gives them: a direct read into
 * 4 KiB pages reaches the device in requests of at most max_segments pages (254 on this VM's
 * virtio disk: 1 MiB), into 2 MiB pages in requests of max_sectors_kb (4 MiB), as the page
 * cache's readahead does (docs/benchmarks.md, ranks34f).
 */
export function directBuffer(): Uint8Array {
  if (!adviseHugePages) return pageAlignedSharedBytes(BUFFER_BYTES);
  const bytes = pageAlignedSharedBytes(BUFFER_BYTES + HUGE_PAGE);
  // Advice for the span's 8 MiB alone: the few KiB past them (a read's unaligned ends) stay in small pages.
  const at = adviseHugePages(bytes.subarray(0, SPAN_BYTES + HUGE_PAGE - 1));
  return at >= 0 && at + BUFFER_BYTES <= bytes.byteLength
    ? bytes.subarray(at, at + BUFFER_BYTES)
    : bytes.subarray(0, BUFFER_BYTES);
}

async function takeBuffer(): Promise<Uint8Array> {
  const buffer = free.pop();
  if (buffer) return buffer;
  if (made < MAX_BUFFERS) {
    made++;
    return directBuffer();
  }
  return new Promise((resolve) => waiting.push(resolve));
}

function giveBack(buffer: Uint8Array): void {
  const next = waiting.shift();
  if (next) next(buffer);
  else free.push(buffer);
}

/**
 * Reads `[start, start + length)` of a file of `size` bytes opened with O_DIRECT, past the page
 * cache: whole aligned blocks into aligned buffers, then copied into `place` (a view of the range:
 * by the addon's `readThrough`, on the libuv thread that read them) or handed to it in order (with
 * their offset in the range) to be copied out. On a
 * cold cache this spares the kernel filling the page cache, which costs more CPU than the
 * copy. Returns how many bytes it read (fewer only at the end of the file). Rejects EINVAL
 * where the file system refuses direct reads.
 */
async function readDirect(
  handle: FileHandleLike,
  size: number,
  start: number,
  length: number,
  place: Uint8Array | ((bytes: Uint8Array, at: number) => void),
): Promise<number> {
  const end = Math.min(size, start + length);
  // Into one view, with the addon: each buffer's bytes copied out on the libuv thread that read them.
  const through = place instanceof Uint8Array && readThrough !== undefined && handle.fd !== undefined;
  let done = start;
  while (done < end) {
    const buffer = await takeBuffer();
    try {
      const from = Math.floor(done / ALIGN) * ALIGN;
      const to = Math.min(from + BUFFER_BYTES, Math.ceil(end / ALIGN) * ALIGN);
      let got = 0;
      if (through) {
        const into = place.subarray(done - start, Math.min(end, to) - start);
        got = await readThrough!(handle.fd!, buffer.subarray(0, to - from), from, into, done - from);
      } else {
        while (from + got < to) {
          const { bytesRead } = await handle.read(buffer, got, to - from - got, from + got);
          if (bytesRead === 0) break;
          got += bytesRead;
        }
      }
      const last = Math.min(end, from + got);
      if (last <= done) break;
      if (!through) {
        const bytes = buffer.subarray(done - from, last - from);
        if (place instanceof Uint8Array) place.set(bytes, done - start);
        else place(bytes, done - start);
      }
      done = last;
    } finally {
      giveBack(buffer);
    }
  }
  return done - start;
}

/**
 * The big reads of one file that is not in the page cache, made past it (O_DIRECT through a
 * second descriptor). Whether the file is cached is probed once, at its first big read.
 */
export class DirectReads {
  readonly #fs: FsPromisesLike;
  readonly #abs: string;
  readonly #fd: number;
  readonly #cached: (fd: number, position: number) => boolean;
  /** Undefined until probed; false once the file system refused a direct read. */
  #cold: boolean | undefined;
  #handle: Promise<FileHandleLike> | undefined;

  /** `cached` tells whether the page at a position of the file is in the page cache (tests inject it). */
  constructor(
    fs: FsPromisesLike,
    abs: string,
    fd: number,
    cached: (fd: number, position: number) => boolean = cachedAt,
  ) {
    this.#fs = fs;
    this.#abs = abs;
    this.#fd = fd;
    this.#cached = cached;
  }

  /** The range read past the page cache, or undefined where it should go through it. */
  async read(
    size: number,
    range: ByteRange | undefined,
    options: ReadOptions | undefined,
  ): Promise<Uint8Array | undefined> {
    const start = Math.min(range?.offset ?? 0, size);
    const length = rangeLength(size, range);
    if (options?.head || length < DIRECT_READ_MIN_BYTES || this.#cold === false) return undefined;
    const target = new ReadTarget(length, options);
    const body = target.slot(0, length);
    const got = await this.#read(size, start, length, body);
    return got === undefined ? undefined : target.result(got);
  }

  /** `readScattered` past the page cache: the bytes read, or undefined where it should go through it. */
  readScattered(size: number, offset: number, parts: readonly Uint8Array[]): Promise<number | undefined> {
    const length = parts.reduce((n, p) => n + p.byteLength, 0);
    let part = 0;
    let partStart = 0;
    return this.#read(size, Math.min(offset, size), length, (bytes, at) => {
      for (let done = 0; done < bytes.byteLength;) {
        while (at + done >= partStart + parts[part]!.byteLength) partStart += parts[part++]!.byteLength;
        const into = at + done - partStart;
        const n = Math.min(bytes.byteLength - done, parts[part]!.byteLength - into);
        parts[part]!.set(bytes.subarray(done, done + n), into);
        done += n;
      }
    });
  }

  async #read(
    size: number,
    start: number,
    length: number,
    place: Uint8Array | ((bytes: Uint8Array, at: number) => void),
  ): Promise<number | undefined> {
    if (length < DIRECT_READ_MIN_BYTES || this.#cold === false) return undefined;
    // At the range's end: its start may be in what the kernel read ahead after the file's header.
    this.#cold ??= !this.#cached(this.#fd, Math.max(0, Math.min(size, start + length) - PROBE_BYTES));
    if (!this.#cold) return undefined;
    try {
      this.#handle ??= this.#fs.open(this.#abs, directReadFlags());
      return await readDirect(await this.#handle, size, start, length, place);
    } catch (error) {
      if (errnoOf(error) !== "EINVAL") throw error;
      this.#cold = false;
      return undefined;
    }
  }

  async close(): Promise<void> {
    const handle = this.#handle;
    this.#handle = undefined;
    await (await handle?.catch(() => undefined))?.close().catch(() => undefined);
  }
}
