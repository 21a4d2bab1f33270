import PQueue from "p-queue";
import { CheckpointError } from "../errors.js";
import { type CheckpointMetadata, type DataFileMetadata, formatVersionOf } from "../format/metadata.js";
import { checkSharedFiles } from "../save/incremental-base.js";
import { type ReusableCheckpoint, type ReusedFile, reusableFiles } from "./reuse-files.js";
import { dataFileName, dataFilePath, newAttemptId } from "../format/naming.js";
import { withRetry } from "../storage/retry.js";
import { type StorageAdapter, joinPath } from "../storage/storage-adapter.js";
import { checkpointDestination, commitCheckpoint } from "./commit-checkpoint.js";
import { checkPieceAsync, filePieces, readPieces, throwIfDamaged, verifyCheckpoint } from "./verify-checkpoint.js";

export interface CopyOptions {
  readonly signal?: AbortSignal;
  /** After writing, read every destination file back and check it before committing (default true). */
  readonly readBack?: boolean;
  /** Data files copied at once (default 2). */
  readonly concurrency?: number;
  readonly readBytes?: number;
  /** Called with the bytes of data files written, and of the copy read back, for progress. */
  readonly onWrite?: (bytes: number) => void;
  readonly onReadBack?: (bytes: number) => void;
  /** Check the CRC32Cs (of the source, and of the copy read back) on checksum worker threads (see `VerifyOptions.offThread`). */
  readonly offThread?: boolean;
  /**
   * Committed checkpoints beside the destination (an incremental source's base, copied there
   * earlier): a source file whose bytes one of them holds (`reusableFiles`) is referenced there
   * (format 2.1) instead of copied. Without it (`cairn cp`, `export`) the copy holds every byte.
   */
  readonly reuse?: readonly ReusableCheckpoint[];
  /** Replace a checkpoint committed at the destination (see `commitCheckpoint`) instead of refusing it. */
  readonly force?: boolean;
  /**
   * A copy made by several ranks, each from its own storage: this rank copies only the data files
   * of `rank`, named for the shared `attempt`; once its files are written (or failed) it calls
   * `agree` with its failure (undefined on success), which resolves only if every rank succeeded
   * (a collective). Rank 0 then reads the copy back (with `readBack`) and commits it; other ranks
   * return without committing. A failure on any rank removes every rank's files.
   */
  readonly share?: {
    readonly attempt: string;
    readonly rank: number;
    readonly agree: (failure: unknown) => Promise<void>;
  };
}

export interface CopyResult {
  readonly bytes: number;
  readonly files: number;
  readonly metadata: CheckpointMetadata;
  /** Data files of a replaced checkpoint that could not be deleted. */
  readonly leftFiles: readonly string[];
}

/** Data files get names unique to this copy, by the rule every writer follows, so two copies racing for one destination never share a file. */
function renameFiles(metadata: CheckpointMetadata, attempt: string): Map<string, string> {
  const names = new Map<string, string>();
  const perRank = new Map<number, number>();
  for (const [file, info] of Object.entries(metadata.files).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const n = perRank.get(info.rank) ?? 0;
    perRank.set(info.rank, n + 1);
    names.set(file, dataFileName(info.rank, n, attempt));
  }
  return names;
}

/**
 * Copies a committed checkpoint between any two storages, byte for byte, streaming: every
 * byte is checked against the source's checksums as it passes (a damaged source is never
 * copied), the destination's files are read back and checked (unless `readBack: false`), and
 * `metadata.json` is committed last through `commitCheckpoint`, so the copy is visible only
 * once complete. The copy's metadata differs from the source's only in its data file names, and
 * holds them all itself: files an incremental source referenced in a sibling are copied in.
 *
 * Called by `cairn cp`. Throws `already_exists` if the destination holds a committed checkpoint
 * (unless `force`: then it is replaced once the copy is complete, and stays readable if the copy
 * fails), `corrupt` if the source (or the written copy) is damaged; on any failure the copy's
 * files are removed.
 */
export async function copyCheckpoint(
  source: { storage: StorageAdapter; dir: string; metadata: CheckpointMetadata; where: string },
  destination: { storage: StorageAdapter; dir: string; where: string },
  options: CopyOptions = {},
): Promise<CopyResult> {
  const { share } = options;
  const commits = share === undefined || share.rank === 0;
  const { metadata } = source;
  const attempt = share?.attempt ?? newAttemptId();
  const names = renameFiles(metadata, attempt);
  const reused = options.reuse ? reusableFiles(metadata, options.reuse) : new Map<string, ReusedFile>();
  for (const [file, { name }] of reused) names.set(file, name);
  const readBytes = options.readBytes ?? 8 << 20;
  const queue = new PQueue({ concurrency: options.concurrency ?? 2 });
  const written: string[] = [];
  let bytes = 0;
  let agreed = share === undefined;
  try {
    // Inside the try: a destination that cannot be checked still fails the agreement every rank waits on.
    const replacing = commits
      ? await checkpointDestination(
          destination.storage,
          destination.dir,
          destination.where,
          options.force === true,
          options.signal,
        )
      : undefined;
    // The first failure stops the other files; every write is settled before a failed copy removes its files.
    const stop = new AbortController();
    let firstFailure: unknown;
    const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
    const settled = await Promise.allSettled(
      Object.keys(metadata.files)
        .filter((file) => (share === undefined || metadata.files[file]!.rank === share.rank) && !reused.has(file))
        .map((file) =>
          queue.add(async () => {
            const pieces = filePieces(metadata, file, readBytes);
            const body = async function* (): AsyncGenerator<Uint8Array> {
              let index = 0;
              for await (const data of readPieces(
                source.storage,
                dataFilePath(source.dir, file, metadata.files[file]),
                pieces,
                { signal, offThread: options.offThread === true },
              )) {
                const damage = await checkPieceAsync(metadata, file, pieces[index++]!, data);
                if (damage) {
                  throw new CheckpointError(
                    "corrupt",
                    `${source.where} is damaged, nothing was copied: ${damage.problem}`,
                    {
                      context: { file, ...(damage.key ? { key: damage.key } : {}) },
                    },
                  );
                }
                yield data;
                options.onWrite?.(data.byteLength);
              }
            };
            const target = joinPath(destination.dir, names.get(file)!);
            written.push(target);
            try {
              await withRetry(
                () => destination.storage.write(target, body(), { size: metadata.files[file]!.size, signal }),
                { signal },
              );
            } catch (error) {
              if (!stop.signal.aborted) {
                firstFailure = error;
                stop.abort(error);
              }
              throw error;
            }
            bytes += metadata.files[file]!.size;
          }),
        ),
    );
    const failed = settled.find((s) => s.status === "rejected");
    if (share) {
      // Every rank joins the agreement, failed or not, so none waits for one that gave up.
      agreed = true;
      await share.agree(failed ? (firstFailure ?? failed.reason) : undefined);
    }
    if (failed) throw firstFailure ?? failed.reason;
    const files: Record<string, DataFileMetadata> = Object.create(null);
    // The copy holds every byte it needs (files a source step referenced in a sibling are its own), unless reused beside it.
    for (const [file, { dir: _dir, ...info }] of Object.entries(metadata.files))
      files[names.get(file)!] = reused.get(file)?.file ?? info;
    const entries = metadata.entries.map((e) =>
      e.kind === "value" ? e : { ...e, chunks: e.chunks.map((c) => ({ ...c, file: names.get(c.file)! })) },
    );
    // Written in this version's layout: a copy of a 1.x checkpoint is a 2.x one holding the same bytes (and hashes, if it had them).
    const copied: CheckpointMetadata = { ...metadata, version: formatVersionOf(files, entries), files, entries };
    if (!commits) return { bytes, files: written.length, metadata: copied, leftFiles: [] };
    if (options.readBack ?? true) {
      throwIfDamaged(
        await verifyCheckpoint(destination.storage, destination.dir, copied, {
          signal: options.signal,
          onRead: options.onReadBack,
          offThread: options.offThread === true,
        }),
        `the copy at ${destination.where}`,
      );
    }
    // Reused files must still be there at the commit (a retention pass beside it may have deleted them).
    if (reused.size > 0) await checkSharedFiles(destination, files, { signal: options.signal });
    const leftFiles = await commitCheckpoint(
      destination.storage,
      destination.dir,
      copied,
      attempt,
      destination.where,
      replacing,
      options.signal,
    );
    return { bytes, files: written.length, metadata: copied, leftFiles };
  } catch (error) {
    // A rank that failed before agreeing (reading its source) still joins, so the others go on.
    if (!agreed) {
      agreed = true;
      await share?.agree(error).catch(() => undefined);
    }
    await Promise.all(written.map((path) => destination.storage.delete(path).catch(() => undefined)));
    throw error;
  }
}
