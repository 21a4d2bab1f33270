import { CheckpointError } from "@cairn/core";
import type { ByteRange, DeleteOptions, ObjectInfo, ReadOptions, WriteBody, WriteOptions } from "@cairn/core/storage";
import { FaultyStorageAdapter } from "@cairn/core/testing";

/** A storage that can be taken down in tests: while `down`, every call fails (not transiently, so core does not retry it). */
export class OutageStorage extends FaultyStorageAdapter {
  down = false;
  /** Calls refused while down. */
  refused = 0;
  #check(path: string): void {
    if (!this.down) return;
    this.refused++;
    throw new CheckpointError("storage", `[${this.protocol}] ${path}: the bucket is down (injected)`, {
      context: { path, transient: false },
    });
  }
  override async read(path: string, range?: ByteRange, options?: ReadOptions): Promise<Uint8Array> {
    this.#check(path);
    return super.read(path, range, options);
  }
  override async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    this.#check(path);
    return super.write(path, body, options);
  }
  override async stat(path: string): Promise<ObjectInfo | null> {
    this.#check(path);
    return super.stat(path);
  }
  override async *list(prefix: string): AsyncIterable<ObjectInfo> {
    this.#check(prefix);
    yield* super.list(prefix);
  }
}

/** An outage that refuses deletes too (`OutageStorage` lets them through): a save with `overwrite` cannot clear the step there. */
export class FullOutageStorage extends OutageStorage {
  override async delete(path: string, options?: DeleteOptions): Promise<void> {
    if (this.down)
      throw new CheckpointError("storage", `[${this.protocol}] ${path}: the bucket is down (injected)`, {
        context: { path, transient: false },
      });
    return super.delete(path, options);
  }
}
