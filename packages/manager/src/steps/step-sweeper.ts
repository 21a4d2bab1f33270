import { type StorageAdapter, isCheckpointError } from "@cairn/core";
import { METADATA_FILE } from "@cairn/core/format";
import { joinPath, withRetry } from "@cairn/core/storage";
import PQueue from "p-queue";
import { readFileTable } from "./step-file-table.js";
import type { StepFiles } from "./step-files.js";
import type { StepIndex } from "./step-index.js";
import { parseStep, stepDir } from "./step-naming.js";

/** A step retention could not delete, and why; `step` is undefined when the pass failed before reaching any step (listing the root). */
export interface RetentionFailure {
  readonly step: number | undefined;
  readonly error: unknown;
}

/** A data file a retention pass swept, with the rank that wrote it (whose own tier 0 holds it when each rank has one). */
export interface SweptFile {
  /** `<step>/<file name>`, relative to the root. */
  readonly path: string;
  readonly rank: number;
}

/** What one retention pass did: the committed steps it deleted, and what it could not do (retried by the next pass). */
export interface RetentionPass {
  readonly deleted: number[];
  readonly failures: RetentionFailure[];
  /** With `sweepsByRank`: every rank's data files the deleted steps' sweeps took (from their metadata), for ranks with their own tier 0. */
  readonly swept: SweptFile[];
}

/** Objects one step's deletion deletes at once. */
const DELETE_CONCURRENCY = 16;

function isNotFound(error: unknown): boolean {
  return isCheckpointError(error, "not_found");
}

/**
 * Mark and sweep under one root: deletes a step (un-committing it first) and sweeps its files
 * and those of other steps only it used, never a file a committed step references (the marks
 * are `StepFiles`'). What a deletion could not finish is kept, and finished by the next pass.
 */
export class StepSweeper {
  /** Steps un-committed (or leftovers) whose objects could not all be deleted, with those objects: finished by the next pass whatever their age. */
  readonly unfinished = new Map<number, readonly string[]>();
  /**
   * Steps whose un-commit failed after its name may have gone, not durably (a failed fsync): a
   * power cut may bring them back, so their references stay marked (the store keeps them across
   * listings) until `finishUncommit` makes the deletion durable.
   */
  readonly uncommitting = new Set<number>();
  /** Steps whose metadata.json a deletion is removing now, each settling once that removal ended. */
  readonly #deleting = new Map<number, Promise<void>>();
  readonly #storage: StorageAdapter;
  readonly #index: StepIndex;
  readonly #files: StepFiles;
  readonly #forget: (step: number) => void;

  /** `forget` drops what the store knows of a step once its metadata is gone (the store keeps the references of steps in `uncommitting`). */
  constructor(storage: StorageAdapter, index: StepIndex, files: StepFiles, forget: (step: number) => void) {
    this.#storage = storage;
    this.#index = index;
    this.#files = files;
    this.#forget = forget;
  }

  /** Whether a deletion of `step` has begun un-committing it. */
  isDeleting(step: number): boolean {
    return this.#deleting.has(step);
  }

  /**
   * Resolves once no removal of `step`'s metadata.json is in flight: a commit of the step made
   * before then could be the one that removal deletes (its request may land late).
   */
  async uncommitted(step: number): Promise<void> {
    while (this.#deleting.has(step)) await this.#deleting.get(step);
  }

  /**
   * Deletes a step, its metadata.json first, once every step is marked (see `StepStore.deleteStep`;
   * a retention pass marks once for all its deletions).
   * With `byRank`, resolves every rank's data files its sweep takes, read from its metadata first.
   * `claim` is asked right before the metadata goes (in the same turn that marks the step as being
   * deleted): false leaves the step alone and resolves undefined.
   */
  async delete(
    step: number,
    listed: boolean,
    byRank: boolean,
    claim: () => boolean = () => true,
    /** Asked once it is un-committed: true leaves its files to a later pass (a copy in flight references them). */
    keepFiles: () => boolean = () => false,
  ): Promise<SweptFile[] | undefined> {
    const dir = stepDir(step);
    const listing = listed ? undefined : this.#index.objectsOf(step)?.paths;
    // Its metadata, read before it is deleted, names its objects when no listing does, and every rank's files.
    const table = byRank || (!listed && !listing) ? await readFileTable(this.#storage, step) : [];
    const known = listed ? undefined : (listing ?? table.filter((file) => file.own).map((file) => file.path));
    const ownReferences = this.#files.referencedBy(step);
    // Another removal of its metadata.json in flight ends first (one request at a time per step).
    await this.uncommitted(step);
    if (!claim()) return undefined;
    const uncommit = this.#uncommit(step);
    const settled = uncommit.then(
      () => undefined,
      () => undefined,
    );
    this.#deleting.set(step, settled);
    try {
      await uncommit;
    } finally {
      if (this.#deleting.get(step) === settled) this.#deleting.delete(step);
    }
    // Files of other steps it referenced: those of a step still committed (or being deleted, not yet forgotten) are that step's own, swept with it.
    const ownerGone = (path: string): boolean => {
      const owner = parseStep(path.slice(0, path.indexOf("/")));
      return owner === step || owner === undefined || (!this.#index.has(owner) && !this.uncommitting.has(owner));
    };
    const referenced = ownReferences.filter(ownerGone);
    let rest = known?.filter((path) => path !== joinPath(dir, METADATA_FILE));
    if (rest === undefined) {
      rest = [];
      for await (const object of this.#storage.list(`${dir}/`)) rest.push(object.path);
    }
    // Sweep: its own files no other step uses, and the files of other steps only it used.
    const sweep = this.#files.sweepable([...rest, ...referenced]);
    // Decided now, with every step marked: what the other ranks delete of this step on their own tier 0.
    const rankOf = new Map(byRank ? table.map((file) => [file.path, file.rank]) : []);
    const swept = this.#files
      .sweepable([...rankOf.keys()].filter(ownerGone))
      .map((path) => ({ path, rank: rankOf.get(path)! }));
    this.unfinished.set(step, sweep);
    if (keepFiles()) return swept;
    await this.#deleteAll(sweep);
    this.unfinished.delete(step);
    return swept;
  }

  /**
   * Deletes the step's metadata.json durably, retried: a power cut must not bring back a step whose
   * references (in other steps' directories) are swept, by this pass or, once the name is gone, by
   * any later one. Then the store forgets the step.
   */
  async #uncommit(step: number): Promise<void> {
    const path = joinPath(stepDir(step), METADATA_FILE);
    try {
      await withRetry(() => this.#storage.delete(path, { durable: true })).catch((error: unknown) => {
        if (!isNotFound(error)) throw error;
      });
    } catch (error) {
      // Still there: still committed. Gone, not durably (or unknown): unlisted from now on, its references kept.
      if (await this.#storage.stat(path).catch(() => null)) throw error;
      this.uncommitting.add(step);
      this.#forget(step);
      throw error;
    }
    this.uncommitting.delete(step);
    this.#forget(step);
  }

  /** Makes the un-commit of a step in `uncommitting` durable; its files are swept as a leftover's then. */
  async finishUncommit(step: number): Promise<void> {
    await this.#uncommit(step);
  }

  /** Finishes a step left unfinished: deletes those of its `paths` no committed step uses. */
  async finishUnfinished(step: number, paths: readonly string[]): Promise<void> {
    await this.#deleteAll(this.#files.sweepable(paths));
    this.unfinished.delete(step);
  }

  /** Deletes `paths` of `step` (kept as unfinished until all are gone); with `removed`, the step leaves the index then. */
  async finish(step: number, paths: readonly string[], removed = false): Promise<void> {
    this.unfinished.set(step, paths);
    await this.#deleteAll(paths);
    this.unfinished.delete(step);
    if (removed) this.#index.removed(step);
  }

  async #deleteAll(paths: readonly string[]): Promise<void> {
    const queue = new PQueue({ concurrency: DELETE_CONCURRENCY });
    const results = await Promise.allSettled(paths.map((path) => queue.add(() => this.#storage.delete(path))));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected" && !isNotFound(r.reason));
    if (failed) throw failed.reason;
  }
}
