import { emitWarning } from "@cairn/core";
/** What a CheckpointManager reports, for a training script's logs. */
export interface ManagerEvents {
  /** A saveAsync's state is snapshotted: training may change it now. */
  staged: { readonly step: number; readonly bytes: number; readonly seconds: number };
  /**
   * A step is committed (its metadata.json written). `backgroundCopySeconds`: what reference
   * staging's background copy took of this thread (see `SaveResult`); 0 for other saves.
   */
  committed: {
    readonly step: number;
    readonly bytes: number;
    readonly seconds: number;
    readonly backgroundCopySeconds: number;
  };
  /**
   * Something failed in the background. `operation` says what: `"save"` (a background upload
   * that failed after core's retries of each file; unless that failure was transient, its error
   * also rejects the next call once), `"retention"` (a step could not be deleted:
   * saving goes on, the next pass retries, `join()` lists it), `"listing"` (a committed step's
   * metadata is damaged or foreign: it is skipped), `"preemption"` (a notice source cannot reach
   * its endpoint, so notices may be missed), `"replication"` (a copy to the slower tier `tier`
   * failed: it is retried with backoff, the fast copy is kept, `join()` lists it), `"restore"` (a
   * tier's copy of a step could not be read; the next tier's was). Reported once
   * per step or outage.
   */
  error: {
    readonly step?: number;
    readonly error: unknown;
    readonly operation: ManagerOperation;
    readonly tier?: number;
  };
  /**
   * A step is committed on the slower tier `tier` (tiered managers): `bytes` copied in `seconds`,
   * `sinceCommit` ms after it was committed on tier 0 (its saved time, for steps of earlier runs).
   * With several ranks every rank hears it, `bytes` being its own files'.
   */
  replicated: {
    readonly step: number;
    readonly tier: number;
    readonly bytes: number;
    readonly seconds: number;
    readonly sinceCommit: number;
  };
  /** A preemption notice arrived; the next save takes a checkpoint whatever the interval. */
  preemption: { readonly reason: string };
  /**
   * `restore("latest")` or `latestStep({ verified: true })` passed over `step`: its copy on `tier`
   * did not verify. `file` is the damaged file when known (`metadata.json` or a data file);
   * `reason` says what is wrong. Once per step and tier.
   */
  skipped: {
    readonly step: number;
    readonly tier: number;
    readonly file?: string;
    readonly reason: string;
    readonly error: unknown;
  };
  /** A save holds the same weights as the step saved (or restored) before it: training may have stopped updating them. */
  stale: { readonly step: number; readonly sameAs: number; readonly message: string };
  /**
   * The loss budget (`durability`) is exceeded (`exceeded: true`), or met again after it was
   * (`false`): what would be lost if the run died now, measured against the newest step committed
   * on the last tier.
   */
  lossBudget: {
    readonly exceeded: boolean;
    readonly stepsAtRisk: number;
    readonly secondsAtRisk: number;
    readonly newestDurable: number | undefined;
  };
}

export type ManagerEventName = keyof ManagerEvents;

/** What an `error` event is about. */
export type ManagerOperation = "save" | "retention" | "listing" | "preemption" | "replication" | "restore";

const EVENT_NAMES: ReadonlySet<string> = new Set<ManagerEventName>([
  "staged",
  "committed",
  "error",
  "preemption",
  "replicated",
  "skipped",
  "stale",
  "lossBudget",
]);

export function isManagerEventName(name: unknown): name is ManagerEventName {
  return typeof name === "string" && EVENT_NAMES.has(name);
}

/**
 * A small typed emitter. Unlike Node's EventEmitter, an `error` with no listener is not
 * thrown; `emit` says whether anyone listened, so the manager can warn instead.
 */
export class ManagerEmitter {
  readonly #listeners = new Map<ManagerEventName, Set<(payload: never) => void>>();
  readonly #watchers = new Map<ManagerEventName, Set<(payload: never) => void>>();

  on<E extends ManagerEventName>(event: E, listener: (payload: ManagerEvents[E]) => void): () => void {
    const set = this.#listeners.get(event) ?? new Set();
    set.add(listener as (payload: never) => void);
    this.#listeners.set(event, set);
    return () => set.delete(listener as (payload: never) => void);
  }

  /**
   * The manager's own bookkeeping (durability/): called before the listeners, never counted as
   * one (an `error` nobody else hears still becomes a warning), and kept by `clear()`.
   */
  watch<E extends ManagerEventName>(event: E, watcher: (payload: ManagerEvents[E]) => void): void {
    const set = this.#watchers.get(event) ?? new Set();
    set.add(watcher as (payload: never) => void);
    this.#watchers.set(event, set);
  }

  emit<E extends ManagerEventName>(event: E, payload: ManagerEvents[E]): boolean {
    for (const watcher of this.#watchers.get(event) ?? []) (watcher as (p: ManagerEvents[E]) => void)(payload);
    const listeners = [...(this.#listeners.get(event) ?? [])];
    for (const listener of listeners) {
      try {
        (listener as (p: ManagerEvents[E]) => void)(payload);
      } catch (error) {
        // A throwing listener surfaces as an uncaught exception, as with EventEmitter, without breaking the manager's own bookkeeping.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
    return listeners.length > 0;
  }

  /**
   * Emits `error`; with nobody listening, a failure that rejects no call (`thrown` false: by
   * default all but a save's) becomes a process warning rather than nothing.
   */
  report(payload: ManagerEvents["error"], thrown = payload.operation === "save"): void {
    if (this.emit("error", payload) || thrown) return;
    const tier = payload.tier === undefined ? "" : ` (tier ${payload.tier})`;
    const what = `${payload.step === undefined ? payload.operation : `${payload.operation} of step ${payload.step}`}${tier}`;
    const message =
      payload.error instanceof Error
        ? payload.error.message
        : typeof payload.error === "string"
          ? payload.error
          : "a value that is not an Error";
    emitWarning(`CheckpointManager: ${what} failed: ${message}`, "CAIRN_BACKGROUND_FAILURE");
  }

  clear(): void {
    this.#listeners.clear();
  }
}
