import { CheckpointError } from "../errors.js";

/** An object in storage; `path` is relative to the adapter's root. */
export interface ObjectInfo {
  readonly path: string;
  readonly size: number;
  readonly modified?: Date;
}

/**
 * How the temp files an adapter writes objects through (file://) are named: this prefix, then
 * anything, beside the object. file:// lists them like objects, with their modification time,
 * so what a killed writer left is found and swept by age like any other leftover.
 */
export const TEMP_OBJECT_PREFIX = ".cairn-tmp-";

/** `length` bytes from `offset`. A range past the end is cut at the end; one starting at or past it reads nothing. */
export interface ByteRange {
  readonly offset: number;
  readonly length: number;
}

/**
 * Bytes to write: all at once, or streamed (consumed once; an adapter never buffers a stream
 * whole). A chunk must not change after it is yielded: adapters may send it without copying.
 */
export type WriteBody = Uint8Array | AsyncIterable<Uint8Array>;

/** Options of `StorageAdapter.delete`. */
export interface DeleteOptions {
  /**
   * Resolve only once the deletion survives a power loss (file://: fsyncs the directory, also
   * when the object was already gone, as after an attempt whose fsync failed). Asked of an
   * un-commit (metadata.json), which must be durable before anything it referenced is swept.
   * Adapters whose deletes are durable when they resolve ignore it.
   */
  readonly durable?: boolean;
}

export interface WriteOptions {
  /** Atomic create: fails with `already_exists` if the object exists, and never replaces it. */
  readonly ifAbsent?: boolean;
  /** The body's total size, when known; adapters may use it to pick a single or multipart upload. */
  readonly size?: number;
  readonly signal?: AbortSignal;
  /**
   * Every part of the body is a view of memory whose buffer starts on a page boundary (a
   * WebAssembly memory; core's staging lays a background save out this way). An adapter that
   * writes past the page cache (file:// with O_DIRECT) may then write a part that starts on a
   * page boundary straight from its memory instead of copying it into aligned buffers. The body's
   * memory must not change until the write settles, or until `onWritten` passed it. Others ignore it.
   */
  readonly pageAligned?: boolean;
  /**
   * Told, as the write goes, how many of the body's first bytes the adapter has written or
   * copied and will not read again (never less than it said before): core reuses that memory
   * before the write settles. Only adapters with `reportsWritten` call it; it is never called
   * once `write` settled.
   */
  readonly onWritten?: (bytes: number) => void;
  /**
   * Leaves the object's durability to a later `StorageAdapter.sync` of its path: `write` then
   * resolves once the object is whole and visible, and it survives a crash only once that
   * `sync` resolved (before, a crash may lose it or leave it partial). Core passes it only to
   * adapters that have `sync`, for data files that nothing reads before a commit made after
   * that `sync`; an adapter without `sync` writes durably whatever this says.
   */
  readonly syncLater?: boolean;
  /**
   * The object becomes visible only once this resolves; if it rejects, the write fails with its
   * reason and leaves no object. The adapter may prepare the object meanwhile (file:// writes
   * and syncs its temp file), so a commit that waits for other objects' `sync` costs one wait
   * for the disk after it, not two. Core passes it only to adapters that have `sync`, which
   * must honour it (the storage contract suite checks); to others it waits before writing.
   */
  readonly publishAfter?: Promise<unknown>;
  /**
   * CRC32Cs of the body's ranges from checksums the writer computes anyway (core's block
   * CRC32Cs of a data file), for an adapter that sends a checksum with each request the
   * storage verifies (S3's `x-amz-checksum-crc32c`): it need not read the bytes again.
   */
  readonly crc32c?: KnownCrc32c;
}

/** CRC32Cs of ranges of an object being written, as `WriteOptions.crc32c` gives them. */
export interface KnownCrc32c {
  /**
   * The CRC32C of `bytes`, the object's bytes from `offset` on, once the writer has checksummed
   * them; rejects if that failed. Computed from the writer's own checksums of the same memory:
   * should the memory change between the two, the result is not the CRC32C of `bytes`, and the
   * storage that verifies it refuses the request.
   */
  of(bytes: Uint8Array, offset: number): Promise<number>;
}

export interface ReadOptions {
  readonly signal?: AbortSignal;
  /**
   * A buffer at least as long as the range, which an adapter may read into and return a view
   * of instead of allocating (core passes the destination tensor's memory, or a pooled buffer,
   * so a load allocates nothing per read). Adapters that cannot read in place ignore it.
   * With `head`, it is for the bytes after the head and need only be as long as those.
   */
  readonly into?: Uint8Array;
  /**
   * A buffer for the range's first `head.byteLength` bytes (core reads a data file's header
   * this way, in the same request as the file's first data range). Every adapter honours it:
   * those bytes are written into `head`, and the read returns only the bytes after them (a
   * view of `into` when it read in place). A read that ends inside the head returns nothing,
   * and how much of `head` it filled is unspecified. `ReadTarget` does the bookkeeping.
   */
  readonly head?: Uint8Array;
  /**
   * Told the object's whole size where the answer states it (a ranged GET's `Content-Range:
   * bytes a-b/SIZE`, checked against the bytes that came): core then checks a data file's size
   * without a `stat` of its own. Adapters that learn no size never call it.
   */
  readonly onObjectSize?: (size: number) => void;
  /**
   * Asks for the CRC32C of every `blockSize` bytes the read returns, computed where the bytes
   * arrive: OPFS reads them in Web Workers and hashes them there, off the page's thread. An
   * adapter that can passes them to `onChecksums` before it resolves; others ignore it and core
   * hashes the bytes itself. Core checks them against the checkpoint's block CRC32Cs either way.
   */
  readonly blockChecksums?: BlockChecksumRequest;
}

/** See `ReadOptions.blockChecksums`: one CRC32C per `blockSize` bytes of the read's result, the last block possibly shorter. */
export interface BlockChecksumRequest {
  readonly blockSize: number;
  readonly onChecksums: (sums: Uint32Array) => void;
}

/**
 * An object held open for many ranged reads (a file descriptor), from `StorageAdapter.openReader`:
 * a load reads each data file through one, instead of opening and closing it for every range.
 */
export interface ObjectReader {
  /** The object's size when it was opened. */
  readonly size: number;
  /** What `StorageAdapter.read` with this range and these options returns, from the opened object. */
  read(range: ByteRange, options?: ReadOptions): Promise<Uint8Array>;
  /**
   * Reads the object's bytes from `offset` into `parts`, one after another (a scattered read,
   * like preadv(2)): core reads neighbouring small tensors straight into their own memory this
   * way. Resolves how many bytes it read, fewer only where the object ends. Optional.
   */
  readScattered?(offset: number, parts: readonly Uint8Array[], options?: Pick<ReadOptions, "signal">): Promise<number>;
  /** Releases the handle; called once, after every read settled. */
  close(): Promise<void>;
}

/**
 * How another thread of this process opens the same storage: the factory `factory` exported
 * by the module at `module` (an absolute URL), called with `new URL(url)`. Only adapters whose
 * state lives outside the JavaScript heap can offer one (file://: the file system); an
 * adapter built on a caller's client object or on in-process memory cannot.
 */
export interface PortableStorage {
  readonly module: string;
  readonly factory: string;
  readonly url: string;
}

/**
 * Moves bytes and nothing else: core builds paths, retries, the commit protocol and step
 * listing on top of these primitives. Paths are relative to the adapter's root (the URL's
 * prefix), `/`-separated, never starting with `/` and never containing `..`.
 *
 * Contract (checked by `storageContractSuite` in `@cairn/core/testing`):
 * - `read` of a missing object rejects with `not_found`; ranges follow `ByteRange`.
 * - `write` is all-or-nothing: a failed or aborted write leaves no object and no partial one
 *   at its path; with `ifAbsent` it is an atomic create that rejects with `already_exists`.
 * - `stat` resolves `null` for a missing object; `list(prefix)` yields every object whose
 *   path starts with `prefix` (a raw string prefix, recursive, in no promised order), paged
 *   lazily, temp files of writes in progress or killed included (`TEMP_OBJECT_PREFIX`).
 * - `delete` of a missing object succeeds; with `durable` it resolves once the deletion survives a power loss.
 * - Failures are `CheckpointError`s; storage failures carry `context.transient` so core's
 *   retry policy can tell a blip from a permanent refusal. Messages start with `[protocol]`.
 * - `read` honours `ReadOptions.head` (and may ignore `into`).
 *
 * `remote` is a hint about cost, not a capability: it tells core whether a request is a
 * round trip worth saving bytes for. It changes how many requests a load makes, never what
 * it reads or checks.
 */
export interface StorageAdapter {
  /** "file", "memory", "s3", "gs": the URL scheme, without the colon. */
  readonly protocol: string;
  /** The root this adapter was opened at, for messages (never with credentials). */
  readonly root: string;
  /**
   * True when every request is a round trip over a network whose cost dwarfs reading a few
   * extra bytes (object stores: s3, gs). A load then reads each data file's safetensors header
   * in the same request as the file's first data range (`ReadOptions.head`) instead of in one of
   * its own. Absent or false (file, memory): requests are cheap, and every range is read
   * straight into its destination, the headers with small reads of their own.
   */
  readonly remote?: boolean;
  /**
   * Set when a worker thread can open this same storage: a background save whose staged bytes
   * are in shared memory is then written and committed from a worker thread, whose event loop
   * the training loop does not pace. Absent: the save writes from the calling thread.
   */
  readonly portable?: PortableStorage;
  /**
   * Set when `write` reports its progress through `WriteOptions.onWritten`: a save on the main
   * thread then copies big files through a few MiB of reused page-aligned memory instead of
   * holding a whole file's (see core's save/write-windows.ts). Its reports must not wait for more
   * of the body than it has pulled: the windows of all files written at once share one budget.
   */
  readonly reportsWritten?: boolean;
  read(path: string, range?: ByteRange, options?: ReadOptions): Promise<Uint8Array>;
  /**
   * Opens an object for many ranged reads, where holding it open saves work per read (file://
   * keeps the file descriptor). Rejects `not_found` for a missing object, as `read` does. Optional:
   * without it, core reads with `read` and learns sizes from `ReadOptions.onObjectSize`, else with `stat`.
   */
  openReader?(path: string): Promise<ObjectReader>;
  write(path: string, body: WriteBody, options?: WriteOptions): Promise<void>;
  /**
   * Makes objects written with `WriteOptions.syncLater` durable, all at once (file:// fsyncs
   * each file, on the descriptor it was written through, and each of their directories in
   * parallel: one wait for the disk where a write each would make two). Its failure means the objects may not be durable: core writes them
   * again rather than calling it twice. Optional: adapters whose writes are durable when they
   * resolve (object stores, memory) have none, and core then never passes `syncLater`.
   */
  sync?(paths: readonly string[]): Promise<void>;
  stat(path: string): Promise<ObjectInfo | null>;
  list(prefix: string): AsyncIterable<ObjectInfo>;
  delete(path: string, options?: DeleteOptions): Promise<void>;
  /** Releases clients and handles. The adapter is unusable afterwards. */
  close(): Promise<void>;
}

/** Joins relative storage path segments with `/`, dropping empty ones. */
export function joinPath(...parts: string[]): string {
  return parts
    .flatMap((p) => p.split("/"))
    .filter((p) => p.length > 0)
    .join("/");
}

/** Rejects paths that are absolute or escape the root; adapters call it on every path they receive. */
export function checkRelativePath(protocol: string, path: string): string {
  if (path.startsWith("/") || path.split("/").some((part) => part === ".." || part === ".") || path.includes("\0")) {
    throw new CheckpointError(
      "invalid_argument",
      `[${protocol}] storage path ${JSON.stringify(path)} must be relative, without "." or ".." segments`,
      {
        context: { path, protocol },
      },
    );
  }
  return path;
}

export function notFound(protocol: string, path: string, root: string): CheckpointError {
  return new CheckpointError("not_found", `[${protocol}] ${path} does not exist under ${root}`, {
    context: { path, protocol },
  });
}

export function alreadyExists(protocol: string, path: string, root: string): CheckpointError {
  return new CheckpointError(
    "already_exists",
    `[${protocol}] ${path} already exists under ${root} and was not replaced`,
    {
      context: { path, protocol },
    },
  );
}
