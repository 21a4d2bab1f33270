import { type TensorStats, CheckpointReader, checkpointStats, selectEntries } from "@cairn/core/ops";
import { type CommandSpec, integerOption } from "../command.js";
import { formatMetric } from "../figures.js";
import { table, withCheckpoint } from "./open.js";

const SPARKS = "▁▂▃▄▅▆▇█";

/** A histogram as one line of block characters, each bin's height by its count. */
export function sparkline(counts: readonly number[]): string {
  const top = counts.reduce((a, b) => Math.max(a, b), 0);
  return counts.map((n) => (n === 0 ? " " : SPARKS[Math.min(7, Math.floor((n / top) * 7.999))])).join("");
}

function figure(value: number | null): string {
  return value === null ? "-" : formatMetric(value);
}

function row(s: TensorStats): string[] {
  const inf = s.posInf + s.negInf;
  return [
    `${s.nan > 0 || inf > 0 ? "! " : ""}${s.name}`,
    s.dtype,
    JSON.stringify(s.shape),
    figure(s.min),
    figure(s.max),
    figure(s.mean),
    figure(s.std),
    String(s.nan),
    String(inf),
    s.histogram ? sparkline(s.histogram.counts) : "",
  ];
}

export const statsCommand: CommandSpec = {
  name: "stats",
  args: "<checkpoint> [<key>...]",
  summary: "statistics of a checkpoint's tensors: min, max, mean, std, NaN and Inf counts, a histogram",
  help: [
    "Reads each tensor in 8 MiB ranges (every block checked against its CRC32C), whatever chunks and ranks it was saved in, as float64: float16 and bfloat16 decoded, int64 rounded beyond 2^53. Minimum, maximum, mean and standard deviation (population, numpy's ddof=0) are over the finite elements; NaN and Inf are counted apart, and their tensors marked with ! in the table.",
    "A key is a dotted name (model.dense.kernel) or a whole-segment prefix of names (model.dense); without keys, every tensor. The histogram has --bins equal bins over [min, max] of the finite elements, as numpy.histogram lays them out (0: none, and one pass over the data instead of two).",
    "With --json, prints { checkpoint, tensors: [{ key, name, dtype, shape, elements, nan, posInf, negInf, min, max, mean, std, histogram: { min, max, counts } }] } (null where a tensor has no finite element). cairn ui shows the same figures.",
  ],
  options: {
    bins: { type: "string", value: "<n>", help: "histogram bins (default 16, 0 for none)" },
  },
  minArgs: 1,
  maxArgs: Infinity,
  async run(context, [url, ...keys], options) {
    const bins = integerOption(options, "bins", true) ?? 16;
    return withCheckpoint(context, url!, async (location, metadata) => {
      const total = selectEntries(metadata, keys).reduce(
        (n, e) => n + (e.kind === "tensor" ? e.chunks.reduce((m, c) => m + c.byteLength, 0) : 0),
        0,
      );
      const progress = context.progress("reading", bins > 0 ? 2 * total : total);
      const reader = new CheckpointReader(location.storage, location.dir, metadata, {
        signal: context.signal,
        onRead: (n) => progress.advance(n),
      });
      let stats: TensorStats[];
      try {
        stats = await checkpointStats(reader, keys, { signal: context.signal, bins });
      } finally {
        await reader.close();
      }
      progress.finish();
      const header = ["KEY", "DTYPE", "SHAPE", "MIN", "MAX", "MEAN", "STD", "NAN", "INF", "HISTOGRAM"];
      const text =
        stats.length === 0
          ? `${location.where} holds no tensors`
          : `${location.where}\n${table([header, ...stats.map(row)])}`;
      context.result({ checkpoint: location.where, tensors: stats }, text);
    });
  },
};
