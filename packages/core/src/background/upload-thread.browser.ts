// Background saves in a browser: no upload worker. A page's storage I/O is asynchronous already
// (OPFS through its own worker, IndexedDB, fetch), and checksums run in Web Workers, so the
// calling thread only plans and commits.
import type { OpenedCheckpoint } from "../storage/checkpoint-location.js";
import { CheckpointError } from "../errors.js";
import type { Leaf } from "../state/leaf.js";
import type { SaveOptions, SaveResult } from "../save/save-options.js";

export function canUploadInWorker(
  _leaves: readonly Leaf[],
  _location: OpenedCheckpoint,
  _options: SaveOptions,
): boolean {
  return false;
}

export function startUploadWorker(): void {}

export function uploadWorkerReady(): Promise<void> {
  return Promise.resolve();
}

export function uploadInWorker(
  _leaves: readonly Leaf[],
  _location: OpenedCheckpoint,
  _options: SaveOptions,
): Promise<Omit<SaveResult, "seconds">> {
  return Promise.reject(new CheckpointError("invalid_argument", "a browser has no upload worker thread"));
}
