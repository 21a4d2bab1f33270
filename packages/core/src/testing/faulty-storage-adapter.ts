import { CheckpointError } from "../errors.js";
import type { ByteRange, ObjectInfo, ReadOptions, StorageAdapter, WriteBody, WriteOptions } from "../storage/storage-adapter.js";

export type FaultyOperation = "read" | "write" | "stat" | "list" | "delete";

/** A failure to inject: the `nth` matching call of `operation` (1-based) and, with `times`, the ones after it. */
export interface Fault {
  readonly operation: FaultyOperation;
  readonly nth?: number;
  /** How many consecutive matching calls fail from `nth` on (default 1). */
  readonly times?: number;
  /** Only calls on paths this accepts count (default: all). */
  readonly path?: (path: string) => boolean;
  /** The error to throw (default: a permanent `storage` error). */
  readonly error?: () => Error;
}

/**
 * Wraps an adapter and fails chosen calls, so tests inject faults below the code under test
 * (like flystorage's chaos decorator). Writes fail after consuming part of their body, as a
 * connection dropped mid-upload would.
 */
export class FaultyStorageAdapter implements StorageAdapter {
  readonly protocol: string;
  readonly root: string;
  readonly remote: boolean;
  readonly calls: Record<FaultyOperation, string[]> = { read: [], write: [], stat: [], list: [], delete: [] };
  readonly #inner: StorageAdapter;
  readonly #faults: Fault[];
  readonly #seen = new Map<Fault, number>();

  constructor(inner: StorageAdapter, faults: readonly Fault[] = []) {
    this.#inner = inner;
    this.#faults = [...faults];
    this.protocol = inner.protocol;
    this.root = inner.root;
    this.remote = inner.remote === true;
  }

  addFault(fault: Fault): void {
    this.#faults.push(fault);
  }

  #check(operation: FaultyOperation, path: string): Error | undefined {
    this.calls[operation].push(path);
    for (const fault of this.#faults) {
      if (fault.operation !== operation || (fault.path && !fault.path(path))) continue;
      const count = (this.#seen.get(fault) ?? 0) + 1;
      this.#seen.set(fault, count);
      const first = fault.nth ?? 1;
      if (count >= first && count < first + (fault.times ?? 1)) {
        return (
          fault.error?.() ??
          new CheckpointError("storage", `[${this.protocol}] injected failure of ${operation} ${path} (call ${count})`, {
            context: { path, protocol: this.protocol, transient: false },
          })
        );
      }
    }
    return undefined;
  }

  async read(path: string, range?: ByteRange, options?: ReadOptions): Promise<Uint8Array> {
    const fault = this.#check("read", path);
    if (fault) throw fault;
    return this.#inner.read(path, range, options);
  }

  async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    const fault = this.#check("write", path);
    if (!fault) return this.#inner.write(path, body, options);
    async function* failAfterFirstPart(): AsyncGenerator<Uint8Array> {
      for await (const part of body instanceof Uint8Array ? [body] : body) {
        yield part;
        break;
      }
      throw fault;
    }
    return this.#inner.write(path, failAfterFirstPart(), options);
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    const fault = this.#check("stat", path);
    if (fault) throw fault;
    return this.#inner.stat(path);
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    const fault = this.#check("list", prefix);
    if (fault) throw fault;
    yield* this.#inner.list(prefix);
  }

  async delete(path: string): Promise<void> {
    const fault = this.#check("delete", path);
    if (fault) throw fault;
    return this.#inner.delete(path);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}
