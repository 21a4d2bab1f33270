import { isSharedMemory, sharedBytes } from "../storage/page-aligned.js";
import PQueue from "p-queue";
import { dataFilePath } from "../format/naming.js";
import { CheckpointError, isCheckpointError, throwIfAborted } from "../errors.js";
import { type CheckpointMetadata, type ChunkMetadata, isReferencedFile } from "../format/metadata.js";
import { checkBlocks, checkFileSize, checkHeader } from "../load/check-bytes.js";
import { intersectBoxes } from "../state/box.js";
import { numel } from "../state/dtypes.js";
import { displayKey } from "../state/state-dict.js";
import { withRetry } from "../storage/retry.js";
import type { StorageAdapter } from "../storage/storage-adapter.js";
import { blockChecksumsAsync } from "#platform/save/checksum-workers.js";
import { prefetched } from "../storage/prefetch.js";

/** A stretch of a data file and what its bytes must match: the header's CRC32C, or blocks of a chunk. */
export interface FilePiece {
  readonly start: number;
  readonly end: number;
  readonly header?: true;
  readonly chunk?: { readonly meta: ChunkMetadata; readonly key: string; readonly firstBlock: number };
}

/** What is wrong, and with which entry and file. */
export interface Damage {
  readonly file?: string;
  readonly key?: string;
  readonly problem: string;
}

export interface VerifyReport {
  readonly entries: number;
  readonly files: number;
  /** Bytes read and checked (`checkpointBytes`: of a referenced sibling's file, only what this checkpoint uses). */
  readonly bytes: number;
  readonly damaged: readonly Damage[];
  /** Keys of the damaged entries, in checkpoint order. */
  readonly damagedKeys: readonly string[];
}

export interface VerifyOptions {
  readonly signal?: AbortSignal;
  /** Bytes per range read (default 8 MiB, rounded to whole blocks). */
  readonly readBytes?: number;
  /** Data files checked at once (default 2). */
  readonly concurrency?: number;
  readonly onRead?: (bytes: number) => void;
  /**
   * Hash on the checksum worker threads: each piece is read into fresh shared memory
   * (`ReadOptions.into`), which a worker hashes in place, so the calling thread (beside a
   * training loop) does no CRC work. A piece the storage did not read in place is hashed here.
   */
  readonly offThread?: boolean;
}

/** Every chunk of the metadata with the display key of its entry. */
function chunksByFile(metadata: CheckpointMetadata): Map<string, { meta: ChunkMetadata; key: string }[]> {
  const byFile = new Map<string, { meta: ChunkMetadata; key: string }[]>(
    Object.keys(metadata.files).map((f) => [f, []]),
  );
  for (const entry of metadata.entries) {
    if (entry.kind === "value") continue;
    for (const meta of entry.chunks) byFile.get(meta.file)?.push({ meta, key: displayKey(entry.key) });
  }
  return byFile;
}

/**
 * A data file as pieces of at most `readBytes` covering it from byte 0 to its recorded size:
 * the header, then every chunk in block-aligned pieces, then whatever no chunk claims (a valid
 * file has none; it is copied but cannot be checked).
 */
export function filePieces(metadata: CheckpointMetadata, file: string, readBytes: number): FilePiece[] {
  const info = metadata.files[file]!;
  const pieces: FilePiece[] = [{ start: 0, end: 8 + info.headerLength, header: true }];
  const chunks = (chunksByFile(metadata).get(file) ?? []).sort((a, b) => a.meta.byteOffset - b.meta.byteOffset);
  let at = 8 + info.headerLength;
  for (const { meta, key } of chunks) {
    if (meta.byteOffset < at) continue;
    if (meta.byteOffset > at) pieces.push({ start: at, end: meta.byteOffset });
    const step = Math.max(meta.blockSize, Math.floor(readBytes / meta.blockSize) * meta.blockSize);
    for (let offset = 0; offset < meta.byteLength; offset += step) {
      const start = meta.byteOffset + offset;
      pieces.push({
        start,
        end: Math.min(meta.byteOffset + meta.byteLength, start + step),
        chunk: { meta, key, firstBlock: offset / meta.blockSize },
      });
    }
    at = Math.max(at, meta.byteOffset + meta.byteLength);
  }
  if (info.size > at) pieces.push({ start: at, end: info.size });
  return pieces;
}

/** What is wrong with a piece's bytes, if anything, checked as load checks what it reads. */
export function checkPiece(
  metadata: CheckpointMetadata,
  file: string,
  piece: FilePiece,
  bytes: Uint8Array,
  sums?: readonly number[],
): Damage | undefined {
  const key = piece.chunk?.key;
  if (bytes.byteLength < piece.end - piece.start) {
    return {
      file,
      ...(key ? { key } : {}),
      problem: `${file} is truncated: it ends at byte ${piece.start + bytes.byteLength}, ${key ?? "its header"} needs bytes up to ${piece.end}`,
    };
  }
  try {
    if (piece.header) checkHeader(file, metadata, bytes);
    if (piece.chunk)
      checkBlocks(piece.chunk.meta, piece.chunk.key, piece.chunk.firstBlock * piece.chunk.meta.blockSize, bytes, sums);
  } catch (error) {
    if (!isCheckpointError(error, "corrupt")) throw error;
    return { file, ...(key ? { key } : {}), problem: error.message };
  }
  return undefined;
}

/** `checkPiece`, with a chunk's blocks hashed by a checksum worker when its bytes are in shared memory (see `VerifyOptions.offThread`). */
export async function checkPieceAsync(
  metadata: CheckpointMetadata,
  file: string,
  piece: FilePiece,
  bytes: Uint8Array,
): Promise<Damage | undefined> {
  const chunk = piece.chunk;
  if (!chunk || !isSharedMemory(bytes.buffer) || bytes.byteLength < piece.end - piece.start)
    return checkPiece(metadata, file, piece, bytes);
  const [sums] = (await blockChecksumsAsync([bytes], [chunk.meta.blockSize], false)).sums;
  return checkPiece(metadata, file, piece, bytes, sums);
}

/** The pieces' bytes read in order, `depth` reads ahead (with `offThread`, each into shared memory of its own). */
export function readPieces(
  storage: StorageAdapter,
  path: string,
  pieces: readonly FilePiece[],
  options: VerifyOptions,
): AsyncGenerator<Uint8Array> {
  return prefetched(pieces, 2, async (piece) => {
    throwIfAborted(options.signal, "the read");
    const length = piece.end - piece.start;
    const into = options.offThread && piece.chunk ? { into: sharedBytes(length) } : {};
    const data = await withRetry(
      () => storage.read(path, { offset: piece.start, length }, { signal: options.signal, ...into }),
      {
        signal: options.signal,
      },
    );
    options.onRead?.(data.byteLength);
    return data;
  });
}

/** Where an entry's chunks leave a gap, overlap, or fall outside the tensor. */
function coverageProblem(shape: readonly number[], chunks: readonly ChunkMetadata[]): string | undefined {
  const whole = { offsets: shape.map(() => 0), sizes: shape };
  let covered = 0;
  for (const [i, a] of chunks.entries()) {
    if (a.offsets.length !== shape.length || a.sizes.length !== shape.length)
      return `chunk ${i} has ${a.offsets.length} dimensions, the tensor ${shape.length}`;
    if (a.offsets.some((o, d) => o + a.sizes[d]! > shape[d]!))
      return `chunk ${i} lies outside the tensor's shape ${JSON.stringify(shape)}`;
    covered += numel(a.sizes);
    for (const b of chunks.slice(i + 1)) {
      if (numel(a.sizes) > 0 && numel(b.sizes) > 0 && intersectBoxes(a, b)) return "two of its chunks overlap";
    }
  }
  if (covered !== numel(whole.sizes)) return `its chunks cover ${covered} of its ${numel(shape)} elements`;
  return undefined;
}

/**
 * Reads every byte of every data file the metadata lists (of a file referenced in a sibling, its
 * header and this checkpoint's chunks) and checks it: each file's size and header CRC32C, every
 * block of every chunk, and that each tensor's chunks tile it exactly.
 * The checks are load's (`checkFileSize`, `checkHeader`, `checkBlocks`), but damage does not
 * stop this one: every damaged file and entry is reported. Memory stays bounded by
 * `concurrency` × 2 reads of `readBytes`. Called by `cairn verify` and by `copyCheckpoint` to
 * read a copy back; throws only what storage throws (a missing file is damage) or `cancelled`.
 */
export async function verifyCheckpoint(
  storage: StorageAdapter,
  dir: string,
  metadata: CheckpointMetadata,
  options: VerifyOptions = {},
): Promise<VerifyReport> {
  const damaged: Damage[] = [];
  const byFile = chunksByFile(metadata);
  for (const entry of metadata.entries) {
    if (entry.kind === "value") continue;
    const shape = entry.kind === "tensor" ? entry.shape : [entry.byteLength];
    const problem = coverageProblem(shape, entry.chunks);
    if (problem) damaged.push({ key: displayKey(entry.key), problem: `${displayKey(entry.key)}: ${problem}` });
  }
  let bytes = 0;
  const readBytes = options.readBytes ?? 8 << 20;
  const queue = new PQueue({ concurrency: options.concurrency ?? 2 });
  const fileDamage = (file: string, problem: string): void => {
    damaged.push({ file, problem });
    for (const { key } of byFile.get(file) ?? []) damaged.push({ file, key, problem });
  };
  await Promise.all(
    Object.keys(metadata.files).map((file) =>
      queue.add(async () => {
        const path = dataFilePath(dir, file, metadata.files[file]);
        const stat = await withRetry(() => storage.stat(path), { signal: options.signal });
        try {
          await checkFileSize(file, metadata, async () => stat?.size ?? null);
        } catch (error) {
          if (!isCheckpointError(error, "corrupt")) throw error;
          if (!stat) return fileDamage(file, error.message);
          damaged.push({ file, problem: error.message });
        }
        // Of a file it references in a sibling, only the header and its own chunks: the rest is the sibling's.
        const whole = filePieces(metadata, file, readBytes);
        const pieces = isReferencedFile(metadata.files[file]!) ? whole.filter((p) => p.header || p.chunk) : whole;
        let index = 0;
        try {
          for await (const data of readPieces(storage, path, pieces, {
            ...options,
            onRead: (n) => ((bytes += n), options.onRead?.(n)),
          })) {
            const piece = pieces[index++]!;
            const damage = await checkPieceAsync(metadata, file, piece, data);
            if (!damage) continue;
            if (piece.header) fileDamage(file, damage.problem);
            else damaged.push(damage);
            if (data.byteLength < piece.end - piece.start) {
              for (const later of pieces.slice(index))
                if (later.chunk)
                  damaged.push({
                    file,
                    key: later.chunk.key,
                    problem: `${file} is truncated before ${later.chunk.key}`,
                  });
              break;
            }
          }
        } catch (error) {
          if (!isCheckpointError(error, "not_found")) throw error;
          fileDamage(file, `${file} disappeared while it was read`);
        }
      }),
    ),
  );
  const order = metadata.entries.map((e) => displayKey(e.key));
  const keys = new Set(damaged.flatMap((d) => (d.key ? [d.key] : [])));
  return {
    entries: metadata.entries.length,
    files: Object.keys(metadata.files).length,
    bytes,
    damaged,
    damagedKeys: order.filter((k) => keys.has(k)),
  };
}

/** Throws `corrupt` for a report with damage, naming the damaged keys (the first problem as detail). */
export function throwIfDamaged(report: VerifyReport, where: string): void {
  if (report.damaged.length === 0) return;
  const keys = report.damagedKeys.length > 0 ? `damaged entries: ${report.damagedKeys.join(", ")}` : "damaged files";
  throw new CheckpointError("corrupt", `${where} is damaged (${keys}); first problem: ${report.damaged[0]!.problem}`, {
    context: { path: where },
  });
}
