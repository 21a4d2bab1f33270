import { type CheckpointErrorCode, type StorageAdapter, CheckpointError, isGone } from "@cairn/core";
import { METADATA_FILE, checkpointFingerprint, isReferencedFile } from "@cairn/core/format";
import { checkpointBytes } from "@cairn/core/ops";
import { TEMP_OBJECT_PREFIX } from "@cairn/core/storage";
import PQueue from "p-queue";
import { parseStep } from "./step-naming.js";
import { metricsOf, readStepMetadata } from "./stored-values.js";

/** What went wrong with one step: a tool reports it and goes on with the others. */
export interface StepProblem {
  readonly step: number;
  readonly code: CheckpointErrorCode | "internal";
  readonly message: string;
}

/**
 * Where a step directory stands: `committed` (its metadata.json reads back), `damaged` (it has
 * one that cannot be read), `referenced` (a deleted step whose every remaining file a committed
 * incremental step uses: kept on purpose, gone with the last step using it) or `uncommitted`
 * (a leftover of a save that never committed, or is still running).
 */
export type StepState = "committed" | "uncommitted" | "referenced" | "damaged";

/** A step directory under a manager's root, as `listSteps` finds it. */
export interface StepListing {
  readonly step: number;
  readonly state: StepState;
  /** Whether it has a metadata.json (readable or not). */
  readonly committed: boolean;
  /** Objects and bytes under `<root>/<step>/`: what the step wrote and still holds. */
  readonly objects: number;
  readonly bytes: number;
  /**
   * A committed incremental step (format 2.1): bytes it uses of other steps' data files (their
   * headers and its chunks, `checkpointBytes`), instead of writing them. 0 for a full save.
   */
  readonly referencedBytes: number;
  /** Of `objects` and `bytes`: temp files of writes in progress or killed (`TEMP_OBJECT_PREFIX`), which no step uses. */
  readonly tempObjects: number;
  readonly tempBytes: number;
  /** The committed steps using files of this directory (a base of incremental steps), ascending. */
  readonly referencedBy: readonly number[];
  /** Committed: when it was saved (the manager's `savedAt`, else the commit time). Leftover: its newest object's time, if storage knows every object's. */
  readonly time?: string;
  /** Committed by a CheckpointManager: seconds from the start of its save (`savedAt`) to its commit (`createdAt`). */
  readonly saveSeconds?: number;
  readonly metrics: Readonly<Record<string, number>>;
  /** Committed: its fingerprint (`checkpointFingerprint`), null for a step saved before content hashes (format 2.1 or older). */
  readonly fingerprint?: string | null;
  /** Set when the step has a metadata.json that cannot be read (damaged, foreign, unreadable): why. */
  readonly error?: { readonly code: StepProblem["code"]; readonly message: string };
}

/** A root's listing: its step directories ascending, and how many objects lie outside any step directory. */
export interface RootListing {
  readonly steps: StepListing[];
  readonly others: number;
}

/** What a step's metadata.json gives its listing. */
interface FromMetadata {
  readonly time: string;
  readonly saveSeconds?: number;
  readonly metrics: Readonly<Record<string, number>>;
  readonly fingerprint: string | null;
  readonly referencedBytes: number;
  /** `<step>/<file>` paths of other steps' files it uses (only under canonical step names). */
  readonly uses: readonly string[];
}

/**
 * What earlier listings of one root read from its steps' metadata.json, by step, with the
 * object's size and time: a listing that finds the same object again reuses it instead of
 * reading it (`cairn ui` lists its roots again every few seconds). Storage that reports no
 * modification times is always read.
 */
export class StepListingCache {
  readonly #steps = new Map<number, { readonly stamp: string; readonly read: FromMetadata }>();

  get(step: number, stamp: string | undefined): FromMetadata | undefined {
    const known = this.#steps.get(step);
    return stamp !== undefined && known?.stamp === stamp ? known.read : undefined;
  }

  set(step: number, stamp: string | undefined, read: FromMetadata): void {
    if (stamp === undefined) this.#steps.delete(step);
    else this.#steps.set(step, { stamp, read });
  }

  /** Forgets steps no longer listed. */
  keepOnly(steps: ReadonlySet<number>): void {
    for (const step of this.#steps.keys()) if (!steps.has(step)) this.#steps.delete(step);
  }
}

export interface ListStepsOptions {
  /** What earlier listings of the same root read (see `StepListingCache`). */
  readonly cache?: StepListingCache;
  readonly signal?: AbortSignal;
}

/**
 * The steps under `dir` of `storage` that have a metadata.json, ascending, from one listing and
 * no read: what a tool names when it was given a root of steps where it wanted one checkpoint.
 */
export async function committedStepsUnder(storage: StorageAdapter, dir: string): Promise<number[]> {
  const prefix = dir === "" ? "" : `${dir}/`;
  const steps = new Set<number>();
  for await (const object of storage.list(prefix)) {
    const [name, file, extra] = object.path.slice(prefix.length).split("/");
    const step = parseStep(name ?? "");
    if (step !== undefined && file === METADATA_FILE && extra === undefined) steps.add(step);
  }
  return [...steps].sort((a, b) => a - b);
}

/** Metadata reads in flight at once. */
const READ_CONCURRENCY = 8;

export function problemOf(step: number, error: unknown): StepProblem {
  if (error instanceof CheckpointError) return { step, code: error.code, message: error.message };
  return { step, code: "internal", message: error instanceof Error ? error.message : String(error) };
}

async function readStep(storage: StorageAdapter, step: number, signal?: AbortSignal): Promise<FromMetadata> {
  const metadata = await readStepMetadata(storage, step, signal);
  const savedAt = metadata.user.savedAt;
  const seconds = typeof savedAt === "string" ? (Date.parse(metadata.createdAt) - Date.parse(savedAt)) / 1000 : NaN;
  const uses: string[] = [];
  for (const name in metadata.files) {
    const file = metadata.files[name]!;
    if (isReferencedFile(file) && parseStep(file.dir!) !== undefined) uses.push(`${file.dir}/${name}`);
  }
  return {
    time: typeof savedAt === "string" ? savedAt : metadata.createdAt,
    metrics: metricsOf(metadata.user.metrics),
    fingerprint: (await checkpointFingerprint(metadata)) ?? null,
    referencedBytes: checkpointBytes(metadata).referenced,
    uses,
    ...(Number.isFinite(seconds) && seconds >= 0 ? { saveSeconds: seconds } : {}),
  };
}

/** What one listing found under a step directory. */
interface Found {
  objects: number;
  bytes: number;
  tempObjects: number;
  tempBytes: number;
  newest?: number;
  unknownAge: boolean;
  committed: boolean;
  stamp?: string;
  paths: string[];
}

/**
 * Every step directory under `root`, ascending, named as the manager names them (canonical
 * decimals; anything else is not a step): one listing, then each committed step's metadata.json
 * read once (or taken from `cache` when unchanged). A step whose metadata cannot be read is listed
 * `damaged` with its `error`, never allowed to stop the listing; one deleted meanwhile is what is
 * left of it. A directory without metadata.json whose files committed steps use is `referenced`,
 * not a leftover. Read-only: nothing is written or deleted. `cairn ls`, `cairn ui` and `cairn
 * doctor` print it; a listing failure is thrown.
 */
export async function listSteps(storage: StorageAdapter, options: ListStepsOptions = {}): Promise<RootListing> {
  const { cache, signal } = options;
  const dirs = new Map<number, Found>();
  let others = 0;
  for await (const object of storage.list("")) {
    const slash = object.path.indexOf("/");
    const step = slash > 0 ? parseStep(object.path.slice(0, slash)) : undefined;
    if (step === undefined) {
      others++;
      continue;
    }
    let entry = dirs.get(step);
    if (!entry)
      dirs.set(
        step,
        (entry = {
          objects: 0,
          bytes: 0,
          tempObjects: 0,
          tempBytes: 0,
          unknownAge: false,
          committed: false,
          paths: [],
        }),
      );
    entry.objects++;
    entry.bytes += object.size;
    entry.paths.push(object.path);
    if (object.path.slice(object.path.lastIndexOf("/") + 1).startsWith(TEMP_OBJECT_PREFIX)) {
      entry.tempObjects++;
      entry.tempBytes += object.size;
    }
    if (object.modified) entry.newest = Math.max(entry.newest ?? 0, object.modified.getTime());
    else entry.unknownAge = true;
    if (object.path.slice(slash + 1) === METADATA_FILE) {
      entry.committed = true;
      if (object.modified) entry.stamp = `${object.size}:${object.modified.getTime()}`;
    }
  }
  cache?.keepOnly(new Set(dirs.keys()));
  const queue = new PQueue({ concurrency: READ_CONCURRENCY });
  const read = new Map<number, FromMetadata | StepProblem | undefined>();
  await Promise.all(
    [...dirs].map(([step, found]) =>
      queue.add(async () => {
        if (!found.committed) return;
        const cached = cache?.get(step, found.stamp);
        if (cached) return void read.set(step, cached);
        try {
          const fromMetadata = await readStep(storage, step, signal);
          cache?.set(step, found.stamp, fromMetadata);
          read.set(step, fromMetadata);
        } catch (error) {
          // Deleted between the listing and the read (another manager's retention): what is left is not committed.
          read.set(step, isGone(error) ? undefined : problemOf(step, error));
        }
      }),
    ),
  );
  // The mark: which committed steps use each file of another step.
  const users = new Map<string, number[]>();
  for (const [step, r] of [...read].sort(([a], [b]) => a - b))
    if (r !== undefined && "uses" in r) for (const path of r.uses) users.set(path, [...(users.get(path) ?? []), step]);
  const steps = [...dirs]
    .sort(([a], [b]) => a - b)
    .map(([step, found]): StepListing => {
      const referencedBy = [...new Set(found.paths.flatMap((path) => users.get(path) ?? []))].sort((a, b) => a - b);
      const base = {
        step,
        objects: found.objects,
        bytes: found.bytes,
        tempObjects: found.tempObjects,
        tempBytes: found.tempBytes,
        referencedBytes: 0,
        referencedBy,
        metrics: {},
        ...(found.newest !== undefined && !found.unknownAge ? { time: new Date(found.newest).toISOString() } : {}),
      };
      const r = read.get(step);
      if (r === undefined) {
        const used = found.paths.every((path) => users.has(path));
        return { ...base, state: used && referencedBy.length > 0 ? "referenced" : "uncommitted", committed: false };
      }
      if (!("uses" in r))
        return { ...base, state: "damaged", committed: true, error: { code: r.code, message: r.message } };
      const { uses: _uses, ...fromMetadata } = r;
      return { ...base, ...fromMetadata, state: "committed", committed: true };
    });
  return { steps, others };
}
