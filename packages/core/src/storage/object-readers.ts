import { CheckpointError, isCheckpointError } from "../errors.js";
import { type RetryPolicy, withRetry } from "./retry.js";
import { type ObjectReader, type ReadOptions, type StorageAdapter, joinPath } from "./storage-adapter.js";

export interface ObjectReadersOptions {
  readonly retry?: Partial<RetryPolicy>;
  readonly signal?: AbortSignal;
  /** Where the object `name` is under the storage's root (default: in `dir`); format's `dataFilePath` for a checkpoint's data files. */
  readonly pathOf?: (name: string) => string;
}

/**
 * The objects of one directory a load reads ranges of, each opened once (`StorageAdapter.openReader`)
 * and held until `close`; with adapters that offer no readers, each range is a `read`, and a size
 * is the one reads were told (`ReadOptions.onObjectSize`), else a `stat`. Every call is retried by
 * core's policy; a failed open is tried afresh next time.
 */
export class ObjectReaders {
  readonly #storage: StorageAdapter;
  readonly #dir: string;
  readonly #options: ObjectReadersOptions;
  readonly #open = new Map<string, Promise<ObjectReader>>();
  /** Sizes that reads of objects without readers were told. */
  readonly #told = new Map<string, number>();

  constructor(storage: StorageAdapter, dir: string, options: ObjectReadersOptions = {}) {
    this.#storage = storage;
    this.#dir = dir;
    this.#options = options;
  }

  /** The object's size, or null if it is missing; ask once its reads have settled to spare a `stat`. */
  async size(name: string): Promise<number | null> {
    if (!this.#storage.openReader) {
      const told = this.#told.get(name);
      if (told !== undefined) return told;
      const info = await this.#retry(() => this.#storage.stat(this.#path(name)));
      return info?.size ?? null;
    }
    try {
      return (await this.#retry(() => this.#reader(name))).size;
    } catch (error) {
      if (isCheckpointError(error, "not_found")) return null;
      throw error;
    }
  }

  /** `length` bytes from `offset`, as `StorageAdapter.read` returns them with these buffers. */
  read(
    name: string,
    offset: number,
    length: number,
    buffers: Pick<ReadOptions, "into" | "head" | "blockChecksums"> = {},
  ): Promise<Uint8Array> {
    const options = { ...buffers, signal: this.#options.signal };
    if (!this.#storage.openReader) return this.#readTelling(name, offset, length, options);
    return this.#retry(async () => (await this.#reader(name)).read({ offset, length }, options));
  }

  /**
   * Reads from `offset` into `parts` in order (`ObjectReader.readScattered`) and resolves how many
   * bytes it read; undefined, having read nothing, where the adapter cannot.
   */
  async readScattered(name: string, offset: number, parts: readonly Uint8Array[]): Promise<number | undefined> {
    if (!this.#storage.openReader) return undefined;
    const options = { signal: this.#options.signal };
    return this.#retry(async () => {
      const reader = await this.#reader(name);
      return reader.readScattered ? reader.readScattered(offset, parts, options) : undefined;
    });
  }

  /** Closes every reader opened; call once every read has settled. */
  async close(): Promise<void> {
    const opened = [...this.#open.values()];
    this.#open.clear();
    await Promise.all(
      opened.map(async (reader) => (await reader.catch(() => undefined))?.close().catch(() => undefined)),
    );
  }

  /** A `read` that records the object's size if the adapter tells it; a size that changes between reads is `corrupt`. */
  async #readTelling(name: string, offset: number, length: number, options: ReadOptions): Promise<Uint8Array> {
    let told: number | undefined;
    const onObjectSize = (size: number): void => {
      told = size;
    };
    const bytes = await this.#retry(() => {
      told = undefined;
      return this.#storage.read(this.#path(name), { offset, length }, { ...options, onObjectSize });
    });
    if (told === undefined) return bytes;
    if (
      !Number.isSafeInteger(told) ||
      told < offset + bytes.byteLength + (options.head && bytes.byteLength > 0 ? options.head.byteLength : 0)
    ) {
      throw new CheckpointError(
        "corrupt",
        `${name}: storage says the object holds ${told} bytes, fewer than a read of it returned`,
        { context: { file: name } },
      );
    }
    const known = this.#told.get(name);
    if (known !== undefined && known !== told) {
      throw new CheckpointError(
        "corrupt",
        `${name} changed size while it was read (${known} then ${told} bytes); the data file is damaged`,
        { context: { file: name } },
      );
    }
    this.#told.set(name, told);
    return bytes;
  }

  #reader(name: string): Promise<ObjectReader> {
    let reader = this.#open.get(name);
    if (!reader) {
      reader = this.#storage.openReader!(this.#path(name));
      this.#open.set(name, reader);
      reader.catch(() => {
        if (this.#open.get(name) === reader) this.#open.delete(name);
      });
    }
    return reader;
  }

  #path(name: string): string {
    return this.#options.pathOf ? this.#options.pathOf(name) : joinPath(this.#dir, name);
  }

  #retry<T>(operation: () => Promise<T>): Promise<T> {
    return withRetry(operation, { policy: this.#options.retry, signal: this.#options.signal });
  }
}
