import {
  CheckpointError,
  type LoadOptions,
  type LoadResult,
  type ProcessGroup,
  type RankOutcome,
  type StateDict,
  type StorageAdapter,
  failureOf,
  load,
  rankFailure,
} from "@cairn/core";
import { METADATA_FILE, base64ToBytes, bytesToBase64, parseMetadata } from "@cairn/core/format";
import { joinPath } from "@cairn/core/storage";
import type { ManagerEmitter } from "../events/manager-events.js";
import { stepDir } from "../steps/step-naming.js";
import { checkStepOf, readStepMetadata } from "../steps/stored-values.js";
import { stepCopies } from "./step-copies.js";
import type { Tier } from "./tier.js";
import { fallsThrough, holders, notFound } from "./tiered-steps.js";

type RestoreOptions = Omit<LoadOptions, "storage" | "path" | "checkpointId"> & { readonly processGroup: ProcessGroup };

/** Loads `step` from `storage`, its metadata (read there, or given) first checked to be that step's (`checkStepOf`). */
async function loadFrom(
  storage: StorageAdapter,
  step: number,
  target: StateDict | undefined,
  options: RestoreOptions & Pick<LoadOptions, "metadata">,
): Promise<LoadResult | StateDict> {
  const given = options.metadata;
  const metadata =
    given === undefined
      ? await readStepMetadata(storage, step, options.signal)
      : checkStepOf(
          step,
          given instanceof Uint8Array ? parseMetadata(given, `${stepDir(step)}/${METADATA_FILE}`) : given,
          storage.root,
        );
  const where = { ...options, metadata, storage, path: stepDir(step) };
  return target === undefined ? load(where) : load(target, where);
}

/** Whether the next tier may be read after `error` on this one: a copy that failed, not a cancelled restore. */
function nextTierAfter(error: unknown, signal: AbortSignal | undefined): boolean {
  return !signal?.aborted && fallsThrough(error);
}

/**
 * Loads `step` from the fastest tier that holds it whole: a copy that is missing, damaged or
 * unreadable there is reported (`error`, operation `"restore"`, with the tier) and the next tier
 * is read; the first failure is thrown when no tier serves. One location is the tier set of one:
 * its failure is thrown, with nothing else to report. A target loaded in place is overwritten
 * whole by the read that succeeds. With several ranks and tiers (a tier 0 per rank), a
 * collective: see `restoreAcrossRanks`.
 */
export async function restoreFromTiers(
  tiers: readonly Tier[],
  events: ManagerEmitter,
  step: number,
  target: StateDict | undefined,
  options: RestoreOptions,
): Promise<LoadResult | StateDict> {
  if (tiers.length > 1 && options.processGroup.worldSize > 1)
    return restoreAcrossRanks(tiers, events, step, target, options);
  let first: unknown;
  const unanswered: { tier: Tier; error: unknown }[] = [];
  for await (const { tier, other } of stepCopies(tiers, step, options.signal, (tier, error) =>
    unanswered.push({ tier, error }),
  )) {
    try {
      if (other) throw other;
      return await loadFrom((await tier.open()).storage, step, target, options);
    } catch (error) {
      if (!nextTierAfter(error, options.signal)) throw error;
      if (tiers.length > 1) events.report({ step, error, operation: "restore", tier: tier.index });
      first ??= error;
    }
  }
  // No tier served, yet some could not say whether they hold the step: a failed copy too (it may be good).
  for (const { tier, error } of unanswered) {
    events.report({ step, error, operation: "restore", tier: tier.index });
    first ??= error;
  }
  throw first ?? (await notFound(tiers, events, step));
}

/** Rank 0's metadata.json of `step` on `tier`, base64, or null (reported) when it cannot be read. */
async function metadataToSend(
  tier: Tier,
  step: number,
  events: ManagerEmitter,
  signal: AbortSignal | undefined,
): Promise<string | null> {
  try {
    const { storage } = await tier.open();
    return bytesToBase64(
      await storage.read(joinPath(stepDir(step), METADATA_FILE), undefined, signal ? { signal } : {}),
    );
  } catch (error) {
    events.report({ step, error, operation: "restore", tier: tier.index });
    return null;
  }
}

/** On rank 0: the tiers whose copy of `step` is another checkpoint, with why; none when that cannot be told. */
async function otherCopies(
  tiers: readonly Tier[],
  step: number,
  signal: AbortSignal | undefined,
): Promise<{ tier: number; message: string }[]> {
  const marked: { tier: number; message: string }[] = [];
  try {
    for await (const { tier, other } of stepCopies(tiers, step, signal))
      if (other) marked.push({ tier: tier.index, message: other.message });
  } catch {
    // A tier that cannot be listed or read here fails its own read below, on every rank.
  }
  return marked;
}

/** Another rank's failure as this rank throws or keeps it, naming the rank and the tier. */
function failureOfRank(rank: number, outcome: unknown, step: number, tier: number): CheckpointError {
  const failure = failureOf(outcome) ?? { code: "process_group" as const, message: "no reason given" };
  return new CheckpointError(
    failure.code,
    `rank ${rank} could not restore step ${step} from tier ${tier}: ${failure.message}`,
    { context: { step, rank } },
  );
}

/**
 * Several ranks (a collective): every rank reads the same tier, the fastest holding the step
 * committed on rank 0, whose metadata every rank loads with. On a tier where another rank lacks
 * `metadata.json` (a per-rank tier 0: each rank's disk holds its own data files), rank 0
 * broadcasts its bytes and that rank reads its own files with them. The ranks then gather who
 * read the step: if any could not (a damaged or missing copy), each reports its own failure and
 * every rank reads the next tier; a failure no other tier can mend (a target that does not
 * match, a cancelled restore) is thrown on every rank.
 */
async function restoreAcrossRanks(
  tiers: readonly Tier[],
  events: ManagerEmitter,
  step: number,
  target: StateDict | undefined,
  options: RestoreOptions,
): Promise<LoadResult | StateDict> {
  const group = options.processGroup;
  const held = await group.allGather((await holders(tiers, step)).map((t) => t.index));
  const holds = (rank: number, index: number): boolean =>
    Array.isArray(held[rank]) && (held[rank] as unknown[]).includes(index);
  // Rank 0's tiers holding another checkpoint under this number (stepCopies' rule): no rank reads them.
  const others = await group.broadcast(group.rank === 0 ? await otherCopies(tiers, step, options.signal) : null, 0);
  const otherOn = (index: number): string | undefined =>
    Array.isArray(others)
      ? ((others as { tier?: unknown; message?: unknown }[]).find((o) => o?.tier === index)?.message as
          string | undefined)
      : undefined;
  let first: unknown;
  for (const tier of tiers) {
    if (!holds(0, tier.index)) continue;
    const other = otherOn(tier.index);
    if (other !== undefined) {
      const error = new CheckpointError("not_found", other, { context: { step, path: stepDir(step) } });
      events.report({ step, error, operation: "restore", tier: tier.index });
      first ??= error;
      continue;
    }
    let sent: unknown;
    if (!held.every((_, rank) => holds(rank, tier.index))) {
      sent = await group.broadcast(
        group.rank === 0 ? await metadataToSend(tier, step, events, options.signal) : undefined,
        0,
      );
      if (typeof sent !== "string") {
        first ??= new CheckpointError(
          "not_found",
          `rank 0 could not read the metadata of step ${step} on tier ${tier.index}`,
          { context: { step, rank: 0 } },
        );
        continue;
      }
    }
    let result: LoadResult | StateDict | undefined;
    let own: unknown;
    // Whatever fails on this rank (opening its tier too) is its outcome: the others wait for it.
    try {
      const { storage } = await tier.open();
      // With a per-rank tier 0, this rank's disk holds its data files and rank 0's the metadata it sent.
      const given = typeof sent === "string" && !holds(group.rank, tier.index) ? base64ToBytes(sent) : undefined;
      result = await loadFrom(storage, step, target, { ...options, ...(given ? { metadata: given } : {}) });
    } catch (error) {
      own = error ?? new Error("undefined thrown");
    }
    const outcomes = await group.allGather<RankOutcome>(own === undefined ? { ok: true } : rankFailure(own));
    const failed = outcomes.flatMap((o, rank) => (failureOf(o) ? [rank] : []));
    if (failed.length === 0) return result!;
    // A failure no other tier mends (a target that does not match, a cancelled restore) ends it on every rank.
    if (own !== undefined && !nextTierAfter(own, options.signal)) throw own;
    const fatal = failed
      .map((rank) => failureOfRank(rank, outcomes[rank], step, tier.index))
      .find((e) => !fallsThrough(e));
    if (fatal) throw fatal;
    if (own !== undefined) events.report({ step, error: own, operation: "restore", tier: tier.index });
    first ??= own ?? failureOfRank(failed[0]!, outcomes[failed[0]!], step, tier.index);
  }
  throw first ?? (await notFound(tiers, events, step));
}
