import { type CheckpointMetadata, METADATA_FILE, ownFiles } from "../format/metadata.js";
import { isDataFileName } from "../format/naming.js";
import { withRetry } from "../storage/retry.js";
import { type StorageAdapter, joinPath } from "../storage/storage-adapter.js";
import { siblingReferences } from "./files-in-use.js";

/** What `deleteCheckpoint` removed (metadata.json first), and the data files of its own it kept because a sibling uses them. */
export interface DeletedCheckpoint {
  readonly deleted: readonly string[];
  readonly kept: readonly string[];
}

/**
 * Deletes one committed checkpoint by mark and sweep: its metadata.json first (a crash after it
 * leaves files nothing uses, never a damaged checkpoint), then the data files it wrote that no
 * committed sibling references (an incremental step's base files stay; a sibling that cannot be
 * read keeps them all). Only plain data file names from `metadata` are deleted, so a hostile
 * metadata.json cannot name anything else. Called by `cairn rm <checkpoint>`.
 */
export async function deleteCheckpoint(
  storage: StorageAdapter,
  dir: string,
  metadata: CheckpointMetadata,
  signal?: AbortSignal,
): Promise<DeletedCheckpoint> {
  // Durably un-committed before any file goes: a power cut must not bring back a checkpoint whose files are gone.
  await withRetry(() => storage.delete(joinPath(dir, METADATA_FILE), { durable: true }), { signal });
  const own = ownFiles(metadata).filter(isDataFileName);
  const referenced = await siblingReferences(storage, dir, signal);
  const files = referenced.unknown ? [] : own.filter((f) => !referenced.files.has(f));
  await Promise.all(files.map((f) => withRetry(() => storage.delete(joinPath(dir, f)), { signal })));
  return { deleted: [METADATA_FILE, ...files], kept: own.filter((f) => !files.includes(f)) };
}
