import { isCheckpointError } from "../errors.js";
import { METADATA_FILE } from "../format/metadata.js";
import { parseMetadata } from "../format/metadata-json.js";
import { baseName, parentDir } from "../format/naming.js";
import { withRetry } from "../storage/retry.js";
import { type StorageAdapter, joinPath } from "../storage/storage-adapter.js";

/** Data files of one checkpoint that committed siblings reference (format 2.1), and whether some sibling could not be read. */
export interface SiblingReferences {
  readonly files: ReadonlySet<string>;
  /** A sibling's metadata.json is of a newer format, damaged or unreadable: it may use any file, so delete none. */
  readonly unknown: boolean;
}

/**
 * Which of `dir`'s data files the committed checkpoints beside it reference: the mark of a
 * mark-and-sweep for deleters that have no step index of their own (core's replace-on-force).
 * A checkpoint at the storage's root has no siblings.
 */
export async function siblingReferences(
  storage: StorageAdapter,
  dir: string,
  signal?: AbortSignal,
): Promise<SiblingReferences> {
  const parent = parentDir(dir);
  const files = new Set<string>();
  if (parent === undefined) return { files, unknown: false };
  const name = baseName(dir);
  const prefix = parent === "" ? "" : `${parent}/`;
  const siblings: string[] = [];
  for await (const object of storage.list(prefix)) {
    const [sibling, file, extra] = object.path.slice(prefix.length).split("/");
    if (file === METADATA_FILE && extra === undefined && sibling !== undefined && sibling !== name)
      siblings.push(sibling);
  }
  let unknown = false;
  for (const sibling of siblings) {
    const path = joinPath(parent, sibling, METADATA_FILE);
    try {
      const metadata = parseMetadata(
        await withRetry(() => storage.read(path, undefined, { signal }), { signal }),
        path,
      );
      for (const [file, info] of Object.entries(metadata.files)) if (info.dir === name) files.add(file);
    } catch (error) {
      // Deleted since the listing: it references nothing any more.
      if (isCheckpointError(error, "not_found")) continue;
      unknown = true;
    }
  }
  return { files, unknown };
}
