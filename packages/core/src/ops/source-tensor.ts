import { CheckpointError, throwIfAborted } from "../errors.js";
import type { ValueEntry } from "../format/metadata.js";
import type { DType } from "../state/dtypes.js";
import { type KeyPath, displayKey } from "../state/state-dict.js";
import { prefetched } from "../storage/prefetch.js";

/**
 * A tensor (or bytes blob) as a source of its global row-major bytes, read in ranges: what
 * `CheckpointReader` gives for a stored entry, and what `writeCheckpoint` takes to store one.
 */
export interface SourceTensor {
  readonly kind: "tensor" | "bytes";
  readonly key: KeyPath;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly byteLength: number;
  /** Bytes `[offset, offset + length)` of the tensor in global row-major order; both element-aligned. */
  read(offset: number, length: number): Promise<Uint8Array>;
}

/** An entry to write: a tensor read from somewhere in ranges, or an inline value. */
export type EntrySource = SourceTensor | ValueEntry;

/** A tensor's bytes in order, `pieceBytes` at a time with two reads ahead, each piece checked to be as long as asked (`corrupt` if not). */
export function tensorPieces(
  tensor: SourceTensor,
  pieceBytes: number,
  signal?: AbortSignal,
): AsyncGenerator<Uint8Array> {
  const pieces: { at: number; length: number }[] = [];
  for (let at = 0; at < tensor.byteLength; at += pieceBytes)
    pieces.push({ at, length: Math.min(pieceBytes, tensor.byteLength - at) });
  return prefetched(pieces, 2, async ({ at, length }) => {
    throwIfAborted(signal, "the read");
    const data = await tensor.read(at, length);
    if (data.byteLength !== length) {
      const key = displayKey(tensor.key);
      throw new CheckpointError(
        "corrupt",
        `${key}: got ${data.byteLength} bytes at byte ${at} of the tensor where ${length} were expected; its source is truncated`,
        { context: { key } },
      );
    }
    return data;
  });
}
