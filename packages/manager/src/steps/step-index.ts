import type { StorageAdapter } from "@cairn/core";
import { METADATA_FILE } from "@cairn/core/format";
import { parseStep } from "./step-naming.js";

/** What a listing found under one step directory. */
export interface StepObjects {
  readonly paths: readonly string[];
  /** The newest object's modification time, in ms; Infinity when storage gave none (never old enough to delete). */
  readonly newest: number;
  readonly committed: boolean;
}

/**
 * A manager's in-memory picture of its root: which steps are committed, and what the latest
 * listing found in each step directory. Built by one listing when first needed, then kept up
 * to date by the manager's own commits and deletions, so a save costs the same on a root of
 * 10 or 10,000 steps. What other processes did since is seen only by `refresh()` (a new listing).
 * `StepStore` owns it; nothing else writes to it.
 */
export class StepIndex {
  readonly #storage: StorageAdapter;
  #committed: Set<number> | undefined;
  #objects = new Map<number, StepObjects>();
  #listing: Promise<void> | undefined;
  /** What this process committed (true) or deleted (false) while a listing ran: it wins over the listing. */
  #changes: Map<number, boolean> | undefined;
  #listedAt: number | undefined;
  #listings = 0;

  constructor(storage: StorageAdapter) {
    this.#storage = storage;
  }

  /** When the latest listing started (the store's clock), or undefined before the first. */
  get listedAt(): number | undefined {
    return this.#listedAt;
  }

  /** How many listings completed: tells a caller whether it saw the latest one. */
  get listings(): number {
    return this.#listings;
  }

  /** Lists the root unless an earlier listing already did. */
  async load(now: number): Promise<void> {
    if (this.#committed === undefined) await this.refresh(now);
  }

  /** Lists the root anew (one listing, shared by concurrent callers) and replaces what is known. */
  refresh(now: number): Promise<void> {
    this.#listing ??= this.#list(now).finally(() => {
      this.#listing = undefined;
    });
    return this.#listing;
  }

  /** Committed steps, ascending; empty before the first listing. */
  steps(): number[] {
    return [...(this.#committed ?? [])].sort((a, b) => a - b);
  }

  has(step: number): boolean {
    return this.#committed?.has(step) ?? false;
  }

  /** The objects the latest listing found under `step`, or undefined when unknown or changed since. */
  objectsOf(step: number): StepObjects | undefined {
    return this.#objects.get(step);
  }

  /** Step directories without metadata.json at the latest listing. */
  leftovers(): [number, StepObjects][] {
    return [...this.#objects].filter(([, objects]) => !objects.committed);
  }

  /** `step` was committed (here or, as a lost race showed, elsewhere); its objects are no longer what was listed. */
  added(step: number): void {
    this.#committed?.add(step);
    this.#changes?.set(step, true);
    this.#objects.delete(step);
  }

  /** `step` was un-committed or its leftovers deleted. */
  removed(step: number): void {
    this.#committed?.delete(step);
    this.#changes?.set(step, false);
    this.#objects.delete(step);
  }

  async #list(now: number): Promise<void> {
    const changes = new Map<number, boolean>();
    this.#changes = changes;
    try {
      const found = new Map<number, { paths: string[]; newest: number; committed: boolean }>();
      for await (const object of this.#storage.list("")) {
        const slash = object.path.indexOf("/");
        const step = slash > 0 ? parseStep(object.path.slice(0, slash)) : undefined;
        if (step === undefined) continue;
        const entry = found.get(step) ?? { paths: [], newest: 0, committed: false };
        entry.paths.push(object.path);
        entry.committed ||= object.path.slice(slash + 1) === METADATA_FILE;
        entry.newest = Math.max(entry.newest, object.modified?.getTime() ?? Infinity);
        found.set(step, entry);
      }
      const committed = new Set([...found].filter(([, entry]) => entry.committed).map(([step]) => step));
      for (const [step, isCommitted] of changes) {
        if (isCommitted) committed.add(step);
        else committed.delete(step);
        found.delete(step);
      }
      this.#committed = committed;
      this.#objects = found;
      this.#listedAt = now;
      this.#listings++;
    } finally {
      this.#changes = undefined;
    }
  }
}
