/** What retention knows of a committed step. */
export interface StepRecord {
  readonly step: number;
  /** When it was committed, in ms since the epoch. */
  readonly time: number;
  readonly metrics: Readonly<Record<string, number>>;
}

/**
 * Which committed steps to keep, like Orbax's and torch_xla's managers. A step is kept if any
 * policy keeps it, and the newest committed step is always kept.
 */
export interface RetentionOptions {
  /**
   * Keep this many steps: the newest ones, or with `bestFn` the best ones by metric. Unset or 0
   * keeps every step (as torch_xla does), whatever the other policies say.
   */
  readonly maxToKeep?: number;
  /** Also keep every step divisible by this. */
  readonly keepPeriod?: number;
  /** Also keep one step per this many ms of wall time (the first committed in each interval). */
  readonly keepTimeInterval?: number;
  /** Ranks steps by their metrics for `maxToKeep`; steps it gives no finite number for are kept. */
  readonly bestFn?: (metrics: Readonly<Record<string, number>>) => number | undefined;
  /** Whether a larger (`"max"`, the default, as Orbax) or smaller `bestFn` value is better. */
  readonly bestMode?: "max" | "min";
}

/** The steps retention deletes, ascending. `steps` is every committed step, in any order. */
export function stepsToDelete(steps: readonly StepRecord[], options: RetentionOptions): number[] {
  const { maxToKeep = 0 } = options;
  if (maxToKeep <= 0 || steps.length === 0) return [];
  const ascending = [...steps].sort((a, b) => a.step - b.step);
  const keep = new Set<number>([ascending[ascending.length - 1]!.step]);
  if (options.bestFn) {
    const scored: { step: number; score: number }[] = [];
    for (const record of ascending) {
      const score = options.bestFn(record.metrics);
      if (score === undefined || !Number.isFinite(score)) keep.add(record.step);
      else scored.push({ step: record.step, score });
    }
    const sign = options.bestMode === "min" ? 1 : -1;
    scored.sort((a, b) => sign * (a.score - b.score) || b.step - a.step);
    for (const { step } of scored.slice(0, maxToKeep)) keep.add(step);
  } else {
    for (const { step } of ascending.slice(-maxToKeep)) keep.add(step);
  }
  if (options.keepPeriod) for (const { step } of ascending) if (step % options.keepPeriod === 0) keep.add(step);
  if (options.keepTimeInterval) {
    let lastKept = -Infinity;
    for (const { step, time } of ascending) {
      if (time >= lastKept + options.keepTimeInterval) {
        keep.add(step);
        lastKept = time;
      }
    }
  }
  return ascending.filter((r) => !keep.has(r.step)).map((r) => r.step);
}
