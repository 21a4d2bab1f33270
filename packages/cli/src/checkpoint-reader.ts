import {
  type Box,
  type BytesEntry,
  type CheckpointMetadata,
  type ChunkMetadata,
  type DType,
  type StorageAdapter,
  type TensorEntry,
  CheckpointError,
  copyRows,
  crc32c,
  displayKey,
  intersectBoxes,
  itemSize,
  joinPath,
  numel,
  rowLayout,
  rowSpan,
  throwIfAborted,
  withRetry,
} from "@cairn/core";
import { rangeBoxes } from "./row-major.js";

/** A tensor (or bytes blob) as a source of its global row-major bytes, read in ranges. */
export interface SourceTensor {
  readonly kind: "tensor" | "bytes";
  readonly key: readonly (string | number)[];
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly byteLength: number;
  /** Bytes `[offset, offset + length)` of the tensor in global row-major order; both element-aligned. */
  read(offset: number, length: number): Promise<Uint8Array>;
}

export interface CheckpointReaderOptions {
  readonly signal?: AbortSignal;
  /** Called with the bytes of every storage read, for progress. */
  readonly onRead?: (bytes: number) => void;
  /** Bound on the verified blocks kept to avoid reading a block twice (default 16 MiB). */
  readonly cacheBytes?: number;
}

/**
 * Reads tensors of a committed checkpoint in global row-major order, whatever boxes their
 * chunks are, with range reads of the chunks: each range is widened to whole checksum blocks,
 * every block is checked against its CRC32C, and nothing larger than what was asked (plus two
 * blocks a chunk) is held. The edge blocks of each read are kept in a small cache, since the
 * next range of a sequential read starts in them.
 */
export class CheckpointReader {
  readonly storage: StorageAdapter;
  readonly dir: string;
  readonly metadata: CheckpointMetadata;
  readonly #options: CheckpointReaderOptions;
  readonly #cache = new Map<string, Uint8Array>();
  #cachedBytes = 0;

  constructor(storage: StorageAdapter, dir: string, metadata: CheckpointMetadata, options: CheckpointReaderOptions = {}) {
    this.storage = storage;
    this.dir = dir;
    this.metadata = metadata;
    this.#options = options;
  }

  /** The entry as a `SourceTensor`; bytes blobs read as a 1-D uint8 tensor. */
  tensor(entry: TensorEntry | BytesEntry): SourceTensor {
    const dtype: DType = entry.kind === "tensor" ? entry.dtype : "uint8";
    const shape = entry.kind === "tensor" ? entry.shape : [entry.byteLength];
    const size = itemSize(dtype);
    const key = displayKey(entry.key);
    return {
      kind: entry.kind,
      key: entry.key,
      dtype,
      shape,
      byteLength: numel(shape) * size,
      read: (offset, length) => this.#readTensor(entry.chunks, key, shape, size, offset, length),
    };
  }

  async #readTensor(chunks: readonly ChunkMetadata[], key: string, shape: readonly number[], size: number, offset: number, length: number): Promise<Uint8Array> {
    const out = new Uint8Array(length);
    const copies: { chunk: ChunkMetadata; dst: Uint8Array; box: Box; region: Box }[] = [];
    let filled = 0;
    let at = 0;
    for (const box of rangeBoxes(shape, offset / size, (offset + length) / size)) {
      const boxBytes = numel(box.sizes) * size;
      const dst = out.subarray(at, at + boxBytes);
      for (const chunk of chunks) {
        const region = intersectBoxes(chunk, box);
        if (!region) continue;
        filled += numel(region.sizes) * size;
        copies.push({ chunk, dst, box, region });
      }
      at += boxBytes;
    }
    if (filled !== length) {
      throw new CheckpointError(
        "corrupt",
        `${key}: its chunks ${filled < length ? "leave a gap in" : "overlap in"} bytes ${offset}..${offset + length} of the tensor; the checkpoint's metadata is damaged`,
        { context: { key } },
      );
    }
    await Promise.all(
      copies.map(async ({ chunk, dst, box, region }) => {
        const layout = rowLayout(chunk, box, region);
        const span = rowSpan(layout, size);
        const bytes = await this.readChunk(chunk, key, span.start, span.end);
        copyRows(layout, size, bytes, span.start, dst);
      }),
    );
    return out;
  }

  /**
   * Bytes `[start, end)` of a chunk (relative to its first byte), read in whole blocks and
   * verified. Throws `corrupt` naming the file, the key and the block on a mismatch or a short read.
   */
  async readChunk(chunk: ChunkMetadata, key: string, start: number, end: number): Promise<Uint8Array> {
    if (end <= start) return new Uint8Array(0);
    const blockSize = this.metadata.checksum.blockSize;
    const first = Math.floor(start / blockSize);
    const last = Math.ceil(end / blockSize) - 1;
    const blocks = new Array<Uint8Array>(last - first + 1);
    let lo = first;
    let hi = last;
    const head = this.#cached(chunk, lo);
    if (head) blocks[lo++ - first] = head;
    const tail = hi >= lo ? this.#cached(chunk, hi) : undefined;
    if (tail) blocks[hi-- - first] = tail;
    if (hi >= lo) {
      const readStart = lo * blockSize;
      const data = await this.#read(chunk, key, readStart, Math.min(chunk.byteLength, (hi + 1) * blockSize) - readStart);
      for (let b = lo; b <= hi; b++) {
        const block = data.subarray((b - lo) * blockSize, Math.min(data.byteLength, (b - lo + 1) * blockSize));
        this.#verify(chunk, key, b, block);
        blocks[b - first] = block;
      }
      this.#remember(chunk, lo, blocks[lo - first]!);
      if (hi > lo) this.#remember(chunk, hi, blocks[hi - first]!);
    }
    const out = new Uint8Array(end - start);
    let blockStart = first * blockSize;
    for (const block of blocks) {
      const from = Math.max(start, blockStart);
      const to = Math.min(end, blockStart + block.byteLength);
      if (to > from) out.set(block.subarray(from - blockStart, to - blockStart), from - start);
      blockStart += block.byteLength;
    }
    return out;
  }

  async #read(chunk: ChunkMetadata, key: string, offset: number, length: number): Promise<Uint8Array> {
    throwIfAborted(this.#options.signal, "the read");
    const path = joinPath(this.dir, chunk.file);
    const absolute = chunk.byteOffset + offset;
    const data = await withRetry(() => this.storage.read(path, { offset: absolute, length }, { signal: this.#options.signal }), {
      signal: this.#options.signal,
    });
    this.#options.onRead?.(data.byteLength);
    if (data.byteLength < length) {
      throw new CheckpointError("corrupt", `${chunk.file} is truncated: ${key} needs bytes up to ${absolute + length} but the file ends at ${absolute + data.byteLength}`, {
        context: { file: chunk.file, key },
      });
    }
    return data;
  }

  #verify(chunk: ChunkMetadata, key: string, block: number, bytes: Uint8Array): void {
    if (crc32c(bytes) === chunk.crc32c[block]) return;
    const start = chunk.byteOffset + block * this.metadata.checksum.blockSize;
    throw new CheckpointError(
      "corrupt",
      `checksum mismatch in ${chunk.file} for ${key} (block ${block}, file bytes ${start}..${start + bytes.byteLength}): the data file is damaged`,
      { context: { file: chunk.file, key } },
    );
  }

  #cacheKey(chunk: ChunkMetadata, block: number): string {
    return `${chunk.file}\0${chunk.byteOffset}\0${block}`;
  }

  #cached(chunk: ChunkMetadata, block: number): Uint8Array | undefined {
    const id = this.#cacheKey(chunk, block);
    const hit = this.#cache.get(id);
    if (hit) {
      this.#cache.delete(id);
      this.#cache.set(id, hit);
    }
    return hit;
  }

  #remember(chunk: ChunkMetadata, block: number, bytes: Uint8Array): void {
    const limit = this.#options.cacheBytes ?? 16 << 20;
    if (bytes.byteLength > limit) return;
    const id = this.#cacheKey(chunk, block);
    if (this.#cache.has(id)) return;
    // A copy: the block may be a view of a large read that would otherwise stay alive.
    this.#cache.set(id, bytes.slice());
    this.#cachedBytes += bytes.byteLength;
    for (const [old, value] of this.#cache) {
      if (this.#cachedBytes <= limit) break;
      this.#cache.delete(old);
      this.#cachedBytes -= value.byteLength;
    }
  }
}
