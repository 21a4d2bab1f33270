import { type CheckpointMetadata, type StorageAdapter, isGone, readMetadata } from "@cairn/core";
import { isDataFileName, isReferencedFile } from "@cairn/core/format";
import { joinPath } from "@cairn/core/storage";
import { parseStep, stepDir } from "./step-naming.js";

/** A data file a step's metadata lists: where it is under the root, the rank that wrote it, and whether it lives in the step's own directory. */
export interface TableFile {
  /** `<step>/<file name>`: the step's own directory, or the sibling step's (`dir`, format 2.1). */
  readonly path: string;
  readonly rank: number;
  readonly own: boolean;
}

/** Every data file a committed step's metadata lists (its own and those of other steps it uses); none when the step is gone. */
export async function readFileTable(storage: StorageAdapter, step: number): Promise<TableFile[]> {
  let metadata: CheckpointMetadata;
  try {
    metadata = await readMetadata({ storage, path: stepDir(step) });
  } catch (error) {
    // Deleted since it was listed (another manager's retention): it is simply not there.
    if (isGone(error)) return [];
    throw error;
  }
  const files: TableFile[] = [];
  for (const [name, file] of Object.entries(metadata.files)) {
    const own = !isReferencedFile(file);
    if (!isDataFileName(name) || (!own && parseStep(file.dir!) === undefined)) continue;
    files.push({ path: joinPath(file.dir ?? stepDir(step), name), rank: file.rank, own });
  }
  return files;
}
