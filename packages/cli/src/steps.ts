import { type StorageAdapter, CheckpointError, readMetadata } from "@cairn/core";
import { type RetentionOptions, type StepMetadata, StepStore, parseStep, stepDir } from "@cairn/manager";
import PQueue from "p-queue";

/** A step directory under a manager's root, committed or a leftover of a save that never committed. */
export interface StepListing {
  readonly step: number;
  readonly committed: boolean;
  /** Objects and bytes under `<root>/<step>/`. */
  readonly objects: number;
  readonly bytes: number;
  /** Committed: when it was saved (the manager's `savedAt`, else the commit time). Leftover: its newest object's time, if storage knows it. */
  readonly time?: string;
  readonly metrics: Readonly<Record<string, number>>;
}

/**
 * Every step directory under `root`, ascending, named as the manager names them (canonical
 * decimals; anything else is not a step). Committed steps get their time and metrics from
 * their metadata; nothing is deleted or changed.
 */
export async function listSteps(storage: StorageAdapter): Promise<{ steps: StepListing[]; others: number }> {
  const dirs = new Map<number, { objects: number; bytes: number; newest?: number; committed: boolean }>();
  let others = 0;
  for await (const object of storage.list("")) {
    const [dir, name, extra] = object.path.split("/");
    const step = parseStep(dir ?? "");
    if (step === undefined || name === undefined) {
      others++;
      continue;
    }
    const entry = dirs.get(step) ?? { objects: 0, bytes: 0, committed: false };
    entry.objects++;
    entry.bytes += object.size;
    if (object.modified) entry.newest = Math.max(entry.newest ?? 0, object.modified.getTime());
    if (name === "metadata.json" && extra === undefined) entry.committed = true;
    dirs.set(step, entry);
  }
  const queue = new PQueue({ concurrency: 8 });
  const steps = await Promise.all(
    [...dirs.entries()]
      .sort(([a], [b]) => a - b)
      .map(([step, d]) =>
        queue.add(async (): Promise<StepListing> => {
          const leftover = { step, committed: false, objects: d.objects, bytes: d.bytes, metrics: {}, ...(d.newest ? { time: new Date(d.newest).toISOString() } : {}) };
          if (!d.committed) return leftover;
          const metadata = await readMetadata({ storage, path: stepDir(step) });
          const user = metadata.user as Partial<StepMetadata>;
          return { ...leftover, committed: true, time: user.savedAt ?? metadata.createdAt, metrics: user.metrics ?? {} };
        }),
      ),
  );
  return { steps, others };
}

/**
 * Deletes steps, committed or leftovers, as the manager deletes them: `metadata.json` first,
 * so a crash midway leaves an uncommitted leftover, never a damaged committed step. A step
 * with nothing under it is `not_found`, naming the steps there are; nothing is deleted then.
 */
export async function removeSteps(storage: StorageAdapter, steps: readonly number[]): Promise<void> {
  const { steps: present } = await listSteps(storage);
  const missing = steps.filter((s) => !present.some((p) => p.step === s));
  if (missing.length > 0) {
    throw new CheckpointError(
      "not_found",
      `no step ${missing.join(", ")} under ${storage.root}; steps there: ${present.length ? present.map((p) => p.step).join(", ") : "none"}`,
      { context: { path: storage.root } },
    );
  }
  const store = new StepStore(storage);
  for (const step of steps) await store.deleteStep(step);
}

/**
 * Applies the manager's retention rules to a root, as a `CheckpointManager` would after a save:
 * committed steps no policy keeps are deleted (the newest is always kept), and leftovers of saves
 * that never committed are deleted once their newest object is older than `leftoverAgeMs`.
 * Resolves what was deleted.
 */
export async function collectGarbage(
  storage: StorageAdapter,
  retention: RetentionOptions,
  leftoverAgeMs: number,
  now: number,
): Promise<{ steps: number[]; leftovers: number[] }> {
  const before = await listSteps(storage);
  const deleted = await new StepStore(storage).applyRetention(retention, leftoverAgeMs, now, new Set());
  const after = new Set((await listSteps(storage)).steps.map((s) => s.step));
  const leftovers = before.steps.filter((s) => !s.committed && !after.has(s.step)).map((s) => s.step);
  return { steps: deleted, leftovers };
}
