import type { StepListing, StepState } from "../steps/step-listing.js";

/** One step across the tiers of a tiered manager, fastest first. */
export interface TieredStep {
  readonly step: number;
  /** Its state on each tier (undefined where the tier does not hold it). */
  readonly states: readonly (StepState | undefined)[];
  /** The tier its figures come from: the first holding it committed and readable, else the first holding anything. */
  readonly tier: number;
  readonly listing: StepListing;
}

/**
 * Several tiers' listings (`listSteps` of each, fastest first) as one row per step found on any
 * of them, ascending: what `cairn ls` and `cairn ui` show of a tiered manager. Pure.
 */
export function mergeTiers(tiers: readonly { readonly steps: readonly StepListing[] }[]): TieredStep[] {
  const byTier = tiers.map((t) => new Map(t.steps.map((s) => [s.step, s])));
  const all = [...new Set(tiers.flatMap((t) => t.steps.map((s) => s.step)))].sort((a, b) => a - b);
  return all.map((step) => {
    const listings = byTier.map((m) => m.get(step));
    let tier = listings.findIndex((s) => s?.state === "committed");
    if (tier < 0) tier = listings.findIndex((s) => s !== undefined);
    return { step, states: listings.map((s) => s?.state), tier, listing: listings[tier]! };
  });
}
