import {
  CheckpointError,
  type CheckpointMetadata,
  type CoordinatedProcessGroup,
  DEFAULT_SAVE_CONCURRENCY,
  isCheckpointError,
  isGone,
  isUnusable,
  readMetadata,
  unrefTimer,
} from "@cairn/core";
import { referencedFiles } from "@cairn/core/format";
import { backoffDelay, longTimer } from "@cairn/core/storage";
import { type CopyResult, copyCheckpoint, throwIfDamaged, verifyCheckpoint } from "@cairn/core/ops";
import type { ManagerEmitter } from "../events/manager-events.js";
import { ReplicationQueue, type UnreplicatedStep } from "./replication-queue.js";
import { followCopies, leadCopy } from "./shared-copy.js";
import { parseStep, stepDir } from "../steps/step-naming.js";
import type { StepStore } from "../steps/step-store.js";
import { metricsOf } from "../steps/stored-values.js";
import type { Tier } from "./tier.js";
import { identityOf, readableCopy, replacesOlder } from "./copy-identity.js";
import { DEFAULT_REPLICATION_RETRY, type ReplicationOptions } from "./tier-config.js";

/** How long a stopping rank waits for its aborted copies to leave their collectives. */
const STOP_WAIT_MS = 10_000;

export interface ReplicationSetup {
  readonly tiers: readonly Tier[];
  readonly options: ReplicationOptions;
  readonly events: ManagerEmitter;
  /** Several ranks: rank 0 runs the queue and leads each copy; the others join the copies it asks for. */
  readonly group: CoordinatedProcessGroup;
  /** The manager's clock, for `sinceCommit`. */
  readonly now: () => number;
}

/**
 * A manager's replication: each step committed on a tier is copied to the next slower tier that
 * takes it (`every`), through core's `copyCheckpoint` (checked against its CRCs as read, the
 * metadata committed last, so a slower tier never lists a partial copy). It also decides what a
 * faster tier's retention must hold: a step some slower tier wants but has not reached.
 */
export class Replication {
  readonly queue: ReplicationQueue;
  readonly #setup: ReplicationSetup;
  /** When steps were committed on tier 0 in this process (manager clock), for `sinceCommit`. */
  readonly #committedAt = new Map<number, number>();
  readonly #retry: { readonly baseDelayMs: number; readonly maxDelayMs: number };
  /** A discovery that found a tier down runs again after a backoff. */
  #rediscover: { timer?: NodeJS.Timeout; attempts: number } = { attempts: 0 };
  #stopped = false;
  readonly #abort = new AbortController();
  #unfollow: (() => Promise<void>) | undefined;
  /** `tier/step` a save with `overwrite` could not delete there: its copy replaces what it finds. */
  readonly #replacing = new Set<string>();
  /**
   * Steps this process deleted, by when their deletion began or ended: a discovery that listed
   * before then must not queue them. Kept only while a discovery that began earlier runs.
   */
  readonly #droppedAt = new Map<number, number>();
  #drops = 0;
  /** When (in `#drops`) each discovery in flight began. */
  readonly #discovering: number[] = [];
  /** Steps whose deletion runs (`drop` until `deleted`), with how many: a listing meanwhile may still show them. */
  readonly #deleting = new Map<number, number>();
  /** Steps on a slower tier whose files a copy in flight references (`tier/step`), with how many copies do: held from that tier's retention. */
  readonly #reusing = new Map<string, number>();

  constructor(setup: ReplicationSetup) {
    this.#setup = setup;
    const retry = { ...DEFAULT_REPLICATION_RETRY, ...setup.options.retry };
    this.#retry = retry;
    this.queue = new ReplicationQueue({
      copy: (step, tier, signal) => this.#copy(step, tier, signal),
      report: (step, tier, error) => setup.events.report({ step, error, operation: "replication", tier }),
      baseDelayMs: retry.baseDelayMs,
      maxDelayMs: retry.maxDelayMs,
    });
    if (this.#follows) {
      const failing = new Set<number>();
      this.#unfollow = followCopies(setup.group, setup.tiers, {
        readBack: false,
        concurrency: setup.options.concurrency ?? DEFAULT_SAVE_CONCURRENCY,
        signal: this.#abort.signal,
        onCopied: (step, tier, { bytes, seconds, metadata }) => {
          // Every rank wrote its files: this rank's index lists the step there (rank 0 commits it).
          tier.opened?.noteCommitted(step);
          failing.delete(tier.index);
          // This rank hears it too (its own bytes): its loss budget counts the step durable, as rank 0's does.
          const saved = Date.parse(typeof metadata.user.savedAt === "string" ? metadata.user.savedAt : "");
          const sinceCommit = Number.isFinite(saved) ? Math.max(0, setup.now() - saved) : 0;
          setup.events.emit("replicated", { step, tier: tier.index, bytes, seconds, sinceCommit });
        },
        onFailure: (step, tier, error) => {
          if (!failing.has(tier)) setup.events.report({ step, error, operation: "replication", tier });
          failing.add(tier);
        },
      });
    }
  }

  /** A rank other than 0 of several: it copies only when rank 0 asks. */
  get #follows(): boolean {
    return this.#setup.group.worldSize > 1 && this.#setup.group.rank !== 0;
  }

  /** A step committed on `tier` by this process: queued for the next slower tier that takes it. */
  committed(step: number, tier: number): void {
    if (this.#follows) return;
    if (tier === 0) {
      this.#committedAt.set(step, this.#setup.now());
      this.#droppedAt.delete(step);
    }
    const next = this.#next(tier, step);
    if (next !== undefined) this.queue.add(step, next.index);
  }

  /**
   * Lists every tier and queues the steps a faster tier holds that a slower one wants and lacks
   * (copies a crashed process never finished, steps saved while the tier was down), or holds
   * only as listed: its copy there is checked by the copy's `already_exists` path. Tiers whose
   * listing fails are reported, and discovery runs again after a backoff until every tier lists.
   */
  async discover(): Promise<void> {
    clearTimeout(this.#rediscover.timer);
    if (this.#follows) return;
    const asOf = this.#drops;
    this.#discovering.push(asOf);
    try {
      await this.#discoverAsOf(asOf);
    } finally {
      this.#discovering.splice(this.#discovering.indexOf(asOf), 1);
      this.#forgetDrops();
    }
  }

  async #discoverAsOf(asOf: number): Promise<void> {
    const { tiers } = this.#setup;
    const listed = await Promise.all(
      tiers.map((tier) =>
        tier.answer(tier.committedSteps()).catch((error: unknown) => {
          tier.listingFailed(error, (e) =>
            this.#setup.events.report({ error: e, operation: "listing", tier: tier.index }),
          );
          return undefined;
        }),
      ),
    );
    if (listed.includes(undefined) && !this.#stopped) {
      const delay = backoffDelay(++this.#rediscover.attempts, this.#retry, "none");
      this.#rediscover.timer = setTimeout(() => void this.discover(), delay);
      unrefTimer(this.#rediscover.timer);
    } else this.#rediscover.attempts = 0;
    for (let i = 0; i < tiers.length - 1; i++) {
      for (const step of listed[i] ?? []) {
        // Deleted since these listings were asked for (by a deletion or retention), or being deleted: what they say of it is out of date.
        if ((this.#droppedAt.get(step) ?? 0) > asOf || this.#deleting.has(step) || !tiers[i]!.opened?.lists(step))
          continue;
        const next = this.#next(i, step);
        if (next && listed[next.index] !== undefined && !next.holdsReplica(step, tiers[i]!.opened?.identityOf(step)))
          this.queue.add(step, next.index);
      }
    }
  }

  /**
   * Whether `tier`'s retention must keep `step`: a copy reads it, or (unless `deleteUnreplicated`)
   * a slower tier that takes it does not hold a replica of this very checkpoint (same identity,
   * readable) yet: not copied, not listed, damaged there, or another checkpoint under that number.
   */
  isHeld(tier: number, step: number): boolean {
    if (this.queue.isCopying(step) || this.#reusing.has(`${tier}/${step}`)) return true;
    if (this.#setup.options.deleteUnreplicated) return false;
    const identity = this.#setup.tiers[tier]!.opened?.identityOf(step);
    return this.#setup.tiers.slice(tier + 1).some((t) => t.wants(step) && !t.holdsReplica(step, identity));
  }

  /**
   * `step` is being deleted (or saved again over): its copies are dropped, a discovery listing
   * until `deleted(step)` will not queue it again, and this resolves once a copy that was running
   * has ended, so the deletion that follows also clears whatever that copy committed.
   */
  drop(step: number): Promise<void> {
    this.#droppedAt.set(step, ++this.#drops);
    this.#deleting.set(step, (this.#deleting.get(step) ?? 0) + 1);
    return this.queue.remove(step);
  }

  /** The deletion `drop(step)` began has ended (or failed): a discovery listing from now on sees what it left. */
  deleted(step: number): void {
    const left = (this.#deleting.get(step) ?? 1) - 1;
    if (left > 0) this.#deleting.set(step, left);
    else this.#deleting.delete(step);
    this.#droppedAt.set(step, ++this.#drops);
    this.#forgetDrops();
  }

  /** Forgets the deletions every discovery in flight began after: none of them (nor a later one) passes over those steps. */
  #forgetDrops(): void {
    const oldest = this.#discovering.reduce((a, b) => Math.min(a, b), this.#drops);
    for (const [step, at] of this.#droppedAt) if (at <= oldest) this.#droppedAt.delete(step);
  }

  /** How many deleted steps discoveries in flight must still pass over (none once they ended): for tests. */
  get droppedSteps(): number {
    return this.#droppedAt.size;
  }

  /** A save with `overwrite` could not delete `step` on `tier` (down): its copy there replaces the old one. */
  replaces(step: number, tier: number): void {
    this.#replacing.add(`${tier}/${step}`);
  }

  /**
   * Stops copying and discovering (on close); what is left stays unreplicated. With several ranks
   * it resolves once the aborted copies settled (10 s at most), so none is left in a collective
   * another rank waits on after it closed the group.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#rediscover.timer);
    this.#abort.abort();
    const settled = Promise.all([this.#unfollow?.(), this.queue.stop()]);
    if (this.#setup.group.worldSize === 1) return;
    let cancel = (): void => undefined;
    await Promise.race([settled, new Promise<void>((resolve) => (cancel = longTimer(resolve, STOP_WAIT_MS)))]);
    cancel();
  }

  /** What is not replicated yet. */
  unreplicated(): UnreplicatedStep[] {
    return this.queue.unreplicated();
  }

  /** The next slower tier after `tier` that takes `step`. */
  #next(tier: number, step: number): Tier | undefined {
    return this.#setup.tiers.slice(tier + 1).find((t) => t.wants(step));
  }

  /** Copies `step` into tier `index` from the fastest faster tier holding it whole; a damaged source falls through to the next. */
  async #copy(step: number, index: number, signal: AbortSignal): Promise<void> {
    const { tiers, options } = this.#setup;
    const destination = tiers[index]!;
    const target = await destination.open();
    const started = performance.now();
    let lastError: unknown;
    /** Sources that failed with their step gone: deleted since the copy began, or only a file of it lost. */
    const vanished: StepStore[] = [];
    let damaged = false;
    for (const source of tiers.slice(0, index)) {
      const store = await source.open();
      if (!(await store.isCommitted(step))) continue;
      try {
        const copy = {
          readBack: options.readBack ?? false,
          concurrency: options.concurrency ?? DEFAULT_SAVE_CONCURRENCY,
          signal,
          force: this.#replacing.has(`${index}/${step}`),
        };
        const result =
          this.#setup.group.worldSize > 1
            ? await leadCopy(this.#setup.group, source, destination, step, copy)
            : await copyAlone(store, target, step, {
                ...copy,
                incremental: options.incremental ?? true,
                hold: (base) => this.#hold(index, base),
              });
        this.#replacing.delete(`${index}/${step}`);
        throwIfDropped(signal, step, index);
        this.#reached(step, destination, result.metadata, {
          bytes: result.bytes,
          seconds: (performance.now() - started) / 1000,
        });
        return;
      } catch (error) {
        if (isCheckpointError(error, "already_exists")) return this.#adopt(step, store, source, destination, signal);
        // A source copy that cannot be read whole: the next tier holding the step is tried.
        if (!isUnusable(error)) throw error;
        lastError = error;
        if (isGone(error)) vanished.push(store);
        else damaged = true;
      }
    }
    // No faster tier holds it (any more, maybe since the copy began: another manager's retention
    // or deletion took it) and this tier does: nothing is left to copy.
    const gone = async (): Promise<boolean> =>
      !damaged && !(await Promise.all(vanished.map((s) => s.isCommitted(step)))).some(Boolean);
    if ((await gone()) && (await target.isCommitted(step))) return;
    throw (
      lastError ??
      new CheckpointError(
        "not_found",
        `step ${step} is committed on no tier faster than tier ${index}; it cannot be replicated`,
        { context: { step } },
      )
    );
  }

  /**
   * The destination already has `step` committed (an earlier process's copy, or someone else's
   * checkpoint under that number). It counts as the replica only if it is readable and the same
   * checkpoint as the source's; otherwise the copy fails for good (`mismatch`), nothing there is
   * replaced, and the faster tier keeps its copy.
   */
  async #adopt(step: number, from: StepStore, source: Tier, destination: Tier, signal: AbortSignal): Promise<void> {
    const to = await destination.open();
    // The source's metadata alone: with a tier 0 per rank, the other ranks' files are on their disks.
    const [saved, found] = await Promise.all([
      readMetadata({ storage: from.storage, path: stepDir(step), signal }),
      readableCopy(to.storage, step, signal)
        .then(async (found) => {
          // With readBack, a found copy is read back and checked as a copy made here would be.
          if (this.#setup.options.readBack) {
            const where = `${to.storage.root}/${stepDir(step)}`;
            const report = await verifyCheckpoint(to.storage, stepDir(step), found.metadata, {
              signal,
              offThread: true,
            });
            throwIfDamaged(report, where);
          }
          return found;
        })
        .catch((error: unknown) => ({ error })),
    ]);
    const want = identityOf(saved);
    if ("identity" in found && found.identity !== want && replacesOlder(saved, found.metadata)) {
      // A save with overwrite that could not delete the older checkpoint here (the tier was down, maybe in an earlier process).
      this.#replacing.add(`${destination.index}/${step}`);
      return this.#copy(step, destination.index, signal);
    }
    if (!("identity" in found) || found.identity !== want) {
      const why =
        "identity" in found
          ? "another checkpoint (a different run's, or an older save) under that step number"
          : `a copy that cannot be read (${found.error instanceof Error ? found.error.message : String(found.error)})`;
      throw new CheckpointError(
        "mismatch",
        `step ${step} is not replicated to tier ${destination.index}: ${to.storage.root} holds ${why}. It is left as it is, and tier ${source.index} keeps its copy; delete step ${step} there, or save it again with { overwrite: true }`,
        { context: { step }, ...("identity" in found ? {} : { cause: found.error }) },
      );
    }
    throwIfDropped(signal, step, destination.index);
    to.noteCommitted(step);
    this.#reached(step, destination, found.metadata, undefined);
  }

  /** Whether a copy in flight references `step`'s files on tier `tier` (its base there). */
  isReading(tier: number, step: number): boolean {
    return this.#reusing.has(`${tier}/${step}`);
  }

  /** Holds `step` on tier `tier` from its retention until the returned release is called. */
  #hold(tier: number, step: number): () => void {
    const key = `${tier}/${step}`;
    this.#reusing.set(key, (this.#reusing.get(key) ?? 0) + 1);
    return () => {
      const left = this.#reusing.get(key)! - 1;
      if (left > 0) this.#reusing.set(key, left);
      else this.#reusing.delete(key);
    };
  }

  /** `step` is committed on `tier` as `metadata` says: by a copy (`copied`), or found there already. */
  #reached(
    step: number,
    tier: Tier,
    metadata: CheckpointMetadata,
    copied: { bytes: number; seconds: number } | undefined,
  ): void {
    const user = metadata.user;
    const saved = typeof user.savedAt === "string" ? Date.parse(user.savedAt) : NaN;
    tier.committed(
      step,
      Number.isFinite(saved) ? saved : Date.parse(metadata.createdAt) || 0,
      metricsOf(user.metrics),
      referencedFiles(metadata),
      identityOf(metadata),
    );
    const since = this.#committedAt.get(step) ?? (Number.isFinite(saved) ? saved : undefined);
    if (copied)
      this.#setup.events.emit("replicated", {
        step,
        tier: tier.index,
        ...copied,
        sinceCommit: since === undefined ? 0 : Math.max(0, this.#setup.now() - since),
      });
    this.committed(step, tier.index);
    this.#retainUpTo(tier.index, step);
  }

  /** A step reached tier `index`: that may free holds on faster tiers, and that tier's retention has a new step. */
  #retainUpTo(index: number, step: number): void {
    if (!this.#next(index, step)) this.#committedAt.delete(step);
    for (const t of this.#setup.tiers.slice(0, index + 1)) void t.retention?.schedule();
  }
}

/** A copy dropped or stopped while it ran does not count, even if it committed: whoever dropped it clears that. */
function throwIfDropped(signal: AbortSignal, step: number, tier: number): void {
  if (signal.aborted)
    throw new CheckpointError("cancelled", `the copy of step ${step} to tier ${tier} was dropped`, {
      context: { step },
      cause: signal.reason,
    });
}

/**
 * One process's copy of `step` from `from` to `to`. With `incremental`, a step referencing files
 * of other steps references `to`'s copies of those steps where their bytes match (each held from
 * `to`'s retention meanwhile); anything else is copied.
 */
async function copyAlone(
  from: StepStore,
  to: StepStore,
  step: number,
  options: {
    readBack: boolean;
    concurrency: number;
    signal: AbortSignal;
    force: boolean;
    incremental: boolean;
    hold: (step: number) => () => void;
  },
): Promise<CopyResult> {
  const dir = stepDir(step);
  const metadata = await readMetadata({ storage: from.storage, path: dir, signal: options.signal });
  const referenced = new Set(Object.values(metadata.files).flatMap((f) => (f.dir === undefined ? [] : [f.dir])));
  // Its bases' copies, and the newest earlier copy there: that one references the base's bytes even once the base's copy was deleted.
  const earlier = referenced.size > 0 ? (await to.committedSteps()).filter((s) => s < step).at(-1) : undefined;
  const bases = options.incremental
    ? [...new Set([...referenced, ...(earlier === undefined ? [] : [stepDir(earlier)])])]
    : [];
  const releases = bases.flatMap((base) => {
    const step = parseStep(base);
    return step === undefined ? [] : [options.hold(step)];
  });
  try {
    const reuse = (
      await Promise.all(
        bases.map(async (base) => {
          const at = parseStep(base);
          if (at === undefined) return [];
          try {
            // Only a copy whose files are all there with their sizes: a damaged one is copied past, never referenced.
            return [{ dir: base, metadata: (await readableCopy(to.storage, at, options.signal)).metadata }];
          } catch (error) {
            // Not there (or not readable, or damaged) on this tier: its bytes are copied instead.
            if (isCheckpointError(error)) return [];
            throw error;
          }
        }),
      )
    ).flat();
    const { incremental: _incremental, hold: _hold, ...copy } = options;
    // CRCs on checksum workers: a copy runs beside the training loop.
    return await copyCheckpoint(
      { storage: from.storage, dir, metadata, where: `${from.storage.root}/${dir}` },
      { storage: to.storage, dir, where: `${to.storage.root}/${dir}` },
      { ...copy, reuse, offThread: true },
    );
  } finally {
    for (const release of releases) release();
  }
}
