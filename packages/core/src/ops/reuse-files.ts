import type { CheckpointMetadata, DataFileMetadata } from "../format/metadata.js";
import { pathId } from "../state/state-dict.js";

/** A committed checkpoint beside a copy's destination whose data files the copy may reference instead of writing (its directory's name and metadata). */
export interface ReusableCheckpoint {
  readonly dir: string;
  readonly metadata: CheckpointMetadata;
}

/** A destination file a source file's bytes are already in: its name and its record, `dir` where it really is. */
export interface ReusedFile {
  readonly name: string;
  readonly file: DataFileMetadata & { readonly dir: string };
}

function fileKey(file: DataFileMetadata): string {
  return `${file.rank}|${file.size}|${file.headerLength}|${file.headerCrc32c}`;
}

/** Every chunk of `metadata` by the file holding it: key, box, place in the file, block size, CRCs and content hash (if any). */
function chunksByFile(metadata: CheckpointMetadata): Map<string, string[]> {
  const byFile = new Map<string, string[]>();
  for (const entry of metadata.entries) {
    if (entry.kind === "value") continue;
    for (const c of entry.chunks) {
      const list = byFile.get(c.file) ?? [];
      list.push(
        `${pathId(entry.key)}|${c.offsets.join(",")}|${c.sizes.join(",")}|${c.byteOffset}|${c.blockSize}|${c.crc32c.join(",")}|${c.hash ?? ""}`,
      );
      byFile.set(c.file, list);
    }
  }
  return byFile;
}

/**
 * Which of the source's data files are already beside the destination (an incremental step's
 * base, copied there before): a candidate file matches when its rank, size, header length and
 * header CRC are the source file's and it holds every chunk the source reads from that file, at
 * the same offset with the same CRCs and content hash (a candidate written before content hashes
 * never matches a source that has them). Matched by content, never by name; unmatched files are copied.
 */
export function reusableFiles(
  source: CheckpointMetadata,
  candidates: readonly ReusableCheckpoint[],
): Map<string, ReusedFile> {
  const byKey = new Map<
    string,
    { name: string; file: DataFileMetadata & { dir: string }; chunks: ReadonlySet<string> }[]
  >();
  for (const candidate of candidates) {
    const chunks = chunksByFile(candidate.metadata);
    for (const [name, file] of Object.entries(candidate.metadata.files)) {
      const list = byKey.get(fileKey(file)) ?? [];
      list.push({ name, file: { ...file, dir: file.dir ?? candidate.dir }, chunks: new Set(chunks.get(name)) });
      byKey.set(fileKey(file), list);
    }
  }
  const reused = new Map<string, ReusedFile>();
  const sourceChunks = chunksByFile(source);
  for (const [name, file] of Object.entries(source.files)) {
    const needed = sourceChunks.get(name) ?? [];
    const match = byKey.get(fileKey(file))?.find((c) => needed.every((chunk) => c.chunks.has(chunk)));
    if (match) reused.set(name, { name: match.name, file: match.file });
  }
  return reused;
}
