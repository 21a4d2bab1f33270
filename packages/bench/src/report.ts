import { appendFileSync } from "node:fs";

/**
 * One benchmark figure beside the baseline it is judged against, both measured in the same run
 * on the same bytes. Suites call `report` once per figure; the runner collects every result
 * into one table and one JSON file.
 */
export interface BenchResult {
  /** The suite's file name without `.bench.ts`, e.g. `local`. */
  readonly suite: string;
  /** What was measured, e.g. `warm load, 1 GiB (3 x 256 MiB + 2,000 small)`. */
  readonly name: string;
  /** Cairn's figure and its unit (`s`, `MB/s`, `B`, `B/tensor`, `MiB`). */
  readonly value: number;
  readonly unit: string;
  /** The baseline's name and figure, in the same unit; absent for figures without one (peak RSS). */
  readonly baseline?: { readonly name: string; readonly value: number };
  /** Always `value / baseline.value`. */
  readonly ratio?: number;
  /** Whether a higher or a lower ratio is better (`lower` for times and bytes, `higher` for rates). */
  readonly better?: "higher" | "lower";
  /** The target for the ratio, if one: met when ratio >= target (higher) or <= target (lower). */
  readonly target?: number;
  /** Anything else worth keeping (peak RSS in MiB, rounds, per-round figures). */
  readonly extra?: Readonly<Record<string, number | string | readonly number[]>>;
}

/** Whether `result` meets its target; undefined when it has none. */
export function meetsTarget(result: BenchResult): boolean | undefined {
  if (result.target === undefined || result.ratio === undefined) return undefined;
  return result.better === "higher" ? result.ratio >= result.target : result.ratio <= result.target;
}

/**
 * Records `result`: appended as one JSON line to `$CAIRN_BENCH_OUT` when the runner set it,
 * and printed either way, so a suite run on its own still shows its figures.
 */
export function report(result: BenchResult): void {
  const out = process.env.CAIRN_BENCH_OUT;
  if (out) appendFileSync(out, `${JSON.stringify(result)}\n`);
  const vs = result.baseline ? ` vs ${result.baseline.name} ${fmt(result.baseline.value)} ${result.unit}` : "";
  const ratio = result.ratio === undefined ? "" : ` = ${result.ratio.toFixed(2)}x`;
  const met = meetsTarget(result);
  const target =
    met === undefined
      ? ""
      : ` (target ${result.better === "higher" ? ">=" : "<="} ${result.target}: ${met ? "met" : "NOT met"})`;
  console.log(`[${result.suite}] ${result.name}: ${fmt(result.value)} ${result.unit}${vs}${ratio}${target}`);
}

function fmt(x: number): string {
  return Math.abs(x) >= 100 ? x.toFixed(0) : x.toPrecision(3);
}
