import type { ValueEntry } from "../format/metadata.js";
import type { LaidOutTensor, SafetensorsLayout } from "../load/safetensors-layout.js";
import { withRetry } from "../storage/retry.js";
import { type StorageAdapter, joinPath } from "../storage/storage-adapter.js";
import type { EntrySource, SourceTensor } from "./source-tensor.js";
import { type WriteCheckpointOptions, type WrittenCheckpoint, writeCheckpoint } from "./write-checkpoint.js";

/** The entries of a safetensors layout (see `readSafetensorsLayout`), each tensor read from its file in ranges. */
export function layoutEntries(storage: StorageAdapter, layout: SafetensorsLayout): EntrySource[] {
  return layout.entries.map((e): EntrySource =>
    e.kind === "value" ? (e as ValueEntry) : laidOutSource(storage, layout, e),
  );
}

function laidOutSource(storage: StorageAdapter, layout: SafetensorsLayout, t: LaidOutTensor): SourceTensor {
  const path = joinPath(layout.dir, t.file);
  return {
    kind: t.kind,
    key: t.key,
    dtype: t.dtype,
    shape: t.shape,
    byteLength: t.byteLength,
    read: (offset, length) => withRetry(() => storage.read(path, { offset: t.byteOffset + offset, length })),
  };
}

/**
 * Makes a checkpoint at `dir` from a safetensors layout read (and checked) by
 * `readSafetensorsLayout`: one file, the reverse of `exportSafetensors`, or the shards of a
 * Hugging Face layout. Streamed through `writeCheckpoint` (committed last; `force` replaces a
 * committed checkpoint there). Called by `cairn import`. Throws what `writeCheckpoint` throws.
 */
export function importSafetensors(
  source: { readonly storage: StorageAdapter; readonly layout: SafetensorsLayout },
  destination: { readonly storage: StorageAdapter; readonly dir: string },
  options: Omit<WriteCheckpointOptions, "user"> = {},
): Promise<WrittenCheckpoint> {
  return writeCheckpoint(destination.storage, destination.dir, layoutEntries(source.storage, source.layout), {
    ...options,
    user: source.layout.user,
  });
}
