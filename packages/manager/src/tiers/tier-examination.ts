import { type StorageAdapter, readMetadata } from "@cairn/core";
import type { Damage } from "@cairn/core/ops";
import PQueue from "p-queue";
import { type RootListing, type StepListing, type StepProblem, listSteps, problemOf } from "../steps/step-listing.js";
import { verifyStep } from "../steps/step-verification.js";
import { stepDir } from "../steps/step-naming.js";
import { type CopyIdentity, identityOf, sameCheckpoint } from "./copy-identity.js";
import { mergeTiers } from "./tier-listing.js";

/** One step's copy on one tier, as `examineTiers` found it. */
export interface ExaminedCopy {
  readonly listing: StepListing;
  /** Committed or damaged copies: whether every byte it uses verified; undefined for a leftover or a `referenced` directory. */
  readonly verified?: boolean;
  /** What verification found wrong (a metadata.json that cannot be read included). */
  readonly damaged?: readonly Damage[];
  /** Set when the copy could not be verified for another reason than damage (a storage failure): the answer is unknown. */
  readonly error?: StepProblem;
  /** Set when the copy is another checkpoint than the step's copy on a faster tier (an older save an overwrite replaced, another run's): not a copy of this step, whatever it verifies to. */
  readonly otherCheckpoint?: true;
}

/** One step across the tiers, fastest first. */
export interface ExaminedStep {
  readonly step: number;
  /** Its copy on each tier; undefined where the tier holds nothing of it. */
  readonly tiers: readonly (ExaminedCopy | undefined)[];
  /** Whether some tier holds a copy that verified. */
  readonly verified: boolean;
  /** The committed steps (on any tier) that use files of this step's directory there. */
  readonly referencedBy: readonly number[];
}

/** A directory under a step name holding what no committed step uses: a leftover, or temp files of a killed write. */
export interface Leftover {
  readonly tier: number;
  readonly step: number;
  readonly objects: number;
  readonly bytes: number;
  /** Of those, temp files of writes in progress or killed. */
  readonly tempObjects: number;
  readonly tempBytes: number;
  /** Its newest object's time, when storage gives every object's. */
  readonly time?: string;
}

/** What `examineTiers` reports of a manager's tiers. */
export interface TiersExamination {
  readonly tiers: readonly RootListing[];
  /** Every step any tier holds anything of, ascending. */
  readonly steps: readonly ExaminedStep[];
  /** The newest step committed (readable or not) on any tier. */
  readonly newestStep?: number;
  /** The newest step with a copy that verified (with `verify: false`, one whose metadata reads back). */
  readonly newestVerified?: number;
  /** The newest step whose copy on the last tier verified: what survives losing every faster tier. */
  readonly newestDurable?: number;
  /** Loss-budget distance: steps from `newestDurable` to `newestStep`; undefined when no step is durable (everything is at risk). */
  readonly stepsAtRisk?: number;
  /** Seconds between the saves of `newestDurable` and `newestStep` (0 when a time is unknown); undefined when no step is durable. */
  readonly secondsAtRisk?: number;
  /** Directories of leftovers and temp files of killed writes, per tier. */
  readonly leftovers: readonly Leftover[];
}

export interface ExamineOptions {
  /** Read every byte of every committed copy (default true); false: the listing alone. */
  readonly verify?: boolean;
  readonly signal?: AbortSignal;
  readonly onRead?: (bytes: number) => void;
  /** Steps verified at once (default 2; each reads 2 files at once). */
  readonly concurrency?: number;
}

function timeOf(listing: StepListing | undefined): number {
  return listing?.time === undefined ? NaN : Date.parse(listing.time);
}

/**
 * Reads a manager's tiers (fastest first; one root is one tier), read-only: lists each
 * (`listSteps`), then verifies every committed copy once through core's verify op (`verifyStep`),
 * and reports per step and tier its state, whether it verified and what is damaged, which steps
 * use its files, the newest verified and the newest durable step with the loss-budget distance
 * between them, and the leftovers and temp files of killed writes. Damage is reported, never
 * thrown; a listing failure is thrown, a copy that cannot be read for another reason carries its
 * `error`. Called by `cairn doctor`.
 */
export async function examineTiers(
  tiers: readonly StorageAdapter[],
  options: ExamineOptions = {},
): Promise<TiersExamination> {
  const { signal } = options;
  const listings = await Promise.all(tiers.map((storage) => listSteps(storage, signal ? { signal } : {})));
  const copies = listings.map(() => new Map<number, ExaminedCopy>());
  const identities = listings.map(() => new Map<number, CopyIdentity>());
  const queue = new PQueue({ concurrency: options.concurrency ?? 2 });
  await Promise.all(
    listings.flatMap((listing, tier) =>
      listing.steps.map((s) =>
        queue.add(async () => {
          if (s.state !== "committed" && s.state !== "damaged") return void copies[tier]!.set(s.step, { listing: s });
          if (s.state === "damaged" || options.verify === false) {
            const damaged = s.error ? [{ problem: s.error.message }] : [];
            return void copies[tier]!.set(s.step, { listing: s, verified: !s.error, damaged });
          }
          if (tiers.length > 1)
            await readMetadata({ storage: tiers[tier]!, path: stepDir(s.step), ...(signal ? { signal } : {}) }).then(
              (metadata) => void identities[tier]!.set(s.step, identityOf(metadata)),
              () => undefined,
            );
          try {
            const report = await verifyStep(tiers[tier]!, s.step, {
              ...(signal ? { signal } : {}),
              ...(options.onRead ? { onRead: options.onRead } : {}),
            });
            copies[tier]!.set(s.step, { listing: s, verified: report.ok, damaged: report.damaged });
          } catch (error) {
            if (signal?.aborted) throw error;
            // A storage failure, or deleted since the listing (another process's retention): unverified, with why.
            copies[tier]!.set(s.step, { listing: s, error: problemOf(s.step, error) });
          }
        }),
      ),
    ),
  );
  const steps = mergeTiers(listings).map(({ step }): ExaminedStep => {
    const each = sameCheckpointCopies(
      step,
      copies.map((m) => m.get(step)),
      identities.map((m) => m.get(step)),
    );
    return {
      step,
      tiers: each,
      verified: each.some((c) => c?.verified === true),
      referencedBy: [...new Set(each.flatMap((c) => c?.listing.referencedBy ?? []))].sort((a, b) => a - b),
    };
  });
  const committed = steps.filter((s) => s.tiers.some((c) => c?.listing.committed));
  const newestStep = committed.at(-1)?.step;
  const newestVerified = steps.findLast((s) => s.verified)?.step;
  const last = tiers.length - 1;
  const newestDurable = steps.findLast((s) => s.tiers[last]?.verified === true)?.step;
  const newestListing = committed.at(-1)?.tiers.find((c) => c?.listing.time !== undefined)?.listing;
  const durableListing = newestDurable === undefined ? undefined : copies[last]!.get(newestDurable)?.listing;
  const seconds = (timeOf(newestListing) - timeOf(durableListing)) / 1000;
  const leftovers = listings.flatMap((listing, tier) =>
    listing.steps
      .filter((s) => s.state === "uncommitted" || s.tempObjects > 0)
      .map((s) => ({
        tier,
        step: s.step,
        objects: s.state === "uncommitted" ? s.objects : s.tempObjects,
        bytes: s.state === "uncommitted" ? s.bytes : s.tempBytes,
        tempObjects: s.tempObjects,
        tempBytes: s.tempBytes,
        ...(s.state === "uncommitted" && s.time !== undefined ? { time: s.time } : {}),
      })),
  );
  return {
    tiers: listings,
    steps,
    ...(newestStep !== undefined ? { newestStep } : {}),
    ...(newestVerified !== undefined ? { newestVerified } : {}),
    ...(newestDurable !== undefined ? { newestDurable } : {}),
    ...(newestStep !== undefined && newestDurable !== undefined
      ? {
          stepsAtRisk: Math.max(0, newestStep - newestDurable),
          secondsAtRisk: Number.isFinite(seconds) ? Math.max(0, seconds) : 0,
        }
      : {}),
    leftovers,
  };
}

/**
 * A step's copies, each on a slower tier than the fastest committed one marked as not this step
 * when it is another checkpoint (`sameCheckpoint`): it verifies as nothing of this step, so it is
 * neither the step's durable copy nor proof that the step verifies.
 */
function sameCheckpointCopies(
  step: number,
  each: readonly (ExaminedCopy | undefined)[],
  identities: readonly (CopyIdentity | undefined)[],
): (ExaminedCopy | undefined)[] {
  const first = each.findIndex((c) => c?.listing.committed);
  if (first < 0) return [...each];
  const reference = identities[first];
  return each.map((copy, tier) =>
    copy === undefined || tier <= first || !copy.listing.committed || sameCheckpoint(reference, identities[tier])
      ? copy
      : {
          ...copy,
          verified: false,
          otherCheckpoint: true,
          damaged: [
            {
              problem: `another checkpoint under step ${step} than tier ${first}'s (an older save an overwrite replaced, or another run's): not a copy of step ${step}`,
            },
          ],
        },
  );
}
