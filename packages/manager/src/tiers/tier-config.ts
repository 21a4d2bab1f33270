import { type StorageAdapter, checkStorageUrl, storageUrl } from "@cairn/core";
import { MAX_TIMER_MS, checkDuration } from "@cairn/core/storage";
import { invalid } from "../arguments/manager-arguments.js";
import type { RetentionOptions } from "../steps/retention-policy.js";

/** One tier's own settings, by position in the manager's list of locations. */
export interface TierOptions extends Pick<RetentionOptions, "maxToKeep" | "keepPeriod" | "keepTimeInterval"> {
  /** Take only steps divisible by this (default 1: every step the faster tier commits). Tier 0 takes every save. */
  readonly every?: number;
}

/** How committed steps are copied down the tiers. */
export interface ReplicationOptions {
  /** Backoff between attempts at a copy that failed (after core's own retries of each request). */
  readonly retry?: { readonly baseDelayMs?: number; readonly maxDelayMs?: number };
  /** Let a faster tier's retention delete steps a slower tier does not hold yet (default false: they are held). */
  readonly deleteUnreplicated?: boolean;
  /** Read each copy back and check it before committing it (default false: checked against CRCs while read). */
  readonly readBack?: boolean;
  /** Data files copied at once per step (default core's save concurrency). */
  readonly concurrency?: number;
  /**
   * A copy of an incremental step references the slower tier's copy of its base where the bytes
   * match by their CRCs, instead of copying them again (default true; false: whole copies).
   */
  readonly incremental?: boolean;
  /**
   * How long a save waits for a slower tier's first listing before deciding without it, as for a
   * tier that cannot be listed (default 30 s): a tier that stops answering never holds up a save.
   * Queries that list the tiers wait as long at most (see `unlistedTiers`).
   */
  readonly listingWaitMs?: number;
  /**
   * What `allSteps()`, `latestStep()` and `restore("latest")` do when a tier's listing failed or
   * did not answer within `listingWaitMs`: `"refuse"` (default) throws, since that tier may hold
   * a newer step; `"leaveOut"` answers from the tiers that answered (reporting the others).
   */
  readonly unlistedTiers?: UnlistedTiers;
}

/** See `ReplicationOptions.unlistedTiers`. */
export type UnlistedTiers = "refuse" | "leaveOut";

export const DEFAULT_LISTING_WAIT_MS = 30_000;

/** A tier as the manager runs it: where, and what it keeps. */
export interface TierConfig {
  readonly index: number;
  readonly location: string | StorageAdapter;
  readonly retention: RetentionOptions;
  readonly every: number;
  /** `replication.listingWaitMs`, or its default. */
  readonly listingWaitMs: number;
  /** `replication.unlistedTiers`, or its default (`"refuse"`). */
  readonly unlistedTiers: UnlistedTiers;
}

export const DEFAULT_REPLICATION_RETRY = { baseDelayMs: 1_000, maxDelayMs: 30_000 } as const;

function isAdapter(location: unknown): location is StorageAdapter {
  return (
    typeof location === "object" &&
    location !== null &&
    !Array.isArray(location) &&
    typeof (location as Partial<StorageAdapter>).read === "function"
  );
}

/** Checks one location: a URL, a path or an adapter. */
export function checkLocation(
  location: unknown,
  what = "the checkpoint location",
): asserts location is string | StorageAdapter {
  if (typeof location === "string") checkStorageUrl(location);
  else if (!isAdapter(location)) throw invalid(what, "a URL, a path or a StorageAdapter", location);
}

/** The locations a manager was given: one, or an ordered list of tiers, fastest first. */
export function locationsOf(location: unknown): (string | StorageAdapter)[] {
  if (!Array.isArray(location)) {
    checkLocation(location);
    return [location];
  }
  if (location.length === 0)
    throw invalid("the checkpoint locations", "a non-empty array of URLs, paths or StorageAdapters", location);
  location.forEach((l: unknown, i) => checkLocation(l, `checkpoint location ${i}`));
  const urls = location.filter((l): l is string => typeof l === "string").map((l) => storageUrl(l).href);
  if (new Set(urls).size !== urls.length) throw invalid("the checkpoint locations", "distinct locations", location);
  return location as (string | StorageAdapter)[];
}

function count(value: unknown, min: number, what: string): void {
  if (value !== undefined && (typeof value !== "number" || !Number.isSafeInteger(value) || value < min))
    throw invalid(what, `an integer >= ${min}`, value);
}

/** Checks `tiers` and `replication` against the number of locations; single-location managers take neither. */
export function checkTierOptions(tiers: unknown, replication: unknown, locations: number): void {
  if (tiers !== undefined) {
    if (!Array.isArray(tiers) || tiers.length > locations)
      throw invalid(
        "CheckpointManager option tiers",
        `an array of at most ${locations} tier option objects, one per location`,
        tiers,
      );
    tiers.forEach((tier: unknown, i) => {
      const name = `CheckpointManager option tiers[${i}]`;
      if (tier === undefined) return;
      if (typeof tier !== "object" || tier === null) throw invalid(name, "an object", tier);
      const t = tier as Record<string, unknown>;
      count(t.maxToKeep, 0, `${name}.maxToKeep`);
      count(t.keepPeriod, 1, `${name}.keepPeriod`);
      count(t.every, 1, `${name}.every`);
      if (
        t.keepTimeInterval !== undefined &&
        (typeof t.keepTimeInterval !== "number" || !(t.keepTimeInterval > 0) || !Number.isFinite(t.keepTimeInterval))
      ) {
        throw invalid(`${name}.keepTimeInterval`, "a positive number of ms", t.keepTimeInterval);
      }
      if (i === 0 && t.every !== undefined && t.every !== 1)
        throw invalid(`${name}.every`, "1: tier 0 takes every save", t.every);
    });
  }
  if (replication === undefined) return;
  if (typeof replication !== "object" || replication === null)
    throw invalid("CheckpointManager option replication", "an object", replication);
  const r = replication as Record<string, unknown>;
  for (const name of ["deleteUnreplicated", "readBack", "incremental"]) {
    if (r[name] !== undefined && typeof r[name] !== "boolean")
      throw invalid(`CheckpointManager option replication.${name}`, "a boolean", r[name]);
  }
  count(r.concurrency, 1, "CheckpointManager option replication.concurrency");
  if (r.unlistedTiers !== undefined && r.unlistedTiers !== "refuse" && r.unlistedTiers !== "leaveOut")
    throw invalid("CheckpointManager option replication.unlistedTiers", '"refuse" or "leaveOut"', r.unlistedTiers);
  if (r.listingWaitMs !== undefined)
    checkDuration(r.listingWaitMs, "CheckpointManager option replication.listingWaitMs", { min: 0, max: MAX_TIMER_MS });
  if (r.retry !== undefined) {
    if (typeof r.retry !== "object" || r.retry === null)
      throw invalid("CheckpointManager option replication.retry", "an object", r.retry);
    const retry = r.retry as Record<string, unknown>;
    for (const name of ["baseDelayMs", "maxDelayMs"] as const)
      if (retry[name] !== undefined)
        checkDuration(retry[name], `CheckpointManager option replication.retry.${name}`, {
          min: 1,
          max: MAX_TIMER_MS,
        });
  }
}

/**
 * Each tier's configuration. Tier 0 keeps what the manager's own retention options say unless
 * `tiers[0]` says otherwise; slower tiers keep what their entry says (default: every step), with
 * `bestFn`/`bestMode` shared by all.
 */
export function tierConfigs(
  locations: readonly (string | StorageAdapter)[],
  options: RetentionOptions & {
    readonly tiers?: readonly (TierOptions | undefined)[];
    readonly replication?: ReplicationOptions;
  },
): TierConfig[] {
  const listingWaitMs = options.replication?.listingWaitMs ?? DEFAULT_LISTING_WAIT_MS;
  const unlistedTiers = options.replication?.unlistedTiers ?? "refuse";
  const { maxToKeep, keepPeriod, keepTimeInterval, bestFn, bestMode } = options;
  return locations.map((location, index) => {
    const own = options.tiers?.[index];
    const base = index === 0 && own === undefined ? { maxToKeep, keepPeriod, keepTimeInterval } : (own ?? {});
    const retention: RetentionOptions = {
      maxToKeep: base.maxToKeep,
      keepPeriod: base.keepPeriod,
      keepTimeInterval: base.keepTimeInterval,
      bestFn,
      bestMode,
    };
    return { index, location, retention, every: own?.every ?? 1, listingWaitMs, unlistedTiers };
  });
}
