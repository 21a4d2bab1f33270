// How the page shows numbers and times: the CLI's own formatting, bundled in.
export { formatBytes } from "../src/progress-bar.js";
export { formatMetric } from "../src/figures.js";

/** Seconds for people: 0.42 s, 12.3 s, 2 min 5 s. */
export function formatSeconds(seconds: number): string {
  if (seconds < 10) return `${seconds.toFixed(2)} s`;
  if (seconds < 120) return `${seconds.toFixed(1)} s`;
  return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}

/** An ISO time as local date and time to the second. */
export function formatTime(iso: string | null): string {
  if (iso === null) return "–";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString(undefined, { hour12: false });
}

/** A shape as [a, b, c]. */
export function formatShape(shape: readonly number[] | undefined): string {
  return shape === undefined ? "" : `[${shape.join(", ")}]`;
}
