// Numbers for people, in the CLI's tables and on the `cairn ui` page (which bundles this file: no Node import).

/** A metric or statistic for a table: six significant digits (--json keeps full precision). */
export function formatMetric(value: number): string {
  return Number.isFinite(value) ? String(Number(value.toPrecision(6))) : String(value);
}
