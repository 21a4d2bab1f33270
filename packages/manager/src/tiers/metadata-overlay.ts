import { CheckpointError, type StorageAdapter } from "@cairn/core";
import { type ByteRange, type ObjectInfo, type ObjectReader, type ReadOptions, splitHead } from "@cairn/core/storage";

/**
 * A read-only view of a rank's own tier in which one object (a step's `metadata.json`) is bytes
 * another rank sent: with a per-rank tier 0, each rank's disk holds its data files and only rank
 * 0's the metadata, so the other ranks load their files with rank 0's metadata. Every other read
 * goes to the tier itself; writes and deletes are refused (a restore never writes).
 */
export class MetadataOverlay implements StorageAdapter {
  readonly protocol: string;
  readonly root: string;
  readonly remote: boolean;
  readonly openReader?: (path: string) => Promise<ObjectReader>;
  readonly #inner: StorageAdapter;
  readonly #path: string;
  readonly #bytes: Uint8Array;

  constructor(inner: StorageAdapter, path: string, bytes: Uint8Array) {
    this.#inner = inner;
    this.#path = path;
    this.#bytes = bytes;
    this.protocol = inner.protocol;
    this.root = inner.root;
    this.remote = inner.remote === true;
    if (inner.openReader) this.openReader = (p) => inner.openReader!(p);
  }

  read(path: string, range?: ByteRange, options?: ReadOptions): Promise<Uint8Array> {
    if (path !== this.#path) return this.#inner.read(path, range, options);
    const start = Math.min(range?.offset ?? 0, this.#bytes.byteLength);
    const bytes = this.#bytes.slice(start, range ? Math.min(start + range.length, this.#bytes.byteLength) : undefined);
    return Promise.resolve(splitHead(bytes, options?.head));
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    return path === this.#path ? { path, size: this.#bytes.byteLength } : this.#inner.stat(path);
  }

  list(prefix: string): AsyncIterable<ObjectInfo> {
    return this.#inner.list(prefix);
  }

  write(path: string): Promise<void> {
    return Promise.reject(
      new CheckpointError("invalid_argument", `[${this.protocol}] ${path}: a restore's view of a tier is read-only`, {
        context: { path },
      }),
    );
  }

  delete(path: string): Promise<void> {
    return this.write(path);
  }

  /** The tier's storage stays open: its manager closes it. */
  async close(): Promise<void> {}
}
