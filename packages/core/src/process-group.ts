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

/** World size 1: what every entry point uses when no process group is given. */
export class SingleProcessGroup implements ProcessGroup {
  readonly rank = 0;
  readonly worldSize = 1;

  async allGather<T>(value: T): Promise<T[]> {
    return [value];
  }

  async broadcast<T>(value: T | undefined): Promise<T> {
    return value as T;
  }

  async barrier(): Promise<void> {}
}
