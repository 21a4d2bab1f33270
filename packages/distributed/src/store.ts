/**
 * The key-value store a `StoreProcessGroup` runs its collectives on: what an etcd or Redis
 * deployment (or any coordination service) offers, cut down to what the collectives need.
 * Keys are relative to the store's prefix (the URL's path); values are strings.
 *
 * One `Store` is one client: `StoreProcessGroup` opens it, calls the methods concurrently, and
 * calls `close()` last. Every method rejects with a `process_group` CheckpointError naming the
 * store (never its credentials) when the service cannot be reached or answers with an error.
 */
export interface Store {
  /** The store's URL without credentials, for messages. */
  readonly where: string;
  /**
   * Sets `key`. With `lease`, the key lives only as long as this client: it expires within
   * `leaseMs` after the process dies or stops renewing (a dead rank's liveness key).
   */
  set(key: string, value: string, options?: { readonly lease?: boolean }): Promise<void>;
  get(key: string): Promise<string | undefined>;
  /** Adds `delta` to the integer at `key` (absent is 0) and returns the new value, atomically. */
  add(key: string, delta: number): Promise<number>;
  /** Sets `key` to `value` only if its current value is `expected` (`undefined`: absent); true if it did. */
  compareAndSet(key: string, expected: string | undefined, value: string): Promise<boolean>;
  /**
   * The value of `key` once it exists, or `undefined` after `timeoutMs` or when `signal` aborts.
   * Wakes on the write, not by polling.
   */
  wait(key: string, timeoutMs: number, signal?: AbortSignal): Promise<string | undefined>;
  /** Deletes every key under `prefix` (a job's keys once every rank has left). */
  deletePrefix(prefix: string): Promise<void>;
  /** Releases the lease (its keys go at once) and the connection. */
  close(): Promise<void>;
}

export interface StoreOptions {
  /** How long a leased key outlives a dead client (default 10 000 ms; etcd rounds up to whole seconds). */
  readonly leaseMs?: number;
}

export const DEFAULT_LEASE_MS = 10_000;
