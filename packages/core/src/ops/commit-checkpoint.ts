import { CheckpointError, isDamaged } from "../errors.js";
import { type CheckpointMetadata, METADATA_FILE, ownFiles } from "../format/metadata.js";
import { parseMetadata } from "../format/metadata-json.js";
import { isDataFileName } from "../format/naming.js";
import { commitMetadata } from "../save/commit-metadata.js";
import { withRetry } from "../storage/retry.js";
import { siblingReferences } from "./files-in-use.js";
import { type StorageAdapter, joinPath } from "../storage/storage-adapter.js";

/** A committed checkpoint a write replaces (`force`): the data files its metadata.json names. */
export interface ReplacedCheckpoint {
  readonly files: readonly string[];
}

function alreadyCommitted(where: string): CheckpointError {
  return new CheckpointError(
    "already_exists",
    `a checkpoint is already committed at ${where}; choose a new location, delete that one first (cairn rm), or pass --force to replace it`,
    {
      context: { path: where },
    },
  );
}

/**
 * Checks a checkpoint's destination before anything is written; called first by every op that
 * writes a checkpoint (import, copy). Nothing committed there: `undefined`. A committed
 * checkpoint: `already_exists` unless `force`, then what it holds, so `commitCheckpoint` can
 * remove its data files once the new one is committed. A metadata.json that cannot be parsed
 * names no files that can be trusted: its files are left alone.
 */
export async function checkpointDestination(
  storage: StorageAdapter,
  dir: string,
  where: string,
  force: boolean,
  signal?: AbortSignal,
): Promise<ReplacedCheckpoint | undefined> {
  const path = joinPath(dir, METADATA_FILE);
  if ((await withRetry(() => storage.stat(path), { signal })) === null) return undefined;
  if (!force) throw alreadyCommitted(where);
  try {
    const metadata = parseMetadata(
      await withRetry(() => storage.read(path, undefined, { signal }), { signal }),
      `${where}/${METADATA_FILE}`,
    );
    // Only its own files: those it referenced in a sibling belong to that sibling.
    return { files: ownFiles(metadata) };
  } catch (error) {
    if (isDamaged(error)) return { files: [] };
    throw error;
  }
}

/**
 * Commits a checkpoint whose data files (named for `attempt`) are all written, through core's
 * `commitMetadata`: an atomic create at a new destination; replacing one, an all-or-nothing
 * overwrite, so until it lands the old checkpoint stays whole and readable, and then the old
 * data files no sibling checkpoint references are deleted. Resolves the old files it could not delete (no metadata names them
 * any more; they are only space). Throws `already_exists` if another writer committed first.
 */
export async function commitCheckpoint(
  storage: StorageAdapter,
  dir: string,
  metadata: CheckpointMetadata,
  attempt: string,
  where: string,
  replacing: ReplacedCheckpoint | undefined,
  signal?: AbortSignal,
): Promise<string[]> {
  await commitMetadata(storage, dir, metadata, attempt, () => alreadyCommitted(where), {
    signal,
    overwrite: replacing !== undefined,
  });
  if (!replacing) return [];
  // Only plain data file names: a hostile old metadata.json must not make this delete metadata.json or anything outside `dir`.
  // Mark and sweep: files a sibling checkpoint references (an incremental step) stay; a sibling not understood keeps them all.
  const referenced =
    replacing.files.length > 0
      ? await siblingReferences(storage, dir, signal)
      : { files: new Set<string>(), unknown: false };
  if (referenced.unknown) return [];
  const old = replacing.files.filter(
    (f) =>
      !Object.hasOwn(metadata.files, f) && !referenced.files.has(f) && isDataFileName(f) && f.endsWith(".safetensors"),
  );
  const left: string[] = [];
  await Promise.all(
    old.map((f) =>
      withRetry(() => storage.delete(joinPath(dir, f)), { signal }).catch(() => {
        left.push(f);
      }),
    ),
  );
  return left.sort();
}
