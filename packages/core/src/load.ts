import PQueue from "p-queue";
import { type Box, copyRows, rowLayout, rowSpan } from "./box.js";
import { type CheckpointOptions, type OpenedCheckpoint, openCheckpoint } from "./checkpoint-location.js";
import { crc32c } from "./crc32c.js";
import { DefaultLoadPlanner } from "./default-load-planner.js";
import { type DType, allocate, bytesOf, itemSize } from "./dtypes.js";
import { CheckpointError, isCheckpointError, throwIfAborted } from "./errors.js";
import { type FlattenedTarget, type Leaf, flattenTarget, tfjsDType } from "./flatten.js";
import type { LoadPlanner, LoadRequest, ReadItem } from "./load-planner.js";
import { type CheckpointMetadata, type ChunkMetadata, METADATA_FILE, parseMetadata, valueOf } from "./metadata.js";
import { withRetry } from "./retry.js";
import { type HostTensor, type StateDict, type StateValue, type VariableLike, displayKey, pathId } from "./state-dict.js";
import { joinPath } from "./storage/storage-adapter.js";
import { type TfjsModule, tfjsModule } from "./tfjs.js";

export interface LoadOptions extends CheckpointOptions {
  readonly planner?: LoadPlanner;
  /** Load what the checkpoint has and leave the rest of the target as it is (DCP's allow_partial_load). */
  readonly partial?: boolean;
  /** Range reads in flight at once (default 8). */
  readonly concurrency?: number;
  /** Largest single range read; bigger chunks are read in pieces (default 16 MiB). */
  readonly maxReadBytes?: number;
  /** Bound on bytes held by reads in flight (default 256 MiB). */
  readonly maxInflightBytes?: number;
  /** The tfjs module to make tensors with; by default `@tensorflow/tfjs-core` is imported. */
  readonly tf?: TfjsModule;
}

export interface LoadResult {
  readonly checkpoint: string;
  /** Bytes read from storage, headers and metadata included. */
  readonly bytesRead: number;
  /** Data files read from. */
  readonly files: number;
  /** Leaves filled. */
  readonly entries: number;
  /** Leaves the target asked for that the checkpoint lacks (only with `partial`). */
  readonly missing: readonly string[];
  readonly seconds: number;
  readonly metadata: CheckpointMetadata;
}

/**
 * Reads a checkpoint's `metadata.json`. A location with data but no metadata is
 * `not_committed` (a save that never finished); one with nothing is `not_found`.
 */
export async function readMetadata(checkpointIdOrOptions: string | CheckpointOptions): Promise<CheckpointMetadata> {
  const location = await openCheckpoint(checkpointIdOrOptions);
  try {
    return (await readCheckpointMetadata(location, typeof checkpointIdOrOptions === "string" ? {} : checkpointIdOrOptions)).metadata;
  } finally {
    await location.release();
  }
}

async function readCheckpointMetadata(location: OpenedCheckpoint, options: CheckpointOptions): Promise<{ metadata: CheckpointMetadata; bytes: number }> {
  const path = joinPath(location.dir, METADATA_FILE);
  let bytes: Uint8Array;
  try {
    bytes = await withRetry(() => location.storage.read(path, undefined, { signal: options.signal }), { policy: options.retry, signal: options.signal });
  } catch (error) {
    if (!isCheckpointError(error, "not_found")) throw error;
    const prefix = location.dir ? `${location.dir}/` : "";
    for await (const _ of location.storage.list(prefix)) {
      throw new CheckpointError(
        "not_committed",
        `${location.where} holds files but no ${METADATA_FILE}: a save there never committed (it failed, or is still running); it cannot be loaded`,
        { context: { path: location.where } },
      );
    }
    throw new CheckpointError("not_found", `no checkpoint at ${location.where}`, { cause: error, context: { path: location.where } });
  }
  return { metadata: parseMetadata(bytes, `${location.where.replace(/\/$/, "")}/${METADATA_FILE}`), bytes: bytes.byteLength };
}

/**
 * Loads a checkpoint, like `torch.distributed.checkpoint.load`.
 *
 * With a target state dict, loads in place, driven by the target: host tensors are filled,
 * tfjs variables assigned, immutable tfjs tensors, blobs and values replaced in their parent
 * (the replaced tensors are not disposed: the caller owns them), and `Stateful`s get
 * `loadStateDict` after their leaves are filled. Every block a read touches is checked
 * against its CRC32C. If a load fails midway, host tensors of the target may be partly filled.
 *
 * Without a target, resolves the whole state dict as host tensors and values.
 *
 * Throws `not_found`, `not_committed`, `unsupported_version`, `mismatch` (a key missing or of
 * another dtype or shape), `corrupt` (checksum, truncation, malformed metadata), `cancelled`, `storage`.
 */
export function load(stateDict: StateDict, checkpointIdOrOptions: string | LoadOptions): Promise<LoadResult>;
export function load(checkpointIdOrOptions: string | LoadOptions): Promise<StateDict>;
export async function load(first: StateDict | string | LoadOptions, second?: string | LoadOptions): Promise<LoadResult | StateDict> {
  if (second === undefined) {
    const options: LoadOptions = typeof first === "string" ? { checkpointId: first } : (first as LoadOptions);
    const root: StateDict = {};
    await loadInto(undefined, options, root);
    return root;
  }
  const options: LoadOptions = typeof second === "string" ? { checkpointId: second } : second;
  return loadInto(first as StateDict, options);
}

/** A destination for requested bytes: a host buffer laid out as `box`, finished once all reads land. */
interface Destination {
  readonly request: LoadRequest;
  readonly box: Box;
  readonly buffer: Uint8Array;
  readonly finish: () => void;
}

async function loadInto(target: StateDict | undefined, options: LoadOptions, root?: StateDict): Promise<LoadResult> {
  const started = performance.now();
  const flattened = target ? await flattenTarget(target) : undefined;
  const location = await openCheckpoint(options);
  try {
    throwIfAborted(options.signal, "the load");
    const { metadata, bytes: metadataBytes } = await readCheckpointMetadata(location, options);
    const tf = flattened?.leaves.some((l) => l.leaf.kind === "tensor" && l.leaf.source.kind === "tfjs") ? await tfjsModule(options.tf) : undefined;
    const destinations = flattened ? targetDestinations(flattened, metadata, tf) : wholeCheckpoint(metadata, root!);
    const planner = options.planner ?? new DefaultLoadPlanner();
    const plan = planner.createLoadPlan(
      metadata,
      destinations.map((d) => d.request),
      { partial: options.partial ?? false },
    );
    const read = await readAll(location, metadata, plan.items, destinations, options);
    const skipped = new Set(plan.missing);
    for (const [i, destination] of destinations.entries()) if (!skipped.has(i)) destination.finish();
    for (const stateful of flattened?.statefuls ?? []) await stateful.object.loadStateDict(stateful.target);
    return {
      checkpoint: location.where,
      bytesRead: read.bytes + metadataBytes,
      files: read.files,
      entries: destinations.length - skipped.size,
      missing: plan.missing.map((i) => displayKey(destinations[i]!.request.key)),
      seconds: (performance.now() - started) / 1000,
      metadata,
    };
  } finally {
    await location.release();
  }
}

function fullBox(shape: readonly number[]): Box {
  return { offsets: shape.map(() => 0), sizes: shape };
}

/** Where each leaf of a target state dict gets its bytes, and how it is put in place afterwards. */
function targetDestinations(flattened: FlattenedTarget, metadata: CheckpointMetadata, tf: TfjsModule | undefined): Destination[] {
  const entries = new Map(metadata.entries.map((e) => [pathId(e.key), e]));
  return flattened.leaves.map(({ leaf, replace }): Destination => {
    const request = requestFor(leaf);
    if (leaf.kind === "value") {
      return { request, box: fullBox([]), buffer: new Uint8Array(0), finish: () => undefined };
    }
    if (leaf.kind === "bytes") {
      // A blob may change size between saves: it is replaced by one sized as the checkpoint's.
      const saved = entries.get(pathId(leaf.path));
      const data = new Uint8Array(saved?.kind === "bytes" ? saved.byteLength : 0);
      return { request, box: fullBox([data.byteLength]), buffer: data, finish: () => replace(data) };
    }
    const { source, dtype, shape } = leaf;
    if (source.kind === "host") {
      return { request, box: fullBox(shape), buffer: bytesOf(source.tensor.data), finish: () => undefined };
    }
    const host = allocate(dtype, shape.reduce((a, b) => a * b, 1));
    return {
      request,
      box: fullBox(shape),
      buffer: bytesOf(host),
      finish: () => {
        const fresh = tf!.tensor(host, [...shape], source.tensor.dtype);
        if (typeof (source.tensor as Partial<VariableLike>).assign === "function") {
          (source.tensor as VariableLike).assign(fresh);
          fresh.dispose();
        } else {
          replace(fresh);
        }
      },
    };
  });
}

function requestFor(leaf: Leaf): LoadRequest {
  if (leaf.kind === "value") return { key: leaf.path, kind: "value" };
  if (leaf.kind === "bytes") return { key: leaf.path, kind: "bytes" };
  const dtype: DType = leaf.source.kind === "tfjs" ? tfjsDType(leaf.source.tensor, leaf.path) : leaf.dtype;
  return { key: leaf.path, kind: "tensor", dtype, shape: leaf.shape, box: fullBox(leaf.shape) };
}

/** Destinations for every entry of a checkpoint, built into `root` as nested objects and arrays. */
function wholeCheckpoint(metadata: CheckpointMetadata, root: StateDict): Destination[] {
  return metadata.entries.map((entry): Destination => {
    const place = (value: StateValue): void => setPath(root, entry.key, value);
    if (entry.kind === "value") {
      return { request: { key: entry.key, kind: "value" }, box: fullBox([]), buffer: new Uint8Array(0), finish: () => place(valueOf(entry) as StateValue) };
    }
    if (entry.kind === "bytes") {
      const data = new Uint8Array(entry.byteLength);
      return { request: { key: entry.key, kind: "bytes" }, box: fullBox([entry.byteLength]), buffer: data, finish: () => place(data) };
    }
    const data = allocate(entry.dtype, entry.shape.reduce((a, b) => a * b, 1));
    const tensor: HostTensor = { dtype: entry.dtype, shape: [...entry.shape], data };
    place(tensor);
    return {
      request: { key: entry.key, kind: "tensor", dtype: entry.dtype, shape: entry.shape, box: fullBox(entry.shape) },
      box: fullBox(entry.shape),
      buffer: bytesOf(data),
      finish: () => undefined,
    };
  });
}

function setPath(root: StateDict, path: readonly (string | number)[], value: StateValue): void {
  let node: Record<string | number, StateValue> = root;
  for (let i = 0; i < path.length - 1; i++) {
    const key = path[i]!;
    node[key] ??= (typeof path[i + 1] === "number" ? [] : {}) as StateValue;
    node = node[key] as Record<string | number, StateValue>;
  }
  node[path[path.length - 1]!] = value;
}

/** A contiguous range of one data file to read, and the chunk pieces inside it to verify and copy. */
interface RangeRead {
  readonly file: string;
  readonly start: number;
  end: number;
  readonly pieces: { chunk: ChunkMetadata; start: number; end: number; consumers: ReadItem[] }[];
}

async function readAll(
  location: OpenedCheckpoint,
  metadata: CheckpointMetadata,
  items: readonly ReadItem[],
  destinations: Destination[],
  options: LoadOptions,
): Promise<{ bytes: number; files: number }> {
  const blockSize = metadata.checksum.blockSize;
  const maxRead = Math.max(blockSize, Math.floor((options.maxReadBytes ?? 16 << 20) / blockSize) * blockSize);
  const ranges = planRanges(items, destinations, blockSize, maxRead);
  const files = new Set(ranges.map((r) => r.file));
  const queue = new PQueue({ concurrency: Math.max(1, options.concurrency ?? 8) });
  const budget = new ByteBudget(options.maxInflightBytes ?? 256 << 20);
  let bytes = 0;
  const read = async (path: string, offset: number, length: number): Promise<Uint8Array> => {
    throwIfAborted(options.signal, "the load");
    const data = await withRetry(() => location.storage.read(joinPath(location.dir, path), { offset, length }, { signal: options.signal }), {
      policy: options.retry,
      signal: options.signal,
    });
    bytes += data.byteLength;
    return data;
  };
  const tasks: Promise<void>[] = [...files].map((file) => queue.add(() => verifyHeader(file, metadata, read)));
  for (const range of ranges) {
    tasks.push(
      queue.add(async () => {
        const length = range.end - range.start;
        await budget.acquire(length);
        try {
          const data = await read(range.file, range.start, length);
          if (data.byteLength < length) {
            const key = displayKey(entryKeyOf(range.pieces[0]!.consumers[0]!, destinations));
            throw new CheckpointError("corrupt", `${range.file} is truncated: ${key} needs bytes up to ${range.end} but the file ends at ${range.start + data.byteLength}`, {
              context: { file: range.file, key },
            });
          }
          for (const piece of range.pieces) {
            const bytesOfPiece = data.subarray(piece.start - range.start, piece.end - range.start);
            verifyPiece(piece, bytesOfPiece, blockSize, destinations);
            for (const item of piece.consumers) copyInto(item, piece, bytesOfPiece, destinations[item.request]!);
          }
        } finally {
          budget.release(length);
        }
      }),
    );
  }
  const settled = await Promise.allSettled(tasks);
  const failure = settled.find((s) => s.status === "rejected");
  if (failure) throw failure.reason;
  return { bytes, files: files.size };
}

function entryKeyOf(item: ReadItem, destinations: readonly Destination[]): readonly (string | number)[] {
  return destinations[item.request]!.request.key;
}

async function verifyHeader(file: string, metadata: CheckpointMetadata, read: (path: string, offset: number, length: number) => Promise<Uint8Array>): Promise<void> {
  const info = metadata.files[file]!;
  const header = await read(file, 0, 8 + info.headerLength);
  if (header.byteLength < 8 + info.headerLength || crc32c(header) !== info.headerCrc32c) {
    throw new CheckpointError("corrupt", `${file}: its safetensors header does not match the checksum in ${METADATA_FILE}; the file is damaged`, {
      context: { file },
    });
  }
}

/**
 * Groups what each chunk must supply into block-aligned byte ranges (so every byte read can be
 * verified), splits big ones at `maxRead`, and merges neighbours in a file into single reads.
 */
function planRanges(items: readonly ReadItem[], destinations: readonly Destination[], blockSize: number, maxRead: number): RangeRead[] {
  const byChunk = new Map<ChunkMetadata, { start: number; end: number; consumers: ReadItem[] }>();
  for (const item of items) {
    const size = elementSize(destinations[item.request]!.request);
    const span = rowSpan(rowLayout(item.chunk, item.chunk, item.region), size);
    const start = Math.floor(span.start / blockSize) * blockSize;
    const end = Math.min(item.chunk.byteLength, Math.ceil(span.end / blockSize) * blockSize);
    const existing = byChunk.get(item.chunk);
    if (existing) {
      existing.start = Math.min(existing.start, start);
      existing.end = Math.max(existing.end, end);
      existing.consumers.push(item);
    } else {
      byChunk.set(item.chunk, { start, end, consumers: [item] });
    }
  }
  const pieces: { chunk: ChunkMetadata; start: number; end: number; consumers: ReadItem[] }[] = [];
  for (const [chunk, need] of byChunk) {
    for (let at = need.start; at < need.end; at += maxRead) {
      pieces.push({ chunk, start: chunk.byteOffset + at, end: chunk.byteOffset + Math.min(need.end, at + maxRead), consumers: need.consumers });
    }
  }
  pieces.sort((a, b) => (a.chunk.file < b.chunk.file ? -1 : a.chunk.file > b.chunk.file ? 1 : a.start - b.start));
  const ranges: RangeRead[] = [];
  for (const piece of pieces) {
    const last = ranges[ranges.length - 1];
    if (last && last.file === piece.chunk.file && last.end === piece.start && piece.end - last.start <= maxRead) {
      last.end = piece.end;
      last.pieces.push(piece);
    } else {
      ranges.push({ file: piece.chunk.file, start: piece.start, end: piece.end, pieces: [piece] });
    }
  }
  return ranges;
}

/** Bytes per element of what a request reads (a blob is read as uint8). */
function elementSize(request: LoadRequest): number {
  return itemSize(request.dtype ?? "uint8");
}

function verifyPiece(
  piece: { chunk: ChunkMetadata; start: number; end: number; consumers: ReadItem[] },
  data: Uint8Array,
  blockSize: number,
  destinations: readonly Destination[],
): void {
  const { chunk } = piece;
  const relative = piece.start - chunk.byteOffset;
  for (let at = 0; at < data.byteLength; at += blockSize) {
    const block = (relative + at) / blockSize;
    const sum = crc32c(data.subarray(at, Math.min(at + blockSize, data.byteLength)));
    if (sum !== chunk.crc32c[block]) {
      const key = displayKey(entryKeyOf(piece.consumers[0]!, destinations));
      throw new CheckpointError(
        "corrupt",
        `checksum mismatch in ${chunk.file} for ${key} (block ${block}, bytes ${chunk.byteOffset + relative + at}..${chunk.byteOffset + relative + at + Math.min(blockSize, data.byteLength - at)}): the data file is damaged`,
        { context: { file: chunk.file, key } },
      );
    }
  }
}

function copyInto(item: ReadItem, piece: { chunk: ChunkMetadata; start: number }, data: Uint8Array, destination: Destination): void {
  const size = elementSize(destination.request);
  const layout = rowLayout(item.chunk, destination.box, item.region);
  copyRows(layout, size, data, piece.start - item.chunk.byteOffset, destination.buffer);
}

/** Bounds the bytes held by reads in flight; one read larger than the budget still runs, alone. */
class ByteBudget {
  #available: number;
  readonly #limit: number;
  readonly #waiting: { bytes: number; resolve: () => void }[] = [];

  constructor(limit: number) {
    this.#limit = limit;
    this.#available = limit;
  }

  async acquire(bytes: number): Promise<void> {
    const wanted = Math.min(bytes, this.#limit);
    if (this.#waiting.length === 0 && this.#available >= wanted) {
      this.#available -= wanted;
      return;
    }
    await new Promise<void>((resolve) => this.#waiting.push({ bytes: wanted, resolve }));
  }

  release(bytes: number): void {
    this.#available += Math.min(bytes, this.#limit);
    while (this.#waiting.length > 0 && this.#available >= this.#waiting[0]!.bytes) {
      const next = this.#waiting.shift()!;
      this.#available -= next.bytes;
      next.resolve();
    }
  }
}
