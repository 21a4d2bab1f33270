import { randomBytes } from "node:crypto";
import { posix } from "node:path";
import { type StorageAdapter, CheckpointError } from "@cairn/core";
import {
  type ByteRange,
  type DeleteOptions,
  type ObjectInfo,
  type ObjectReader,
  type PortableStorage,
  type ReadOptions,
  type WriteBody,
  type WriteOptions,
  ReadTarget,
  TEMP_OBJECT_PREFIX,
  cancelledError,
  checkRelativePath,
} from "@cairn/core/storage";
import { DirectReads, directReadAvailable } from "./direct-read.js";
import { rangeLength, readRange, readRangeChecksummed, readScattered } from "./file-reads.js";
import { directCreateFlags, directIoAvailable, writeDirect } from "./direct-write.js";
import type { FileHandleLike, FsPromisesLike } from "./fs-like.js";
import {
  type FsAction,
  type FsSite,
  MISSING_CODES,
  errnoOf,
  existingObject,
  fsError,
  missingObject,
} from "./fs-errors.js";
import { NotPublished, published, writeWindowed } from "./file-writes.js";
import { walkFiles } from "./walk-files.js";

export interface FsStorageAdapterOptions {
  /** fsync the directory after a rename or link so the new name survives a power loss (node:fs only). */
  readonly syncDirectories: boolean;
  /** How a worker thread opens the same files (node:fs only: a memfs volume lives in one thread's heap). */
  readonly portable?: PortableStorage;
  /**
   * Write objects of `DIRECT_MIN_BYTES` or more (or of unknown size) with O_DIRECT, past the
   * page cache (node:fs on Linux only; see `writeDirect`). Falls back to buffered writes where
   * the file system refuses it.
   */
  readonly directIo?: boolean;
  /**
   * Reads asking for their blocks' CRC32Cs (`ReadOptions.blockChecksums`) through
   * @cairn/crc32c-native on the handle's descriptor, hashed on libuv's threads (node:fs only:
   * a memfs descriptor is no real one).
   */
  readonly checksummedReads?: boolean;
}

/** Smaller objects (metadata.json) go through the page cache: a direct write would gain nothing. */
export const DIRECT_MIN_BYTES = 1 << 20;
/** `syncLater` writes whose descriptors stay open for `sync`; later ones are closed and reopened to be synced. */
const KEEP_OPEN = 64;

/**
 * A `StorageAdapter` over a POSIX-like file system rooted at a directory. Writes are durable
 * and all-or-nothing: a temp file in the target directory, written, fsynced and closed, then
 * renamed into place (or, for `ifAbsent`, hard-linked, because link(2) fails on an existing
 * name where rename(2) would silently replace it), then the directory is fsynced. The temp file
 * (`TEMP_OBJECT_PREFIX`) is listed like an object, so one a killed process left is swept as a leftover.
 *
 * Objects are regular files; a directory is not an object (as a prefix is not one in an object
 * store): reading it is `not_found`, `stat` is null, deleting it does nothing. Every failure is
 * a `CheckpointError` whose `cause` is the file system's error:
 * - `not_found`: `read` of a missing object (ENOENT, or ENOTDIR: a file where a directory of its path would be);
 * - `already_exists`: an `ifAbsent` write found the name taken (EEXIST from link);
 * - `permission_denied`: EROFS, EACCES, EPERM (read-only mount, file modes, immutable files);
 * - `no_space`: ENOSPC, EDQUOT;
 * - `storage`, transient (retried by core): EMFILE, ENFILE, EAGAIN, EBUSY, EINTR, EIO, ETIMEDOUT,
 *   ESTALE, and ENOENT while writing (a concurrent delete removed the directory);
 * - `storage`, permanent: anything else, e.g. a write whose parent is a file or whose name is a directory.
 * Messages read `[file] <file>: cannot <action>: <what> (<ERRNO>); <what to do>`.
 */
export class FsStorageAdapter implements StorageAdapter {
  readonly protocol: string;
  readonly root: string;
  readonly portable?: PortableStorage;
  /** Direct and buffered writes both call `WriteOptions.onWritten`. */
  readonly reportsWritten = true;
  /** Only where writes are made durable (directories are synced): a memfs volume survives no crash anyway. */
  readonly sync?: (paths: readonly string[]) => Promise<void>;
  readonly #fs: FsPromisesLike;
  readonly #dir: string;
  readonly #options: FsStorageAdapterOptions;
  /** Cleared once the file system refuses O_DIRECT, so later writes do not try again. */
  #directIo: boolean;
  /**
   * Descriptors of `syncLater` writes, by absolute path, kept open (up to KEEP_OPEN) so `sync`
   * starts their fsyncs at once: no reopen, no wait for the calling thread's next turn.
   */
  readonly #unsynced = new Map<string, FileHandleLike>();
  /** Directories this adapter made whose parents were not fsynced since: a power cut may lose them, and all under them. */
  readonly #newDirectories = new Set<string>();
  #closed = false;

  constructor(protocol: string, root: string, fs: FsPromisesLike, dir: string, options: FsStorageAdapterOptions) {
    this.protocol = protocol;
    this.root = root;
    this.#fs = fs;
    this.#dir = posix.normalize(dir);
    this.#options = options;
    this.#directIo = (options.directIo ?? false) && directIoAvailable;
    if (options.portable) this.portable = options.portable;
    if (options.syncDirectories) this.sync = (paths) => this.#syncAll(paths);
  }

  #abs(path: string): string {
    if (this.#closed)
      throw new CheckpointError("invalid_argument", `[${this.protocol}] storage at ${this.root} is closed`);
    return posix.join(this.#dir, checkRelativePath(this.protocol, path));
  }

  #site(action: FsAction, path: string, file: string): FsSite {
    return { protocol: this.protocol, root: this.root, path, file, action };
  }

  async read(path: string, range?: ByteRange, options?: ReadOptions): Promise<Uint8Array> {
    const abs = this.#abs(path);
    if (options?.signal?.aborted) throw cancelledError(options.signal, `reading ${path}`, null);
    const site = this.#site("read", path, abs);
    let handle: FileHandleLike | undefined;
    try {
      const info = await this.#fs.stat(abs);
      this.#checkFile(path, info);
      if (rangeLength(info.size, range) === 0) return new ReadTarget(0, options).result(0);
      handle = await this.#fs.open(abs, "r");
      return (
        (await this.#readChecksummed(handle, info.size, range, options)) ??
        (await readRange(handle, info.size, range, options))
      );
    } catch (error) {
      // Missing at stat, or deleted between stat and open.
      if (MISSING_CODES.has(errnoOf(error))) throw missingObject(error, site);
      throw fsError(error, site);
    } finally {
      // Nothing was written through this handle, so a failing close loses nothing.
      await handle?.close().catch(() => undefined);
    }
  }

  /** The file opened once for all of a load's ranges of it: no stat, open and close per range. */
  async openReader(path: string): Promise<ObjectReader> {
    const abs = this.#abs(path);
    const site = this.#site("read", path, abs);
    let handle: FileHandleLike | undefined;
    let size: number;
    try {
      handle = await this.#fs.open(abs, "r");
      const info = await handle.stat();
      this.#checkFile(path, info);
      size = info.size;
    } catch (error) {
      await handle?.close().catch(() => undefined);
      if (MISSING_CODES.has(errnoOf(error))) throw missingObject(error, site);
      throw fsError(error, site);
    }
    const opened = handle;
    const direct =
      this.#options.directIo === true && directReadAvailable && opened.fd !== undefined
        ? new DirectReads(this.#fs, abs, opened.fd)
        : undefined;
    return {
      size,
      read: async (range, options) => {
        if (options?.signal?.aborted) throw cancelledError(options.signal, `reading ${path}`, null);
        try {
          return (
            (await direct?.read(size, range, options)) ??
            (await this.#readChecksummed(opened, size, range, options)) ??
            (await readRange(opened, size, range, options))
          );
        } catch (error) {
          throw fsError(error, site);
        }
      },
      readScattered: async (offset, parts, options) => {
        if (options?.signal?.aborted) throw cancelledError(options.signal, `reading ${path}`, null);
        try {
          return (await direct?.readScattered(size, offset, parts)) ?? (await readScattered(opened, offset, parts));
        } catch (error) {
          throw fsError(error, site);
        }
      },
      close: async () => {
        await direct?.close();
        await opened.close().catch(() => undefined);
      },
    };
  }

  #readChecksummed(
    handle: FileHandleLike,
    size: number,
    range: ByteRange | undefined,
    options: ReadOptions | undefined,
  ): Promise<Uint8Array | undefined> | undefined {
    if (!this.#options.checksummedReads || handle.fd === undefined) return undefined;
    return readRangeChecksummed(handle.fd, size, range, options);
  }

  /** A directory or a device is not an object: `not_found`, as in an object store. */
  #checkFile(path: string, info: { isFile(): boolean; isDirectory(): boolean }): void {
    if (info.isFile()) return;
    throw new CheckpointError(
      "not_found",
      `[${this.protocol}] ${path} under ${this.root} is ${info.isDirectory() ? "a directory" : "not a regular file"}, not an object`,
      {
        context: { path, protocol: this.protocol },
      },
    );
  }

  async write(path: string, body: WriteBody, options: WriteOptions = {}): Promise<void> {
    const abs = this.#abs(path);
    const dir = posix.dirname(abs);
    const temp = posix.join(dir, `${TEMP_OBJECT_PREFIX}${posix.basename(abs)}-${randomBytes(6).toString("hex")}`);
    const site = this.#site("write", path, abs);
    let handle: FileHandleLike | undefined;
    let placed = false;
    try {
      if (options.signal?.aborted) throw cancelledError(options.signal, `writing ${path}`);
      const parts = body instanceof Uint8Array ? [body] : body;
      const check = (): void => {
        if (options.signal?.aborted) throw cancelledError(options.signal, `writing ${path}`);
      };
      const size = body instanceof Uint8Array ? body.byteLength : options.size;
      const opened =
        this.#directIo && (size === undefined || size >= DIRECT_MIN_BYTES)
          ? await this.#createDirectTemp(dir, temp)
          : { handle: await this.#createTemp(dir, temp), direct: false };
      if (opened.direct) {
        handle = await writeDirect(
          opened.handle,
          parts,
          check,
          async () => {
            this.#directIo = false;
            return this.#fs.open(temp, "r+");
          },
          options.pageAligned === true,
          options.onWritten,
        );
      } else {
        handle = opened.handle;
        await writeWindowed(handle, parts, check, options.onWritten);
      }
      // With syncLater, `sync` fsyncs the file (on this descriptor, kept open) and its directory once, beside the others'.
      const deferred = options.syncLater === true && this.sync !== undefined;
      if (!deferred) {
        this.#forget(abs);
        await handle.sync();
      }
      if (!deferred || this.#unsynced.size >= KEEP_OPEN) {
        await handle.close();
        handle = undefined;
      }
      if (options.publishAfter) await published(options.publishAfter);
      if (options.ifAbsent) {
        try {
          await this.#fs.link(temp, abs);
        } catch (error) {
          if (errnoOf(error) === "EEXIST") throw existingObject(error, site);
          throw error;
        }
      } else {
        await this.#fs.rename(temp, abs);
      }
      placed = true;
      if (handle) {
        this.#forget(abs);
        this.#unsynced.set(abs, handle);
        handle = undefined;
      }
      if (!deferred) await this.#syncDir(dir);
    } catch (error) {
      if (error instanceof NotPublished) throw error.reason;
      throw fsError(error, site);
    } finally {
      await handle?.close().catch(() => undefined);
      if (!placed || options.ifAbsent) await this.#fs.unlink(temp).catch(() => undefined);
    }
  }

  /**
   * Creates the temp file, recreating the directory if a concurrent delete removed it meanwhile
   * (then mkdir itself may fail with ENOENT: node checks an existing directory with a stat that loses the race).
   */
  async #createTemp(dir: string, temp: string, flags: string | number = "wx"): Promise<FileHandleLike> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.#makeDirectory(dir);
        return await this.#fs.open(temp, flags, 0o644);
      } catch (error) {
        if (errnoOf(error) !== "ENOENT" || attempt >= 3) throw error;
      }
    }
  }

  /**
   * mkdir -p. Node's recursive mkdir reports ENOENT for a directory it could not create whatever
   * the reason (EROFS too), so then each missing directory is made on its own, failing with the real errno.
   */
  async #makeDirectory(dir: string): Promise<void> {
    try {
      // The first directory made, if any (node:fs): it and those under it down to `dir` are new.
      const first = await this.#fs.mkdir(dir, { recursive: true });
      if (typeof first === "string") for (let at = dir; at.startsWith(first); at = posix.dirname(at)) this.#made(at);
      return;
    } catch (error) {
      if (errnoOf(error) !== "ENOENT") throw error;
    }
    const missing: string[] = [];
    for (let at = dir; !(await this.#isDirectory(at)) && posix.dirname(at) !== at; at = posix.dirname(at))
      missing.unshift(at);
    for (const at of missing) {
      try {
        await this.#fs.mkdir(at);
        this.#made(at);
      } catch (error) {
        if (errnoOf(error) !== "EEXIST") throw error;
      }
    }
  }

  #made(dir: string): void {
    if (this.#options.syncDirectories) this.#newDirectories.add(dir);
  }

  /**
   * The directories to fsync so that `dirs` and their files survive a power cut: each, and the
   * parent of each directory this adapter made on their way (whose name its parent holds).
   */
  #durableDirs(dirs: Iterable<string>): Set<string> {
    const all = new Set<string>();
    for (const dir of dirs) {
      all.add(dir);
      for (let at = dir; this.#newDirectories.has(at); at = posix.dirname(at)) all.add(posix.dirname(at));
    }
    return all;
  }

  /** After `synced` were fsynced: the directories whose names they hold are durable now. */
  #dirsSynced(synced: Iterable<string>): void {
    for (const dir of synced)
      for (const at of this.#newDirectories) if (posix.dirname(at) === dir) this.#newDirectories.delete(at);
  }

  /** The temp file opened for direct writes, or for buffered ones (and no more tries) where the file system refuses O_DIRECT. */
  async #createDirectTemp(dir: string, temp: string): Promise<{ handle: FileHandleLike; direct: boolean }> {
    try {
      return { handle: await this.#createTemp(dir, temp, directCreateFlags()), direct: true };
    } catch (error) {
      if (errnoOf(error) !== "EINVAL") throw error;
      this.#directIo = false;
      // Linux creates the file before it checks O_DIRECT, so this open must not be exclusive (the name is random).
      return { handle: await this.#fs.open(temp, "w", 0o644), direct: false };
    }
  }

  async #syncDir(dir: string): Promise<void> {
    if (!this.#options.syncDirectories) return;
    const dirs = this.#durableDirs([dir]);
    await Promise.all([...dirs].map((at) => this.#syncFile(at)));
    this.#dirsSynced(dirs);
  }

  async #syncFile(file: string): Promise<void> {
    const handle = await this.#fs.open(file, "r");
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  }

  /**
   * Every file, and each directory holding one of them once, fsynced at the same time; a file
   * written with `syncLater` through a descriptor still open is fsynced on it, then closed.
   */
  async #syncAll(paths: readonly string[]): Promise<void> {
    const files = paths.map((path) => ({ path, file: this.#abs(path) }));
    const named = new Map(files.map(({ path, file }) => [posix.dirname(file), path]));
    const dirs = new Map([...this.#durableDirs(named.keys())].map((dir) => [dir, named.get(dir) ?? paths[0]!]));
    // The directories' opens are queued first: libuv's four threads may all be busy with the files' fsyncs next.
    const synced = await Promise.allSettled([
      ...[...dirs].map(async ([dir, path]) => {
        try {
          await this.#syncFile(dir);
        } catch (error) {
          throw fsError(error, this.#site("write", path, dir));
        }
      }),
      ...files.map(async ({ path, file }) => {
        const open = this.#unsynced.get(file);
        this.#unsynced.delete(file);
        try {
          await (open ? syncAndClose(open) : this.#syncFile(file));
        } catch (error) {
          throw fsError(error, this.#site("write", path, file));
        }
      }),
    ]);
    const failed = synced.find((s) => s.status === "rejected");
    if (failed) throw failed.reason;
    this.#dirsSynced(dirs.keys());
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    const abs = this.#abs(path);
    try {
      const info = await this.#fs.stat(abs);
      return info.isFile() ? { path, size: info.size, modified: info.mtime } : null;
    } catch (error) {
      if (MISSING_CODES.has(errnoOf(error))) return null;
      throw fsError(error, this.#site("stat", path, abs));
    }
  }

  /**
   * Walks the directories under the prefix in name order. Entries are stat'ed and sub-directories
   * read ahead of the consumer, a bounded number of calls at once, never one after another.
   */
  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    // Start at the deepest directory the prefix names in full; everything below it is matched by string prefix.
    const base = prefix.includes("/") ? prefix.slice(0, prefix.lastIndexOf("/")) : "";
    if (base) checkRelativePath(this.protocol, base);
    this.#abs(base);
    yield* walkFiles(this.#fs, this.#dir, base, prefix, {
      stat: (path) => this.stat(path),
      failed: (error, rel, dir) => fsError(error, this.#site("list", rel || ".", dir)),
    });
  }

  async delete(path: string, options?: DeleteOptions): Promise<void> {
    const abs = this.#abs(path);
    this.#forget(abs);
    try {
      await this.#fs.unlink(abs);
    } catch (error) {
      const errno = errnoOf(error);
      // unlink(2) of a directory fails with EISDIR (Linux) or EPERM (POSIX, memfs); a directory is no object to delete.
      const directory = (errno === "EISDIR" || errno === "EPERM") && (await this.#isDirectory(abs));
      if (!MISSING_CODES.has(errno) && !directory) throw fsError(error, this.#site("delete", path, abs));
      if (directory || !options?.durable) return;
    }
    if (options?.durable) await this.#syncRemoval(path, posix.dirname(abs));
    await this.#removeEmptyParents(posix.dirname(abs));
  }

  /** fsyncs the nearest existing directory holding `dir` (itself, or its parent if it was removed), so a removal in it survives a power cut. */
  async #syncRemoval(path: string, dir: string): Promise<void> {
    if (!this.#options.syncDirectories) return;
    let at = dir;
    for (let attempt = 1; ; attempt++) {
      while (at !== this.#dir && at.startsWith(`${this.#dir}/`) && !(await this.#isDirectory(at)))
        at = posix.dirname(at);
      try {
        return await this.#syncFile(at);
      } catch (error) {
        // Gone between the look and the open (another writer emptied and removed it): look again, up to its parent.
        if (!MISSING_CODES.has(errnoOf(error)) || attempt >= 3) throw fsError(error, this.#site("delete", path, at));
      }
    }
  }

  async #isDirectory(abs: string): Promise<boolean> {
    try {
      return (await this.#fs.stat(abs)).isDirectory();
    } catch {
      return false;
    }
  }

  /** Object stores have no directories; removing emptied ones keeps the two kinds of storage alike. */
  async #removeEmptyParents(dir: string): Promise<void> {
    for (let current = dir; current.startsWith(`${this.#dir}/`); current = posix.dirname(current)) {
      try {
        await this.#fs.rmdir(current);
        this.#newDirectories.delete(current);
      } catch {
        return;
      }
    }
  }

  /** Closes the descriptor a `syncLater` write of `abs` left open, if any: its object was replaced or deleted. */
  #forget(abs: string): void {
    const open = this.#unsynced.get(abs);
    if (!open) return;
    this.#unsynced.delete(abs);
    open.close().catch(() => undefined);
  }

  async close(): Promise<void> {
    this.#closed = true;
    const open = [...this.#unsynced.values()];
    this.#unsynced.clear();
    await Promise.all(open.map((handle) => handle.close().catch(() => undefined)));
  }
}

/** fsync, then close (also after a failed fsync); the first failure is the result. */
async function syncAndClose(handle: FileHandleLike): Promise<void> {
  try {
    await handle.sync();
  } catch (error) {
    await handle.close().catch(() => undefined);
    throw error;
  }
  await handle.close();
}
