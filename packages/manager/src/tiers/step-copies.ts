import { CheckpointError, readMetadata } from "@cairn/core";
import { stepDir } from "../steps/step-naming.js";
import { type CopyIdentity, identityOf, sameCheckpoint } from "./copy-identity.js";
import type { Tier } from "./tier.js";
import { holdersInOrder } from "./tiered-steps.js";

/** The identity of `step`'s copy on `tier`: from its index, else its metadata; undefined when that cannot be read. */
async function identityOn(
  tier: Tier,
  step: number,
  signal: AbortSignal | undefined,
): Promise<CopyIdentity | undefined> {
  const store = await tier.open();
  const known = store.identityOf(step);
  if (known !== undefined) return known;
  try {
    return identityOf(
      await readMetadata({ storage: store.storage, path: stepDir(step), ...(signal ? { signal } : {}) }),
    );
  } catch {
    return undefined;
  }
}

/** One tier's copy of a step: `other` (a `not_found` error) when it holds another checkpoint under that number. */
export interface StepCopy {
  readonly tier: Tier;
  readonly other?: CheckpointError;
}

/**
 * The copies of `step`, fastest tier first, each marked when it is not that step (docs/tiers.md,
 * "When a copy counts"): the step is the checkpoint the fastest tier holding it names (its
 * identity: `checkpointId`, or a fingerprint); a slower tier's copy of another checkpoint under
 * that number (an older save an overwrite replaced while the tier was down, another run's) is not
 * a copy of it. One rule for restore, `latestStep({ verified })` and `restore("latest")`. When the
 * fastest holder's metadata cannot be read, which checkpoint the step is cannot be told, and no
 * copy is marked. `unanswered` hears of each tier that cannot say whether it holds the step.
 */
export async function* stepCopies(
  tiers: readonly Tier[],
  step: number,
  signal: AbortSignal | undefined,
  unanswered?: (tier: Tier, error: unknown) => void,
): AsyncGenerator<StepCopy> {
  let reference: { identity: CopyIdentity | undefined; tier: number } | undefined;
  for await (const tier of holdersInOrder(tiers, step, unanswered)) {
    if (tiers.length === 1) {
      yield { tier };
      continue;
    }
    const identity = await identityOn(tier, step, signal);
    if (reference === undefined) {
      reference = { identity, tier: tier.index };
      yield { tier };
    } else if (!sameCheckpoint(reference.identity, identity)) {
      const root = (await tier.open()).storage.root;
      const other = new CheckpointError(
        "not_found",
        `${root}/${stepDir(step)} holds another checkpoint under step ${step} than tier ${reference.tier} (an older save an overwrite replaced, or another run's): it is not a copy of step ${step}`,
        { context: { step, path: stepDir(step) } },
      );
      yield { tier, other };
    } else yield { tier };
  }
}
