// Storages that hold one call until released, so a test can line up a race exactly.
import type { StorageAdapter } from "@cairn/core";
import type { ByteRange, DeleteOptions, ObjectInfo, ReadOptions, WriteBody, WriteOptions } from "@cairn/core/storage";
import { FaultyStorageAdapter } from "@cairn/core/testing";

/**
 * Holds the first write of a `metadata.json` (a copy's commit) or the first listing until
 * `release()`. A held write then completes whatever its signal says: a request the server already
 * has is not undone by an abort.
 */
export class Gate extends FaultyStorageAdapter {
  #held = false;
  #release: () => void = () => undefined;
  #entered: () => void = () => undefined;
  #passed: () => void = () => undefined;
  /** Resolves once a call is held. */
  readonly entered = new Promise<void>((resolve) => (this.#entered = resolve));
  /** Resolves once the held call has gone through (or failed). */
  readonly passed = new Promise<void>((resolve) => (this.#passed = resolve));
  readonly #opened = new Promise<void>((resolve) => (this.#release = resolve));

  constructor(
    inner: StorageAdapter,
    readonly holds: "commit" | "list",
  ) {
    super(inner);
  }

  release(): void {
    this.#release();
  }

  /** Whether this call is the one held. */
  #hold(what: "commit" | "list"): boolean {
    if (this.#held || what !== this.holds) return false;
    this.#held = true;
    this.#entered();
    return true;
  }

  override async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    if (!path.endsWith("metadata.json") || !this.#hold("commit")) return super.write(path, body, options);
    await this.#opened;
    try {
      return await super.write(path, body, { ...options, signal: undefined });
    } finally {
      this.#passed();
    }
  }

  override async *list(prefix: string): AsyncIterable<ObjectInfo> {
    if (!this.#hold("list")) return yield* super.list(prefix);
    await this.#opened;
    try {
      yield* super.list(prefix);
    } finally {
      this.#passed();
    }
  }
}

/** Holds the first read, write, delete (or, with `holdsStat`, stat) of `path` after `arm()` until `release()`. */
export class PathGate extends FaultyStorageAdapter {
  #armed = false;
  #release: () => void = () => undefined;
  #entered: () => void = () => undefined;
  readonly entered = new Promise<void>((resolve) => (this.#entered = resolve));
  readonly #opened = new Promise<void>((resolve) => (this.#release = resolve));

  constructor(
    inner: StorageAdapter,
    readonly path: string,
    /** Only a call made from this function (as the stack names it). */
    readonly caller?: string,
  ) {
    super(inner);
  }

  arm(): void {
    this.#armed = true;
  }

  release(): void {
    this.#release();
  }

  async #pass(path: string): Promise<void> {
    if (!this.#armed || path !== this.path) return;
    if (this.caller !== undefined && !new Error().stack?.includes(this.caller)) return;
    this.#armed = false;
    this.#entered();
    await this.#opened;
  }

  override async read(path: string, range?: ByteRange, options?: ReadOptions): Promise<Uint8Array> {
    await this.#pass(path);
    return super.read(path, range, options);
  }

  override async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    await this.#pass(path);
    return super.write(path, body, options);
  }

  override async delete(path: string, options?: DeleteOptions): Promise<void> {
    await this.#pass(path);
    return super.delete(path, options);
  }

  /** Whether stats are held too. */
  holdsStat = false;

  override async stat(path: string): Promise<ObjectInfo | null> {
    if (this.holdsStat) await this.#pass(path);
    return super.stat(path);
  }
}
