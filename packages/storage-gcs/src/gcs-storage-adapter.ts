import { Readable, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { type RetryPolicy, type StorageAdapter, CheckpointError } from "@cairn/core";
import {
  type ByteRange,
  type ObjectInfo,
  type ProgressDeadline,
  type ReadOptions,
  type WriteBody,
  type WriteOptions,
  DEFAULT_PROGRESS_TIMEOUT_MS,
  ReadTarget,
  checkRelativePath,
  progressDeadline,
  splitHead,
  touching,
  withRetry,
} from "@cairn/core/storage";
import { crc32c } from "@cairn/core/format";
import type { Bucket, CreateWriteStreamOptions, File, Storage } from "@google-cloud/storage";
import PQueue from "p-queue";
import { type GcsErrorSite, httpStatus, toCheckpointError } from "./gcs-errors.js";
import { nativeCrc32cValidator } from "./gcs-integrity.js";
import { downloadObject, downloadRange } from "./gcs-download.js";

/** Tuning of a `GcsStorageAdapter`; every field has a default. */
export interface GcsStorageAdapterOptions {
  /** Bodies smaller than this go in one request (multipart upload); larger ones and streams of unknown size use a resumable upload (default 8 MiB). */
  readonly singleRequestMaxBytes?: number;
  /** Reads of at least this many bytes are split into ranges read concurrently (default 32 MiB). */
  readonly parallelReadMinBytes?: number;
  /** Size of each range of a split read (default 8 MiB). */
  readonly parallelReadPartBytes?: number;
  /** Ranges of one split read in flight at once (default 4). */
  readonly readConcurrency?: number;
  /** Deletes in flight at once in `deleteMany` (default 32). */
  readonly deleteConcurrency?: number;
  /** Objects per listing page (default 1,000, the GCS maximum). */
  readonly listPageSize?: number;
  /** Checksum verified on uploads (by the SDK) and whole-object downloads (by the adapter) (default "crc32c"; `false` to skip). */
  readonly validation?: "crc32c" | false;
  /** Bounds of the adapter's own retries of transient failures (core's `RetryPolicy`). */
  readonly retry?: Partial<RetryPolicy>;
  /**
   * How long a request may go without progress (a byte of the body sent or received, an answer)
   * before it is aborted and retried as a transient failure (default 30 s; `Infinity` for none).
   */
  readonly progressTimeoutMs?: number;
}

const DEFAULTS = {
  singleRequestMaxBytes: 8 << 20,
  parallelReadMinBytes: 32 << 20,
  parallelReadPartBytes: 8 << 20,
  readConcurrency: 4,
  deleteConcurrency: 32,
  listPageSize: 1000,
  validation: "crc32c",
  progressTimeoutMs: DEFAULT_PROGRESS_TIMEOUT_MS,
} as const;

/**
 * `gs://` storage on `@google-cloud/storage`: the adapter's root is a bucket and an object
 * prefix. Core calls it through the `StorageAdapter` primitives; `openGcsStorage` makes one for a
 * URL. Failures are `CheckpointError`s prefixed `[gs]` naming `gs://bucket/object`.
 *
 * Retries are layered so they never multiply: the SDK's own retries must be off
 * (`retryOptions.autoRetry: false`; `openGcsStorage` does that); the adapter retries every
 * request it can replay (reads, stats, list pages, deletes, writes of a `Uint8Array`) with core's
 * `withRetry`, and an error it gave up on surfaces with `transient: false`. A streamed body cannot
 * be replayed, so a streamed write is tried once and keeps its classification: the caller, who
 * can make the body again (core's save does), retries the whole write.
 *
 * Every request runs under a progress deadline (`progressTimeoutMs`): a body that stalls, or
 * never ends because its connection was cut (node-fetch 2, under the SDK, leaves such a body
 * open forever), is aborted with a transient error and retried; a body shorter than its answer
 * announced, or a whole object whose CRC32C is wrong, is a transient error too, never a short read.
 */
export class GcsStorageAdapter implements StorageAdapter {
  readonly protocol = "gs";
  readonly root: string;
  readonly remote = true;
  readonly #bucket: Bucket;
  readonly #prefix: string;
  readonly #options: Required<Omit<GcsStorageAdapterOptions, "retry">>;
  readonly #retry: Partial<RetryPolicy>;
  #closed = false;

  /**
   * @param storage a client whose SDK retries are off (`retryOptions.autoRetry: false`); with
   *   them on, the adapter makes one attempt per request and leaves retrying to the SDK.
   * @param bucket the bucket name; `prefix` the object-name prefix of the root ("" or "a/b").
   */
  constructor(storage: Storage, bucket: string, prefix: string, options: GcsStorageAdapterOptions = {}) {
    this.#bucket = storage.bucket(bucket);
    this.#prefix = prefix.replace(/^\/+|\/+$/g, "");
    this.#prefix = this.#prefix ? `${this.#prefix}/` : "";
    this.root = `gs://${bucket}/${this.#prefix}`;
    this.#options = { ...DEFAULTS, ...withoutUndefined(options) };
    const sdkRetries = storage.retryOptions.autoRetry !== false;
    this.#retry = sdkRetries ? { ...options.retry, maxAttempts: 1 } : (options.retry ?? {});
  }

  async read(path: string, range?: ByteRange, options: ReadOptions = {}): Promise<Uint8Array> {
    const site = this.#site("read", path, options.signal);
    if (!range)
      return splitHead(
        await this.#retrying(site, (deadline) =>
          downloadObject(this.#file(site), site, deadline, this.#options.validation),
        ),
        options.head,
      );
    if (range.length <= 0) {
      // HTTP cannot ask for zero bytes; a zero-length read of a missing object is still `not_found`.
      if (!(await this.stat(path))) throw toCheckpointError({ code: 404, message: "No such object" }, site);
      return new Uint8Array(0);
    }
    const target = new ReadTarget(range.length, options);
    // A large read starts with one part (and the head): its answer tells the object's size, which clips the rest.
    const split = range.length >= this.#options.parallelReadMinBytes;
    const firstEnd =
      range.offset +
      (split ? Math.min(range.length, this.#options.parallelReadPartBytes + target.headLength) : range.length);
    const first = await this.#retrying(site, (deadline) =>
      downloadRange(this.#file(site), site, deadline, range.offset, firstEnd, target, 0),
    );
    if (first.size !== undefined) options.onObjectSize?.(first.size);
    if (first.got < firstEnd - range.offset || first.size === undefined) return target.result(first.got);
    const end = Math.min(first.size, range.offset + range.length);
    await this.#readParts(site, range.offset, firstEnd, end, target, first.size);
    return target.result(end - range.offset);
  }

  async write(path: string, body: WriteBody, options: WriteOptions = {}): Promise<void> {
    const site = this.#site("write", path, options.signal);
    const streamOptions: CreateWriteStreamOptions = {
      validation: this.#options.validation,
      metadata: { contentType: "application/octet-stream" },
      // GCS evaluates generation 0 ("no live object") atomically when it commits the upload.
      ...(options.ifAbsent ? { preconditionOpts: { ifGenerationMatch: 0 } } : {}),
    };
    if (body instanceof Uint8Array) {
      // A checksum in the metadata lets GCS itself refuse a body damaged on the way, before the object exists.
      const sum = Buffer.alloc(4);
      sum.writeUInt32BE(crc32c(body));
      const upload = {
        ...streamOptions,
        resumable: body.byteLength >= this.#options.singleRequestMaxBytes,
        metadata: { ...streamOptions.metadata, crc32c: sum.toString("base64") },
      };
      const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
      return this.#retrying(site, (deadline) => this.#upload(site, deadline, [bytes], upload));
    }
    const resumable = options.size === undefined || options.size >= this.#options.singleRequestMaxBytes;
    this.#checkOpen(site);
    await this.#underDeadline(site, (deadline) => this.#upload(site, deadline, body, { ...streamOptions, resumable }));
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    const site = this.#site("stat", path);
    return this.#retrying(site, async () => {
      try {
        const [metadata] = await this.#file(site).getMetadata();
        return objectInfo(path, metadata);
      } catch (error) {
        if (httpStatus(error) === 404) return null;
        throw toCheckpointError(error, site);
      }
    });
  }

  /** Pages through the listing one request at a time, as the caller consumes it. */
  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    const site = this.#site("list", prefix);
    let pageToken: string | undefined;
    do {
      const query = {
        prefix: this.#prefix + prefix,
        autoPaginate: false,
        maxResults: this.#options.listPageSize,
        ...(pageToken ? { pageToken } : {}),
      };
      const [files, next] = await this.#retrying(site, async () => {
        try {
          return await this.#bucket.getFiles(query);
        } catch (error) {
          throw toCheckpointError(error, site);
        }
      });
      for (const file of files) yield objectInfo(file.name.slice(this.#prefix.length), file.metadata);
      pageToken = (next as { pageToken?: string } | null | undefined)?.pageToken;
    } while (pageToken);
  }

  async delete(path: string): Promise<void> {
    const site = this.#site("delete", path);
    await this.#retrying(site, async () => {
      try {
        // A retry may find the object already gone by its own earlier attempt: that is success.
        await this.#file(site).delete({ ignoreNotFound: true });
      } catch (error) {
        throw toCheckpointError(error, site);
      }
    });
  }

  /**
   * Deletes many objects (a whole checkpoint, for retention) `deleteConcurrency` at a time.
   * Every delete is attempted; the first failure is thrown once all have settled.
   */
  async deleteMany(paths: readonly string[]): Promise<void> {
    const queue = new PQueue({ concurrency: this.#options.deleteConcurrency });
    const settled = await Promise.allSettled(paths.map((p) => queue.add(() => this.delete(p))));
    const failed = settled.find((s) => s.status === "rejected");
    if (failed) throw failed.reason;
  }

  async close(): Promise<void> {
    // The SDK client holds only keep-alive sockets, released when idle; it may be the caller's to keep using.
    this.#closed = true;
  }

  #site(operation: GcsErrorSite["operation"], path: string, signal?: AbortSignal): GcsErrorSite {
    const relative = operation === "list" && path === "" ? "" : checkRelativePath("gs", path);
    return {
      operation,
      path: relative,
      object: `gs://${this.#bucket.name}/${this.#prefix}${relative}`,
      root: this.root,
      ...(signal ? { signal } : {}),
    };
  }

  #file(site: GcsErrorSite): File {
    return this.#bucket.file(this.#prefix + site.path, { crc32cGenerator: nativeCrc32cValidator });
  }

  #checkOpen(site: GcsErrorSite): void {
    if (this.#closed)
      throw new CheckpointError("storage", `[gs] ${site.operation} ${site.object}: the adapter was closed`, {
        context: { path: site.path, protocol: "gs" },
      });
  }

  /**
   * Runs one replayable request under the retry policy, each attempt under a progress deadline;
   * what it gave up on is permanent.
   */
  async #retrying<T>(site: GcsErrorSite, request: (deadline: ProgressDeadline) => Promise<T>): Promise<T> {
    this.#checkOpen(site);
    return withRetry(() => this.#underDeadline(site, request), {
      policy: this.#retry,
      exhaust: true,
      ...(site.signal ? { signal: site.signal } : {}),
    });
  }

  /**
   * Runs one attempt of a request with a progress deadline it touches and aborts on. It settles
   * when the deadline fires even if the request ignores the abort (the SDK's JSON-API calls take
   * no signal), with the deadline's transient error; the caller's abort gives `cancelled`.
   */
  async #underDeadline<T>(site: GcsErrorSite, request: (deadline: ProgressDeadline) => Promise<T>): Promise<T> {
    const deadline = progressDeadline(this.#options.progressTimeoutMs, {
      ...(site.signal ? { signal: site.signal } : {}),
      what: `[gs] ${site.operation} ${site.object}`,
      context: { path: site.path, protocol: "gs" },
    });
    const stopped = new Promise<never>((_, reject) => {
      const stop = (): void =>
        reject(deadline.expired ? deadline.error : toCheckpointError(deadline.signal.reason, site));
      if (deadline.signal.aborted) stop();
      else deadline.signal.addEventListener("abort", stop, { once: true });
    });
    stopped.catch(() => undefined);
    try {
      return await Promise.race([request(deadline), stopped]);
    } catch (error) {
      throw deadline.expired ? deadline.error : toCheckpointError(error, site);
    } finally {
      deadline.clear();
    }
  }

  /** One upload of `body`; every chunk the SDK takes, every progress report and the answer are progress. */
  async #upload(
    site: GcsErrorSite,
    deadline: ProgressDeadline,
    body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
    options: CreateWriteStreamOptions,
  ): Promise<void> {
    const sink: Writable = this.#file(site).createWriteStream(options);
    const touch = (): void => deadline.touch();
    sink.on("progress", touch).on("response", touch);
    // Destroying the SDK stream (a failed body, an abort, a stall) abandons the upload: the object is never committed.
    await pipeline(Readable.from(touching(body, deadline)), sink, { signal: deadline.signal });
  }

  /**
   * Bytes `[start, end)` of an object of `size` bytes, in parts read concurrently into `target`,
   * whose range begins at object offset `base` (past the head, which the read's first part carried).
   */
  async #readParts(
    site: GcsErrorSite,
    base: number,
    start: number,
    end: number,
    target: ReadTarget,
    size: number,
  ): Promise<void> {
    const queue = new PQueue({ concurrency: this.#options.readConcurrency });
    const parts: Promise<void>[] = [];
    for (let at = start; at < end;) {
      const partStart = at;
      const partEnd = Math.min(end, at + this.#options.parallelReadPartBytes);
      parts.push(
        queue.add(async () => {
          const { got, size: partSize } = await this.#retrying(site, (deadline) =>
            downloadRange(this.#file(site), site, deadline, partStart, partEnd, target, partStart - base),
          );
          if (got !== partEnd - partStart || partSize !== size) {
            throw new CheckpointError(
              "storage",
              `[gs] read ${site.object} failed: bytes ${partStart}-${partEnd - 1} came back as ${got} bytes; the object changed while it was read`,
              {
                context: { path: site.path, protocol: "gs", transient: false },
              },
            );
          }
        }),
      );
      at = partEnd;
    }
    const settled = await Promise.allSettled(parts);
    const failed = settled.find((s) => s.status === "rejected");
    if (failed) throw failed.reason;
  }
}

function objectInfo(path: string, metadata: { size?: string | number; updated?: string }): ObjectInfo {
  return {
    path,
    size: Number(metadata.size ?? 0),
    ...(metadata.updated ? { modified: new Date(metadata.updated) } : {}),
  };
}

function withoutUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
