import { CheckpointError, type StorageAdapter, openStorage, readMetadata } from "@cairn/core";
import { METADATA_FILE } from "@cairn/core/format";
import { type ObjectInfo, joinPath } from "@cairn/core/storage";
import { HTTP_INDEX_FILE, encodeHttpIndex, parseHttpIndex } from "./http-index.js";

export interface PublishResult {
  /** The index's path under the root. */
  readonly index: string;
  /** Objects the index now lists, and how many of them are this step's. */
  readonly objects: number;
  readonly stepObjects: number;
}

/**
 * Adds committed step `step` of the root at `rootUrl` to the root's `cairn-index.json`, so the
 * root, copied to any static web server, can be listed and loaded over https:// (HTTP cannot
 * list). The step must be committed; its metadata.json, its own data files and the files it
 * references (an incremental step's) are listed with their sizes, replacing what the index said
 * of them. The index is the only file written.
 */
export async function publishStep(rootUrl: string, step: number, signal?: AbortSignal): Promise<PublishResult> {
  if (!Number.isSafeInteger(step) || step < 0)
    throw new CheckpointError("invalid_argument", `a step is a non-negative integer, not ${String(step)}`);
  const storage = await openStorage(rootUrl);
  try {
    const dir = String(step);
    const metadata = await readMetadata({ storage, path: dir, ...(signal ? { signal } : {}) });
    const paths = [
      joinPath(dir, METADATA_FILE),
      // Own files in the step's directory; an incremental step's referenced ones in their sibling's.
      ...Object.entries(metadata.files).map(([name, file]) => joinPath(file.dir ?? dir, name)),
    ];
    const published: ObjectInfo[] = [];
    for (const path of new Set(paths)) {
      const info = await storage.stat(path);
      if (!info)
        throw new CheckpointError(
          "not_found",
          `${storage.root}/${path} of step ${step} is missing; nothing was published`,
          {
            context: { path, step },
          },
        );
      published.push({ path, size: info.size });
    }
    const byPath = new Map((await existingIndex(storage)).map((o) => [o.path, o]));
    for (const object of published) byPath.set(object.path, object);
    await storage.write(HTTP_INDEX_FILE, encodeHttpIndex([...byPath.values()]), signal ? { signal } : {});
    return { index: HTTP_INDEX_FILE, objects: byPath.size, stepObjects: published.length };
  } finally {
    await storage.close();
  }
}

async function existingIndex(storage: StorageAdapter): Promise<ObjectInfo[]> {
  let bytes: Uint8Array;
  try {
    bytes = await storage.read(HTTP_INDEX_FILE);
  } catch (error) {
    if ((error as CheckpointError).code === "not_found") return [];
    throw error;
  }
  return parseHttpIndex(bytes, `${storage.root}/${HTTP_INDEX_FILE}`);
}
