import { CheckpointError } from "../errors.js";
import { crc32c } from "../format/crc32c.js";
import { parseSafetensorsHeader } from "../format/safetensors.js";
import { type DType, DTYPE_NAMES, byteSize, safetensorsDType } from "../state/dtypes.js";
import { withRetry } from "../storage/retry.js";
import type { StorageAdapter } from "../storage/storage-adapter.js";

/** The safetensors spec caps the JSON header at 100 MB, so a reader never allocates more for it. */
const MAX_HEADER_BYTES = 100_000_000;

const FROM_SAFETENSORS: ReadonlyMap<string, DType> = new Map(DTYPE_NAMES.map((d) => [safetensorsDType(d), d]));

/** A safetensors file's tensors, checked against the spec, and where its data starts. */
export interface SafetensorsFile {
  /** The file's size, which its tensors fill exactly. */
  readonly size: number;
  readonly dataStart: number;
  /** CRC32C of the header as read (its first `dataStart` bytes), so a later read can tell the file has not changed. */
  readonly headerCrc32c: number;
  readonly metadata: Readonly<Record<string, string>>;
  /** In the header's order; `begin` and `end` relative to `dataStart`. */
  readonly tensors: readonly {
    readonly name: string;
    readonly dtype: DType;
    readonly shape: readonly number[];
    readonly begin: number;
    readonly end: number;
  }[];
}

/** `corrupt`: `where` is not a valid safetensors file, and why. */
export function notSafetensors(where: string, problem: string): CheckpointError {
  return new CheckpointError("corrupt", `${where} is not a valid safetensors file: ${problem}`, {
    context: { path: where },
  });
}

/**
 * Reads a safetensors file's header with two range reads (never the data), parsed by core's
 * parser and then checked against the spec: supported dtypes, sizes that match the shapes,
 * tensors tiling the data section, the file's size. Throws `not_found`, `corrupt` (not a valid
 * safetensors file) or `invalid_argument` (a dtype Cairn does not store).
 */
export async function readSafetensorsHeader(
  storage: StorageAdapter,
  name: string,
  where: string,
  signal?: AbortSignal,
): Promise<SafetensorsFile> {
  const stat = await withRetry(() => storage.stat(name), { signal });
  if (!stat) throw new CheckpointError("not_found", `${where} does not exist`, { context: { path: where } });
  const prefix = await withRetry(() => storage.read(name, { offset: 0, length: 8 }, { signal }), { signal });
  if (prefix.byteLength < 8) throw notSafetensors(where, "it is shorter than the 8-byte header length");
  const length = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (length > BigInt(MAX_HEADER_BYTES))
    throw notSafetensors(where, `its header length ${length} is over the spec's 100 MB limit`);
  const bytes = await withRetry(() => storage.read(name, { offset: 0, length: 8 + Number(length) }, { signal }), {
    signal,
  });
  let header: ReturnType<typeof parseSafetensorsHeader>;
  try {
    header = parseSafetensorsHeader(bytes, where);
  } catch (error) {
    if (!(error instanceof CheckpointError) || error.code !== "corrupt") throw error;
    throw new CheckpointError(
      "corrupt",
      `${where} is not a valid safetensors file: ${error.message.replace(`${where}: `, "")}`,
      { cause: error, context: { path: where } },
    );
  }
  const tensors: SafetensorsFile["tensors"][number][] = [];
  for (const [name, { dtype: stored, shape, dataOffsets }] of header.tensors) {
    const dtype = FROM_SAFETENSORS.get(stored);
    if (!dtype) {
      throw new CheckpointError(
        "invalid_argument",
        `${where}: tensor ${name} has dtype ${stored}, which Cairn does not store; supported: ${[...FROM_SAFETENSORS.keys()].join(", ")}`,
        {
          context: { path: where, key: name },
        },
      );
    }
    const [begin, end] = dataOffsets;
    if (end - begin !== byteSize(dtype, shape))
      throw notSafetensors(
        where,
        `tensor ${name} has ${end - begin} bytes, its dtype and shape need ${byteSize(dtype, shape)}`,
      );
    tensors.push({ name, dtype, shape, begin, end });
  }
  // The spec forbids holes and overlaps: sorted by offset, the tensors tile the data section.
  const sorted = [...tensors].sort((a, b) => a.begin - b.begin || a.end - b.end);
  let at = 0;
  for (const t of sorted) {
    if (t.begin !== at)
      throw notSafetensors(
        where,
        `tensor ${t.name} starts at ${t.begin}, where ${at} was expected (holes and overlaps are not allowed)`,
      );
    at = t.end;
  }
  const dataStart = 8 + header.headerLength;
  if (stat.size !== dataStart + at)
    throw notSafetensors(where, `the header describes ${dataStart + at} bytes but the file holds ${stat.size}`);
  return {
    size: stat.size,
    dataStart,
    headerCrc32c: crc32c(bytes.subarray(0, dataStart)),
    metadata: header.metadata,
    tensors,
  };
}
