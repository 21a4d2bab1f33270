import { CheckpointError, cancelledError, isCheckpointError } from "../errors.js";
import { type CheckpointMetadata, FORMAT_MAJOR, METADATA_FILE, formatVersionOf } from "../format/metadata.js";
import { encodeMetadata, parseMetadata } from "../format/metadata-json.js";
import {
  type CheckpointOptions,
  type OpenedCheckpoint,
  checkpointOptionsOf,
  openCheckpoint,
} from "../storage/checkpoint-location.js";
import { withRetry } from "../storage/retry.js";
import { joinPath } from "../storage/storage-adapter.js";
import { layoutMetadata, readSafetensorsLayout } from "./safetensors-layout.js";

/**
 * Reads a checkpoint's `metadata.json`. A location with data but no metadata is
 * `not_committed` (a save that never finished); one with nothing is `not_found`.
 */
export async function readMetadata(checkpointIdOrOptions: string | CheckpointOptions): Promise<CheckpointMetadata> {
  const options = checkpointOptionsOf(checkpointIdOrOptions, "readMetadata");
  const location = await openCheckpoint(options);
  try {
    return (await readCheckpointMetadata(location, options)).metadata;
  } catch (error) {
    throw cancelledOr(error, options.signal, "reading the metadata");
  } finally {
    await location.release();
  }
}

/** Whatever layer noticed an abort first (a read, a retry's wait) and however it put it, the caller learns that its read was cancelled. */
export function cancelledOr(error: unknown, signal: AbortSignal | undefined, what: string): unknown {
  return signal?.aborted ? cancelledError(signal, what, null) : error;
}

/**
 * The metadata of what `location` holds, and the directory its data files are in. An `hf+`
 * location's is its safetensors layout's (`layoutMetadata`), whose files carry no block checksums.
 * `lazyChecksums` (a load, which needs the sums of the blocks it checks only): read metadata
 * decodes chunks' checksums when asked (`ParseOptions.lazyChecksums`).
 */
export async function readCheckpointMetadata(
  location: OpenedCheckpoint,
  options: CheckpointOptions & { readonly metadata?: Uint8Array | CheckpointMetadata },
  lazyChecksums = false,
): Promise<{ metadata: CheckpointMetadata; bytes: number; dir: string; checksums: boolean }> {
  if (options.metadata !== undefined) {
    const where = `${location.where.replace(/\/$/, "")}/${METADATA_FILE} (given as option metadata)`;
    return { metadata: givenMetadata(options.metadata, where), bytes: 0, dir: location.dir, checksums: true };
  }
  if (location.safetensors) {
    const layout = await readSafetensorsLayout(location.storage, location.dir, location.where, options.signal);
    return { metadata: layoutMetadata(layout), bytes: layout.bytesRead, dir: layout.dir, checksums: false };
  }
  const path = joinPath(location.dir, METADATA_FILE);
  let bytes: Uint8Array;
  try {
    bytes = await withRetry(() => location.storage.read(path, undefined, { signal: options.signal }), {
      policy: options.retry,
      signal: options.signal,
    });
  } catch (error) {
    if (!isCheckpointError(error, "not_found")) throw error;
    const prefix = location.dir ? `${location.dir}/` : "";
    for await (const _ of location.storage.list(prefix)) {
      throw new CheckpointError(
        "not_committed",
        `${location.where} holds files but no ${METADATA_FILE}: a save there never committed (it failed, or is still running); it cannot be loaded`,
        { context: { path: location.where } },
      );
    }
    throw new CheckpointError("not_found", `no checkpoint at ${location.where}`, {
      cause: error,
      context: { path: location.where },
    });
  }
  return {
    metadata: parseMetadata(bytes, `${location.where.replace(/\/$/, "")}/${METADATA_FILE}`, { lazyChecksums }),
    bytes: bytes.byteLength,
    dir: location.dir,
    checksums: true,
  };
}

/**
 * Metadata a caller handed over, checked as read metadata is: an object goes through the bytes
 * this version would store it as (one of an older major version, as `readMetadata` gives it, too).
 */
function givenMetadata(given: Uint8Array | CheckpointMetadata, where: string): CheckpointMetadata {
  if (given instanceof Uint8Array) return parseMetadata(given, where);
  const major = typeof given.version === "string" ? /^(\d+)\.\d+$/.exec(given.version)?.[1] : undefined;
  if (major === undefined) {
    throw new CheckpointError("corrupt", `${where}: version ${JSON.stringify(given.version)} is not "major.minor"`, {
      context: { path: where },
    });
  }
  if (Number(major) > FORMAT_MAJOR) {
    throw new CheckpointError(
      "unsupported_version",
      `${where}: format version ${given.version} is newer than this Cairn reads (${FORMAT_MAJOR}.x); upgrade @cairn/core`,
      { context: { path: where } },
    );
  }
  let bytes: Uint8Array;
  try {
    const current =
      Number(major) === FORMAT_MAJOR ? given : { ...given, version: formatVersionOf(given.files, given.entries) };
    bytes = encodeMetadata(current);
  } catch (cause) {
    if (isCheckpointError(cause)) throw cause;
    throw new CheckpointError("corrupt", `${where}: not a checkpoint's metadata (${(cause as Error).message})`, {
      cause,
      context: { path: where },
    });
  }
  return parseMetadata(bytes, where);
}
