import type { BytesEntry, ChunkMetadata, EntryMetadata, TensorEntry } from "../format/metadata.js";
import { valueOf } from "../format/metadata.js";
import { dataFilePath } from "../format/naming.js";
import { type DType, itemSize, numel } from "../state/dtypes.js";
import { elementValues } from "../state/element-values.js";
import { type KeyPath, displayKey, pathId } from "../state/state-dict.js";
import type { CheckpointReader } from "./checkpoint-reader.js";
import { type SourceTensor, tensorPieces } from "./source-tensor.js";

/**
 * How an entry's two sides compare. `identical` entries were decided without reading a byte
 * when `by` is `reference` (both use the very same stored bytes: an incremental step's
 * reference to its base) or `checksum` (the same chunks with the same content hash, or for
 * checkpoints older than format 2.2 the same CRC32C of every block);
 * `read` means their bytes were compared.
 */
export interface EntryDiff {
  readonly key: KeyPath;
  readonly name: string;
  readonly status: "identical" | "changed" | "added" | "removed";
  readonly by?: "reference" | "checksum" | "read";
  readonly kind: EntryMetadata["kind"];
  readonly dtype?: DType;
  readonly shape?: readonly number[];
  /** Set when kind, dtype or shape differ: side A's (its elements were not compared). */
  readonly before?: {
    readonly kind: EntryMetadata["kind"];
    readonly dtype?: DType;
    readonly shape?: readonly number[];
  };
  /** Tensors and bytes compared by reading: elements (bytes) in all, and those whose bits differ. */
  readonly elements?: number;
  readonly changedElements?: number;
  /** The largest |b − a| over changed elements finite on both sides (null when there is none). */
  readonly maxAbsChange?: number | null;
  /** The largest |b − a| / |a| over changed elements finite on both sides with a ≠ 0 (null when there is none). */
  readonly maxRelChange?: number | null;
  /** Changed elements where either side is NaN or ±Infinity. */
  readonly nonFiniteChanges?: number;
  /** Inline values: both sides (NaN, ±Infinity and -0 as their names). */
  readonly values?: { readonly a: unknown; readonly b: unknown };
}

export interface CheckpointDiff {
  /** Every key of either side, in B's order, then the keys only A has. */
  readonly entries: readonly EntryDiff[];
  readonly identical: number;
  readonly changed: number;
  readonly added: number;
  readonly removed: number;
}

export interface DiffOptions {
  readonly signal?: AbortSignal;
  /** Bytes of a tensor read from each side at once (default 8 MiB). */
  readonly readBytes?: number;
}

type DataEntry = TensorEntry | BytesEntry;

function dtypeOf(entry: DataEntry): DType {
  return entry.kind === "tensor" ? entry.dtype : "uint8";
}

function shapeOf(entry: DataEntry): readonly number[] {
  return entry.kind === "tensor" ? entry.shape : [entry.byteLength];
}

function describe(entry: EntryMetadata): Pick<EntryDiff, "kind" | "dtype" | "shape"> {
  return entry.kind === "value"
    ? { kind: "value" }
    : { kind: entry.kind, dtype: dtypeOf(entry), shape: shapeOf(entry) };
}

function sortedChunks(entry: DataEntry): ChunkMetadata[] {
  return [...entry.chunks].sort((x, y) => {
    for (let d = 0; d < x.offsets.length; d++) if (x.offsets[d] !== y.offsets[d]) return x.offsets[d]! - y.offsets[d]!;
    return 0;
  });
}

function sameNumbers(x: readonly number[], y: readonly number[]): boolean {
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

/**
 * Whether two entries of the same dtype and shape hold the same bytes by their metadata alone:
 * `reference` when every chunk is the very same stored bytes, `checksum` when every chunk has the
 * same box and content hash (or block size and CRC32C of each block); undefined when that cannot
 * be told without reading.
 */
function identicalWithoutReading(a: CheckpointReader, x: DataEntry, b: CheckpointReader, y: DataEntry) {
  if (x.chunks.length !== y.chunks.length) return undefined;
  const xs = sortedChunks(x);
  const ys = sortedChunks(y);
  const sameStorage = a.storage.protocol === b.storage.protocol && a.storage.root === b.storage.root;
  let sameBytes = sameStorage;
  for (let i = 0; i < xs.length; i++) {
    const p = xs[i]!;
    const q = ys[i]!;
    if (!sameNumbers(p.offsets, q.offsets) || !sameNumbers(p.sizes, q.sizes)) return undefined;
    // The 128-bit content hash where both sides have it (format 2.2), else the CRC32C of every block.
    if (p.hash !== undefined && q.hash !== undefined) {
      if (p.hash !== q.hash) return undefined;
    } else if (p.blockSize !== q.blockSize || !sameNumbers(p.crc32c, q.crc32c)) return undefined;
    sameBytes &&=
      p.byteOffset === q.byteOffset &&
      dataFilePath(a.dir, p.file, a.metadata.files[p.file]) === dataFilePath(b.dir, q.file, b.metadata.files[q.file]);
  }
  return sameBytes ? "reference" : "checksum";
}

/** Elements' bits as unsigned integers (8-byte elements as two 32-bit halves), for an exact comparison. */
function bitsOf(bytes: Uint8Array, size: number): Uint8Array | Uint16Array | Uint32Array {
  const own = bytes.byteOffset % 4 === 0 ? bytes : bytes.slice();
  if (size === 1) return own;
  if (size === 2) return new Uint16Array(own.buffer, own.byteOffset, own.byteLength / 2);
  return new Uint32Array(own.buffer, own.byteOffset, own.byteLength / 4);
}

/** Reads both sides' bytes in step and compares them element by element. */
async function compareRead(
  a: SourceTensor,
  b: SourceTensor,
  dtype: DType,
  options: DiffOptions,
): Promise<
  Required<Pick<EntryDiff, "elements" | "changedElements" | "maxAbsChange" | "maxRelChange" | "nonFiniteChanges">>
> {
  const size = itemSize(dtype);
  const words = size === 8 ? 2 : 1;
  const pieceBytes = Math.max(size, Math.floor((options.readBytes ?? 8 << 20) / size) * size);
  const numeric = a.kind === "tensor";
  let changed = 0;
  let nonFinite = 0;
  let maxAbs = -1;
  let maxRel = -1;
  let va: Float64Array | undefined;
  let vb: Float64Array | undefined;
  const right = tensorPieces(b, pieceBytes, options.signal);
  try {
    for await (const left of tensorPieces(a, pieceBytes, options.signal)) {
      const next = await right.next();
      const other = next.value as Uint8Array;
      const x = bitsOf(left, size);
      const y = bitsOf(other, size);
      let decoded = false;
      for (let i = 0; i < x.length; i += words) {
        if (x[i] === y[i] && (words === 1 || x[i + 1] === y[i + 1])) continue;
        changed++;
        if (!numeric) continue;
        if (!decoded) {
          va = elementValues(dtype, left, va).values;
          vb = elementValues(dtype, other, vb).values;
          decoded = true;
        }
        const p = va![i / words]!;
        const q = vb![i / words]!;
        if (p - p !== 0 || q - q !== 0) {
          nonFinite++;
          continue;
        }
        const abs = Math.abs(q - p);
        if (abs > maxAbs) maxAbs = abs;
        if (p !== 0 && abs / Math.abs(p) > maxRel) maxRel = abs / Math.abs(p);
      }
    }
  } finally {
    await right.return(undefined);
  }
  return {
    elements: numel(a.shape),
    changedElements: changed,
    maxAbsChange: numeric && maxAbs >= 0 ? maxAbs : null,
    maxRelChange: numeric && maxRel >= 0 ? maxRel : null,
    nonFiniteChanges: nonFinite,
  };
}

function shownValue(entry: EntryMetadata & { kind: "value" }): unknown {
  return entry.special ?? valueOf(entry);
}

async function diffEntry(
  a: CheckpointReader,
  x: EntryMetadata,
  b: CheckpointReader,
  y: EntryMetadata,
  options: DiffOptions,
): Promise<EntryDiff> {
  const common = { key: y.key, name: displayKey(y.key), ...describe(y) };
  if (x.kind === "value" || y.kind === "value") {
    const same =
      x.kind === "value" && y.kind === "value" && JSON.stringify(shownValue(x)) === JSON.stringify(shownValue(y));
    const values = {
      a: x.kind === "value" ? shownValue(x) : undefined,
      b: y.kind === "value" ? shownValue(y) : undefined,
    };
    if (x.kind !== y.kind) return { ...common, status: "changed", before: describe(x), values };
    return { ...common, status: same ? "identical" : "changed", values };
  }
  const dtype = dtypeOf(y);
  if (x.kind !== y.kind || dtypeOf(x) !== dtype || !sameNumbers(shapeOf(x), shapeOf(y)))
    return { ...common, status: "changed", before: describe(x) };
  const by = identicalWithoutReading(a, x, b, y);
  if (by) return { ...common, status: "identical", by };
  const compared = await compareRead(a.tensor(x), b.tensor(y), dtype, options);
  return { ...common, status: compared.changedElements === 0 ? "identical" : "changed", by: "read", ...compared };
}

/**
 * What changed from checkpoint A to checkpoint B, entry by entry: added and removed keys;
 * kind, dtype or shape changes; for tensors and bytes of the same dtype and shape, identical
 * ones told by metadata alone (see `EntryDiff.by`), the others read from both sides in
 * `readBytes` ranges through their readers (every block verified) and compared bit for bit,
 * with the count of changed elements and the largest absolute and relative change. Called by
 * `cairn diff` and `cairn ui`; throws `corrupt` on damage, `cancelled`, storage errors.
 */
export async function diffCheckpoints(
  a: CheckpointReader,
  b: CheckpointReader,
  options: DiffOptions = {},
): Promise<CheckpointDiff> {
  const before = new Map(a.metadata.entries.map((e) => [pathId(e.key), e]));
  const entries: EntryDiff[] = [];
  for (const y of b.metadata.entries) {
    const x = before.get(pathId(y.key));
    before.delete(pathId(y.key));
    entries.push(
      x === undefined
        ? { key: y.key, name: displayKey(y.key), status: "added", ...describe(y) }
        : await diffEntry(a, x, b, y, options),
    );
  }
  for (const x of before.values())
    entries.push({ key: x.key, name: displayKey(x.key), status: "removed", ...describe(x) });
  const count = (status: EntryDiff["status"]): number => entries.filter((e) => e.status === status).length;
  return {
    entries,
    identical: count("identical"),
    changed: count("changed"),
    added: count("added"),
    removed: count("removed"),
  };
}
