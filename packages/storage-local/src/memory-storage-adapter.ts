import {
  type ByteRange,
  type ObjectInfo,
  type ReadOptions,
  type StorageAdapter,
  type WriteBody,
  type WriteOptions,
  ReadTarget,
  alreadyExists,
  checkRelativePath,
  notFound,
  throwIfAborted,
} from "@cairn/core/storage";

interface StoredObject {
  readonly bytes: Uint8Array;
  readonly modified: Date;
}

/** Every memory:// object of this JavaScript realm (a page, a worker), by its full key (`name/a/b/<path>`). */
let objects = new Map<string, StoredObject>();

/** Empties every memory:// location of this realm (between tests). Adapters opened before see the new, empty one. */
export function resetMemoryObjects(): void {
  objects = new Map();
}

/**
 * `memory://name/a/b` where node:fs and memfs do not exist (a page, a Web Worker): objects in a
 * map of this realm, keyed `name/a/b/<path>`, so every adapter opened on one URL sees the same
 * bytes until the page goes away. A write copies its whole body into memory of its own before
 * the object appears (all-or-nothing, and `ifAbsent` decided in the same synchronous turn); a
 * read copies out, so nobody holds a view of what is stored.
 */
export class MemoryStorageAdapter implements StorageAdapter {
  readonly protocol = "memory";
  readonly root: string;
  readonly #prefix: string;

  /** `names`: the URL's decoded segments (`memoryNames`); `root`: the URL for messages. */
  constructor(names: readonly string[], root: string) {
    this.#prefix = names.map((n) => `${n}/`).join("");
    this.root = root;
  }

  #key(path: string): string {
    return this.#prefix + checkRelativePath(this.protocol, path);
  }

  // async: a bad path rejects, as from every adapter, rather than throwing at the call.
  async read(path: string, range?: ByteRange, options: ReadOptions = {}): Promise<Uint8Array> {
    throwIfAborted(options.signal, `[memory] reading ${path}`, null);
    const object = objects.get(this.#key(path));
    if (!object) throw notFound(this.protocol, path, this.root);
    const size = object.bytes.byteLength;
    const start = Math.min(range?.offset ?? 0, size);
    const end = range ? Math.min(size, start + range.length) : size;
    options.onObjectSize?.(size);
    const target = new ReadTarget(end - start, options);
    target.set(object.bytes.subarray(start, end), 0);
    return target.result(end - start);
  }

  async write(path: string, body: WriteBody, options: WriteOptions = {}): Promise<void> {
    const key = this.#key(path);
    const what = `[memory] writing ${path}`;
    throwIfAborted(options.signal, what);
    let bytes: Uint8Array;
    if (body instanceof Uint8Array) bytes = body.slice();
    else {
      const parts: Uint8Array[] = [];
      let size = 0;
      for await (const part of body) {
        throwIfAborted(options.signal, what);
        parts.push(part.slice());
        size += part.byteLength;
      }
      bytes = new Uint8Array(size);
      let at = 0;
      for (const part of parts) {
        bytes.set(part, at);
        at += part.byteLength;
      }
    }
    throwIfAborted(options.signal, what);
    if (options.ifAbsent && objects.has(key)) throw alreadyExists(this.protocol, path, this.root);
    objects.set(key, { bytes, modified: new Date() });
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    const object = objects.get(this.#key(path));
    return object ? { path, size: object.bytes.byteLength, modified: object.modified } : null;
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    const from = this.#prefix + prefix;
    // A snapshot of the keys: writes and deletes during the listing neither break nor repeat it.
    for (const key of [...objects.keys()]) {
      if (!key.startsWith(from)) continue;
      const object = objects.get(key);
      if (object)
        yield { path: key.slice(this.#prefix.length), size: object.bytes.byteLength, modified: object.modified };
    }
  }

  async delete(path: string): Promise<void> {
    objects.delete(this.#key(path));
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
