/** What a CheckpointManager reports, for a training script's logs. */
export interface ManagerEvents {
  /** A saveAsync's state is snapshotted: training may change it now. */
  staged: { readonly step: number; readonly bytes: number; readonly seconds: number };
  /**
   * A step is committed (its metadata.json written). `backgroundCopySeconds`: what reference
   * staging's background copy took of this thread (see `SaveResult`); 0 for other saves.
   */
  committed: { readonly step: number; readonly bytes: number; readonly seconds: number; readonly backgroundCopySeconds: number };
  /** A background save or deletion failed; the error also rejects the next call. */
  error: { readonly step?: number; readonly error: unknown };
  /** A preemption notice arrived; the next save takes a checkpoint whatever the interval. */
  preemption: { readonly reason: string };
}

export type ManagerEventName = keyof ManagerEvents;

/**
 * A small typed emitter. Unlike Node's EventEmitter, an `error` with no listener is not
 * thrown: background failures always surface through the next call anyway.
 */
export class ManagerEmitter {
  readonly #listeners = new Map<ManagerEventName, Set<(payload: never) => void>>();

  on<E extends ManagerEventName>(event: E, listener: (payload: ManagerEvents[E]) => void): () => void {
    const set = this.#listeners.get(event) ?? new Set();
    set.add(listener as (payload: never) => void);
    this.#listeners.set(event, set);
    return () => set.delete(listener as (payload: never) => void);
  }

  emit<E extends ManagerEventName>(event: E, payload: ManagerEvents[E]): void {
    for (const listener of this.#listeners.get(event) ?? []) (listener as (p: ManagerEvents[E]) => void)(payload);
  }

  clear(): void {
    this.#listeners.clear();
  }
}
