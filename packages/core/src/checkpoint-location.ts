import { CheckpointError } from "./errors.js";
import type { ProcessGroup } from "./process-group.js";
import { SingleProcessGroup } from "./process-group.js";
import type { RetryPolicy } from "./retry.js";
import type { StorageAdapter } from "./storage/storage-adapter.js";
import { type StorageOptions, openStorage } from "./storage/storage-registry.js";

/** Where a checkpoint is and how to reach it; shared by every entry point. */
export interface CheckpointOptions {
  /** A URL (`file://`, `memory://`, `s3://`, `gs://`) or a plain path. */
  readonly checkpointId?: string;
  /** An open adapter instead of a URL; the checkpoint lives at `path` under its root. */
  readonly storage?: StorageAdapter;
  readonly path?: string;
  /** Passed to the adapter factory when opening `checkpointId`. */
  readonly storageOptions?: StorageOptions;
  readonly processGroup?: ProcessGroup;
  /** Abort → the call rejects with `cancelled` and nothing is committed. */
  readonly signal?: AbortSignal;
  /** Bounds for retrying transient storage errors. */
  readonly retry?: Partial<RetryPolicy>;
}

export interface OpenedCheckpoint {
  readonly storage: StorageAdapter;
  /** The checkpoint's directory relative to the adapter's root ("" for the root itself). */
  readonly dir: string;
  /** For messages: the URL or root and path. */
  readonly where: string;
  readonly group: ProcessGroup;
  /** Closes the adapter if this call opened it. */
  release(): Promise<void>;
}

/** Every entry point takes a URL or path, or options: this makes options of either. */
export function checkpointOptionsOf<T extends CheckpointOptions>(idOrOptions: string | T): T {
  return typeof idOrOptions === "string" ? ({ checkpointId: idOrOptions } as T) : idOrOptions;
}

export async function openCheckpoint(idOrOptions: string | CheckpointOptions): Promise<OpenedCheckpoint> {
  const options = checkpointOptionsOf(idOrOptions);
  const group = options.processGroup ?? new SingleProcessGroup();
  if (options.storage) {
    const dir = (options.path ?? "").replace(/^\/+|\/+$/g, "");
    return {
      storage: options.storage,
      dir,
      where: `${options.storage.root.replace(/\/$/, "")}/${dir}`,
      group,
      release: async () => undefined,
    };
  }
  if (options.checkpointId === undefined) {
    throw new CheckpointError("invalid_argument", "say where the checkpoint is: pass a URL or path, or { checkpointId }, or { storage, path }");
  }
  const storage = await openStorage(options.checkpointId, options.storageOptions);
  return { storage, dir: "", where: storage.root, group, release: () => storage.close() };
}
