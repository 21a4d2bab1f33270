/** Where the CLI writes: a stream, or a test's buffer. `isTTY` and `columns` as on `process.stdout`. */
export interface Output {
  write(text: string): unknown;
  readonly isTTY?: boolean;
  readonly columns?: number;
}

/** Progress of a long operation, in bytes. */
export interface Progress {
  advance(bytes: number): void;
  /** Removes the bar; the command then prints its result. */
  finish(): void;
}

const SILENT: Progress = { advance: () => undefined, finish: () => undefined };

/**
 * A one-line progress bar redrawn in place (`\r`), at most every `intervalMs`: label, bar,
 * percentage, bytes done of total. Only on a terminal: piped or redirected output gets
 * nothing, so scripts and logs see only results.
 */
export function progressBar(
  out: Output,
  label: string,
  total: number,
  now: () => number = Date.now,
  intervalMs = 100,
): Progress {
  if (!out.isTTY) return SILENT;
  let done = 0;
  let drawn = -Infinity;
  let visible = false;
  const draw = (): void => {
    const width = Math.max(10, Math.min(40, (out.columns ?? 80) - label.length - 40));
    const fraction = total > 0 ? Math.min(1, done / total) : 1;
    const filled = Math.round(fraction * width);
    out.write(
      `\r${label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${String(Math.floor(fraction * 100)).padStart(3)}% ${formatBytes(done)}/${formatBytes(total)}\x1b[K`,
    );
    visible = true;
  };
  return {
    advance(bytes) {
      done += bytes;
      const t = now();
      if (t - drawn >= intervalMs) {
        drawn = t;
        draw();
      }
    },
    finish() {
      if (visible) out.write("\r\x1b[K");
      visible = false;
    },
  };
}

/** Bytes for people: 1023 B, 1.5 KiB, 12.0 MiB… */
export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/** `n` and the noun, singular for one: "1 data file", "2 data files". */
export function count(n: number, singular: string, plural = `${singular}s`): string {
  return `${n} ${n === 1 ? singular : plural}`;
}
