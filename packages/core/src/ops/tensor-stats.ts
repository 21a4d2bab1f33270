import { CheckpointError } from "../errors.js";
import type { TensorEntry } from "../format/metadata.js";
import { type DType, itemSize, numel } from "../state/dtypes.js";
import { elementValues } from "../state/element-values.js";
import { type KeyPath, displayKey } from "../state/state-dict.js";
import type { CheckpointReader } from "./checkpoint-reader.js";
import { selectEntries } from "./select-entries.js";
import { tensorPieces } from "./source-tensor.js";

/** Equal-width bins over `[min, max]` of the finite elements, as numpy's `histogram(x, bins)` lays them out. */
export interface Histogram {
  /** The first and last bin edge: the finite minimum and maximum (±0.5 around a single value). */
  readonly min: number;
  readonly max: number;
  /** Elements per bin; bin `i` holds `edge(i) <= x < edge(i + 1)`, the last bin also `x == max`. */
  readonly counts: readonly number[];
}

/** What `tensorStats` finds in a tensor. Minimum, maximum, mean and std are over its finite elements (null when none is). */
export interface TensorStats {
  readonly key: KeyPath;
  readonly name: string;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly elements: number;
  readonly nan: number;
  readonly posInf: number;
  readonly negInf: number;
  readonly min: number | null;
  readonly max: number | null;
  readonly mean: number | null;
  /** Population standard deviation (numpy's default, `ddof=0`). */
  readonly std: number | null;
  readonly histogram: Histogram | null;
}

export interface StatsOptions {
  readonly signal?: AbortSignal;
  /** Histogram bins (default 16); 0 skips the histogram and its second pass over the data. */
  readonly bins?: number;
  /** Bytes of a tensor read and summarised at once (default 8 MiB). */
  readonly readBytes?: number;
}

const DEFAULT_BINS = 16;
const MAX_BINS = 1024;

/** The edges numpy's `linspace(first, last, bins + 1)` gives: `first + i * step`, the last exactly `last`. */
export function binEdge(histogram: { min: number; max: number; bins: number }, i: number): number {
  if (i >= histogram.bins) return histogram.max;
  const width = histogram.max - histogram.min;
  // Beyond ±1.8e308 the width overflows; each end divided first still gives the step.
  const step = Number.isFinite(width)
    ? width / histogram.bins
    : histogram.max / histogram.bins - histogram.min / histogram.bins;
  return i * step + histogram.min;
}

/** Running count, min, max, mean and sum of squared deviations of finite values (pieces merged as Chan et al.). */
class Moments {
  nan = 0;
  posInf = 0;
  negInf = 0;
  finite = 0;
  min = Infinity;
  max = -Infinity;
  mean = 0;
  m2 = 0;

  add(values: Float64Array, count: number): void {
    let n = 0;
    let sum = 0;
    for (let i = 0; i < count; i++) {
      const x = values[i]!;
      if (x - x !== 0) {
        if (x !== x) this.nan++;
        else if (x > 0) this.posInf++;
        else this.negInf++;
        continue;
      }
      n++;
      sum += x;
      if (x < this.min) this.min = x;
      if (x > this.max) this.max = x;
    }
    if (n === 0) return;
    const mean = sum / n;
    let m2 = 0;
    for (let i = 0; i < count; i++) {
      const x = values[i]!;
      if (x - x === 0) m2 += (x - mean) * (x - mean);
    }
    const total = this.finite + n;
    const delta = mean - this.mean;
    this.mean += (delta * n) / total;
    this.m2 += m2 + (delta * delta * this.finite * n) / total;
    this.finite = total;
  }
}

/** Counts finite values into `bins` equal bins over [first, last], placing each exactly as numpy's `histogram` does. */
class Bins {
  readonly counts: number[];
  readonly layout: { min: number; max: number; bins: number };
  readonly #norm: number;

  constructor(min: number, max: number, bins: number) {
    const [first, last] = min === max ? [min - 0.5, max + 0.5] : [min, max];
    this.layout = { min: first, max: last, bins };
    this.counts = new Array<number>(bins).fill(0);
    this.#norm = bins / (last - first);
  }

  add(values: Float64Array, count: number): void {
    const { bins, min } = this.layout;
    for (let i = 0; i < count; i++) {
      const x = values[i]!;
      if (x - x !== 0) continue;
      let bin = Math.min(bins - 1, Math.floor((x - min) * this.#norm) || 0);
      // The fast index can be off at an edge (rounding): the edges decide.
      while (bin > 0 && x < binEdge(this.layout, bin)) bin--;
      while (bin < bins - 1 && x >= binEdge(this.layout, bin + 1)) bin++;
      this.counts[bin]!++;
    }
  }
}

function binsOf(options: StatsOptions): number {
  const bins = options.bins ?? DEFAULT_BINS;
  if (!Number.isSafeInteger(bins) || bins < 0 || bins > MAX_BINS)
    throw new CheckpointError("invalid_argument", `bins must be an integer from 0 to ${MAX_BINS}, got ${bins}`);
  return bins;
}

/**
 * Statistics of one stored tensor, read in `readBytes` ranges through `reader` (every block
 * verified against its CRC32C, whatever chunks and ranks it was saved in): count of NaN and
 * ±Infinity; minimum, maximum, mean and standard deviation of the finite elements; a histogram
 * of them (a second pass over the bytes, unless the tensor fits one range). Elements are read as
 * float64 (float16 and bfloat16 decoded, int64 rounded beyond 2^53). Memory: two ranges and
 * their values. Called by `cairn stats` and `cairn ui`; throws `corrupt` on damage, `cancelled`.
 */
export async function tensorStats(
  reader: CheckpointReader,
  entry: TensorEntry,
  options: StatsOptions = {},
): Promise<TensorStats> {
  const bins = binsOf(options);
  const source = reader.tensor(entry);
  const size = itemSize(entry.dtype);
  const pieceBytes = Math.max(size, Math.floor((options.readBytes ?? 8 << 20) / size) * size);
  const moments = new Moments();
  let buffer: Float64Array | undefined;
  let only: Uint8Array | undefined;
  for await (const bytes of tensorPieces(source, pieceBytes, options.signal)) {
    const { values, count } = elementValues(entry.dtype, bytes, buffer);
    buffer = values;
    moments.add(values, count);
    if (bytes.byteLength === source.byteLength) only = bytes;
  }
  let histogram: Histogram | null = null;
  if (bins > 0 && moments.finite > 0) {
    const counts = new Bins(moments.min, moments.max, bins);
    const pieces = only ? [only] : tensorPieces(source, pieceBytes, options.signal);
    for await (const bytes of pieces) {
      const { values, count } = elementValues(entry.dtype, bytes, buffer);
      buffer = values;
      counts.add(values, count);
    }
    histogram = { min: counts.layout.min, max: counts.layout.max, counts: counts.counts };
  }
  const any = moments.finite > 0;
  return {
    key: entry.key,
    name: displayKey(entry.key),
    dtype: entry.dtype,
    shape: entry.shape,
    elements: numel(entry.shape),
    nan: moments.nan,
    posInf: moments.posInf,
    negInf: moments.negInf,
    min: any ? moments.min : null,
    max: any ? moments.max : null,
    mean: any ? moments.mean : null,
    std: any ? Math.sqrt(moments.m2 / moments.finite) : null,
    histogram,
  };
}

/**
 * `tensorStats` of the tensors `names` select (see `selectEntries`; none: every tensor), one
 * after another in checkpoint order. Bytes blobs and inline values have no statistics: a name
 * that selects only those is `invalid_argument`.
 */
export async function checkpointStats(
  reader: CheckpointReader,
  names: readonly (string | KeyPath)[] = [],
  options: StatsOptions = {},
): Promise<TensorStats[]> {
  binsOf(options);
  const entries = selectEntries(reader.metadata, names);
  const tensors = entries.filter((e): e is TensorEntry => e.kind === "tensor");
  if (names.length > 0 && tensors.length === 0) {
    throw new CheckpointError(
      "invalid_argument",
      `${entries.map((e) => displayKey(e.key)).join(", ")} ${entries.length === 1 ? "is" : "are"} not a tensor (bytes and values have no statistics)`,
    );
  }
  const stats: TensorStats[] = [];
  for (const entry of tensors) stats.push(await tensorStats(reader, entry, options));
  return stats;
}
