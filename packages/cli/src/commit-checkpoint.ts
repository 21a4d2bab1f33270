import {
  type CheckpointMetadata,
  type StorageAdapter,
  CheckpointError,
  METADATA_FILE,
  commitMetadata,
  encodeMetadata,
  isCheckpointError,
  joinPath,
  parseMetadata,
  withRetry,
} from "@cairn/core";

/** A committed checkpoint a write replaces (`--force`): the data files its metadata.json names. */
export interface ReplacedCheckpoint {
  readonly files: readonly string[];
}

function alreadyCommitted(where: string): CheckpointError {
  return new CheckpointError("already_exists", `a checkpoint is already committed at ${where}; choose a new location, delete that one first (cairn rm), or pass --force to replace it`, {
    context: { path: where },
  });
}

/**
 * Checks a checkpoint's destination before anything is written. Nothing committed there:
 * `undefined`. A committed checkpoint: `already_exists` unless `force`, then what it holds, so
 * `commitCheckpoint` can remove its data files once the new one is committed. A metadata.json
 * that cannot be parsed names no files that can be trusted: its files are left alone.
 */
export async function checkpointDestination(storage: StorageAdapter, dir: string, where: string, force: boolean, signal?: AbortSignal): Promise<ReplacedCheckpoint | undefined> {
  const path = joinPath(dir, METADATA_FILE);
  if ((await withRetry(() => storage.stat(path), { signal })) === null) return undefined;
  if (!force) throw alreadyCommitted(where);
  try {
    return { files: Object.keys(parseMetadata(await withRetry(() => storage.read(path, undefined, { signal }), { signal }), `${where}/${METADATA_FILE}`).files) };
  } catch (error) {
    if (isCheckpointError(error, "corrupt") || isCheckpointError(error, "unsupported_version")) return { files: [] };
    throw error;
  }
}

/**
 * Commits a checkpoint whose data files (named `-<attempt>.safetensors`) are all written.
 * New destination: `metadata.json` by atomic create (core's commit). Replacing one: `metadata.json`
 * is overwritten by an all-or-nothing write (temp file + rename, or one object PUT), so until that
 * lands the old checkpoint stays whole and readable; then the old data files are deleted. Resolves
 * the old files it could not delete (no metadata names them any more; they are only space).
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
  if (!replacing) {
    await commitMetadata(storage, dir, metadata, attempt, () => alreadyCommitted(where), { signal });
    return [];
  }
  const path = joinPath(dir, METADATA_FILE);
  const bytes = encodeMetadata(metadata);
  try {
    await withRetry(() => storage.write(path, bytes, { signal }), { signal });
  } catch (error) {
    // A write whose response was lost may have landed: then this attempt is committed, and its files must stay.
    if (!(await committedBy(storage, path, attempt))) throw error;
  }
  // Only plain data file names: a hostile old metadata.json must not make this delete metadata.json or anything outside `dir`.
  const old = replacing.files.filter((f) => !Object.hasOwn(metadata.files, f) && !f.includes("/") && f.endsWith(".safetensors"));
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

async function committedBy(storage: StorageAdapter, path: string, attempt: string): Promise<boolean> {
  try {
    return Object.keys(parseMetadata(await storage.read(path), path).files).some((f) => f.endsWith(`-${attempt}.safetensors`));
  } catch {
    return false;
  }
}
