import { CheckpointError, METADATA_FILE, type StorageAdapter, isCheckpointError, joinPath, readMetadata } from "@cairn/core";
import { type RetentionOptions, type StepRecord, stepsToDelete } from "./retention-policy.js";
import { parseStep, stepDir } from "./step-naming.js";

/** What `metadata(step)` returns, as the manager stores it in each step's user metadata. */
export interface StepMetadata {
  readonly step: number;
  /** ISO 8601 commit time. */
  readonly savedAt: string;
  readonly metrics: Readonly<Record<string, number>>;
  readonly metadata: Readonly<Record<string, unknown>>;
}

/**
 * The steps under a manager's root: `<root>/<step>/`, committed once `metadata.json` exists.
 * Listing, un-committing deletion, retention and leftover cleanup live here, in one place that
 * ignores anything uncommitted.
 */
export class StepStore {
  readonly storage: StorageAdapter;
  readonly #records = new Map<number, StepRecord>();

  constructor(storage: StorageAdapter) {
    this.storage = storage;
  }

  async committedSteps(): Promise<number[]> {
    const steps: number[] = [];
    for await (const object of this.storage.list("")) {
      const [dir, name, extra] = object.path.split("/");
      const step = parseStep(dir ?? "");
      if (step !== undefined && name === METADATA_FILE && extra === undefined) steps.push(step);
    }
    return steps.sort((a, b) => a - b);
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
  }

  async metadata(step: number): Promise<StepMetadata> {
    await this.requireCommitted(step);
    const user = (await readMetadata({ storage: this.storage, path: stepDir(step) })).user as Partial<StepMetadata>;
    return { step, savedAt: user.savedAt ?? "", metrics: user.metrics ?? {}, metadata: user.metadata ?? {} };
  }

  /** Deletes a step, its metadata.json first: a crash midway leaves an uncommitted leftover, never a damaged committed step. */
  async deleteStep(step: number): Promise<void> {
    const dir = stepDir(step);
    await this.storage.delete(joinPath(dir, METADATA_FILE));
    this.#records.delete(step);
    const rest: string[] = [];
    for await (const object of this.storage.list(`${dir}/`)) rest.push(object.path);
    await Promise.all(rest.map((path) => this.storage.delete(path)));
  }

  async #record(step: number): Promise<StepRecord> {
    const cached = this.#records.get(step);
    if (cached) return cached;
    const metadata = await readMetadata({ storage: this.storage, path: stepDir(step) });
    const user = metadata.user as Partial<StepMetadata>;
    const record = { step, time: Date.parse(user.savedAt ?? metadata.createdAt), metrics: user.metrics ?? {} };
    this.#records.set(step, record);
    return record;
  }

  /**
   * Deletes the committed steps retention no longer keeps, and the leftovers of saves that never
   * committed once their newest object is older than `leftoverAgeMs`, so a save still running
   * elsewhere is never touched. `busy` steps (saves in flight here) are left alone.
   */
  async applyRetention(options: RetentionOptions, leftoverAgeMs: number, now: number, busy: ReadonlySet<number>): Promise<number[]> {
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
    const records = await Promise.all([...committed].map((step) => this.#record(step)));
    const deleted = stepsToDelete(records, options).filter((step) => !busy.has(step));
    for (const step of deleted) await this.deleteStep(step);
    for (const [step, { paths, newest }] of objects) {
      if (committed.has(step) || busy.has(step) || now - newest < leftoverAgeMs) continue;
      await Promise.all(
        paths.map((path) =>
          this.storage.delete(path).catch((error: unknown) => {
            if (!isCheckpointError(error, "not_found")) throw error;
          }),
        ),
      );
    }
    return deleted;
  }
}
