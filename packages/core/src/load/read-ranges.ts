import PQueue from "p-queue";
import { copyRows } from "../state/box.js";
import { CheckpointError, isCheckpointError, throwIfAborted } from "../errors.js";
import type { ReadItem } from "../plan/load-planner.js";
import type { CheckpointMetadata } from "../format/metadata.js";
import type { ReadOptions } from "../storage/storage-adapter.js";
import { ByteBudget } from "../storage/byte-budget.js";
import { giveBackReusableMemory, takeReusableMemory } from "../storage/reusable-memory.js";
import { type SizeFn, checkBlocks, checkFileSize, checkHeader, keyText } from "./check-bytes.js";
import {
  type Piece,
  type RangeRead,
  type ReadDestination,
  directTarget,
  planRanges,
  scatterTargets,
} from "./plan-ranges.js";

/** Size of the reads a range read straight into its destination is issued as, so verification follows the reads closely. */
const PIPELINED_READ_BYTES = 8 << 20;

/**
 * Most bytes between a data file's header and its first range that are read (and dropped) to
 * fetch the header in that range's request: fewer than a network round trip is worth.
 */
const HEADER_GAP_BYTES = 1 << 20;

export interface RangeReadOptions {
  /**
   * Read each data file's header in the same request as the file's first range, when that range
   * starts at most `HEADER_GAP_BYTES` past it (for remote storage: `StorageAdapter.remote`).
   */
  readonly headerInFirstRange: boolean;
  readonly concurrency: number;
  readonly maxReadBytes: number;
  /**
   * Neighbouring pieces of a file at most this many bytes apart are read in one request, the gap
   * read and dropped: 0 for local storage (read only needed blocks), more where a request costs a round trip.
   */
  readonly coalesceGapBytes?: number;
  readonly maxInflightBytes: number;
  /** Read a range or header that fails its checksum (or comes short) once more before reporting it `corrupt`: for network storage. */
  readonly rereadDamaged: boolean;
  /**
   * Every data file read from is checked to have the size `metadata.json` records (a truncated or
   * extended file is `corrupt`), once its reads have settled: remote adapters tell the size in reads' answers.
   */
  readonly sizeOf: SizeFn;
  /** Data files whose size and header an earlier call checked: not checked again; files checked here are added. */
  readonly checkedFiles?: Set<string>;
  /** Reads a range into several buffers in order, resolving the bytes read; undefined where it cannot (see `ObjectReaders.readScattered`). */
  readonly readScattered?: (file: string, offset: number, parts: readonly Uint8Array[]) => Promise<number | undefined>;
  /**
   * False only for files that carry no block checksums (a Hugging Face safetensors layout, chosen
   * by the caller's `hf+` URL, never by anything stored): sizes and headers are still checked.
   */
  readonly verifyBlocks?: boolean;
  readonly signal?: AbortSignal;
}

/** Reads `[offset, offset + length)` of a data file, as `StorageAdapter.read` does with these options. */
export type ReadFn = (
  file: string,
  offset: number,
  length: number,
  options?: Pick<ReadOptions, "into" | "head" | "blockChecksums">,
) => Promise<Uint8Array>;

/**
 * Executes a load plan's reads: every data file read from must have the size `metadata.json`
 * records and a header matching its CRC32C; each chunk's needed bytes are read in block-aligned
 * pieces (so each block read is verified), neighbouring pieces of a file are merged into one
 * range read, and verified bytes are copied
 * into their destinations. A read that lands in one contiguous run of a destination is read
 * straight into it; others are staged in the process's reusable memory (kept between loads), so
 * a load's extra memory is bounded by concurrency × maxReadBytes (plus headers).
 *
 * A header is read on its own, or, with `headerInFirstRange`, by extending the file's first
 * range back to byte 0 with the bytes before the range going to a buffer of their own
 * (`ReadOptions.head`): one request per range and none per header, and still no copy of the
 * range's bytes. A file whose first range starts far past its header has it read on its own.
 */
export async function readRanges(
  metadata: CheckpointMetadata,
  items: readonly ReadItem[],
  destinations: readonly ReadDestination[],
  read: ReadFn,
  options: RangeReadOptions,
): Promise<{ files: number }> {
  const verify = options.verifyBlocks !== false;
  const { ranges, maxRead } = planRanges(items, destinations, options.maxReadBytes, options.coalesceGapBytes ?? 0);
  const firstRanges = new Map<string, RangeRead>();
  for (const range of ranges) if (!firstRanges.has(range.file)) firstRanges.set(range.file, range);
  const withHeader = new Set<RangeRead>();
  if (options.headerInFirstRange) {
    for (const range of firstRanges.values()) {
      const headerEnd = 8 + metadata.files[range.file]!.headerLength;
      if (headerEnd <= range.start && range.start - headerEnd <= HEADER_GAP_BYTES) withHeader.add(range);
    }
  }
  const queue = new PQueue({ concurrency: Math.max(1, options.concurrency) });
  const budget = new ByteBudget(options.maxInflightBytes);
  const tasks: Promise<void>[] = [];
  for (const [file, range] of firstRanges) {
    if (options.checkedFiles?.has(file)) continue;
    if (!withHeader.has(range)) tasks.push(queue.add(() => verified(() => verifyHeader(file, metadata, read))));
  }
  for (const range of ranges) {
    tasks.push(
      queue.add(async () => {
        throwIfAborted(options.signal, "the load", null);
        await verified(() => readRange(range));
      }),
    );
  }
  const settled = await Promise.allSettled(tasks);
  const failure = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
  // A wrong size explains a failed read best (a short read of a truncated file); other failures stand as they are.
  if (failure && !isCheckpointError(failure.reason, "corrupt") && !isCheckpointError(failure.reason, "not_found"))
    throw failure.reason;
  const unchecked = [...firstRanges.keys()].filter((file) => !options.checkedFiles?.has(file));
  const sizes = await Promise.allSettled(
    unchecked.map((file) => queue.add(() => checkFileSize(file, metadata, options.sizeOf))),
  );
  const wrongSize = sizes.find((s): s is PromiseRejectedResult => s.status === "rejected");
  if (wrongSize) throw wrongSize.reason;
  if (failure) throw failure.reason;
  for (const file of firstRanges.keys()) options.checkedFiles?.add(file);
  return { files: firstRanges.size };

  /** Bytes damaged on the wire are not damaged in storage: with `rereadDamaged`, a read failing its check is read once more. */
  async function verified(readAndCheck: () => Promise<void>): Promise<void> {
    try {
      await readAndCheck();
    } catch (error) {
      if (!options.rereadDamaged || !isCheckpointError(error, "corrupt")) throw error;
      await readAndCheck();
    }
  }

  /** Reads one range, verifies every block of it (and the header read with it) and copies it into its destinations. */
  async function readRange(range: RangeRead): Promise<void> {
    const direct = directTarget(range, destinations);
    if (direct && !withHeader.has(range)) return readDirect(range, direct);
    if (!withHeader.has(range) && (await readScattered(range))) return;
    const length = range.end - range.start;
    // The header and any gap after it, read in this range's request: [0, range.start).
    const head = withHeader.has(range) ? new Uint8Array(range.start) : undefined;
    const held = (direct ? 0 : length) + (head?.byteLength ?? 0);
    const release = await budget.acquire(held);
    // Staging for bytes that cannot land in place: the process's reusable memory, not memory of this call.
    const scratch = direct ? undefined : takeReusableMemory(maxRead);
    try {
      const into = direct ?? scratch;
      const data = head
        ? await read(range.file, 0, range.end, { into, head })
        : await read(range.file, range.start, length, { into });
      if (head) {
        // A read that ended before the range says nothing of how much of the header came: read it on its own.
        if (data.byteLength === 0) await verifyHeader(range.file, metadata, read);
        else checkHeader(range.file, metadata, head);
      }
      if (data.byteLength < length) throw truncated(range, range.start + data.byteLength);
      for (const piece of range.pieces) {
        const bytes = data.subarray(piece.start - range.start, piece.end - range.start);
        if (verify) verifyPiece(piece, bytes, destinations);
        if (direct && data.buffer === direct.buffer && data.byteOffset === direct.byteOffset) continue;
        for (const { item, layout } of piece.consumers) {
          const destination = destinations[item.request]!;
          copyRows(layout, destination.itemSize, bytes, piece.start - item.chunk.byteOffset, destination.buffer);
        }
      }
    } finally {
      release();
      if (scratch) giveBackReusableMemory(scratch);
    }
  }

  /**
   * Reads a range straight into its destination as several reads issued at once, and verifies
   * each as it lands, in order: the checksums of the first bytes run while later ones are read.
   */
  async function readDirect(range: RangeRead, into: Uint8Array): Promise<void> {
    const piece = range.pieces[0]!;
    const key = destinations[piece.consumers[0]!.item.request]!.key;
    const { blockSize } = piece.chunk;
    const step = Math.max(blockSize, Math.floor(PIPELINED_READ_BYTES / blockSize) * blockSize);
    const reads: { at: number; length: number; data: Promise<Uint8Array>; sums: { given?: Uint32Array } }[] = [];
    for (let at = range.start; at < range.end; at += step) {
      const length = Math.min(step, range.end - at);
      // Where the adapter hashes the blocks as they arrive (OPFS, in its read workers), only the comparison is left here.
      const sums: { given?: Uint32Array } = {};
      const blockChecksums = { blockSize, onChecksums: (computed: Uint32Array) => (sums.given = computed) };
      const data = read(range.file, at, length, {
        into: into.subarray(at - range.start, at - range.start + length),
        ...(verify ? { blockChecksums } : {}),
      });
      // Awaited in order below; one failing early must not count as unhandled meanwhile.
      data.catch(() => undefined);
      reads.push({ at, length, data, sums });
    }
    try {
      for (const { at, length, data, sums } of reads) {
        const bytes = await data;
        if (bytes.byteLength < length) throw truncated(range, at + bytes.byteLength);
        const given = sums.given?.length === Math.ceil(bytes.byteLength / blockSize) ? sums.given : undefined;
        if (verify) checkBlocks(piece.chunk, key, at - piece.chunk.byteOffset, bytes, given);
        const place = into.subarray(at - range.start, at - range.start + length);
        if (bytes.buffer !== place.buffer || bytes.byteOffset !== place.byteOffset) place.set(bytes);
      }
    } finally {
      // Every read has settled before the range does: none writes into the destination after a failure is reported.
      await Promise.allSettled(reads.map((r) => r.data));
    }
  }

  /**
   * Reads a range of neighbouring pieces that each land in one contiguous run of one destination
   * straight into those runs, with no buffer and no copy. False, having read nothing, where it cannot.
   */
  async function readScattered(range: RangeRead): Promise<boolean> {
    const parts = options.readScattered ? scatterTargets(range, destinations) : undefined;
    if (!parts) return false;
    const got = await options.readScattered!(range.file, range.start, parts);
    if (got === undefined) return false;
    if (got < range.end - range.start) throw truncated(range, range.start + got);
    if (verify) for (const [i, piece] of range.pieces.entries()) verifyPiece(piece, parts[i]!, destinations);
    return true;
  }

  function truncated(range: RangeRead, fileEnd: number): CheckpointError {
    const key = keyText(destinations[range.pieces[0]!.consumers[0]!.item.request]!.key);
    return new CheckpointError(
      "corrupt",
      `${range.file} is truncated: ${key} needs bytes up to ${range.end} but the file ends at ${fileEnd}`,
      {
        context: { file: range.file, key },
      },
    );
  }
}

async function verifyHeader(file: string, metadata: CheckpointMetadata, read: ReadFn): Promise<void> {
  checkHeader(file, metadata, await read(file, 0, 8 + metadata.files[file]!.headerLength));
}

function verifyPiece(piece: Piece, data: Uint8Array, destinations: readonly ReadDestination[]): void {
  checkBlocks(
    piece.chunk,
    destinations[piece.consumers[0]!.item.request]!.key,
    piece.start - piece.chunk.byteOffset,
    data,
  );
}
