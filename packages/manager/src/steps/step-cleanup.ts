import { type StorageAdapter, CheckpointError } from "@cairn/core";
import { type RetentionOptions, stepsToDelete } from "./retention-policy.js";
import { type StepProblem, listSteps, problemOf } from "./step-listing.js";
import { StepStore } from "./step-store.js";

/** What `removeSteps` did: the steps deleted, and those that could not be (each with why). */
export interface RemovedSteps {
  readonly deleted: number[];
  readonly failed: StepProblem[];
}

/** What `collectGarbage` did. */
export interface CollectedGarbage {
  /** Committed steps the retention rules no longer keep, deleted. */
  readonly steps: number[];
  /** Leftovers of saves that never committed, deleted (files committed steps use stay). */
  readonly leftovers: number[];
  /** Steps whose metadata.json cannot be read: neither kept nor deleted, left for a person to look at. */
  readonly damaged: StepProblem[];
  readonly failed: StepProblem[];
}

/** Deletes each step through one `StepStore` (mark once, then metadata.json first, then what no committed step uses). */
async function deleteEach(store: StepStore, steps: readonly number[]): Promise<RemovedSteps> {
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
 * Deletes steps of a root, committed or leftovers, as the manager's retention does:
 * `metadata.json` first, so a crash midway leaves an uncommitted leftover, never a damaged
 * committed step; files a kept step uses stay. A step with nothing under it is `not_found`,
 * naming the steps there are, and nothing is deleted then. A step that cannot be deleted does not
 * stop the others: it is in `failed`. Called by `cairn rm <root> <step>…`.
 */
export async function removeSteps(storage: StorageAdapter, steps: readonly number[]): Promise<RemovedSteps> {
  const { steps: present } = await listSteps(storage);
  const there = new Set(present.map((p) => p.step));
  const missing = steps.filter((s) => !there.has(s));
  if (missing.length > 0) {
    throw new CheckpointError(
      "not_found",
      `no step ${missing.join(", ")} under ${storage.root}; steps there: ${present.length ? [...there].join(", ") : "none"}`,
      { context: { path: storage.root } },
    );
  }
  return deleteEach(new StepStore(storage), steps);
}

/**
 * Applies the manager's retention rules (`stepsToDelete`) to a root, as a `CheckpointManager`
 * would after a save: committed steps no rule keeps are deleted (the newest is always kept), and
 * leftovers of saves that never committed are deleted once their newest object is older than
 * `leftoverAgeMs` (one of unknown age never; a deleted step's files that kept steps use are not
 * a leftover). A damaged step is neither kept nor deleted: it is in `damaged`; a step that cannot
 * be deleted is in `failed`, and neither stops the rest. Called by `cairn gc`.
 */
export async function collectGarbage(
  storage: StorageAdapter,
  retention: RetentionOptions,
  leftoverAgeMs: number,
  now: number,
): Promise<CollectedGarbage> {
  const { steps } = await listSteps(storage);
  const damaged = steps.flatMap((s) => (s.error ? [{ step: s.step, ...s.error }] : []));
  const expired = stepsToDelete(
    steps
      .filter((s) => s.state === "committed")
      .map((s) => ({ step: s.step, time: Date.parse(s.time ?? ""), metrics: s.metrics })),
    retention,
  );
  const old = steps
    .filter((s) => s.state === "uncommitted" && s.time !== undefined && now - Date.parse(s.time) >= leftoverAgeMs)
    .map((s) => s.step);
  const store = new StepStore(storage);
  const a = await deleteEach(store, expired);
  const b = await deleteEach(store, old);
  return { steps: a.deleted, leftovers: b.deleted, damaged, failed: [...a.failed, ...b.failed] };
}
