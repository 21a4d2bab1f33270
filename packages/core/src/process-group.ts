/**
 * The collectives a distributed save or load needs, as in `torch.distributed`. Every rank
 * calls each collective in the same order; values are JSON-serialisable. Rank 0 is the
 * coordinator. Implementations must time out rather than hang when a rank never arrives.
 */
export interface ProcessGroup {
  readonly rank: number;
  readonly worldSize: number;
  /** Every rank's value, indexed by rank. */
  allGather<T>(value: T): Promise<T[]>;
  /** `root`'s value on every rank (other ranks pass `undefined`). */
  broadcast<T>(value: T | undefined, root?: number): Promise<T>;
  barrier(): Promise<void>;
}

/**
 * A process group that can also run independent streams of collectives and pass messages
 * without a collective: what `CheckpointManager` needs to save in the background while the
 * training loop goes on, and to agree on a preemption step without a collective per step.
 */
export interface CoordinatedProcessGroup extends ProcessGroup {
  /** The same ranks, with collectives sequenced apart from this group's (and from other tags'). */
  group(tag: string): ProcessGroup;
  /** Delivers `value` to every rank's `topic` listeners, this rank's included; does not wait. */
  post(topic: string, value?: unknown): void;
  /** Listens to `topic`; returns the unsubscribe. */
  on(topic: string, listener: (value: unknown, from: number) => void): () => void;
}

export function isCoordinated(group: ProcessGroup): group is CoordinatedProcessGroup {
  const g = group as Partial<CoordinatedProcessGroup>;
  return typeof g.group === "function" && typeof g.post === "function" && typeof g.on === "function";
}

/** World size 1: what every entry point uses when no process group is given. */
export class SingleProcessGroup implements CoordinatedProcessGroup {
  readonly rank = 0;
  readonly worldSize = 1;
  readonly #listeners = new Map<string, Set<(value: unknown, from: number) => void>>();

  async allGather<T>(value: T): Promise<T[]> {
    return [value];
  }

  async broadcast<T>(value: T | undefined): Promise<T> {
    return value as T;
  }

  async barrier(): Promise<void> {}

  group(): ProcessGroup {
    return this;
  }

  post(topic: string, value?: unknown): void {
    for (const listener of this.#listeners.get(topic) ?? []) listener(value, 0);
  }

  on(topic: string, listener: (value: unknown, from: number) => void): () => void {
    const listeners = this.#listeners.get(topic) ?? new Set();
    listeners.add(listener);
    this.#listeners.set(topic, listeners);
    return () => listeners.delete(listener);
  }
}
