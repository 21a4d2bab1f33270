import { type CheckpointError, isCheckpointError } from "../errors.js";
import { type CheckpointMetadata, METADATA_FILE } from "../format/metadata.js";
import { encodeMetadata, parseMetadata } from "../format/metadata-json.js";
import { type RetryPolicy, withRetry } from "../storage/retry.js";
import type { StorageAdapter } from "../storage/storage-adapter.js";
import { joinPath } from "../storage/storage-adapter.js";
import { isFileOfAttempt } from "../format/naming.js";

/**
 * Commits a checkpoint: writes `metadata.json` into `dir` with an atomic create, after every
 * data file is durable. A retried create that finds metadata naming this attempt's files
 * (`-<attempt>.safetensors`) committed after all; any other existing metadata is another
 * checkpoint, and `alreadyCommitted()` is thrown. With `overwrite` a committed checkpoint there
 * is replaced by one all-or-nothing write. A failed write that left this attempt's metadata in
 * place committed if it can be made durable (`durableOrTakenBack`), else it is deleted again.
 * Called by `save` and by ops writing their own data files (import, copy).
 *
 * `after`: the commit becomes visible only once it resolves (the save's own data files synced),
 * and fails with its reason if it rejects. The metadata is encoded meanwhile, and where the
 * storage can prepare an object before publishing it (adapters with `sync` honour
 * `WriteOptions.publishAfter`), written and synced too.
 */
export async function commitMetadata(
  storage: StorageAdapter,
  dir: string,
  metadata: CheckpointMetadata,
  attempt: string,
  alreadyCommitted: () => CheckpointError,
  options: {
    readonly retry?: Partial<RetryPolicy>;
    readonly signal?: AbortSignal | undefined;
    readonly overwrite?: boolean;
    readonly after?: Promise<unknown>;
    /** `encodeMetadata`'s: the chunks' content hashes as bytes. */
    readonly contentHashes?: Uint8Array;
  } = {},
): Promise<void> {
  const path = joinPath(dir, METADATA_FILE);
  const bytes = encodeMetadata(metadata, options.contentHashes);
  const { after } = options;
  const early = after !== undefined && storage.sync !== undefined;
  if (after && !early) await after;
  /** Set when `after` rejected: its reason is the commit's failure, never retried as the write's. */
  let notPublished: { reason: unknown } | undefined;
  const publishAfter = early
    ? after.catch((reason: unknown) => {
        notPublished = { reason };
        throw notPublished;
      })
    : undefined;
  publishAfter?.catch(() => undefined);
  try {
    await withRetry(
      () =>
        storage.write(path, bytes, {
          ifAbsent: options.overwrite !== true,
          signal: options.signal,
          ...(publishAfter ? { publishAfter } : {}),
        }),
      { policy: options.retry, signal: options.signal },
    );
  } catch (error) {
    if (notPublished) throw notPublished.reason;
    // A retried create may find its own earlier attempt, and a write may fail after its object was
    // placed (file://: the directory's fsync after the link): that metadata is this commit.
    // Then one read, not cut short by an abort (a failed save must not leave its metadata in place)
    // nor retried (a storage that is down must not hold an aborted save for another retry policy).
    const exists = isCheckpointError(error, "already_exists");
    const ours = exists
      ? await committedBy(storage, path, attempt, options)
      : await committedBy(storage, path, attempt, { retry: { ...options.retry, maxAttempts: 1 } }).catch(() => false);
    if (ours) return durableOrTakenBack(storage, path, options.retry);
    if (exists && options.overwrite !== true) throw alreadyCommitted();
    throw error;
  }
}

/**
 * This attempt's metadata, found in place after its write failed: made durable (file://: fsynced
 * with its directory, whose fsync may be what failed), or, if that fails, deleted and the failure
 * thrown, so that a save reported failed leaves no step that is listed but lost at a power cut.
 */
async function durableOrTakenBack(storage: StorageAdapter, path: string, policy?: Partial<RetryPolicy>): Promise<void> {
  if (!storage.sync) return;
  const retry = { policy };
  try {
    await withRetry(() => storage.sync!([path]), retry);
  } catch (error) {
    await withRetry(() => storage.delete(path), retry).catch(() => undefined);
    throw error;
  }
}

/** Whether the metadata at `path` names this attempt's files. A transient failure to read it is retried, then thrown, never taken for "another writer's". */
async function committedBy(
  storage: StorageAdapter,
  path: string,
  attempt: string,
  options: { readonly retry?: Partial<RetryPolicy>; readonly signal?: AbortSignal | undefined },
): Promise<boolean> {
  let existing: CheckpointMetadata;
  try {
    existing = parseMetadata(
      await withRetry(() => storage.read(path, undefined, { signal: options.signal }), {
        policy: options.retry,
        signal: options.signal,
      }),
      path,
    );
  } catch (error) {
    if (isCheckpointError(error, "not_found") || isCheckpointError(error, "corrupt")) return false;
    throw error;
  }
  return Object.keys(existing.files).some((name) => isFileOfAttempt(name, attempt));
}
