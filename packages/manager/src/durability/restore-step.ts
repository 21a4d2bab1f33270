import type { LoadResult, StateDict } from "@cairn/core";
import type { RestoreOptions } from "../arguments/manager-arguments.js";
import type { TierSet } from "../tiers/tier-set.js";
import type { Durability } from "./durability.js";

/**
 * A restore of `step` from the fastest tier serving it, or of `"latest"`: the newest step whose
 * bytes verify, step by step and tier by tier. Either way the durability contract hears of it.
 */
export async function restoreStep(
  tiers: TierSet,
  durability: Durability,
  step: number | "latest",
  target: StateDict | undefined,
  options: RestoreOptions,
): Promise<LoadResult | StateDict> {
  await tiers.open();
  if (step !== "latest") return durability.restore(step, target, { ...options, processGroup: tiers.group });
  const latest = await durability.restoreLatest(target, { ...options, processGroup: tiers.group });
  return target === undefined ? latest.result : { ...(latest.result as LoadResult), step: latest.step };
}
