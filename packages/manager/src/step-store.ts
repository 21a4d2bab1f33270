import { CheckpointError, type CheckpointMetadata, type StorageAdapter, isCheckpointError, readMetadata } from "@cairn/core";
import { joinPath } from "@cairn/core/storage";
import { METADATA_FILE } from "@cairn/core/format";
import PQueue from "p-queue";
import { type RetentionOptions, type StepRecord, stepsToDelete } from "./retention-policy.js";
import { parseStep, stepDir } from "./step-naming.js";
import { hostileJsonCopy, metricsOf } from "./stored-values.js";

/** What `metadata(step)` returns, as the manager stores it in each step's user metadata. */
export interface StepMetadata {
  readonly step: number;
  /** ISO 8601 commit time. */
  readonly savedAt: string;
  readonly metrics: Readonly<Record<string, number>>;
  readonly metadata: Readonly<Record<string, unknown>>;
}

/** A step retention could not delete, and why; `step` is undefined when the pass failed before reaching any step (listing the root). */
export interface RetentionFailure {
  readonly step: number | undefined;
  readonly error: unknown;
}

/** What one retention pass did: the committed steps it deleted, and what it could not do (retried by the next pass). */
export interface RetentionPass {
  readonly deleted: number[];
  readonly failures: RetentionFailure[];
}

/** Called once per step whose metadata.json is present but unusable (damaged, foreign, a newer format); the step is skipped. */
export type DamagedStepListener = (step: number, error: CheckpointError) => void;

/** Codes that say a step vanished between listing and reading it (another manager deleted it): it is simply not there. */
const GONE = new Set(["not_found", "not_committed"]);
/** Codes that say storage failed, not the step: the answer is unknown, so the caller hears of it. */
const STORAGE_FAILURES = new Set(["storage", "timeout", "cancelled", "permission_denied", "no_space", "process_group"]);
/** Metadata reads in flight at once when listing many steps. */
const READ_CONCURRENCY = 8;

function isNotFound(error: unknown): boolean {
  return isCheckpointError(error, "not_found");
}

/**
 * The steps under a manager's root: `<root>/<step>/`, committed once `metadata.json` exists.
 * Listing, un-committing deletion, retention and leftover cleanup live here, in one place that
 * ignores anything uncommitted. Another writer may delete steps at any moment: a step that
 * vanishes midway is treated as gone, never as a failure. A step whose metadata is damaged is
 * reported (once) and skipped: it is not listed, counted or deleted by retention.
 * The manager opens one per root on first use and calls it in any order; `RetentionRunner` calls `retain`.
 */
export class StepStore {
  readonly storage: StorageAdapter;
  readonly #records = new Map<number, StepRecord>();
  readonly #damaged = new Map<number, CheckpointError>();
  /** Steps this store un-committed whose other objects it could not all delete: finished by the next pass whatever their age. */
  readonly #unfinished = new Set<number>();
  readonly #onDamaged: DamagedStepListener | undefined;

  constructor(storage: StorageAdapter, onDamaged?: DamagedStepListener) {
    this.storage = storage;
    this.#onDamaged = onDamaged;
  }

  /** Committed steps whose metadata reads back, ascending. Steps deleted meanwhile and damaged ones are left out. */
  async committedSteps(): Promise<number[]> {
    const steps: number[] = [];
    for await (const object of this.storage.list("")) {
      const [dir, name, extra] = object.path.split("/");
      const step = parseStep(dir ?? "");
      if (step !== undefined && name === METADATA_FILE && extra === undefined) steps.push(step);
    }
    this.#forgetAllBut(new Set(steps));
    const queue = new PQueue({ concurrency: READ_CONCURRENCY });
    const records = await Promise.all(steps.map((step) => queue.add(() => this.#record(step))));
    return records.flatMap((record) => (record ? [record.step] : [])).sort((a, b) => a - b);
  }

  async isCommitted(step: number): Promise<boolean> {
    return (await this.storage.stat(joinPath(stepDir(step), METADATA_FILE))) !== null;
  }

  async requireCommitted(step: number): Promise<void> {
    if (await this.isCommitted(step)) return;
    const steps = await this.committedSteps();
    throw new CheckpointError(
      "not_found",
      `step ${step} has no committed checkpoint under ${this.storage.root}; committed steps: ${steps.length ? steps.join(", ") : "none"}`,
      { context: { step } },
    );
  }

  remember(record: StepRecord): void {
    this.#records.set(record.step, record);
    this.#damaged.delete(record.step);
    this.#unfinished.delete(record.step);
  }

  /** What `step` was saved with; stored values are copied into null-prototype objects. */
  async metadata(step: number): Promise<StepMetadata> {
    await this.requireCommitted(step);
    const metadata = await readMetadata({ storage: this.storage, path: stepDir(step) });
    const user = metadata.user;
    const custom = hostileJsonCopy(user.metadata);
    return {
      step,
      savedAt: typeof user.savedAt === "string" ? user.savedAt : "",
      metrics: metricsOf(user.metrics),
      metadata: typeof custom === "object" && custom !== null && !Array.isArray(custom) ? (custom as Record<string, unknown>) : Object.create(null),
    };
  }

  /**
   * Deletes a step, its metadata.json first: a crash midway leaves an uncommitted leftover, never
   * a damaged committed step. Objects already gone are fine; a failure is thrown after every
   * object was tried, and the next retention pass finishes the step.
   */
  async deleteStep(step: number): Promise<void> {
    const dir = stepDir(step);
    await this.storage.delete(joinPath(dir, METADATA_FILE)).catch((error: unknown) => {
      if (!isNotFound(error)) throw error;
    });
    this.#records.delete(step);
    this.#damaged.delete(step);
    this.#unfinished.add(step);
    const rest: string[] = [];
    for await (const object of this.storage.list(`${dir}/`)) rest.push(object.path);
    await this.#deleteAll(rest);
    this.#unfinished.delete(step);
  }

  /**
   * Deletes the committed steps retention no longer keeps, and the leftovers of saves that never
   * committed once their newest object is older than `leftoverAgeMs` (so a save still running
   * elsewhere is never touched) or that this store left unfinished. Steps `isBusy` names (saves in
   * flight here, asked at each decision) are left alone. A step that fails is recorded and the pass goes on with the others.
   */
  async retain(options: RetentionOptions, leftoverAgeMs: number, now: number, isBusy: (step: number) => boolean): Promise<RetentionPass> {
    const committed = new Set<number>();
    const objects = new Map<number, { paths: string[]; newest: number }>();
    for await (const object of this.storage.list("")) {
      const [dir, name] = object.path.split("/");
      const step = parseStep(dir ?? "");
      if (step === undefined || name === undefined) continue;
      if (name === METADATA_FILE) committed.add(step);
      const entry = objects.get(step) ?? { paths: [], newest: 0 };
      entry.paths.push(object.path);
      // An object of unknown age is treated as brand new: never deleted as a leftover.
      entry.newest = Math.max(entry.newest, object.modified?.getTime() ?? Infinity);
      objects.set(step, entry);
    }
    this.#forgetAllBut(committed);
    const failures: RetentionFailure[] = [];
    const records: StepRecord[] = [];
    const queue = new PQueue({ concurrency: READ_CONCURRENCY });
    await Promise.all(
      [...committed].map((step) =>
        queue.add(async () => {
          try {
            const record = await this.#record(step);
            if (record) records.push(record);
          } catch (error) {
            failures.push({ step, error });
          }
        }),
      ),
    );
    // Unfinished steps someone else finished, or saved anew, are no longer this store's to finish.
    for (const step of this.#unfinished) if (!objects.has(step) || committed.has(step)) this.#unfinished.delete(step);
    const deleted: number[] = [];
    for (const step of stepsToDelete(records, options).filter((s) => !isBusy(s))) {
      try {
        await this.deleteStep(step);
        deleted.push(step);
      } catch (error) {
        failures.push({ step, error });
      }
    }
    for (const [step, { paths, newest }] of objects) {
      if (committed.has(step) || isBusy(step) || (!this.#unfinished.has(step) && now - newest < leftoverAgeMs)) continue;
      try {
        await this.#deleteAll(paths);
        this.#unfinished.delete(step);
      } catch (error) {
        failures.push({ step, error });
      }
    }
    return { deleted, failures: failures.sort((a, b) => (a.step ?? -1) - (b.step ?? -1)) };
  }

  /** Drops what is known of steps no longer committed (deleted by anyone), so the caches only hold listed steps. */
  #forgetAllBut(committed: ReadonlySet<number>): void {
    for (const step of this.#records.keys()) if (!committed.has(step)) this.#records.delete(step);
    for (const step of this.#damaged.keys()) if (!committed.has(step)) this.#damaged.delete(step);
  }

  async #deleteAll(paths: readonly string[]): Promise<void> {
    const results = await Promise.allSettled(paths.map((path) => this.storage.delete(path)));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected" && !isNotFound(r.reason));
    if (failed) throw failed.reason;
  }

  /**
   * What retention knows of a committed step, read once and cached. Undefined for a step that
   * vanished since it was listed, or whose metadata is damaged (reported once); storage failures are thrown.
   */
  async #record(step: number): Promise<StepRecord | undefined> {
    const cached = this.#records.get(step);
    if (cached) return cached;
    if (this.#damaged.has(step)) return undefined;
    let metadata: CheckpointMetadata;
    try {
      metadata = await readMetadata({ storage: this.storage, path: stepDir(step) });
    } catch (error) {
      if (isCheckpointError(error) && GONE.has(error.code)) return undefined;
      if (isCheckpointError(error) && STORAGE_FAILURES.has(error.code)) throw error;
      const damaged = isCheckpointError(error)
        ? error
        : new CheckpointError("corrupt", `step ${step} under ${this.storage.root} has metadata that cannot be read; it is skipped`, { cause: error, context: { step } });
      this.#damaged.set(step, damaged);
      this.#onDamaged?.(step, damaged);
      return undefined;
    }
    const user = metadata.user;
    const saved = typeof user.savedAt === "string" ? Date.parse(user.savedAt) : NaN;
    const created = Date.parse(metadata.createdAt);
    const record = { step, time: Number.isFinite(saved) ? saved : Number.isFinite(created) ? created : 0, metrics: metricsOf(user.metrics) };
    this.#records.set(step, record);
    return record;
  }
}
