import { onMainThread } from "#platform/runtime.js";
import { blockChecksumsAsync, startChecksumWorkers } from "#platform/save/checksum-workers.js";
import { hexDigests } from "./checksums-here.js";
import type { OpenedCheckpoint } from "../storage/checkpoint-location.js";
import { pageAlignedAvailable } from "../storage/page-aligned.js";
import { dataFileShape } from "../plan/data-file-layout.js";
import { throwIfAborted } from "../errors.js";
import { type Leaf, hostDataOf, stagedPlaceOf } from "../state/leaf.js";
import { checkStagedSums } from "./staged-sums.js";
import { DataFileCrc32c } from "./data-file-crc32c.js";
import { COALESCE_BELOW, coalesce, groupItems } from "./item-groups.js";
import { WINDOW_BYTES, type WindowedChecksums, itemBytes, writeThroughWindows } from "./write-windows.js";
import type { ChunkMetadata, DataFileMetadata } from "../format/metadata.js";
import { withRetry } from "../storage/retry.js";
import type { SafetensorsLayout } from "../format/safetensors.js";
import type { SaveOptions } from "./save-options.js";
import type { DataFilePlan, WriteItem } from "../plan/save-planner.js";
import { type WriteOptions, joinPath } from "../storage/storage-adapter.js";

/** A chunk a rank wrote, with the item it came from. */
export interface WrittenChunk {
  readonly item: WriteItem;
  readonly chunk: ChunkMetadata;
}

/** An item's block CRC32Cs and content hash, computed before its file is written. */
export interface KnownChecksums {
  readonly sums: readonly number[];
  /** Absent only while content hashing is off (`setContentHashing`). */
  readonly hash?: string;
}

/** Block CRC32Cs and content hashes of items, in their order. */
interface ItemChecksums {
  readonly sums: readonly (readonly number[])[];
  readonly hashes?: readonly (string | undefined)[];
}

/** File offsets in a staged segment's body parts are cut on these boundaries (direct I/O's alignment). */
const PAGE = 4096;
/** A file of small items only, up to this size, goes through one window where the storage does not report progress. */
const PACK_FILE_BELOW = 64 << 20;

/**
 * On the main thread, where page-aligned memory can be had, a file goes through windows of
 * reused page-aligned shared memory (save/write-windows.ts): every file where the storage reports
 * its progress (file://), so windows are reused as they are written; elsewhere a file of at least
 * two small items (all below COALESCE_BELOW) of at most PACK_FILE_BELOW bytes, whole, in one window.
 * Returns the window size, or undefined for the plain path.
 */
function windowBytesFor(
  file: DataFilePlan,
  leaves: readonly Leaf[],
  layout: SafetensorsLayout,
  location: OpenedCheckpoint,
): number | undefined {
  if (!onMainThread || !pageAlignedAvailable) return undefined;
  // Staged copies (a background save's) are copies already, whose staged sums the plain path checks.
  // Index loops, here and below: a loop run before V8 optimizes it (once per save) makes an iterator result per turn.
  const { items } = file;
  for (let i = 0; i < items.length; i++) {
    const leaf = leaves[items[i]!.leafIndex];
    if (leaf !== undefined && leaf.kind !== "value" && leaf.stagedSums !== undefined) return undefined;
  }
  if (location.storage.reportsWritten === true) return WINDOW_BYTES;
  if (layout.fileSize > PACK_FILE_BELOW || file.items.length < 2) return undefined;
  for (let i = 0; i < items.length; i++) if (items[i]!.byteLength >= COALESCE_BELOW) return undefined;
  return PACK_FILE_BELOW;
}

/**
 * Starts the checksum workers when this save's files will go through windows, which they hash:
 * their start (about 50 ms) then overlaps planning instead of holding up the first windows.
 */
export function prepareDataFileWrites(location: OpenedCheckpoint): void {
  if (onMainThread && pageAlignedAvailable && location.storage.reportsWritten === true) startChecksumWorkers();
}

/**
 * The page-aligned memory copy staging laid this file out in (its header, then its items back
 * to back, file offset = memory offset): when the plan gives this rank the very file staging
 * asked the planner for (`SavePlanner.rankFiles`), the same items in the same order.
 */
function stagedSegment(file: DataFilePlan, leaves: readonly Leaf[], layout: SafetensorsLayout): Uint8Array | undefined {
  const first = file.items[0] && leaves[file.items[0].leafIndex];
  const segment = stagedPlaceOf(first)?.segment;
  if (segment === undefined) return undefined;
  for (const [index, item] of file.items.entries()) {
    const leaf = leaves[item.leafIndex]!;
    const staged = stagedPlaceOf(leaf);
    if (staged?.segment !== segment || staged.index !== index || staged.count !== file.items.length) return undefined;
    // A planner whose global plan cut a leaf that its rankFiles kept whole breaks its contract: written the plain way.
    if (hostDataOf(leaf)?.byteLength !== item.byteLength) return undefined;
  }
  const data = hostDataOf(first!)!;
  return new Uint8Array(data.buffer, data.byteOffset - layout.offsets[0]!, layout.fileSize);
}

/**
 * Streams one data file: the safetensors header (known from shapes alone), then the items'
 * bytes. Items go in groups, each read (tfjs `data()`) while the one before is written, with one
 * checksum round trip and few writes per group, because a background save may get only one
 * event-loop turn per training step. A group's checksums are computed beside its write, not
 * before it: the disk starts at once, and the checksums are only needed for the metadata. A
 * group is read once the group before the previous one is hashed, so a file holds few groups'
 * bytes at once. A transient storage failure rewrites the whole file.
 *
 * A file staged as a page-aligned segment goes out as slices of that segment, cut on page
 * boundaries as each group is read, so the storage may write it from there in place. On the
 * main thread most others go through windows of page-aligned memory (`windowBytesFor`); those
 * resolve once every window is hashed, so the metadata can be made while the write ends, and
 * `written` settles with the write (the plain path resolves after it, `written` already settled).
 * `distinctNames`: as `dataFileLayout` takes it. The layout may be one kept from an earlier save of
 * the same structure (`dataFileShape`). Where `digests` is returned, the chunks' content hashes
 * are those bytes and the chunks have no `hash` string: the caller keeps them (`rememberDigests`)
 * or spells them out (`spellOutHashes`).
 */
export async function writeDataFile(
  file: DataFilePlan,
  leaves: readonly Leaf[],
  location: OpenedCheckpoint,
  options: SaveOptions,
  blockSize: number,
  distinctNames = false,
  /** Checksums already computed (an incremental save's comparison), not computed again. */
  known?: ReadonlyMap<WriteItem, KnownChecksums>,
  /** `WriteOptions.syncLater`: the caller syncs the file (with others) before relying on it. */
  syncLater = false,
): Promise<{ file: DataFileMetadata; chunks: WrittenChunk[]; digests?: Uint8Array; written: Promise<void> }> {
  const { names, layout, blockSizes, headerCrc32c, shared } = dataFileShape(file.items, distinctNames, blockSize);
  const rank = location.group.rank;
  const path = joinPath(location.dir, file.name);
  const staged = stagedSegment(file, leaves, layout);
  const windowBytes = staged ? undefined : windowBytesFor(file, leaves, layout, location);
  const writeOptions = {
    size: layout.fileSize,
    signal: options.signal,
    ...(staged || windowBytes !== undefined ? { pageAligned: true } : {}),
    ...(syncLater ? { syncLater } : {}),
  };
  let sums: (readonly number[] | undefined)[];
  let hashes: (string | undefined)[] = [];
  /**
   * Every chunk's content hash as bytes (16 at 16 * i), where every one was hashed here (none
   * `known`): the chunks then have no `hash` string (the caller keeps these or spells them out).
   */
  let digests: Uint8Array | undefined;
  let written = Promise.resolve();
  if (windowBytes !== undefined) {
    // Resolves with the checksums once every window is hashed, usually before the write ends.
    let hashed!: (checksums: WindowedChecksums) => void;
    const early = new Promise<WindowedChecksums>((resolve) => (hashed = resolve));
    const writing = writeThroughWindows(
      file.items,
      leaves,
      layout,
      blockSizes,
      windowBytes,
      (i) => !known?.has(file.items[i]!),
      options.signal,
      (attempt) =>
        withRetry(
          () => attempt((body, progress) => location.storage.write(path, body, { ...writeOptions, ...progress })),
          { policy: options.retry, signal: options.signal },
        ),
      hashed,
    );
    writing.catch(() => undefined);
    const checksums = await Promise.race([early, writing]);
    sums = checksums.sums;
    let all = true;
    for (let i = 0; i < file.items.length; i++) if (checksums.hashed[i] !== 1) all = false;
    if (all) digests = checksums.digests;
    else if (checksums.hashed.includes(1)) {
      // Some items known (an incremental save's comparison): the others' hashes as strings here.
      const hex = hexDigests(checksums.digests, file.items.length);
      hashes = hex.map((h, i) => (checksums.hashed[i] === 1 ? h : undefined));
    }
    written = writing.then(() => undefined);
  } else {
    ({ sums, hashes } = await writeInGroups(
      file,
      leaves,
      location,
      options,
      layout,
      blockSizes,
      staged,
      known,
      path,
      writeOptions,
      shared,
    ));
  }
  const chunks: WrittenChunk[] = file.items.map((item, i) => {
    const own = known?.get(item);
    return {
      item,
      chunk: {
        offsets: item.chunk.offsets,
        sizes: item.chunk.sizes,
        file: file.name,
        tensorName: names[i]!,
        byteOffset: layout.offsets[i]!,
        byteLength: item.byteLength,
        blockSize: blockSizes[i]!,
        crc32c: own ? own.sums : sums[i]!,
        // Undefined only while content hashing is off (a benchmark's baseline); one object shape either way.
        hash: own ? own.hash : hashes[i],
      },
    };
  });
  const headerLength = layout.header.byteLength - 8;
  return {
    file: { rank, size: layout.fileSize, headerLength, headerCrc32c },
    chunks,
    ...(digests ? { digests } : {}),
    written,
  };
}

/** The plain path of `writeDataFile`: items read and hashed in groups, written as they are (or from their staged segment). */
async function writeInGroups(
  file: DataFilePlan,
  leaves: readonly Leaf[],
  location: OpenedCheckpoint,
  options: SaveOptions,
  layout: SafetensorsLayout,
  blockSizes: readonly number[],
  segment: Uint8Array | undefined,
  known: ReadonlyMap<WriteItem, KnownChecksums> | undefined,
  path: string,
  writeOptions: WriteOptions,
  /** The header is kept for later saves: storage gets a copy, as it may keep or reuse what it is given. */
  sharedHeader: boolean,
): Promise<{ sums: (readonly number[] | undefined)[]; hashes: (string | undefined)[] }> {
  const groups = groupItems(file.items);
  /** Reads a group's bytes, and starts hashing them in one call. Resolves when the bytes are read; `sums` when they are hashed. */
  const read = async (group: readonly number[]): Promise<{ datas: Uint8Array[]; sums: Promise<ItemChecksums> }> => {
    throwIfAborted(options.signal, "the save");
    const datas: Uint8Array[] = [];
    for (const i of group) {
      const data = itemBytes(file.items[i]!, leaves[file.items[i]!.leafIndex]!);
      datas.push(data instanceof Promise ? await data : data);
    }
    // An incremental save hashed the items it compared with its base already: only the others are hashed.
    const todo = known ? group.flatMap((i, k) => (known.has(file.items[i]!) ? [] : [k])) : group.map((_, k) => k);
    const sums =
      todo.length === 0
        ? Promise.resolve({ sums: [], hashes: [] })
        : blockChecksumsAsync(
            todo.map((k) => datas[k]!),
            todo.map((k) => blockSizes[group[k]!]!),
          );
    sums.catch(() => undefined);
    return { datas, sums };
  };
  /** Each group's checksums, of the latest attempt at the write. */
  let hashing: Promise<ItemChecksums>[] = [];
  /** The file's ranges' CRC32Cs from the groups' block sums, for storage that sends one per request. */
  const rangeSums = new DataFileCrc32c({ offsets: layout.offsets, items: file.items, blockSizes });
  /** A group's block sums in its order: known ones where an incremental save had them, computed ones for the rest. */
  const groupSums = async (group: readonly number[], computed: Promise<ItemChecksums>) => {
    const { sums } = await computed;
    let next = 0;
    return group.map((i) => known?.get(file.items[i]!)?.sums ?? sums[next++]!);
  };
  const body = async function* (): AsyncGenerator<Uint8Array> {
    hashing = [];
    rangeSums.reset();
    let sent = 0;
    /** The segment up to `end`, from where the last slice ended. */
    const slice = function* (end: number): Generator<Uint8Array> {
      if (end > sent) yield segment!.subarray(sent, end);
      sent = Math.max(sent, end);
    };
    if (!segment) yield sharedHeader ? layout.header.slice() : layout.header;
    const readNext = (reading: ReturnType<typeof read>): ReturnType<typeof read> => {
      // Settled when awaited next turn; marked handled so an abandoned write leaves no unhandled rejection.
      reading.catch(() => undefined);
      return reading;
    };
    let next = groups.length > 0 ? readNext(read(groups[0]!)) : undefined;
    for (let g = 0; g < groups.length; g++) {
      const current = await next!;
      hashing.push(current.sums);
      const sums = groupSums(groups[g]!, current.sums);
      sums.catch(() => undefined);
      rangeSums.add(groups[g]!, sums);
      if (g + 1 < groups.length) {
        // The next group is read beside this one's write, once the group before this one is hashed:
        // that bounds the bytes read ahead of their hashing (tfjs data() may download them from a device).
        const before = g >= 1 ? hashing[g - 1] : undefined;
        next = readNext(before ? before.then(() => read(groups[g + 1]!)) : read(groups[g + 1]!));
      }
      const group = groups[g]!;
      if (segment) {
        const last = group[group.length - 1]!;
        yield* slice(Math.floor((layout.offsets[last]! + file.items[last]!.byteLength) / PAGE) * PAGE);
      } else {
        yield* onMainThread ? coalesce(current.datas) : current.datas;
      }
    }
    if (segment) yield* slice(layout.fileSize);
  };
  await withRetry(() => location.storage.write(path, body(), { ...writeOptions, crc32c: rangeSums }), {
    policy: options.retry,
    signal: options.signal,
  });
  const computed = await Promise.all(hashing);
  // A staged copy must have been written as it was staged; the bytes are hashed as they go out.
  const sums: (readonly number[] | undefined)[] = new Array(file.items.length);
  const hashes: (string | undefined)[] = new Array(file.items.length);
  groups.forEach((group, g) => {
    const todo = known ? group.filter((i) => !known.has(file.items[i]!)) : group;
    todo.forEach((i, k) => {
      sums[i] = computed[g]!.sums[k];
      hashes[i] = computed[g]!.hashes?.[k];
    });
    checkStagedSums(
      file.items,
      group,
      leaves,
      group.map((i) => blockSizes[i]!),
      group.map((i) => known?.get(file.items[i]!)?.sums ?? sums[i]!),
    );
  });
  return { sums, hashes };
}
