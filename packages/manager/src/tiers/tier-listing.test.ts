import { describe, expect, it } from "vitest";
import type { StepListing, StepState } from "../steps/step-listing.js";
import { mergeTiers } from "./tier-listing.js";

function listing(step: number, state: StepState, bytes: number): StepListing {
  const committed = state === "committed" || state === "damaged";
  return {
    step,
    state,
    committed,
    objects: 1,
    bytes,
    tempObjects: 0,
    tempBytes: 0,
    referencedBytes: 0,
    referencedBy: [],
    metrics: {},
  };
}

describe("mergeTiers", () => {
  it("one row per step, its figures from the first tier holding it committed and readable", () => {
    const merged = mergeTiers([
      { steps: [listing(1, "uncommitted", 10), listing(2, "committed", 20), listing(4, "damaged", 40)] },
      { steps: [listing(1, "committed", 11), listing(3, "referenced", 30), listing(4, "committed", 41)] },
    ]);
    expect(merged.map((r) => [r.step, r.states, r.tier, r.listing.bytes])).toEqual([
      [1, ["uncommitted", "committed"], 1, 11],
      [2, ["committed", undefined], 0, 20],
      [3, [undefined, "referenced"], 1, 30],
      [4, ["damaged", "committed"], 1, 41],
    ]);
  });
});
