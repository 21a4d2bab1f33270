import { type CheckpointMetadata, type StorageAdapter, isCheckpointError, readMetadata } from "@cairn/core";
import { isDataFileName } from "@cairn/core/format";
import { joinPath } from "@cairn/core/storage";
import { parseStep, stepDir } from "./step-naming.js";

/** Codes that say a step vanished between listing and reading it (another manager deleted it): it is simply not there. */
export const GONE = new Set(["not_found", "not_committed"]);

/** A data file a step's metadata lists: where it is under the root, the rank that wrote it, and whether it lives in the step's own directory. */
export interface TableFile {
  /** `<step>/<file name>`: the step's own directory, or the sibling step's (`dir`, format 2.1). */
  readonly path: string;
  readonly rank: number;
  readonly own: boolean;
}

/** The files of sibling steps an incremental step uses (format 2.1), as paths under the root. */
export function referencedFiles(metadata: CheckpointMetadata): string[] {
  const paths: string[] = [];
  for (const [name, file] of Object.entries(metadata.files))
    if (file.dir !== undefined) paths.push(joinPath(file.dir, name));
  return paths;
}

/** Every data file a committed step's metadata lists (its own and those of other steps it uses); none when the step is gone. */
export async function readFileTable(storage: StorageAdapter, step: number): Promise<TableFile[]> {
  let metadata: CheckpointMetadata;
  try {
    metadata = await readMetadata({ storage, path: stepDir(step) });
  } catch (error) {
    if (isCheckpointError(error) && GONE.has(error.code)) return [];
    throw error;
  }
  const files: TableFile[] = [];
  for (const [name, file] of Object.entries(metadata.files)) {
    if (!isDataFileName(name) || (file.dir !== undefined && parseStep(file.dir) === undefined)) continue;
    files.push({ path: joinPath(file.dir ?? stepDir(step), name), rank: file.rank, own: file.dir === undefined });
  }
  return files;
}
