import { type CheckpointMetadata, CheckpointError, isCheckpointError, readMetadata } from "@cairn/core";
import { METADATA_FILE } from "@cairn/core/format";
import {
  type Damage,
  CheckpointReader,
  checkpointBytes,
  diffCheckpoints,
  inspectCheckpoint,
  selectEntries,
  tensorStats,
  verifyCheckpoint,
} from "@cairn/core/ops";
import {
  type StepListing,
  type TieredStep,
  StepListingCache,
  listSteps,
  mergeTiers,
  parseStep,
  stepDir,
} from "@cairn/manager";
import PQueue from "p-queue";
import type { Location } from "../location.js";
import type {
  DiffResponse,
  StatsResponse,
  StepResponse,
  StepRow,
  StepsResponse,
  Verification,
  VerifyEvent,
} from "./ui-types.js";

/** Metadata of recently opened steps kept for the next request (a page asks for many tensors' statistics in a row). */
const METADATA_CACHE = 16;

export interface RunViewOptions {
  /** How often the page lists again, in ms. */
  readonly refreshMs: number;
  /** Reads of tensor data (statistics, diffs, verifications) at once; more wait their turn. */
  readonly concurrency?: number;
  readonly now?: () => number;
}

/** A step's copy as the listing last saw it: a verification holds only while this is unchanged. */
function stampOf(listing: StepListing): string {
  return `${listing.time ?? ""}|${listing.bytes}|${listing.referencedBytes}`;
}

/**
 * What `cairn ui` shows of a run, read-only, over the tiers of its manager (fastest first):
 * the steps as `cairn ls` lists them (`listSteps`, `mergeTiers`), a step's entries, tensor
 * statistics, diffs and verifications through core's ops. The server calls it per request; a
 * step's data is read from the first tier holding it committed unless a tier is given.
 */
export class RunView {
  readonly tiers: readonly Location[];
  readonly #options: RunViewOptions;
  readonly #caches: StepListingCache[];
  readonly #queue: PQueue;
  readonly #verifications = new Map<string, Verification & { readonly stamp: string }>();
  readonly #metadata = new Map<string, Promise<CheckpointMetadata>>();
  #listing: Promise<{ merged: TieredStep[]; others: number }> | undefined;
  #last: TieredStep[] = [];

  constructor(tiers: readonly Location[], options: RunViewOptions) {
    this.tiers = tiers;
    this.#options = options;
    this.#caches = tiers.map(() => new StepListingCache());
    this.#queue = new PQueue({ concurrency: options.concurrency ?? 2 });
  }

  /** Lists every tier once; requests arriving meanwhile share that listing. */
  async #list(): Promise<{ merged: TieredStep[]; others: number }> {
    this.#listing ??= (async () => {
      try {
        const tiers = await Promise.all(this.tiers.map((t, i) => listSteps(t.storage, { cache: this.#caches[i]! })));
        const merged = mergeTiers(tiers);
        this.#last = merged;
        return { merged, others: tiers.reduce((n, t) => n + t.others, 0) };
      } finally {
        this.#listing = undefined;
      }
    })();
    return this.#listing;
  }

  async steps(): Promise<StepsResponse> {
    const { merged, others } = await this.#list();
    const metrics = new Set<string>();
    const steps = merged.map(({ step, states, tier, listing }): StepRow => {
      for (const name of Object.keys(listing.metrics)) metrics.add(name);
      const verified = this.#verifications.get(`${tier}:${step}`);
      const { stamp, ...verification } = verified ?? { stamp: undefined };
      return {
        step,
        tiers: states.map((s) => s ?? null),
        tier,
        state: states[tier]!,
        bytes: listing.bytes,
        referencedBytes: listing.referencedBytes > 0 ? listing.referencedBytes : null,
        time: listing.time ?? null,
        saveSeconds: listing.saveSeconds ?? null,
        metrics: listing.metrics,
        error: listing.error ? { code: listing.error.code, message: listing.error.message } : null,
        verification: verified && stamp === stampOf(listing) ? (verification as Verification) : null,
      };
    });
    const newest = steps.findLast((s) => s.state === "committed" && s.verification?.ok);
    return {
      tiers: this.tiers.map((t) => t.where),
      steps,
      metrics: [...metrics].sort(),
      newestVerified: newest?.step ?? null,
      others,
      refreshMs: this.#options.refreshMs,
    };
  }

  #now(): number {
    return (this.#options.now ?? Date.now)();
  }

  /** The tier a step is read from: the one asked for, else the first holding it committed (as the last listing saw it). */
  async #tierOf(step: number, tier: number | undefined): Promise<{ tier: number; listing?: StepListing }> {
    if (tier !== undefined) {
      if (!Number.isSafeInteger(tier) || tier < 0 || tier >= this.tiers.length)
        throw new CheckpointError("invalid_argument", `tier must be 0 to ${this.tiers.length - 1}, got ${tier}`);
    }
    let row = this.#last.find((r) => r.step === step);
    if (!row) row = (await this.#list()).merged.find((r) => r.step === step);
    if (!row && tier === undefined) {
      throw new CheckpointError("not_found", `no step ${step} under ${this.tiers.map((t) => t.where).join(", ")}`, {
        context: { step },
      });
    }
    const chosen = tier ?? row!.tier;
    return { tier: chosen, ...(row?.tier === chosen ? { listing: row.listing } : {}) };
  }

  /** A step's metadata: cached while the listing shows its copy unchanged, read afresh for a copy the listing did not see. */
  #metadataOf(step: number, tier: number, listing: StepListing | undefined): Promise<CheckpointMetadata> {
    const read = () => readMetadata({ storage: this.tiers[tier]!.storage, path: stepDir(step) });
    if (!listing) return read();
    const key = `${tier}:${step}:${stampOf(listing)}`;
    let metadata = this.#metadata.get(key);
    if (!metadata) {
      metadata = read();
      this.#metadata.set(key, metadata);
      metadata.catch(() => this.#metadata.delete(key));
      if (this.#metadata.size > METADATA_CACHE) this.#metadata.delete(this.#metadata.keys().next().value!);
    }
    return metadata;
  }

  async #open(step: number, tier: number | undefined, signal?: AbortSignal) {
    const chosen = await this.#tierOf(step, tier);
    const metadata = await this.#metadataOf(step, chosen.tier, chosen.listing);
    const location = this.tiers[chosen.tier]!;
    return {
      tier: chosen.tier,
      where: `${location.where}/${stepDir(step)}`,
      metadata,
      reader: () => new CheckpointReader(location.storage, stepDir(step), metadata, signal ? { signal } : {}),
    };
  }

  async step(step: number, tier?: number, signal?: AbortSignal): Promise<StepResponse> {
    const opened = await this.#open(step, tier, signal);
    return { step, tier: opened.tier, where: opened.where, summary: inspectCheckpoint(opened.metadata) };
  }

  /** Statistics of one tensor, named by its key path. */
  async stats(
    step: number,
    key: readonly (string | number)[],
    tier?: number,
    signal?: AbortSignal,
  ): Promise<StatsResponse> {
    const opened = await this.#open(step, tier, signal);
    const [entry] = selectEntries(opened.metadata, [key]);
    if (entry?.kind !== "tensor")
      throw new CheckpointError("invalid_argument", "bytes and values have no statistics", { context: { step } });
    const reader = opened.reader();
    try {
      const stats = await this.#queue.add(() => tensorStats(reader, entry, signal ? { signal } : {}));
      return { step, tier: opened.tier, stats };
    } finally {
      await reader.close();
    }
  }

  async diff(a: number, b: number, signal?: AbortSignal): Promise<DiffResponse> {
    const [x, y] = await Promise.all([this.#open(a, undefined, signal), this.#open(b, undefined, signal)]);
    const [ra, rb] = [x.reader(), y.reader()];
    try {
      const diff = await this.#queue.add(() => diffCheckpoints(ra, rb, signal ? { signal } : {}));
      return {
        ...diff,
        a: { step: a, tier: x.tier, where: x.where },
        b: { step: b, tier: y.tier, where: y.where },
      };
    } finally {
      await Promise.all([ra.close(), rb.close()]);
    }
  }

  /**
   * Verifies a step's copy as `cairn verify` does (every byte against its CRC32C; a metadata.json
   * that cannot be read is damage too), reporting as it goes; the outcome is remembered for the
   * step's row until its copy changes.
   */
  async verify(step: number, tier: number | undefined, send: (event: VerifyEvent) => void, signal?: AbortSignal) {
    const chosen = await this.#tierOf(step, tier);
    const location = this.tiers[chosen.tier]!;
    const where = `${location.where}/${stepDir(step)}`;
    const finish = (report: {
      entries: number;
      files: number;
      bytes: number;
      damaged: readonly Damage[];
      damagedKeys: readonly string[];
    }) => {
      const verification: Verification = {
        ok: report.damaged.length === 0,
        tier: chosen.tier,
        at: new Date(this.#now()).toISOString(),
        by: "ui",
        damaged: report.damaged.length,
      };
      if (chosen.listing)
        this.#verifications.set(`${chosen.tier}:${step}`, { ...verification, stamp: stampOf(chosen.listing) });
      send({ type: "done", ...report, ok: verification.ok, verification });
    };
    let metadata: CheckpointMetadata;
    try {
      metadata = await readMetadata({ storage: location.storage, path: stepDir(step), ...(signal ? { signal } : {}) });
    } catch (error) {
      if (!isCheckpointError(error, "corrupt")) throw error;
      send({ type: "start", step, tier: chosen.tier, where, total: 0 });
      return finish({
        entries: 0,
        files: 0,
        bytes: 0,
        damaged: [{ file: METADATA_FILE, problem: error.message }],
        damagedKeys: [],
      });
    }
    const { own, referenced } = checkpointBytes(metadata);
    send({ type: "start", step, tier: chosen.tier, where, total: own + referenced });
    let done = 0;
    let sent = 0;
    const report = await this.#queue.add(() =>
      verifyCheckpoint(location.storage, stepDir(step), metadata, {
        ...(signal ? { signal } : {}),
        onRead: (n) => {
          done += n;
          const t = this.#now();
          if (t - sent >= 100) {
            sent = t;
            send({ type: "progress", bytes: done });
          }
        },
      }),
    );
    send({ type: "progress", bytes: done });
    finish(report);
  }
}

/** A step number from a request, checked as the manager names steps. */
export function stepParameter(value: string | null, name: string): number {
  const step = value === null ? undefined : parseStep(value);
  if (step === undefined)
    throw new CheckpointError("invalid_argument", `${name} must be a step number, got ${JSON.stringify(value)}`);
  return step;
}
