import {
  DeleteObjectCommand,
  DeleteObjectsCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { type StorageAdapter, CheckpointError, isCheckpointError } from "@cairn/core";
import {
  type ByteRange,
  type ObjectInfo,
  type ReadOptions,
  type WriteBody,
  type WriteOptions,
  type KnownCrc32c,
  ByteBudget,
  ReadTarget,
  cancelledError,
  checkRelativePath,
  splitHead,
} from "@cairn/core/storage";
import { MAX_PARTS, multipartUpload, partChecksum } from "./multipart-upload.js";
import { type S3CallContext, s3Call } from "./s3-call.js";
import { isOwnPut } from "./own-object.js";
import { isTransientS3Error, s3CodeOf } from "./s3-error.js";
import { releasePart, sliceParts } from "./slice-parts.js";
import { type RangedAnswer, rangedGet, replacedWhileRead } from "./ranged-get.js";
import { type S3StorageAdapterOptions, checkS3Options } from "./s3-storage-options.js";
import { withUnsignedPayload } from "./unsigned-payload.js";

/** Where the adapter's root is: a bucket and a key prefix ("" or ending in "/"). */
export interface S3Location {
  readonly bucket: string;
  readonly prefix: string;
}

/** DeleteObjects takes at most this many keys per request. */
const DELETE_BATCH = 1000;

/**
 * A `StorageAdapter` on Amazon S3 and S3-compatible stores (MinIO, R2, Ceph), through an
 * `S3Client` the caller owns. Core calls it (`save`, `load`, a manager); users normally reach it
 * through `openStorage("s3://bucket/prefix", { s3: {...} })`, which builds the client.
 *
 * Writes are all-or-nothing: one PutObject, or a multipart upload that only becomes visible on
 * CompleteMultipartUpload and is aborted on failure. `ifAbsent` sends `If-None-Match: *` and
 * rejects with `already_exists` on 412 or 409. Reads are ranged GETs, split into concurrent
 * part-sized GETs for large ranges. Every request is retried through core's `withRetry`; all
 * failures are `CheckpointError`s whose message starts with `[s3]` and names bucket and key.
 */
export class S3StorageAdapter implements StorageAdapter {
  readonly protocol = "s3";
  readonly root: string;
  readonly remote = true;
  readonly #client: S3Client;
  readonly #bucket: string;
  readonly #prefix: string;
  readonly #partSize: number;
  readonly #checksums: { readonly put: boolean; readonly multipart: boolean };
  /** Room for `concurrency` part-sized requests in flight, across every call on this adapter. */
  readonly #budget: ByteBudget;
  readonly #context: S3CallContext;
  readonly #onClose: () => void;
  #closed = false;

  /** `onClose` runs once on `close()`: destroy the client there if the adapter owns it. */
  constructor(
    client: S3Client,
    location: S3Location,
    options: S3StorageAdapterOptions = {},
    onClose: () => void = () => undefined,
  ) {
    const { partSize, concurrency, progressTimeoutMs } = checkS3Options(options);
    this.#client = client;
    this.#bucket = location.bucket;
    this.#prefix = location.prefix;
    this.root = `s3://${location.bucket}/${location.prefix}`;
    this.#partSize = partSize;
    this.#checksums = { put: options.checksums?.put ?? true, multipart: options.checksums?.multipart ?? true };
    this.#budget = new ByteBudget(concurrency * partSize);
    this.#context = { bucket: location.bucket, retry: options.retry ?? {}, progressTimeoutMs };
    this.#onClose = onClose;
  }

  #key(path: string): string {
    if (this.#closed) throw new CheckpointError("invalid_argument", `[s3] storage at ${this.root} is closed`);
    return this.#prefix + checkRelativePath("s3", path);
  }

  async read(path: string, range?: ByteRange, options: ReadOptions = {}): Promise<Uint8Array> {
    const key = this.#key(path);
    const { signal } = options;
    if (signal?.aborted) throw cancelledError(signal, `reading s3://${this.#bucket}/${key}`, null);
    if (
      range &&
      (range.offset < 0 ||
        range.length < 0 ||
        !Number.isSafeInteger(range.offset) ||
        !Number.isSafeInteger(range.length))
    ) {
      throw new CheckpointError(
        "invalid_argument",
        `[s3] reading s3://${this.#bucket}/${key}: bad range ${JSON.stringify(range)}`,
        { context: { path, protocol: "s3" } },
      );
    }
    if (range?.length === 0) {
      // HTTP cannot ask for zero bytes; the object must still exist.
      if ((await this.stat(path)) === null)
        throw new CheckpointError("not_found", `[s3] s3://${this.#bucket}/${key} does not exist`, {
          context: { path, protocol: "s3" },
        });
      return new Uint8Array(0);
    }
    const start = range?.offset ?? 0;
    const wanted = range?.length ?? Number.POSITIVE_INFINITY;
    // The first GET also carries the head (ReadOptions.head), so a head costs no request of its own.
    const first = await this.#get(
      key,
      path,
      start,
      Math.min(wanted, this.#partSize + (options.head?.byteLength ?? 0)),
      undefined,
      signal,
    );
    if (first === undefined) return new Uint8Array(0);
    if (first.told) options.onObjectSize?.(first.size);
    const end = Math.min(start + wanted, first.size);
    if (start + first.bytes.byteLength >= end) return splitHead(first.bytes, options.head);
    // The first answer told the object's size: the rest is fetched in concurrent part-sized GETs
    // straight into place, into the caller's buffers when it gave them (ReadOptions.into, head).
    const target = new ReadTarget(end - start, options);
    target.set(first.bytes, 0);
    const stop = new AbortController();
    const onAbort = (): void => stop.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const pieces: Promise<void>[] = [];
      for (let at = start + first.bytes.byteLength; at < end; at += this.#partSize) {
        const length = Math.min(this.#partSize, end - at);
        // Past the head, which the first GET covered: each part lies in one buffer.
        const into = target.slot(at - start, at - start + length);
        pieces.push(
          this.#get(key, path, at, length, { into, etag: first.etag }, stop.signal).then(
            (piece) => {
              if (!piece) throw replacedWhileRead(this.#bucket, key, path);
            },
            (error: unknown) => {
              stop.abort(error);
              throw error;
            },
          ),
        );
      }
      const settled = await Promise.allSettled(pieces);
      const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
      if (failed)
        throw signal?.aborted ? cancelledError(signal, `reading s3://${this.#bucket}/${key}`, null) : failed.reason;
      return target.result(end - start);
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }

  /** One ranged GET (`rangedGet`) holding room for a part-sized request in flight. */
  async #get(
    key: string,
    path: string,
    offset: number,
    length: number,
    target: { into: Uint8Array; etag: string | undefined } | undefined,
    signal: AbortSignal | undefined,
  ): Promise<RangedAnswer | undefined> {
    const release = await this.#room(signal);
    try {
      return await rangedGet(this.#client, this.#context, { key, path }, offset, length, target, signal);
    } finally {
      release();
    }
  }

  /** Room for one part-sized request in flight; resolves its release. */
  #room(signal: AbortSignal | undefined): Promise<() => void> {
    return this.#budget.acquire(this.#partSize, signal);
  }

  async write(path: string, body: WriteBody, options: WriteOptions = {}): Promise<void> {
    const key = this.#key(path);
    const { signal } = options;
    if (signal?.aborted) throw cancelledError(signal, `writing s3://${this.#bucket}/${key}`);
    const ifAbsent = options.ifAbsent === true;
    // With a known size the part grows (in whole MiB) so the object fits in S3's 10,000 parts.
    const partSize = Math.max(this.#partSize, Math.ceil((options.size ?? 0) / MAX_PARTS / (1 << 20)) * (1 << 20));
    const parts = sliceParts(body instanceof Uint8Array ? [body] : body, partSize);
    // Room per part from before it is read: the body is pulled only as fast as parts go up.
    const release = await this.#room(signal);
    let first: IteratorResult<Uint8Array>;
    try {
      first = await parts.next();
      if (signal?.aborted) throw cancelledError(signal, `writing s3://${this.#bucket}/${key}`);
    } catch (error) {
      release();
      await parts.return(undefined);
      throw error;
    }
    // A part shorter than partSize is the body's last, so it fits one PutObject. A stream of
    // exactly one part goes multipart: peeking for more would need room for a second part while
    // holding one, which can deadlock writers sharing the budget.
    if (
      first.done ||
      first.value.byteLength < partSize ||
      (body instanceof Uint8Array && body.byteLength === partSize)
    ) {
      try {
        await this.#put(key, path, first.done ? new Uint8Array(0) : first.value, ifAbsent, signal, options.crc32c);
      } finally {
        release();
        if (!first.done) releasePart(first.value);
      }
      return;
    }
    await multipartUpload(
      this.#client,
      this.#context,
      (signal) => this.#room(signal),
      { key, path },
      { first: { bytes: first.value, release }, rest: parts },
      {
        ifAbsent,
        checksums: this.#checksums.multipart,
        crc32c: options.crc32c,
        ...(signal ? { signal } : {}),
      },
    );
  }

  /**
   * One PutObject, retried. A create-only write whose earlier attempt got no answer may find
   * its own object on retry (412): it succeeds when the object holds exactly these bytes.
   */
  async #put(
    key: string,
    path: string,
    bytes: Uint8Array,
    ifAbsent: boolean,
    signal: AbortSignal | undefined,
    known: KnownCrc32c | undefined,
  ): Promise<void> {
    const checksum = this.#checksums.put ? await partChecksum(bytes, 0, known) : undefined;
    let ambiguous = false;
    try {
      await s3Call(
        this.#context,
        { op: "writing", key, path, ifAbsent },
        async ({ signal: attemptSignal }) => {
          try {
            await this.#client.send(
              withUnsignedPayload(
                new PutObjectCommand({
                  Bucket: this.#bucket,
                  Key: key,
                  Body: bytes,
                  ContentLength: bytes.byteLength,
                  ContentType: "application/octet-stream",
                  ...(checksum ? { ChecksumAlgorithm: "CRC32C", ChecksumCRC32C: checksum } : {}),
                  ...(ifAbsent ? { IfNoneMatch: "*" } : {}),
                }),
              ),
              { abortSignal: attemptSignal },
            );
          } catch (error) {
            if (isTransientS3Error(error)) ambiguous = true;
            throw error;
          }
        },
        { signal, watch: "socket" },
      );
    } catch (error) {
      if (
        ambiguous &&
        isCheckpointError(error, "already_exists") &&
        (await isOwnPut(this.#client, this.#context, { key, path }, bytes, checksum))
      )
        return;
      throw error;
    }
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    const key = this.#key(path);
    try {
      const head = await s3Call(this.#context, { op: "checking", key, path }, ({ signal }) =>
        this.#client.send(new HeadObjectCommand({ Bucket: this.#bucket, Key: key }), { abortSignal: signal }),
      );
      return { path, size: head.ContentLength ?? 0, ...(head.LastModified ? { modified: head.LastModified } : {}) };
    } catch (error) {
      if (error instanceof CheckpointError && error.code === "not_found") return null;
      throw error;
    }
  }

  /**
   * Every object whose path starts with `prefix`, one ListObjectsV2 page (up to 1,000 keys) at a
   * time as the caller iterates. Keys ending in "/" are folder markers some tools create; no
   * Cairn path names them, so they are skipped.
   */
  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    const keyPrefix = prefix === "" ? this.#prefix : this.#key(prefix);
    let token: string | undefined;
    do {
      const page = await s3Call(this.#context, { op: "listing", key: keyPrefix, path: prefix }, ({ signal }) =>
        this.#client.send(
          new ListObjectsV2Command({
            Bucket: this.#bucket,
            Prefix: keyPrefix,
            ...(token ? { ContinuationToken: token } : {}),
          }),
          { abortSignal: signal },
        ),
      );
      for (const object of page.Contents ?? []) {
        if (!object.Key?.startsWith(this.#prefix) || object.Key.endsWith("/")) continue;
        yield {
          path: object.Key.slice(this.#prefix.length),
          size: object.Size ?? 0,
          ...(object.LastModified ? { modified: object.LastModified } : {}),
        };
      }
      if (page.IsTruncated && !page.NextContinuationToken) {
        throw new CheckpointError(
          "storage",
          `[s3] listing s3://${this.#bucket}/${keyPrefix}: the server cut the listing without a continuation token`,
          {
            context: { path: prefix, protocol: "s3", transient: false },
          },
        );
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
  }

  async delete(path: string): Promise<void> {
    const key = this.#key(path);
    try {
      await s3Call(this.#context, { op: "deleting", key, path }, ({ signal }) =>
        this.#client.send(new DeleteObjectCommand({ Bucket: this.#bucket, Key: key }), { abortSignal: signal }),
      );
    } catch (error) {
      // A missing object is deleted already; a missing bucket is a wrong URL, not a done delete.
      if (error instanceof CheckpointError && error.code === "not_found" && s3CodeOf(error.cause) !== "NoSuchBucket")
        return;
      throw error;
    }
  }

  /**
   * Deletes many objects with DeleteObjects, 1,000 keys per request (for removing whole
   * checkpoints: one request instead of a thousand). Missing objects are not an error; any key
   * the server refused to delete rejects the call with `storage`, naming the first few.
   */
  async deleteMany(paths: Iterable<string>): Promise<void> {
    const keys = [...paths].map((p) => ({ path: p, key: this.#key(p) }));
    for (let at = 0; at < keys.length; at += DELETE_BATCH) {
      const batch = keys.slice(at, at + DELETE_BATCH);
      const first = batch[0]!;
      const result = await s3Call(
        this.#context,
        { op: `deleting ${batch.length} objects from`, key: first.key, path: first.path },
        ({ signal }) =>
          this.#client.send(
            new DeleteObjectsCommand({
              Bucket: this.#bucket,
              Delete: { Objects: batch.map(({ key }) => ({ Key: key })), Quiet: true },
            }),
            {
              abortSignal: signal,
            },
          ),
      );
      const refused = (result.Errors ?? []).filter((e) => e.Code !== "NoSuchKey");
      if (refused.length > 0) {
        const named = refused.slice(0, 3).map((e) => `s3://${this.#bucket}/${e.Key} (${e.Code}: ${e.Message})`);
        throw new CheckpointError(
          "storage",
          `[s3] deleting ${refused.length} of ${batch.length} objects failed: ${named.join(", ")}${refused.length > 3 ? ", …" : ""}`,
          {
            context: {
              path: refused[0]!.Key?.slice(this.#prefix.length) ?? first.path,
              protocol: "s3",
              transient: false,
            },
          },
        );
      }
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#onClose();
  }
}
