import { crc32c } from "../format/crc32c.js";
import { crc32cCombine, crc32cCombiner } from "../format/crc32c-combine.js";
import type { KnownCrc32c } from "../storage/storage-adapter.js";

/** Where a data file's items lie: absolute offsets, ascending and back to back; their checksum block sizes. */
export interface ItemSpans {
  readonly offsets: readonly number[];
  readonly items: readonly { readonly byteLength: number }[];
  readonly blockSizes: readonly number[];
}

/** A group of consecutive items (indices, ascending) and the promise of their block sums, in its order. */
interface GroupSums {
  readonly group: readonly number[];
  readonly sums: Promise<readonly (readonly number[])[]>;
}

/**
 * The CRC32C of any range of a data file being written (`WriteOptions.crc32c`), from the block
 * CRC32Cs its writer computes anyway: whole blocks are combined (`crc32cShift`), only the bytes
 * no whole block covers (the header, a block cut by the range's ends) are read. Each group of
 * items registers the promise of its blocks' sums as it goes out (`add`); a range waits for the
 * groups it touches. A sum computed from other bytes than the ones sent (memory changed in
 * between) gives a checksum the storage refuses, never a silently wrong one.
 */
export class DataFileCrc32c implements KnownCrc32c {
  readonly #spans: ItemSpans;
  /** The latest write attempt's groups, in file order. */
  #groups: GroupSums[] = [];
  /** Table combiners by block size, made once per file. */
  readonly #combiners = new Map<number, (crcA: number, crcB: number) => number>();

  constructor(spans: ItemSpans) {
    this.#spans = spans;
  }

  /** A new attempt at the write: no group's sums are known yet. */
  reset(): void {
    this.#groups = [];
  }

  /** Groups come in file order, each right after the one before. */
  add(group: readonly number[], sums: Promise<readonly (readonly number[])[]>): void {
    // Sums are looked up by an item's distance from its group's first: only runs of consecutive items.
    if (group.length > 0 && group[group.length - 1]! - group[0]! === group.length - 1)
      this.#groups.push({ group, sums });
  }

  async of(bytes: Uint8Array, offset: number): Promise<number> {
    const { offsets, items } = this.#spans;
    const end = offset + bytes.byteLength;
    /** The touched groups' items and sums, in file order. */
    const touched: { readonly first: number; readonly last: number; readonly sums: readonly (readonly number[])[] }[] =
      [];
    for (let g = this.#groupOf(offset); g < this.#groups.length; g++) {
      const { group, sums } = this.#groups[g]!;
      if (offsets[group[0]!]! >= end) break;
      touched.push({ first: group[0]!, last: group[group.length - 1]!, sums: await sums });
    }
    let t = 0;
    let crc = 0;
    let at = offset;
    /** Continues the CRC over the range's bytes from `at` to `to`. */
    const direct = (to: number): void => {
      if (to <= at) return;
      crc = crc32c(bytes.subarray(at - offset, to - offset), crc);
      at = to;
    };
    for (let i = this.#firstEndingAfter(offset); i < items.length && offsets[i]! < end; i++) {
      const start = offsets[i]!;
      const length = items[i]!.byteLength;
      const itemEnd = Math.min(start + length, end);
      while (t < touched.length && touched[t]!.last < i) t++;
      const place = touched[t];
      const sums = place && place.first <= i ? place.sums[i - place.first] : undefined;
      if (!sums) continue; // Not registered: read from the bytes below, like a gap.
      direct(start);
      const blockSize = this.#spans.blockSizes[i]!;
      // The first whole block from `at`; a block cut by the range's start is read.
      let block = Math.ceil((at - start) / blockSize);
      direct(Math.min(start + block * blockSize, itemEnd));
      // Whole blocks by table; an item's last, shorter block, once, bit by bit.
      const whole = Math.min(Math.floor((itemEnd - start) / blockSize), sums.length);
      if (block < whole) {
        let append = this.#combiners.get(blockSize);
        if (!append) this.#combiners.set(blockSize, (append = crc32cCombiner(blockSize)));
        for (; block < whole; block++) crc = append(crc, sums[block]!);
        at = start + whole * blockSize;
      }
      const tail = start + length - at;
      if (block === whole && tail > 0 && tail < blockSize && at + tail <= itemEnd && sums[block] !== undefined) {
        crc = crc32cCombine(crc, sums[block]!, tail);
        at += tail;
      }
      direct(itemEnd);
    }
    direct(end);
    return crc;
  }

  /** The first item that ends after `offset` (items lie in ascending order, back to back). */
  #firstEndingAfter(offset: number): number {
    const { offsets, items } = this.#spans;
    let low = 0;
    let high = offsets.length;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (offsets[mid]! + items[mid]!.byteLength <= offset) low = mid + 1;
      else high = mid;
    }
    return low;
  }

  /** The last group that starts at or before `offset` (0 if none). */
  #groupOf(offset: number): number {
    const offsets = this.#spans.offsets;
    let low = 0;
    let high = this.#groups.length - 1;
    while (low < high) {
      const mid = (low + high + 1) >>> 1;
      if (offsets[this.#groups[mid]!.group[0]!]! <= offset) low = mid;
      else high = mid - 1;
    }
    return Math.max(low, 0);
  }
}
