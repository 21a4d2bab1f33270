import { type BenchResult, meetsTarget } from "./report.js";

/** A figure for a table: integers as they are, others whole from 100 up and to three significant digits below. */
export function formatNumber(x: number): string {
  if (Number.isInteger(x)) return String(x);
  return Math.abs(x) >= 100 ? x.toFixed(0) : x.toPrecision(3);
}

/** A Markdown table, its columns padded so it also reads as plain text. */
export function markdownTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]): string => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}

const RATIO_HEADER = ["suite", "what", "Cairn", "baseline", "ratio", "target", "met"] as const;

/** One row per result: every figure beside its baseline, ratio and target (a dash where none). */
export function ratioTable(results: readonly BenchResult[]): string {
  const rows = results.map((r) => {
    const met = meetsTarget(r);
    return [
      r.suite,
      r.name,
      `${formatNumber(r.value)} ${r.unit}`,
      r.baseline ? `${r.baseline.name}: ${formatNumber(r.baseline.value)} ${r.unit}` : "—",
      r.ratio === undefined ? "—" : `${r.ratio.toFixed(2)}×`,
      r.target === undefined ? "—" : `${r.better === "higher" ? "≥" : "≤"} ${r.target}`,
      met === undefined ? "—" : met ? "met" : "**not met**",
    ];
  });
  return markdownTable(RATIO_HEADER, rows);
}
