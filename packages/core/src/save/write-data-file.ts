import { onMainThread } from "#platform/runtime.js";
import { blockChecksumsAsync, hexDigests, regionChecksumsAsync } from "#platform/save/checksum-workers.js";
import type { OpenedCheckpoint } from "../storage/checkpoint-location.js";
import { crc32c } from "../format/crc32c.js";
import { chunkBlockSize } from "../format/checksum-blocks.js";
import { pageAlignedAvailable } from "../storage/page-aligned.js";
import { giveBackReusableMemory, takeReusableMemory } from "../storage/reusable-memory.js";
import { dataFileLayout } from "../plan/data-file-layout.js";
import { CheckpointError, throwIfAborted } from "../errors.js";
import { type Leaf, hostDataOf, stagedPlaceOf, tensorBytes } from "../state/leaf.js";
import { checkStagedSums } from "./staged-sums.js";
import { COALESCE_BELOW, coalesce, groupItems } from "./item-groups.js";
import { type TypedArray, bytesOf } from "../state/dtypes.js";
import type { ChunkMetadata, DataFileMetadata } from "../format/metadata.js";
import { withRetry } from "../storage/retry.js";
import type { SafetensorsLayout } from "../format/safetensors.js";
import type { SaveOptions } from "./save-options.js";
import type { DataFilePlan, WriteItem } from "../plan/save-planner.js";
import { displayKey } from "../state/state-dict.js";
import { joinPath } from "../storage/storage-adapter.js";

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
type TypedArrayType = {
  new (buffer: ArrayBufferLike, offset: number, length: number): TypedArray;
  readonly BYTES_PER_ELEMENT: number;
};
/** The built-in typed arrays by prototype: copying one into a view of its own type copies its bytes as they are. */
const ELEMENT_TYPES = new Map<object, TypedArrayType>(
  [
    Int8Array,
    Uint8Array,
    Int16Array,
    Uint16Array,
    Int32Array,
    Uint32Array,
    Float32Array,
    Float64Array,
    BigInt64Array,
    BigUint64Array,
  ].map((type) => [type.prototype, type as unknown as TypedArrayType]),
);
/** Packed items are sent to the checksum workers in batches of about this many bytes, so hashing overlaps packing. */
const HASH_BATCH_BYTES = 4 << 20;
/** A file of small items up to this size is packed whole into page-aligned memory (see `packedSegment`). */
const PACK_FILE_BELOW = 64 << 20;

/**
 * On the main thread, a file of small items only (all below COALESCE_BELOW), of at most
 * PACK_FILE_BELOW bytes, is copied into one page-aligned memory (pooled) laid out as the file, header
 * first: its items are copied there as they are checksummed, instead of into coalesced buffers
 * that file:// would copy once more, and it goes out as slices of that memory, which file://
 * writes in place (`WriteOptions.pageAligned`).
 */
function packedSegment(file: DataFilePlan, layout: SafetensorsLayout): Uint8Array | undefined {
  if (!onMainThread || !pageAlignedAvailable || layout.fileSize > PACK_FILE_BELOW || file.items.length < 2)
    return undefined;
  for (const item of file.items) if (item.byteLength >= COALESCE_BELOW) return undefined;
  const segment = takeReusableMemory(layout.fileSize, true);
  segment.set(layout.header, 0);
  return segment;
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
  return new Uint8Array(hostDataOf(first!)!.buffer, 0, layout.fileSize);
}

/**
 * Streams one data file: the safetensors header (known from shapes alone), then the items'
 * bytes. Items go in groups, each read (tfjs `data()`, or copied into packed memory) while the
 * one before is written, with one checksum round trip and few writes per group, because a
 * background save may get only one event-loop turn per training step. A group's checksums are
 * computed beside its write, not before it: the disk starts at once, and the checksums are only
 * needed for the metadata. A group is read once the group before the previous one is hashed,
 * so a file holds few groups' bytes at once. A transient storage failure rewrites the whole file.
 *
 * A file staged as a page-aligned segment, or packed into one (`packedSegment`), goes out as
 * slices of that segment, cut on page boundaries as each group is read, so the storage may
 * write it from there in place. `distinctNames`: as `dataFileLayout` takes it.
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
): Promise<{ file: DataFileMetadata; chunks: WrittenChunk[] }> {
  const { names, layout } = dataFileLayout(file.items, distinctNames);
  const rank = location.group.rank;
  const groups = groupItems(file.items);
  const staged = stagedSegment(file, leaves, layout);
  const packed = staged ? undefined : packedSegment(file, layout);
  const segment = staged ?? packed;
  const blockSizes = file.items.map((item) => chunkBlockSize(item.dtype, item.chunk.sizes, blockSize));
  /** Views of the packed memory by element type, made once per file. */
  const views = new Map<TypedArrayType, TypedArray>();
  /** Copies `data` to `at` through a view of its own (built-in) type, if `at` is aligned for it; false if not. */
  const packInto = (memory: Uint8Array, data: TypedArray, at: number): boolean => {
    const type = ELEMENT_TYPES.get(Object.getPrototypeOf(data));
    if (!type || at % type.BYTES_PER_ELEMENT !== 0) return false;
    let view = views.get(type);
    if (!view)
      views.set(
        type,
        (view = new type(memory.buffer, memory.byteOffset, Math.floor(memory.byteLength / type.BYTES_PER_ELEMENT))),
      );
    view.set(data as never, at / type.BYTES_PER_ELEMENT);
    return true;
  };
  /**
   * Reads a group's bytes, and starts hashing them: packed items on worker threads in batches
   * as they are copied in, others in one call once all are read. Resolves when the bytes are
   * read; `sums` resolves when they are hashed.
   */
  const read = async (group: readonly number[]): Promise<{ datas: Uint8Array[]; sums: Promise<ItemChecksums> }> => {
    throwIfAborted(options.signal, "the save");
    const datas: Uint8Array[] = [];
    // An incremental save hashed the items it compared with its base already: only the others are hashed.
    const todo = known ? group.filter((i) => !known.has(file.items[i]!)) : group;
    /** Packed: batches of items already copied in, each sent to a worker while the next ones are copied. */
    const batches: Promise<ItemChecksums>[] = [];
    let posted = 0;
    let packedTodo = 0;
    let waiting = 0;
    const post = (): void => {
      const batch = packedChecksums(packed!, todo.slice(posted, packedTodo));
      posted = packedTodo;
      waiting = 0;
      batch.catch(() => undefined);
      batches.push(batch);
    };
    /** Counts the items before `i` (all copied in) that need hashing; sends a batch once it is large enough. */
    const packedUpTo = (i: number): void => {
      while (packedTodo < todo.length && todo[packedTodo]! < i) waiting += file.items[todo[packedTodo++]!]!.byteLength;
      if (waiting >= HASH_BATCH_BYTES) post();
    };
    for (const i of group) {
      if (packed) packedUpTo(i);
      const item = file.items[i]!;
      const leaf = leaves[item.leafIndex]!;
      // Packed, a host tensor is copied by its own element type, without a byte view made for it.
      if (
        packed &&
        leaf.kind === "tensor" &&
        leaf.source.kind === "host" &&
        leaf.source.tensor.data.byteLength === item.byteLength &&
        packInto(packed, leaf.source.tensor.data, layout.offsets[i]!)
      )
        continue;
      // A host tensor's bytes are a view: no await (one promise per tensor) unless tfjs must be read.
      const data =
        leaf.kind === "bytes"
          ? leaf.data
          : leaf.kind !== "tensor"
            ? undefined
            : leaf.source.kind === "host"
              ? bytesOf(leaf.source.tensor.data)
              : await tensorBytes(leaf);
      if (!data || data.byteLength !== item.byteLength) {
        throw new CheckpointError(
          "invalid_argument",
          `state dict key ${displayKey(item.key)} changed size while it was being saved`,
          {
            context: { key: displayKey(item.key) },
          },
        );
      }
      if (packed) packed.set(data, layout.offsets[i]!);
      else datas.push(data);
    }
    let computed: Promise<ItemChecksums>;
    if (packed) {
      packedUpTo(Infinity);
      if (posted < todo.length) post();
      computed = Promise.all(batches).then((parts) => {
        const all = parts.every((p) => p.hashes !== undefined);
        return { sums: parts.flatMap((p) => p.sums), ...(all ? { hashes: parts.flatMap((p) => p.hashes!) } : {}) };
      });
    } else {
      const at = new Map(group.map((i, k) => [i, k]));
      computed =
        todo.length === 0
          ? Promise.resolve({ sums: [], hashes: [] })
          : blockChecksumsAsync(
              todo.map((i) => datas[at.get(i)!]!),
              todo.map((i) => blockSizes[i]!),
            );
    }
    const sums = known ? computed.then((c) => withKnown(group, c)) : computed;
    sums.catch(() => undefined);
    return { datas, sums };
  };
  /** The group's checksums in its order: known ones where an incremental save had them, computed ones for the rest. */
  const withKnown = (group: readonly number[], computed: ItemChecksums): ItemChecksums => {
    let next = 0;
    const sums: (readonly number[])[] = [];
    const hashes: (string | undefined)[] = [];
    for (const i of group) {
      const own = known!.get(file.items[i]!);
      if (own) {
        sums.push(own.sums);
        hashes.push(own.hash);
      } else {
        sums.push(computed.sums[next]!);
        hashes.push(computed.hashes?.[next]);
        next++;
      }
    }
    return { sums, hashes };
  };
  /** Items of the packed memory hashed where they were packed, on a worker thread, in one round trip. */
  const packedChecksums = async (memory: Uint8Array, items: readonly number[]): Promise<ItemChecksums> => {
    const starts = new Float64Array(items.length);
    const lengths = new Float64Array(items.length);
    const sizes = new Float64Array(items.length);
    items.forEach((i, k) => {
      starts[k] = layout.offsets[i]!;
      lengths[k] = file.items[i]!.byteLength;
      sizes[k] = blockSizes[i]!;
    });
    // The arrays are handed over to the worker (transferred): read nothing from them after this.
    const flat = await regionChecksumsAsync(memory.buffer as SharedArrayBuffer, starts, lengths, sizes);
    const sums = new Array<number[]>(items.length);
    let at = 0;
    for (let k = 0; k < items.length; k++) {
      const i = items[k]!;
      const count = Math.ceil(file.items[i]!.byteLength / blockSizes[i]!);
      sums[k] = count === 1 ? [flat.sums[at]!] : Array.from(flat.sums.subarray(at, at + count));
      at += count;
    }
    return flat.hashes ? { sums, hashes: hexDigests(flat.hashes, items.length) } : { sums };
  };
  /** Each group's checksums, of the latest attempt at the write. */
  let hashing: Promise<ItemChecksums>[] = [];
  /** Every read and hashing started, of every attempt: a failed write may leave them running, still using packed memory. */
  const started: Promise<unknown>[] = [];
  const body = async function* (): AsyncGenerator<Uint8Array> {
    hashing = [];
    let sent = 0;
    /** The segment up to `end`, from where the last slice ended. */
    const slice = function* (end: number): Generator<Uint8Array> {
      if (end > sent) yield segment!.subarray(sent, end);
      sent = Math.max(sent, end);
    };
    if (!segment) yield layout.header;
    const readNext = (reading: ReturnType<typeof read>): ReturnType<typeof read> => {
      started.push(reading);
      // Settled when awaited next turn; marked handled so an abandoned write leaves no unhandled rejection.
      reading.catch(() => undefined);
      return reading;
    };
    let next = groups.length > 0 ? readNext(read(groups[0]!)) : undefined;
    for (let g = 0; g < groups.length; g++) {
      const current = await next!;
      hashing.push(current.sums);
      started.push(current.sums);
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
  const writeOptions = {
    size: layout.fileSize,
    signal: options.signal,
    ...(segment ? { pageAligned: true } : {}),
    ...(syncLater ? { syncLater } : {}),
  };
  let sums: ItemChecksums[];
  try {
    await withRetry(() => location.storage.write(joinPath(location.dir, file.name), body(), writeOptions), {
      policy: options.retry,
      signal: options.signal,
    });
    sums = await Promise.all(hashing);
    // A staged copy must have been written as it was staged; the bytes are hashed as they go out.
    groups.forEach((group, g) =>
      checkStagedSums(
        file.items,
        group,
        leaves,
        group.map((i) => blockSizes[i]!),
        sums[g]!.sums,
      ),
    );
  } finally {
    // The write settled, so the storage holds no part of it any more; nor may a group still be read or hashed.
    if (packed) {
      await Promise.allSettled(started);
      giveBackReusableMemory(packed);
    }
  }
  const chunks: WrittenChunk[] = [];
  groups.forEach((group, g) =>
    group.forEach((i, k) => {
      const item = file.items[i]!;
      chunks.push({
        item,
        chunk: {
          offsets: item.chunk.offsets,
          sizes: item.chunk.sizes,
          file: file.name,
          tensorName: names[i]!,
          byteOffset: layout.offsets[i]!,
          byteLength: item.byteLength,
          blockSize: blockSizes[i]!,
          crc32c: sums[g]!.sums[k]!,
          // Undefined only while content hashing is off (a benchmark's baseline); one object shape either way.
          hash: sums[g]!.hashes?.[k],
        },
      });
    }),
  );
  const headerLength = layout.header.byteLength - 8;
  return { file: { rank, size: layout.fileSize, headerLength, headerCrc32c: crc32c(layout.header) }, chunks };
}
