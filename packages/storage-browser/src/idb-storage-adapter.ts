import { type IDBPDatabase, openDB } from "idb";
import {
  type ByteRange,
  type ObjectInfo,
  type ReadOptions,
  type StorageAdapter,
  type WriteBody,
  type WriteOptions,
  ReadTarget,
  alreadyExists,
  cancelledError,
  checkRelativePath,
  notFound,
  throwIfAborted,
} from "@cairn/core/storage";
import { newAttemptId } from "@cairn/core/format";
import { browserStorageError } from "./location.js";

/** Bytes per stored chunk: a range read fetches only the chunks it touches, and no value nears a browser's limits. */
export const IDB_CHUNK_BYTES = 4 << 20;

/** Keys listed per request while listing. */
const LIST_PAGE = 500;

/** An object's record: its chunks are `[id, 0…]` in the chunks store, written before the record. */
interface ObjectRecord {
  readonly size: number;
  readonly modified: number;
  readonly id: string;
}

const OBJECTS = "objects";
const CHUNKS = "chunks";

/** The database behind `idb://<name>`: one per name, opened once per page and shared by its adapters. */
const databases = new Map<string, Promise<IDBPDatabase>>();

function database(name: string): Promise<IDBPDatabase> {
  let db = databases.get(name);
  if (!db) {
    db = openDB(name, 1, {
      upgrade(upgrading) {
        upgrading.createObjectStore(OBJECTS);
        upgrading.createObjectStore(CHUNKS);
      },
      // Another tab deleting or upgrading the database: let it, and open again on next use.
      blocking() {
        void db?.then((opened) => opened.close());
        databases.delete(name);
      },
    });
    databases.set(name, db);
    db.catch(() => databases.delete(name));
  }
  return db;
}

function chunkRange(id: string, first = 0, last = Number.MAX_SAFE_INTEGER): IDBKeyRange {
  return IDBKeyRange.bound([id, first], [id, last]);
}

/** Pieces of `body` regrouped into chunks of exactly IDB_CHUNK_BYTES (the last may be shorter). */
async function* fixedChunks(body: WriteBody): AsyncGenerator<Uint8Array> {
  let pending = new Uint8Array(IDB_CHUNK_BYTES);
  let filled = 0;
  for await (const part of body instanceof Uint8Array ? [body] : body) {
    for (let done = 0; done < part.byteLength;) {
      const n = Math.min(part.byteLength - done, IDB_CHUNK_BYTES - filled);
      pending.set(part.subarray(done, done + n), filled);
      filled += n;
      done += n;
      if (filled === IDB_CHUNK_BYTES) {
        yield pending;
        pending = new Uint8Array(IDB_CHUNK_BYTES);
        filled = 0;
      }
    }
  }
  if (filled > 0) yield pending.subarray(0, filled);
}

/**
 * `idb://db/a/b`: objects in the IndexedDB database `db`, keyed by `a/b/` + path. An object is a
 * record (size, time, id) and its bytes in chunks of 4 MiB under that id. A write stores its
 * chunks under a new id first, then the record in one transaction, which is also where
 * `ifAbsent` checks and a replaced object's chunks go: readers see the old object or the new
 * one, whole. A tab closed mid-write leaves chunks no record names (never read, never listed).
 */
export class IdbStorageAdapter implements StorageAdapter {
  readonly protocol = "idb";
  readonly root: string;
  readonly #database: string;
  readonly #prefix: string;

  constructor(names: readonly string[], root: string) {
    this.#database = names[0]!;
    this.#prefix = names
      .slice(1)
      .map((n) => `${n}/`)
      .join("");
    this.root = root;
  }

  #key(path: string): string {
    checkRelativePath(this.protocol, path);
    return this.#prefix + path;
  }

  async #db(path: string, action: string): Promise<IDBPDatabase> {
    try {
      return await database(this.#database);
    } catch (error) {
      throw browserStorageError(this.protocol, path, action, error);
    }
  }

  async read(path: string, range?: ByteRange, options: ReadOptions = {}): Promise<Uint8Array> {
    const key = this.#key(path);
    throwIfAborted(options.signal, `[idb] reading ${path}`, null);
    const db = await this.#db(path, "reading");
    let record: ObjectRecord | undefined;
    let pieces: Uint8Array[];
    let start: number;
    let end: number;
    try {
      // One transaction: the record and the chunks it names, as one snapshot.
      const tx = db.transaction([OBJECTS, CHUNKS], "readonly");
      record = (await tx.objectStore(OBJECTS).get(key)) as ObjectRecord | undefined;
      if (!record) throw notFound(this.protocol, path, this.root);
      start = Math.min(range?.offset ?? 0, record.size);
      end = range ? Math.min(record.size, start + range.length) : record.size;
      const first = Math.floor(start / IDB_CHUNK_BYTES);
      const last = Math.floor(Math.max(start, end - 1) / IDB_CHUNK_BYTES);
      pieces =
        end > start ? ((await tx.objectStore(CHUNKS).getAll(chunkRange(record.id, first, last))) as Uint8Array[]) : [];
      if (pieces.length !== (end > start ? last - first + 1 : 0))
        throw browserStorageError(this.protocol, path, "reading", new Error("chunks of the object are missing"));
    } catch (error) {
      throw browserStorageError(this.protocol, path, "reading", error);
    }
    options.onObjectSize?.(record.size);
    const target = new ReadTarget(end - start, options);
    let at = Math.floor(start / IDB_CHUNK_BYTES) * IDB_CHUNK_BYTES;
    let filled = 0;
    for (const piece of pieces) {
      const from = Math.max(start - at, 0);
      const to = Math.min(piece.byteLength, end - at);
      target.set(piece.subarray(from, to), filled);
      filled += to - from;
      at += piece.byteLength;
    }
    return target.result(filled);
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    const key = this.#key(path);
    const db = await this.#db(path, "reading");
    try {
      const record = (await db.get(OBJECTS, key)) as ObjectRecord | undefined;
      return record ? { path, size: record.size, modified: new Date(record.modified) } : null;
    } catch (error) {
      throw browserStorageError(this.protocol, path, "reading", error);
    }
  }

  async write(path: string, body: WriteBody, options: WriteOptions = {}): Promise<void> {
    const key = this.#key(path);
    const what = `[idb] writing ${path}`;
    throwIfAborted(options.signal, what);
    const db = await this.#db(path, "writing");
    const id = `${newAttemptId()}${newAttemptId()}`;
    let size = 0;
    let count = 0;
    try {
      for await (const chunk of fixedChunks(body)) {
        throwIfAborted(options.signal, what);
        await db.put(CHUNKS, chunk, [id, count++]);
        size += chunk.byteLength;
      }
      throwIfAborted(options.signal, what);
      const tx = db.transaction([OBJECTS, CHUNKS], "readwrite", { durability: "strict" });
      const objects = tx.objectStore(OBJECTS);
      const existing = (await objects.get(key)) as ObjectRecord | undefined;
      if (existing && options.ifAbsent) {
        tx.abort();
        await tx.done.catch(() => undefined);
        throw alreadyExists(this.protocol, path, this.root);
      }
      if (existing) await tx.objectStore(CHUNKS).delete(chunkRange(existing.id));
      await objects.put({ size, modified: Date.now(), id } satisfies ObjectRecord, key);
      await tx.done;
    } catch (error) {
      await db.delete(CHUNKS, chunkRange(id)).catch(() => undefined);
      if (options.signal?.aborted) throw cancelledError(options.signal, what);
      throw browserStorageError(this.protocol, path, "writing", error);
    }
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    const db = await this.#db(prefix, "listing");
    const from = this.#prefix + prefix;
    let after: string | undefined;
    for (;;) {
      const range =
        after === undefined
          ? IDBKeyRange.bound(from, `${from}\uffff`)
          : IDBKeyRange.bound(after, `${from}\uffff`, true);
      let keys: string[];
      let records: ObjectRecord[];
      try {
        const tx = db.transaction(OBJECTS, "readonly");
        keys = (await tx.store.getAllKeys(range, LIST_PAGE)) as string[];
        records = (await tx.store.getAll(range, LIST_PAGE)) as ObjectRecord[];
      } catch (error) {
        throw browserStorageError(this.protocol, prefix, "listing", error);
      }
      for (const [i, key] of keys.entries()) {
        const record = records[i]!;
        yield { path: key.slice(this.#prefix.length), size: record.size, modified: new Date(record.modified) };
      }
      if (keys.length < LIST_PAGE) return;
      after = keys[keys.length - 1];
    }
  }

  async delete(path: string): Promise<void> {
    const key = this.#key(path);
    const db = await this.#db(path, "deleting");
    try {
      const tx = db.transaction([OBJECTS, CHUNKS], "readwrite", { durability: "strict" });
      const record = (await tx.objectStore(OBJECTS).get(key)) as ObjectRecord | undefined;
      if (record) {
        await tx.objectStore(OBJECTS).delete(key);
        await tx.objectStore(CHUNKS).delete(chunkRange(record.id));
      }
      await tx.done;
    } catch (error) {
      throw browserStorageError(this.protocol, path, "deleting", error);
    }
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
