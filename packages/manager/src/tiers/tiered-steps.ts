import { CheckpointError, type ProcessGroup, isStorageFailure, isUnusable } from "@cairn/core";
import type { ManagerEmitter } from "../events/manager-events.js";
import type { StepMetadata, StepStore } from "../steps/step-store.js";
import type { Replication } from "./replication.js";
import type { Tier, TierState } from "./tier.js";

/** Whether a read of one tier's copy failed so that the next tier's may serve: that copy is missing, damaged or unreadable. */
export function fallsThrough(error: unknown): boolean {
  return isUnusable(error) || isStorageFailure(error);
}

/** A tier whose listing failed, or did not answer within `listingWaitMs`, with why. */
interface Unanswered {
  readonly tier: Tier;
  readonly error: unknown;
}

/** A tier's root as its storage names it, or its location as given while it is not opened. */
function rootOf(tier: Tier): string {
  const { location } = tier.config;
  return tier.opened?.storage.root ?? (typeof location === "string" ? location : `tier ${tier.index}`);
}

/**
 * What `allSteps()`, `latestStep()` and `restore("latest")` throw (`replication.unlistedTiers:
 * "refuse"`) when `tier` could not be listed: it may hold a step newer than any of the others.
 */
function unlisted({ tier, error }: Unanswered, others: readonly number[], rank?: number): CheckpointError {
  const root = rootOf(tier);
  const why = error instanceof Error ? error.message : "no reason given";
  const newest = others.length === 0 ? "any step" : `step ${others.reduce((a, b) => Math.max(a, b))}`;
  return new CheckpointError(
    "storage",
    `tier ${tier.index} (${root})${rank === undefined ? "" : ` on rank ${rank}`} could not be listed (${why}): it may hold a step newer than ${newest} on the tiers that answered, so no step is named the latest from them. Try again once it answers, raise replication.listingWaitMs for a tier that slow, or set replication.unlistedTiers to "leaveOut" to answer from the tiers that answered`,
    { cause: error, context: { path: root, transient: true } },
  );
}

/** Whether the manager answers from the tiers that answered (`replication.unlistedTiers: "leaveOut"`). */
function leavesOut(tiers: readonly Tier[]): boolean {
  return tiers[0]?.config.unlistedTiers === "leaveOut";
}

/**
 * Asks every tier, in order: the answers of those that answered, and the tiers that did not
 * (their storage failed, or a slower tier gave no answer within `listingWaitMs`), each reported
 * (`error`, operation `"listing"`, once per outage); if every tier fails, the first failure is
 * thrown (and not also reported) and the others reported.
 */
async function acrossTiers<T>(
  tiers: readonly Tier[],
  events: ManagerEmitter,
  ask: (store: StepStore, tier: Tier) => Promise<T>,
): Promise<{ answers: T[]; unanswered: Unanswered[] }> {
  const settled = await Promise.allSettled(
    tiers.map((tier) =>
      tier.answer(
        (async () => {
          const store = await tier.open();
          await tier.retention?.settled();
          return ask(store, tier);
        })(),
      ),
    ),
  );
  const answers: T[] = [];
  const unanswered: Unanswered[] = [];
  const thrown = settled.every((s) => s.status === "rejected") ? 0 : -1;
  settled.forEach((s, index) => {
    const tier = tiers[index]!;
    if (s.status === "fulfilled") {
      answers.push(s.value);
      tier.listingSucceeded();
      return;
    }
    unanswered.push({ tier, error: s.reason });
    if (index !== thrown)
      tier.listingFailed(s.reason, (error) => events.report({ error, operation: "listing", tier: index }));
  });
  if (thrown === 0) throw (settled[0] as PromiseRejectedResult).reason;
  return { answers, unanswered };
}

/**
 * Committed steps on any tier, ascending; `withDamaged`: and those whose metadata.json is there
 * but unusable (candidates of `restore("latest")` that fail to verify). A tier that could not be
 * listed makes it throw `storage` (it may hold newer steps), unless `replication.unlistedTiers`
 * is `"leaveOut"`. With several ranks (a collective, every rank deciding alike): the steps rank
 * 0 sees committed on some tier where every other rank holds them too (committed, or with a
 * tier 0 per rank, a directory of its own files of that step), which are those every rank can
 * restore together; a tier some rank could not list makes every rank throw.
 */
export async function allStepsOf(
  tiers: readonly Tier[],
  events: ManagerEmitter,
  group?: ProcessGroup,
  withDamaged = false,
): Promise<number[]> {
  const rank = group?.rank ?? 0;
  const ask = async (store: StepStore, tier: Tier) => {
    const steps = await tier.committedSteps();
    return [tier.index, withDamaged ? [...steps, ...store.damagedSteps()] : steps, store.filesOfRank(rank)] as const;
  };
  if (group === undefined || group.worldSize === 1) {
    const { answers, unanswered } = await acrossTiers(tiers, events, ask);
    const steps = [...new Set(answers.flatMap(([, steps]) => steps))].sort((a, b) => a - b);
    if (unanswered[0] !== undefined && !leavesOut(tiers)) throw unlisted(unanswered[0], steps);
    return steps;
  }
  // Every rank gathers, even one that could list no tier: none is left waiting for it.
  const mine = await acrossTiers(tiers, events, ask).then(
    ({ answers, unanswered }) => ({ answers, unanswered, failure: undefined }),
    (failure: unknown) => ({ answers: [], unanswered: tiers.map((tier) => ({ tier, error: failure })), failure }),
  );
  const ranks = await group.allGather([
    mine.answers.map(([index, steps, own]) => [index, steps, own]),
    mine.unanswered.map((u) => u.tier.index),
  ]);
  // Every rank decides from the same gathered lists, rank 0's first: they all answer alike.
  const listsOf = (r: unknown): unknown[] => (Array.isArray(r) && Array.isArray(r[0]) ? (r[0] as unknown[]) : []);
  const unansweredOf = (r: unknown): unknown[] => (Array.isArray(r) && Array.isArray(r[1]) ? (r[1] as unknown[]) : []);
  const listOf = (r: unknown, index: number): [unknown, unknown, unknown] | undefined =>
    listsOf(r).find((e) => Array.isArray(e) && e[0] === index) as [unknown, unknown, unknown] | undefined;
  const has = (list: unknown, step: number): boolean => Array.isArray(list) && list.includes(step);
  const common = new Set<number>();
  for (const tier of tiers) {
    const first = listOf(ranks[0], tier.index);
    if (!first || !Array.isArray(first[1])) continue;
    for (const step of first[1]) {
      // Other ranks' lists, yet checked: a rank trusts no value it did not make.
      if (!Number.isSafeInteger(step)) continue;
      const everywhere = ranks.every((r, i) => {
        const list = listOf(r, tier.index);
        return list !== undefined && (has(list[1], step as number) || (i > 0 && has(list[2], step as number)));
      });
      if (everywhere) common.add(step as number);
    }
  }
  const steps = [...common].sort((a, b) => a - b);
  if (mine.failure !== undefined) throw mine.failure;
  const down = ranks.findIndex((r) => (leavesOut(tiers) ? listsOf(r).length === 0 : unansweredOf(r).length > 0));
  if (down < 0) return steps;
  const own = mine.unanswered[0];
  if (own !== undefined && !leavesOut(tiers)) throw unlisted(own, steps);
  const index = unansweredOf(ranks[down]).find((i) => tiers.some((t) => t.index === i));
  const tier = tiers.find((t) => t.index === index) ?? tiers[0]!;
  throw unlisted({ tier, error: new CheckpointError("storage", `rank ${down} could not list it`) }, steps, down);
}

/**
 * The newest step committed on any tier (with several ranks, a collective: of those some tier
 * holds on every rank); throws as `allStepsOf` does when a tier could not be listed.
 */
export async function latestStepOf(
  tiers: readonly Tier[],
  events: ManagerEmitter,
  group?: ProcessGroup,
): Promise<number | undefined> {
  if (group !== undefined && group.worldSize > 1) return (await allStepsOf(tiers, events, group)).at(-1);
  const { answers, unanswered } = await acrossTiers(tiers, events, (store) => store.latestStep());
  const steps = answers.filter((s): s is number => s !== undefined);
  if (unanswered[0] !== undefined && !leavesOut(tiers)) throw unlisted(unanswered[0], steps);
  return steps.length === 0 ? undefined : steps.reduce((a, b) => Math.max(a, b));
}

/** The tiers holding `step` committed, fastest first (one stat each); tiers that cannot answer (or be opened) are left out. */
export async function holders(tiers: readonly Tier[], step: number): Promise<Tier[]> {
  const found = await Promise.all(
    tiers.map(async (tier) =>
      (await tier
        .open()
        .then((store) => store.isCommitted(step))
        .catch(() => false))
        ? tier
        : undefined,
    ),
  );
  return found.filter((t): t is Tier => t !== undefined);
}

/**
 * The tiers holding `step` committed, fastest first, each asked only once the faster ones were
 * read past: a slower tier that hangs never holds up a faster one. Tiers that cannot answer are
 * left out and told to `unanswered` (the step may be there: a caller deciding it is damaged
 * must know); when none answers, the first failure is thrown (what exists is unknown, not absent).
 */
export async function* holdersInOrder(
  tiers: readonly Tier[],
  step: number,
  unanswered?: (tier: Tier, error: unknown) => void,
): AsyncGenerator<Tier> {
  let answered = false;
  let first: { error: unknown } | undefined;
  for (const tier of tiers) {
    let held: boolean;
    try {
      held = await (await tier.open()).isCommitted(step);
      answered = true;
    } catch (error) {
      first ??= { error };
      unanswered?.(tier, error);
      continue;
    }
    if (held) yield tier;
  }
  if (!answered && first) throw first.error;
}

/** The `not_found` error for `step`, listing the committed steps, and the tiers that could not be listed. */
export async function notFound(tiers: readonly Tier[], events: ManagerEmitter, step: number): Promise<CheckpointError> {
  const listed = await acrossTiers(tiers, events, (_, tier) => tier.committedSteps()).catch(() => undefined);
  const steps = [...new Set(listed?.answers.flat() ?? [])].sort((a, b) => a - b);
  const unlisted = listed === undefined ? tiers : listed.unanswered.map((u) => u.tier);
  const where = tiers.length === 1 ? `under ${(await tiers[0]!.open()).storage.root}` : "on any tier";
  const note = unlisted.length === 0 ? "" : ` (${unlisted.map((t) => `tier ${t.index}`).join(", ")} not listed)`;
  return new CheckpointError(
    "not_found",
    `step ${step} has no committed checkpoint ${where}; committed steps${note}: ${steps.length ? steps.join(", ") : "none"}`,
    {
      context: { step },
    },
  );
}

/**
 * What `step` was saved with, from the fastest tier holding it. Not found where every tier
 * answered; else the failure of a tier that could not say whether it holds the step.
 */
export async function metadataOf(tiers: readonly Tier[], events: ManagerEmitter, step: number): Promise<StepMetadata> {
  let first: unknown;
  let unanswered: { error: unknown } | undefined;
  for await (const tier of holdersInOrder(tiers, step, (_, error) => (unanswered ??= { error }))) {
    try {
      return await (await tier.open()).metadata(step);
    } catch (error) {
      if (!fallsThrough(error)) throw error;
      first ??= error;
    }
  }
  if (first !== undefined) throw first;
  if (unanswered !== undefined) throw unanswered.error;
  throw await notFound(tiers, events, step);
}

/** Each tier's state for `mgr.tiers()`. */
export function tierStates(tiers: readonly Tier[], replication: Replication | undefined): Promise<TierState[]> {
  return Promise.all(
    tiers.map(async (tier) => {
      const store = await tier.open();
      const failing = replication?.queue.failing(tier.index);
      let listed: { steps: number[]; listingFailure?: unknown };
      try {
        listed = {
          steps: await tier.answer(
            (async () => {
              await tier.retention?.settled();
              return tier.committedSteps();
            })(),
          ),
        };
      } catch (error) {
        listed = { steps: store.knownSteps(), listingFailure: error };
      }
      return {
        index: tier.index,
        root: store.storage.root,
        ...listed,
        pending: (replication?.unreplicated() ?? [])
          .filter((u) => u.tier === tier.index && !u.permanent)
          .map((u) => u.step),
        ...(failing === undefined ? {} : { failing }),
        retentionFailures: tier.retention?.failures() ?? [],
      };
    }),
  );
}

/**
 * Deletes `step` on every tier, the fastest first, once its copies are dropped and any running one
 * has ended (a commit already sent would otherwise land after the deletion); every tier is
 * tried, the first failure thrown. With `replacing` (a save with `overwrite`), a slower tier
 * that fails is left as it is: the save goes on, and its copy replaces the old one there later.
 */
export async function deleteEverywhere(
  tiers: readonly Tier[],
  replication: Replication | undefined,
  step: number,
  replacing = false,
): Promise<void> {
  let failure: unknown;
  try {
    await replication?.drop(step);
    for (const tier of tiers) {
      try {
        // A copy to this tier that references the step's files (its base) commits after: they stay until a later pass.
        const reading = (): boolean => replication?.isReading(tier.index, step) ?? false;
        await (await tier.open()).deleteStep(step, true, reading);
      } catch (error) {
        if (replacing && tier.index > 0) replication?.replaces(step, tier.index);
        else failure ??= error;
      }
    }
  } finally {
    replication?.deleted(step);
  }
  if (failure !== undefined) throw failure;
}
