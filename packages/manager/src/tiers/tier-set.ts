import { CheckpointError, type CoordinatedProcessGroup, type StorageAdapter, type StorageOptions } from "@cairn/core";
import { longTimer } from "@cairn/core/storage";
import type { ManagerEmitter } from "../events/manager-events.js";
import type { RetentionOptions } from "../steps/retention-policy.js";
import type { RetentionFailure, StepMetadata, StepStore } from "../steps/step-store.js";
import type { CopyIdentity } from "./copy-identity.js";
import { DeletionPoster, type DeletionFollower, followDeletions } from "./rank-deletions.js";
import type { UnreplicatedStep } from "./replication-queue.js";
import { Replication } from "./replication.js";
import { Tier, type TierState } from "./tier.js";
import { type ReplicationOptions, type TierOptions, tierConfigs } from "./tier-config.js";
import { allStepsOf, deleteEverywhere, latestStepOf, metadataOf, tierStates } from "./tiered-steps.js";

export interface TierSetSetup {
  readonly locations: readonly (string | StorageAdapter)[];
  readonly options: RetentionOptions & {
    readonly tiers?: readonly (TierOptions | undefined)[];
    readonly replication?: ReplicationOptions;
    readonly storageOptions?: StorageOptions;
    readonly leftoverAgeMs?: number;
    readonly readOnly?: boolean;
  };
  readonly group: CoordinatedProcessGroup;
  readonly events: ManagerEmitter;
  readonly now: () => number;
  /** Whether a save in flight (staging, uploading, or used as an incremental base) holds `step` on tier 0. */
  readonly isSaving: (step: number) => boolean;
  /** Whether retention must keep `step` on every tier (the durability guard: the newest good, durable step). */
  readonly holds: (step: number) => boolean;
}

/** What `join()` and `close()` resolve with once every background upload and retention pass is done. */
export interface JoinResult {
  /**
   * Steps retention should have deleted but could not, as of its latest pass, each with the
   * error; `step` is undefined when a pass could not list the root. Every later pass retries
   * them; empty when retention is caught up.
   */
  readonly retentionFailures: readonly RetentionFailure[];
  /**
   * With several locations only: the copies to slower tiers not done, newest first, each with its
   * latest error (retried until `close()`, unless `permanent`). Empty when every tier holds what it takes.
   */
  readonly unreplicated?: readonly UnreplicatedStep[];
}

/** A step tier 0 committed, as the commit path hands it on. */
export interface CommittedStep {
  readonly step: number;
  readonly time: number;
  readonly metrics: Readonly<Record<string, number>>;
  readonly referenced: readonly string[];
  readonly identity: CopyIdentity;
}

/**
 * A manager's locations, fastest first: one is a tier set of one. Tier 0 takes the saves; each
 * commit and deletion passes through here to the tier's index, its retention and the copies down
 * the slower tiers. Reads (steps, metadata, restores) ask every tier, the fastest first.
 */
export class TierSet {
  readonly #tiers: Tier[];
  readonly #events: ManagerEmitter;
  readonly #group: CoordinatedProcessGroup;
  readonly #replication: Replication | undefined;
  /** Several ranks with slower tiers: tier 0 is each rank's own disk, so what exists is agreed across ranks. */
  readonly #perRank: boolean;
  #discovery: Promise<void> | undefined;
  /** Several ranks, not rank 0: the deletions rank 0's tier 0 retention asks of this rank's tier 0. */
  #deletions: DeletionFollower | undefined;
  #deletionPoster: DeletionPoster | undefined;
  #closed = false;

  constructor(setup: TierSetSetup) {
    const { locations, options, group, events, now } = setup;
    this.#events = events;
    this.#group = group;
    this.#perRank = locations.length > 1 && group.worldSize > 1;
    // With a tier 0 per rank, rank 0 alone decides retention, and sends each rank what to sweep of its tier 0.
    const byRank = this.#perRank && !options.readOnly;
    this.#tiers = tierConfigs(locations, options).map(
      (config) =>
        new Tier({
          config,
          storageOptions: options.storageOptions,
          leftoverAgeMs: options.leftoverAgeMs ?? 24 * 3600 * 1000,
          now,
          isBusy: (tier, step) =>
            (tier === 0 && setup.isSaving(step)) ||
            setup.holds(step) ||
            (this.#replication?.isHeld(tier, step) ?? false) ||
            (this.#replication?.queue.has(step, tier) ?? false),
          onDamaged: (tier, step, error) => events.report({ step, error, operation: "listing", ...this.#label(tier) }),
          onRetentionFailure: (tier, { step, error }) =>
            events.report({
              ...(step === undefined ? {} : { step }),
              error,
              operation: "retention",
              ...this.#label(tier),
            }),
          onDeleted: (tier, steps, swept) => (tier === 0 ? this.#deletionPoster?.post(steps, swept) : undefined),
          sweepsByRank: byRank && group.rank === 0,
          retains: !(byRank && group.rank !== 0),
        }),
    );
    if (this.#tiers.length > 1 && !options.readOnly) {
      this.#replication = new Replication({
        tiers: this.#tiers,
        options: options.replication ?? {},
        events,
        now,
        group,
      });
      if (group.worldSize > 1 && group.rank === 0) this.#deletionPoster = new DeletionPoster(group);
      if (group.rank !== 0) this.#deletions = followDeletions(group, this.#tiers[0]!, events);
    }
  }

  /** Events name the tier when there are several. */
  #label(tier: number): { tier?: number } {
    return this.#tiers.length > 1 ? { tier } : {};
  }

  get group(): CoordinatedProcessGroup {
    return this.#group;
  }

  /** Tier 0, where saves commit. */
  get first(): Tier {
    return this.#tiers[0]!;
  }

  get all(): readonly Tier[] {
    return this.#tiers;
  }

  get replication(): Replication | undefined {
    return this.#replication;
  }

  /** Opens tier 0 (and, with slower tiers, starts finding what earlier runs left unreplicated). */
  open(): Promise<StepStore> {
    if (this.#closed) return Promise.reject(new CheckpointError("invalid_argument", "the CheckpointManager is closed"));
    if (this.#replication && !this.#discovery) void this.#discover(false);
    return this.first.open();
  }

  /** Lists every tier and queues missing copies; listing failures are reported, never thrown. */
  #discover(again: boolean): Promise<void> {
    if (this.#replication && (!this.#discovery || again))
      this.#discovery = this.#replication.discover().catch(() => undefined);
    return this.#discovery ?? Promise.resolve();
  }

  /**
   * The commit path: a step tier 0 committed enters its index, is queued for the slower tiers,
   * and (on rank 0) schedules tier 0's retention, whose pass resolves the steps it deleted.
   */
  committed(c: CommittedStep): Promise<number[]> | undefined {
    this.first.committed(c.step, c.time, c.metrics, c.referenced, c.identity);
    this.#replication?.committed(c.step, 0);
    return this.#group.rank === 0 ? this.first.retention?.schedule() : undefined;
  }

  /** The deletion path: `step` leaves every tier and the copy queue (see `deleteEverywhere`). */
  async delete(step: number, replacing = false): Promise<void> {
    await this.open();
    await deleteEverywhere(this.#tiers, this.#replication, step, replacing);
  }

  /** Committed steps on any tier, ascending (with a tier 0 per rank, a collective). */
  async allSteps(): Promise<number[]> {
    await this.open();
    return allStepsOf(this.#tiers, this.#events, this.#perRank ? this.#group : undefined);
  }

  async latestStep(): Promise<number | undefined> {
    await this.open();
    return latestStepOf(this.#tiers, this.#events, this.#perRank ? this.#group : undefined);
  }

  async metadata(step: number): Promise<StepMetadata> {
    await this.open();
    return metadataOf(this.#tiers, this.#events, step);
  }

  /** Lists every tier again; a slower tier that cannot be listed is reported (once per outage), tier 0's failure thrown. */
  async reload(): Promise<void> {
    await this.open();
    await Promise.all(
      this.#tiers.map(async (tier) => {
        const store = await tier.open();
        try {
          await tier.answer(
            (async () => {
              await tier.retention?.settled();
              await store.reload();
            })(),
          );
          tier.listingSucceeded();
        } catch (error) {
          if (tier.index === 0) throw error;
          tier.listingFailed(error, (e) => this.#events.report({ error: e, operation: "listing", tier: tier.index }));
        }
      }),
    );
    await this.#discover(true);
  }

  async states(): Promise<TierState[]> {
    await this.open();
    return tierStates(this.#tiers, this.#replication);
  }

  /** Waits for discovery, queued copies and every tier's retention. */
  async settled(): Promise<void> {
    await this.#discovery;
    await this.#replication?.queue.settled();
    await this.#retention();
  }

  #retention(): Promise<unknown> {
    return Promise.all(this.#tiers.map((tier) => tier.retention?.settled()));
  }

  result(): JoinResult {
    const retentionFailures = this.first.retention?.failures() ?? [];
    return this.#tiers.length > 1
      ? { retentionFailures, unreplicated: this.#replication?.unreplicated() ?? [] }
      : { retentionFailures };
  }

  /**
   * What `close` waits for: `join()`; with slower tiers and a `timeoutMs`, tier 0's saves whole
   * (`pipeline`) and the rest (listing, copies, the retention passes they freed) only until the
   * deadline, even on a tier that hangs.
   */
  async settleForClose(
    timeoutMs: number | undefined,
    pipeline: { drain(): Promise<void>; throwFailure(): void },
    join: () => Promise<JoinResult>,
  ): Promise<JoinResult> {
    const replication = this.#replication;
    if (!replication || timeoutMs === undefined) return join();
    await pipeline.drain();
    let cancel = (): void => undefined;
    const expired = new Promise<void>((resolve) => (cancel = longTimer(resolve, timeoutMs, { ref: true })));
    const rest = (async () => {
      await join();
      await replication.queue.drained(timeoutMs);
      await this.#retention();
    })();
    rest.catch(() => undefined);
    await Promise.race([rest, expired]).finally(cancel);
    pipeline.throwFailure();
    return this.result();
  }

  /** Several ranks: the others keep joining rank 0's copies, and deleting what its retention did, until it is done. */
  async followRankZero(): Promise<void> {
    if (!this.#replication || this.#group.worldSize === 1) return;
    // Rank 0's copies end before the others stop following: none waits for a rank that left.
    if (this.#group.rank === 0) await this.#replication.stop();
    const posted = await this.#group.group("cairn/manager/close").broadcast(this.#deletionPoster?.posted, 0);
    await this.#deletions?.settled(typeof posted === "number" ? posted : 0, 10_000);
  }

  async close(): Promise<void> {
    this.#closed = true;
    // What close({ timeoutMs }) left running deletes nothing more once close returns.
    for (const tier of this.#tiers) tier.retention?.stop();
    await this.#replication?.stop();
    this.#deletions?.stop();
    await Promise.all(this.#tiers.map((tier) => tier.close()));
  }
}
