import { type CheckpointErrorCode, type StorageAdapter, CheckpointError, isGone, readMetadata } from "@cairn/core";
import { checkpointFingerprint } from "@cairn/core/format";
import { type RetentionOptions, StepStore, parseStep, stepDir, stepsToDelete } from "@cairn/manager";
import PQueue from "p-queue";

/** What went wrong with one step: a command reports it and goes on with the others. */
export interface StepProblem {
  readonly step: number;
  readonly code: CheckpointErrorCode | "internal";
  readonly message: string;
}

/** A step directory under a manager's root, committed or a leftover of a save that never committed. */
export interface StepListing {
  readonly step: number;
  readonly committed: boolean;
  /** Objects and bytes under `<root>/<step>/`: what the step wrote. */
  readonly objects: number;
  readonly bytes: number;
  /** A committed incremental step (format 2.1): bytes of the sibling steps' data files it uses instead of writing them. */
  readonly referencedBytes?: number;
  /** Committed: when it was saved (the manager's `savedAt`, else the commit time). Leftover: its newest object's time, if storage knows every object's. */
  readonly time?: string;
  /** Committed by a CheckpointManager: seconds from the start of its save (`savedAt`) to its commit (`createdAt`). */
  readonly saveSeconds?: number;
  readonly metrics: Readonly<Record<string, number>>;
  /**
   * Committed: its fingerprint (`checkpointFingerprint`: equal for steps with identical tensors),
   * null for a step saved before content hashes (format 2.1 or older).
   */
  readonly fingerprint?: string | null;
  /** Set when the step has a metadata.json that cannot be read (damaged, foreign, unreadable): why. */
  readonly error?: { readonly code: StepProblem["code"]; readonly message: string };
}

/** What a step's metadata.json gives its listing. */
type FromMetadata = Pick<StepListing, "time" | "saveSeconds" | "metrics" | "referencedBytes" | "fingerprint">;

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

function problemOf(step: number, error: unknown): StepProblem {
  if (error instanceof CheckpointError) return { step, code: error.code, message: error.message };
  return { step, code: "internal", message: error instanceof Error ? error.message : String(error) };
}

/** The numbers of a stored metrics object; anything else in it is not a metric. */
function metricsOf(value: unknown): Record<string, number> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return {};
  return Object.fromEntries(Object.entries(value).filter((e): e is [string, number] => typeof e[1] === "number"));
}

async function readStep(storage: StorageAdapter, step: number): Promise<FromMetadata> {
  const metadata = await readMetadata({ storage, path: stepDir(step) });
  const savedAt = metadata.user.savedAt;
  const seconds = typeof savedAt === "string" ? (Date.parse(metadata.createdAt) - Date.parse(savedAt)) / 1000 : NaN;
  let referencedBytes = 0;
  for (const name in metadata.files)
    if (metadata.files[name]!.dir !== undefined) referencedBytes += metadata.files[name]!.size;
  return {
    time: typeof savedAt === "string" ? savedAt : metadata.createdAt,
    metrics: metricsOf(metadata.user.metrics),
    fingerprint: (await checkpointFingerprint(metadata)) ?? null,
    ...(referencedBytes > 0 ? { referencedBytes } : {}),
    ...(Number.isFinite(seconds) && seconds >= 0 ? { saveSeconds: seconds } : {}),
  };
}

/**
 * Every step directory under `root`, ascending, named as the manager names them (canonical
 * decimals; anything else is not a step). Committed steps get their time, metrics, save
 * duration and referenced bytes from their metadata (or from `cache`, when it read the same
 * metadata.json before); one whose metadata cannot be read is listed with its `error`, never
 * allowed to stop the listing. Nothing is deleted or changed. `cairn ls` and `cairn ui` list with it.
 */
export async function listSteps(
  storage: StorageAdapter,
  cache?: StepListingCache,
): Promise<{ steps: StepListing[]; others: number }> {
  const dirs = new Map<
    number,
    { objects: number; bytes: number; newest?: number; unknownAge: boolean; committed: boolean; stamp?: string }
  >();
  let others = 0;
  for await (const object of storage.list("")) {
    const [dir, name, extra] = object.path.split("/");
    const step = parseStep(dir ?? "");
    if (step === undefined || name === undefined) {
      others++;
      continue;
    }
    const entry = dirs.get(step) ?? { objects: 0, bytes: 0, unknownAge: false, committed: false };
    entry.objects++;
    entry.bytes += object.size;
    if (object.modified) entry.newest = Math.max(entry.newest ?? 0, object.modified.getTime());
    else entry.unknownAge = true;
    if (name === "metadata.json" && extra === undefined) {
      entry.committed = true;
      if (object.modified) entry.stamp = `${object.size}:${object.modified.getTime()}`;
    }
    dirs.set(step, entry);
  }
  cache?.keepOnly(new Set(dirs.keys()));
  const queue = new PQueue({ concurrency: 8 });
  const steps = await Promise.all(
    [...dirs.entries()]
      .sort(([a], [b]) => a - b)
      .map(([step, d]) =>
        queue.add(async (): Promise<StepListing> => {
          const known = d.newest !== undefined && !d.unknownAge;
          const leftover = {
            step,
            committed: false,
            objects: d.objects,
            bytes: d.bytes,
            metrics: {},
            ...(known ? { time: new Date(d.newest!).toISOString() } : {}),
          };
          if (!d.committed) return leftover;
          const cached = cache?.get(step, d.stamp);
          if (cached) return { ...leftover, ...cached, committed: true };
          try {
            const read = await readStep(storage, step);
            cache?.set(step, d.stamp, read);
            return { ...leftover, ...read, committed: true };
          } catch (error) {
            // Deleted between the listing and the read (another manager's retention): a leftover now, if anything.
            if (isGone(error)) return leftover;
            const problem = problemOf(step, error);
            return { ...leftover, committed: true, error: { code: problem.code, message: problem.message } };
          }
        }),
      ),
  );
  return { steps, others };
}

/** Where a step is on one tier: absent (undefined), a leftover, committed, or damaged. */
export type StepState = "committed" | "uncommitted" | "damaged";

export function stateOf(s: StepListing | undefined): StepState | undefined {
  return s === undefined ? undefined : s.error ? "damaged" : s.committed ? "committed" : "uncommitted";
}

/** One step across the tiers of a tiered manager, fastest first. */
export interface TieredStep {
  readonly step: number;
  /** Its state on each tier (undefined where the tier does not hold it). */
  readonly states: readonly (StepState | undefined)[];
  /** The tier its figures come from: the first holding it committed and readable, else the first holding anything. */
  readonly tier: number;
  readonly listing: StepListing;
}

/** Several tiers' listings (`listSteps` of each, fastest first) as one row per step found on any of them, ascending. */
export function mergeTiers(tiers: readonly { readonly steps: readonly StepListing[] }[]): TieredStep[] {
  const byTier = tiers.map((t) => new Map(t.steps.map((s) => [s.step, s])));
  const all = [...new Set(tiers.flatMap((t) => t.steps.map((s) => s.step)))].sort((a, b) => a - b);
  return all.map((step) => {
    const listings = byTier.map((m) => m.get(step));
    let tier = listings.findIndex((s) => s?.committed && !s.error);
    if (tier < 0) tier = listings.findIndex((s) => s !== undefined);
    return { step, states: listings.map(stateOf), tier, listing: listings[tier]! };
  });
}

/**
 * One error for the steps a command could not handle, after it handled the rest: `corrupt`
 * when every one is damaged (exit code 3), else the first other problem's code.
 */
export function stepsError(problems: readonly StepProblem[], what: string, where: string): CheckpointError {
  const other = problems.find((p) => p.code !== "corrupt");
  const code: CheckpointErrorCode =
    other === undefined ? "corrupt" : other.code === "internal" ? "storage" : other.code;
  const list = problems.map((p) => `step ${p.step} (${p.message})`).join("; ");
  return new CheckpointError(code, `${what} under ${where}: ${list}`, {
    context: { path: where, step: problems[0]?.step },
  });
}

/** Deletes one step, its metadata.json first, as the manager does: a crash midway leaves an uncommitted leftover. */
async function deleteEach(
  storage: StorageAdapter,
  steps: readonly number[],
): Promise<{ deleted: number[]; failed: StepProblem[] }> {
  const store = new StepStore(storage);
  const deleted: number[] = [];
  const failed: StepProblem[] = [];
  for (const step of steps) {
    try {
      await store.deleteStep(step);
      deleted.push(step);
    } catch (error) {
      failed.push(problemOf(step, error));
    }
  }
  return { deleted, failed };
}

/**
 * Deletes steps, committed or leftovers, as the manager deletes them: `metadata.json` first,
 * so a crash midway leaves an uncommitted leftover, never a damaged committed step. A step
 * with nothing under it is `not_found`, naming the steps there are; nothing is deleted then.
 * A step that cannot be deleted does not stop the others: it is in `failed`.
 */
export async function removeSteps(
  storage: StorageAdapter,
  steps: readonly number[],
): Promise<{ deleted: number[]; failed: StepProblem[] }> {
  const { steps: present } = await listSteps(storage);
  const missing = steps.filter((s) => !present.some((p) => p.step === s));
  if (missing.length > 0) {
    throw new CheckpointError(
      "not_found",
      `no step ${missing.join(", ")} under ${storage.root}; steps there: ${present.length ? present.map((p) => p.step).join(", ") : "none"}`,
      { context: { path: storage.root } },
    );
  }
  return deleteEach(storage, steps);
}

/**
 * Applies the manager's retention rules (its `stepsToDelete`) to a root, as a `CheckpointManager`
 * would after a save: committed steps no policy keeps are deleted (the newest is always kept), and
 * leftovers of saves that never committed are deleted once their newest object is older than
 * `leftoverAgeMs` (one of unknown age is never). A damaged step is neither kept nor deleted: it is
 * in `damaged`, left for a person to look at; a step that cannot be deleted is in `failed`, and
 * neither stops the rest.
 */
export async function collectGarbage(
  storage: StorageAdapter,
  retention: RetentionOptions,
  leftoverAgeMs: number,
  now: number,
): Promise<{ steps: number[]; leftovers: number[]; damaged: StepProblem[]; failed: StepProblem[] }> {
  const { steps } = await listSteps(storage);
  const damaged = steps.flatMap((s) => (s.error ? [{ step: s.step, ...s.error }] : []));
  const committed = steps.filter((s) => s.committed && !s.error);
  const expired = stepsToDelete(
    committed.map((s) => ({ step: s.step, time: Date.parse(s.time ?? ""), metrics: s.metrics })),
    retention,
  );
  const old = steps
    .filter((s) => !s.committed && s.time !== undefined && now - Date.parse(s.time) >= leftoverAgeMs)
    .map((s) => s.step);
  const a = await deleteEach(storage, expired);
  const b = await deleteEach(storage, old);
  return { steps: a.deleted, leftovers: b.deleted, damaged, failed: [...a.failed, ...b.failed] };
}
