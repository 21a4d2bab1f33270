import type { BytesEntry, CheckpointMetadata, TensorEntry } from "../format/metadata.js";
import { CheckpointError, throwIfAborted } from "../errors.js";
import { readRanges } from "../load/read-ranges.js";
import { DefaultLoadPlanner } from "../plan/default-load-planner.js";
import type { LoadRequest } from "../plan/load-planner.js";
import type { Box } from "../state/box.js";
import { type DType, itemSize, numel } from "../state/dtypes.js";
import { displayKey } from "../state/state-dict.js";
import { ObjectReaders } from "../storage/object-readers.js";
import { dataFilePath } from "../format/naming.js";
import type { StorageAdapter } from "../storage/storage-adapter.js";
import { rangeBoxes } from "./row-major.js";
import type { SourceTensor } from "./source-tensor.js";

export interface CheckpointReaderOptions {
  readonly signal?: AbortSignal;
  /** Called with the bytes of every storage read, for progress. */
  readonly onRead?: (bytes: number) => void;
}

const PLANNER = new DefaultLoadPlanner();

/**
 * Reads tensors of a committed checkpoint in global row-major order, whatever boxes their
 * chunks are: a byte range of a tensor is a few boxes, planned by the default load planner and
 * read by load's `readRanges` (block-aligned reads, every block checked against its CRC32C,
 * each data file's size and header checked once, each opened once: `close` when done). Called by
 * export and tfjs conversion; `read` throws `corrupt` on damage, `cancelled` when the signal
 * aborts, `storage` errors as they come.
 */
export class CheckpointReader {
  readonly storage: StorageAdapter;
  readonly dir: string;
  readonly metadata: CheckpointMetadata;
  readonly #options: CheckpointReaderOptions;
  readonly #checkedFiles = new Set<string>();
  readonly #readers: ObjectReaders;

  constructor(
    storage: StorageAdapter,
    dir: string,
    metadata: CheckpointMetadata,
    options: CheckpointReaderOptions = {},
  ) {
    this.storage = storage;
    this.dir = dir;
    this.metadata = metadata;
    this.#options = options;
    this.#readers = new ObjectReaders(storage, dir, {
      pathOf: (name) => dataFilePath(dir, name, metadata.files[name]),
      ...(options.signal ? { signal: options.signal } : {}),
    });
  }

  /** Releases the data files held open; call once every read has settled. */
  close(): Promise<void> {
    return this.#readers.close();
  }

  /** The entry as a `SourceTensor`; bytes blobs read as a 1-D uint8 tensor. */
  tensor(entry: TensorEntry | BytesEntry): SourceTensor {
    const dtype: DType = entry.kind === "tensor" ? entry.dtype : "uint8";
    const shape = entry.kind === "tensor" ? entry.shape : [entry.byteLength];
    return {
      kind: entry.kind,
      key: entry.key,
      dtype,
      shape,
      byteLength: numel(shape) * itemSize(dtype),
      read: (offset, length) => this.#read(entry, dtype, shape, offset, length),
    };
  }

  /**
   * The elements of `box` of a stored tensor (or blob), in row-major order of the box: what a
   * reader reordering dimensions (an export transposing a kernel) reads a band at a time.
   */
  readBox(entry: TensorEntry | BytesEntry, box: Box): Promise<Uint8Array> {
    const { dtype, shape } = this.tensor(entry);
    return this.#readBoxes(entry, dtype, shape, [box], `elements ${JSON.stringify(box)}`);
  }

  #read(
    entry: TensorEntry | BytesEntry,
    dtype: DType,
    shape: readonly number[],
    offset: number,
    length: number,
  ): Promise<Uint8Array> {
    const size = itemSize(dtype);
    const boxes = rangeBoxes(shape, offset / size, (offset + length) / size);
    return this.#readBoxes(entry, dtype, shape, boxes, `bytes ${offset}..${offset + length}`);
  }

  /** The boxes' elements, one after another, each in row-major order. */
  async #readBoxes(
    entry: TensorEntry | BytesEntry,
    dtype: DType,
    shape: readonly number[],
    boxes: readonly Box[],
    what: string,
  ): Promise<Uint8Array> {
    const { signal, onRead } = this.#options;
    throwIfAborted(signal, "the read");
    const size = itemSize(dtype);
    const length = boxes.reduce((n, box) => n + numel(box.sizes) * size, 0);
    const out = new Uint8Array(length);
    const key = displayKey(entry.key);
    const requests = boxes.map((box): LoadRequest => ({ key: entry.key, kind: entry.kind, dtype, shape, box }));
    // The plan of this entry alone: the planner indexes every entry it is given.
    const plan = PLANNER.createLoadPlan({ ...this.metadata, entries: [entry] }, requests, { partial: false });
    const filled = plan.items.reduce((n, item) => n + numel(item.region.sizes) * size, 0);
    if (filled !== length) {
      throw new CheckpointError(
        "corrupt",
        `${key}: its chunks overlap in ${what} of the tensor; the checkpoint's metadata is damaged`,
        { context: { key } },
      );
    }
    let at = 0;
    const destinations = boxes.map((box) => {
      const buffer = out.subarray(at, (at += numel(box.sizes) * size));
      return { key, box, buffer, itemSize: size };
    });
    const remote = this.storage.remote === true;
    await readRanges(
      this.metadata,
      plan.items,
      destinations,
      async (file, from, count, buffers = {}) => {
        const data = await this.#readers.read(file, from, count, buffers);
        onRead?.(data.byteLength + (buffers.head && data.byteLength > 0 ? buffers.head.byteLength : 0));
        return data;
      },
      {
        headerInFirstRange: remote,
        rereadDamaged: remote,
        sizeOf: (file) => this.#readers.size(file),
        readScattered: async (file, at, parts) => {
          const got = await this.#readers.readScattered(file, at, parts);
          onRead?.(got ?? 0);
          return got;
        },
        checkedFiles: this.#checkedFiles,
        concurrency: 4,
        maxReadBytes: 8 << 20,
        maxInflightBytes: 64 << 20,
        ...(signal ? { signal } : {}),
      },
    );
    return out;
  }
}
