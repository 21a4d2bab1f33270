import {
  type ByteRange,
  type ObjectInfo,
  type ObjectReader,
  type ReadOptions,
  type StorageAdapter,
  type WriteBody,
  type WriteOptions,
  ReadTarget,
  alreadyExists,
  cancelledError,
  throwIfAborted,
  checkRelativePath,
  giveBackReusableMemory,
  notFound,
  takeReusableMemory,
} from "@cairn/core/storage";
import { newAttemptId } from "@cairn/core/format";
import { browserStorageError } from "./location.js";
import { type OpfsWorkerFile, OpfsWriteWorker } from "./opfs-write-worker.js";
import { OpfsReadWorkers, ReadWorkersUnavailable } from "./opfs-read-workers.js";

/** Files of writes in progress: never listed, never read as objects; a closed tab leaves them behind, unlisted. */
const TEMP_PREFIX = ".cairn-tmp-";

/**
 * Reads of at least this many bytes go through a read-only sync access handle in a read worker
 * (which locks out writers while it reads); smaller ones, metadata and headers, slice the snapshot.
 */
const SYNC_READ_MIN_BYTES = 1 << 20;

/** Bytes a write keeps queued at the worker while it pulls the next parts of its body. */
const WRITE_WINDOW_BYTES = 32 << 20;

/** `move()`, which Chromium, Firefox and Safari have and TypeScript's DOM types do not declare yet. */
type MovableHandle = FileSystemFileHandle & {
  move(destination: FileSystemDirectoryHandle, name: string): Promise<void>;
};

/** A directory handle with its entries (declared by lib.dom.iterable only for some targets). */
type ListableDirectory = FileSystemDirectoryHandle & {
  entries(): AsyncIterable<[string, FileSystemDirectoryHandle | FileSystemFileHandle]>;
};

function isNotFound(error: unknown): boolean {
  const name = (error as { name?: unknown })?.name;
  return name === "NotFoundError" || name === "TypeMismatchError";
}

/** How long a delete or replace waits for reads holding the file (read-only sync access handles, a few ms each). */
const READ_LOCK_WAIT_MS = 10_000;

/**
 * Runs `change` (a removal), again while reads lock the file (NoModificationAllowedError), for
 * at most READ_LOCK_WAIT_MS: each read holds its lock only while it reads.
 */
async function onceUnlocked(change: () => Promise<void>): Promise<void> {
  const deadline = Date.now() + READ_LOCK_WAIT_MS;
  for (let wait = 2; ; wait = Math.min(wait * 2, 100)) {
    try {
      return await change();
    } catch (error) {
      if ((error as { name?: unknown })?.name !== "NoModificationAllowedError" || Date.now() + wait > deadline)
        throw error;
    }
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

/** Chunks of a body, whatever form it came in. */
async function* chunks(body: WriteBody): AsyncGenerator<Uint8Array> {
  if (body instanceof Uint8Array) yield body;
  else yield* body;
}

/**
 * `opfs://name/a/b`: objects are files of the Origin Private File System under the directories
 * name/a/b, one directory per path segment. Reads go through `File` snapshots, sliced and read
 * in Web Workers that also hash the blocks a load asks for (else on the calling thread); writes
 * go to a temp file beside the object, through a sync access handle in a Web Worker where the
 * browser has them (else createWritable), and are moved into place whole, so a write interrupted by anything, a closed tab included,
 * leaves no object. `ifAbsent` creates under a Web Lock held by every tab and worker of the origin.
 */
export class OpfsStorageAdapter implements StorageAdapter {
  readonly protocol = "opfs";
  readonly root: string;
  readonly #names: readonly string[];
  #base: Promise<FileSystemDirectoryHandle> | undefined;

  /** `names`: the directories under the origin's OPFS root (the URL's host and path segments). */
  constructor(names: readonly string[], root: string) {
    this.#names = names;
    this.root = root;
  }

  #path(path: string): string[] {
    checkRelativePath(this.protocol, path);
    return path.split("/").filter((s) => s !== "");
  }

  async #rootDir(): Promise<FileSystemDirectoryHandle> {
    this.#base ??= (async () => {
      let dir = await navigator.storage.getDirectory();
      for (const name of this.#names) dir = await dir.getDirectoryHandle(name, { create: true });
      return dir;
    })();
    return this.#base;
  }

  /** The directory holding `segments`' last name; undefined when it does not exist (and `create` is false). */
  async #parent(segments: readonly string[], create: boolean): Promise<FileSystemDirectoryHandle | undefined> {
    let dir = await this.#rootDir();
    for (const name of segments.slice(0, -1)) {
      try {
        dir = await dir.getDirectoryHandle(name, { create });
      } catch (error) {
        if (isNotFound(error)) return undefined;
        throw error;
      }
    }
    return dir;
  }

  /** The object's snapshot, and its handle, which reads lock it through. */
  async #file(path: string): Promise<SnapshotFile> {
    const segments = this.#path(path);
    const name = segments[segments.length - 1];
    try {
      const dir = name === undefined ? undefined : await this.#parent(segments, false);
      if (!dir || name === undefined || name.startsWith(TEMP_PREFIX)) throw notFound(this.protocol, path, this.root);
      const handle = await dir.getFileHandle(name);
      return { handle, file: await handle.getFile() };
    } catch (error) {
      if (isNotFound(error)) throw notFound(this.protocol, path, this.root);
      throw browserStorageError(this.protocol, path, "reading", error);
    }
  }

  async read(path: string, range?: ByteRange, options: ReadOptions = {}): Promise<Uint8Array> {
    throwIfAborted(options.signal, `[opfs] reading ${path}`, null);
    return readFile(await this.#file(path), path, range, options, this.protocol);
  }

  async openReader(path: string): Promise<ObjectReader> {
    const file = await this.#file(path);
    return {
      size: file.file.size,
      read: (range, options = {}) => readFile(file, path, range, options, this.protocol),
      close: () => Promise.resolve(),
    };
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    try {
      const { file } = await this.#file(path);
      return { path, size: file.size, modified: new Date(file.lastModified) };
    } catch (error) {
      if ((error as { code?: unknown }).code === "not_found") return null;
      throw error;
    }
  }

  async write(path: string, body: WriteBody, options: WriteOptions = {}): Promise<void> {
    const segments = this.#path(path);
    const name = segments[segments.length - 1];
    if (name === undefined || name.startsWith(TEMP_PREFIX))
      throw browserStorageError(
        this.protocol,
        path,
        "writing",
        new TypeError(`not an object name: ${JSON.stringify(path)}`),
      );
    const what = `[opfs] writing ${path}`;
    throwIfAborted(options.signal, what);
    let dir: FileSystemDirectoryHandle;
    let temp: FileSystemFileHandle;
    const tempName = `${TEMP_PREFIX}${newAttemptId()}`;
    try {
      dir = (await this.#parent(segments, true))!;
      temp = await dir.getFileHandle(tempName, { create: true });
    } catch (error) {
      throw browserStorageError(this.protocol, path, "writing", error);
    }
    try {
      await writeTemp(temp, body, options.signal, what);
      throwIfAborted(options.signal, what);
      await navigator.locks.request(`cairn-opfs:${[...this.#names, ...segments].join("/")}`, async () => {
        const existing = await dir.getFileHandle(name).then(
          () => true,
          (error: unknown) => {
            if (isNotFound(error)) return false;
            throw error;
          },
        );
        if (existing && options.ifAbsent) throw alreadyExists(this.protocol, path, this.root);
        if (existing) await onceUnlocked(() => dir.removeEntry(name));
        await (temp as MovableHandle).move(dir, name);
      });
    } catch (error) {
      await dir.removeEntry(tempName).catch(() => undefined);
      if (options.signal?.aborted) throw cancelledError(options.signal, what);
      throw browserStorageError(this.protocol, path, "writing", error);
    }
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    yield* this.#walk(await this.#rootDir(), "", prefix);
  }

  async *#walk(dir: FileSystemDirectoryHandle, at: string, prefix: string): AsyncGenerator<ObjectInfo> {
    const entries: [string, FileSystemDirectoryHandle | FileSystemFileHandle][] = [];
    try {
      for await (const entry of (dir as ListableDirectory).entries()) entries.push(entry);
    } catch (error) {
      // A directory another writer removed meanwhile holds nothing.
      if (isNotFound(error)) return;
      throw browserStorageError(this.protocol, at, "listing", error);
    }
    for (const [name, handle] of entries) {
      if (name.startsWith(TEMP_PREFIX)) continue;
      const path = at === "" ? name : `${at}/${name}`;
      if (handle.kind === "directory") {
        if (path.startsWith(prefix) || prefix.startsWith(`${path}/`)) yield* this.#walk(handle, path, prefix);
      } else if (path.startsWith(prefix)) {
        try {
          const file = await handle.getFile();
          yield { path, size: file.size, modified: new Date(file.lastModified) };
        } catch (error) {
          if (!isNotFound(error)) throw browserStorageError(this.protocol, path, "listing", error);
        }
      }
    }
  }

  async delete(path: string): Promise<void> {
    const segments = this.#path(path);
    const name = segments[segments.length - 1];
    if (name === undefined) return;
    try {
      const dir = await this.#parent(segments, false);
      if (!dir) return;
      // A directory of that name is no object: it stays.
      await dir.getFileHandle(name);
      await onceUnlocked(() => dir.removeEntry(name));
    } catch (error) {
      if (!isNotFound(error)) throw browserStorageError(this.protocol, path, "deleting", error);
    }
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

/** A file's snapshot and its handle. */
interface SnapshotFile {
  readonly file: File;
  readonly handle: FileSystemFileHandle;
}

/**
 * Reads `range` of a File snapshot into the read's target (head, into, or a new buffer): in the
 * read workers where the page has them, which hash the blocks when asked
 * (`ReadOptions.blockChecksums`), else on this thread. A large read lands in reusable memory
 * lent to the worker (fresh memory costs a page fault per 4 KiB) and is copied into the target.
 */
async function readFile(
  { file, handle }: SnapshotFile,
  path: string,
  range: ByteRange | undefined,
  options: ReadOptions,
  protocol: string,
): Promise<Uint8Array> {
  const start = Math.min(range?.offset ?? 0, file.size);
  const end = range ? Math.min(file.size, start + range.length) : file.size;
  // Sums are of what the read returns: without a head, all of the range.
  const blockSize = options.head ? 0 : (options.blockChecksums?.blockSize ?? 0);
  const large = end - start >= SYNC_READ_MIN_BYTES;
  // A read returning a buffer of its own returns the worker's; one into the caller's memory borrows the pool's.
  const own = !options.head && !options.into;
  let lent = large && !own ? takeReusableMemory(end - start) : undefined;
  // Shared memory (a save's staging, given back) cannot be transferred: the worker reads into memory of its own.
  if (lent && Object.prototype.toString.call(lent.buffer) !== "[object ArrayBuffer]") {
    giveBackReusableMemory(lent);
    lent = undefined;
  }
  let bytes: Uint8Array;
  let sums: Uint32Array | undefined;
  try {
    ({ bytes, sums } = await readInWorker(
      file,
      large ? handle : undefined,
      start,
      end,
      blockSize,
      lent?.buffer as ArrayBuffer | undefined,
    ));
  } catch (error) {
    throw browserStorageError(protocol, path, "reading", error);
  }
  throwIfAborted(options.signal, `[${protocol}] reading ${path}`, null);
  options.onObjectSize?.(file.size);
  if (sums) options.blockChecksums?.onChecksums(sums);
  if (own) return bytes;
  const target = new ReadTarget(end - start, options);
  target.set(bytes, 0);
  if (lent) giveBackReusableMemory(new Uint8Array(bytes.buffer));
  return target.result(bytes.byteLength);
}

/** `[start, end)` of `file` read by the read workers (and hashed there), or on this thread where they are unavailable. */
async function readInWorker(
  file: File,
  handle: FileSystemFileHandle | undefined,
  start: number,
  end: number,
  blockSize: number,
  into: ArrayBuffer | undefined,
): Promise<{ bytes: Uint8Array; sums?: Uint32Array | undefined }> {
  const workers = OpfsReadWorkers.shared();
  if (workers) {
    try {
      return await workers.read(file, handle, start, end, blockSize, into);
    } catch (error) {
      if (!(error instanceof ReadWorkersUnavailable)) throw error;
    }
  }
  return { bytes: new Uint8Array(await file.slice(start, end).arrayBuffer()) };
}

/** Writes the body into `temp`: through the worker's sync access handle, or createWritable where there is none. */
async function writeTemp(
  temp: FileSystemFileHandle,
  body: WriteBody,
  signal: AbortSignal | undefined,
  what: string,
): Promise<void> {
  const worker = await OpfsWriteWorker.shared(temp);
  if (!worker) {
    const writable = await temp.createWritable();
    try {
      for await (const chunk of chunks(body)) {
        throwIfAborted(signal, what);
        await writable.write(chunk as Uint8Array<ArrayBuffer>);
      }
      await writable.close();
    } catch (error) {
      await writable.abort().catch(() => undefined);
      throw error;
    }
    return;
  }
  const file: OpfsWorkerFile = worker.open(temp);
  const pending = new Set<Promise<void>>();
  let queued = 0;
  let failure: { error: unknown } | undefined;
  try {
    await file.opened;
    for await (const chunk of chunks(body)) {
      throwIfAborted(signal, what);
      if (failure) throw failure.error;
      const size = chunk.byteLength;
      const done: Promise<void> = file.write(chunk).then(
        () => {
          pending.delete(done);
          queued -= size;
        },
        (error: unknown) => {
          pending.delete(done);
          failure ??= { error };
        },
      );
      pending.add(done);
      queued += size;
      while (queued > WRITE_WINDOW_BYTES && pending.size > 0) await Promise.race(pending);
    }
    await Promise.all(pending);
    if (failure) throw failure.error;
    await file.close();
  } catch (error) {
    await Promise.allSettled(pending);
    await file.abort().catch(() => undefined);
    throw error;
  }
}
