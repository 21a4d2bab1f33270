import { CheckpointError } from "@cairn/core";
import { longTimer } from "@cairn/core/storage";
import { DEFAULT_LEASE_MS, STORE_DEADLINE_MS, type Store, type StoreOptions, withDeadline } from "@cairn/distributed";
import { Redis, ReplyError } from "ioredis";

/** Sets KEYS[1] to ARGV[3] if it is absent (ARGV[1] = "0") or equals ARGV[2] (ARGV[1] = "1"), and wakes its waiters. */
const COMPARE_AND_SET = `local cur = redis.call('GET', KEYS[1])
if (ARGV[1] == '0' and cur) or (ARGV[1] == '1' and cur ~= ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('PUBLISH', KEYS[1], '')
return 1`;

/** How long a lost connection is retried before the client gives up and every call fails at once. */
const RECONNECT_MS = STORE_DEADLINE_MS / 2;

/**
 * An ioredis retry strategy (one per connection): reconnects every 100 ms to 1 s until `ms` have
 * passed since the connection was lost, then ends the client, which fails its queued commands.
 * ioredis's own limit (maxRetriesPerRequest) counts attempts whose delays grow, so a dead server
 * held each call for 6 to 10 s.
 */
function reconnectFor(ms: number): (attempt: number) => number | null {
  let lostAt = 0;
  return (attempt) => {
    if (attempt === 1) lostAt = Date.now();
    return Date.now() - lostAt >= ms ? null : Math.min(attempt * 100, 1_000);
  };
}

/**
 * A `Store` on Redis through `ioredis`: `redis://[:password@]host:6379/prefix[?db=N]`
 * (`rediss://` for TLS). Every write publishes on the key's own channel, so `wait` subscribes,
 * then reads, and wakes on the write. Leased keys carry a TTL this client renews.
 */
export class RedisStore implements Store {
  readonly where: string;
  readonly #prefix: string;
  readonly #client: Redis;
  readonly #subscriber: Redis;
  /** Per channel: the wake-ups of the calls waiting on it, and its SUBSCRIBE. */
  readonly #waiters = new Map<string, { readonly wakers: Set<() => void>; readonly subscribed: Promise<unknown> }>();
  readonly #leased = new Set<string>();
  readonly #leaseMs: number;
  readonly #renewal: NodeJS.Timeout;
  /** Set once a command failed other than by Redis's own refusal: teardown then no longer waits for Redis. */
  #unresponsive = false;

  constructor(url: URL, options: StoreOptions = {}) {
    const prefix = decodeURIComponent(url.pathname).replace(/^\/+|\/+$/g, "");
    this.#prefix = `${prefix || "cairn"}/`;
    this.where = `${url.protocol}//${url.host}/${this.#prefix}`;
    const db = Number(url.searchParams.get("db") ?? 0);
    if (!Number.isSafeInteger(db) || db < 0)
      throw new CheckpointError(
        "invalid_argument",
        `[redis] db=${url.searchParams.get("db")} in ${this.where} is not a database number`,
      );
    this.#client = new Redis({
      host: url.hostname.replace(/^\[(.*)\]$/, "$1"),
      port: Number(url.port || 6379),
      db,
      ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
      ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
      ...(url.protocol === "rediss:" ? { tls: {} } : {}),
      commandTimeout: STORE_DEADLINE_MS,
      connectTimeout: STORE_DEADLINE_MS,
      // Commands wait out a reconnection, which has its own deadline (see reconnectFor).
      maxRetriesPerRequest: null,
      retryStrategy: reconnectFor(RECONNECT_MS),
    });
    this.#client.on("error", () => undefined);
    this.#subscriber = this.#client.duplicate({ retryStrategy: reconnectFor(RECONNECT_MS) });
    this.#subscriber.on("error", () => undefined);
    this.#subscriber.on("message", (channel: string) => {
      for (const wake of this.#waiters.get(channel)?.wakers ?? []) wake();
    });
    this.#leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.#renewal = setInterval(
      () => {
        for (const key of this.#leased) this.#client.pexpire(key, this.#leaseMs).catch(() => undefined);
      },
      Math.max(100, Math.floor(this.#leaseMs / 3)),
    );
    this.#renewal.unref();
  }

  async set(key: string, value: string, options: { readonly lease?: boolean } = {}): Promise<void> {
    const k = this.#prefix + key;
    const multi = this.#client.multi();
    if (options.lease) multi.set(k, value, "PX", this.#leaseMs);
    else multi.set(k, value);
    await this.#call(`set ${key}`, () => multi.publish(k, "").exec());
    if (options.lease) this.#leased.add(k);
  }

  async get(key: string): Promise<string | undefined> {
    return (await this.#call(`get ${key}`, () => this.#client.get(this.#prefix + key))) ?? undefined;
  }

  async add(key: string, delta: number): Promise<number> {
    const k = this.#prefix + key;
    const results = await this.#call(`add to ${key}`, () =>
      this.#client.multi().incrby(k, delta).publish(k, "").exec(),
    );
    const [error, value] = results?.[0] ?? [new Error("no reply")];
    if (error)
      throw new CheckpointError("process_group", `[redis] add to ${key} on ${this.where}: ${error.message}`, {
        cause: error,
      });
    return Number(value);
  }

  async compareAndSet(key: string, expected: string | undefined, value: string): Promise<boolean> {
    const args = expected === undefined ? ["0", "", value] : ["1", expected, value];
    return (
      (await this.#call(`compare-and-set ${key}`, () =>
        this.#client.eval(COMPARE_AND_SET, 1, this.#prefix + key, ...args),
      )) === 1
    );
  }

  async wait(key: string, timeoutMs: number, signal?: AbortSignal): Promise<string | undefined> {
    if (signal?.aborted) return undefined;
    const channel = this.#prefix + key;
    let entry = this.#waiters.get(channel);
    if (!entry) {
      entry = { wakers: new Set(), subscribed: this.#call(`watch ${key}`, () => this.#subscriber.subscribe(channel)) };
      this.#waiters.set(channel, entry);
    }
    let wake = (): void => undefined;
    const waker = (): void => wake();
    entry.wakers.add(waker);
    // The timer's own flag, not a clock comparison: a timer may fire a little before Date.now() says it is due.
    let timedOut = false;
    const cancel = longTimer(() => {
      timedOut = true;
      waker();
    }, timeoutMs);
    signal?.addEventListener("abort", waker);
    try {
      // Subscribed first, then read, so a write between the two is never missed.
      await entry.subscribed;
      for (;;) {
        const woken = new Promise<void>((resolve) => (wake = resolve));
        const value = await this.get(key);
        if (value !== undefined || timedOut || signal?.aborted) return value;
        await woken;
      }
    } finally {
      cancel();
      signal?.removeEventListener("abort", waker);
      entry.wakers.delete(waker);
      if (entry.wakers.size === 0 && this.#waiters.get(channel) === entry) {
        this.#waiters.delete(channel);
        // Teardown has a deadline too, but nobody waits for it: the answer (or the failure) is already known.
        void entry.subscribed
          .then(() => this.#call(`unwatch ${key}`, () => this.#subscriber.unsubscribe(channel)))
          .catch(() => undefined);
      }
    }
  }

  async deletePrefix(prefix: string): Promise<void> {
    const pattern = `${(this.#prefix + prefix).replace(/[*?[\]\\]/g, "\\$&")}*`;
    let cursor = "0";
    do {
      const [next, keys] = await this.#call(`list ${prefix}*`, () =>
        this.#client.scan(cursor, "MATCH", pattern, "COUNT", 1000),
      );
      if (keys.length > 0) await this.#call(`delete ${prefix}*`, () => this.#client.del(...keys));
      cursor = next;
    } while (cursor !== "0");
  }

  /**
   * Deletes the leased keys and quits, waiting only while Redis answers: on a lost connection or
   * after a failed call it just disconnects (the leases then end by their TTL).
   */
  async close(): Promise<void> {
    clearInterval(this.#renewal);
    this.#subscriber.disconnect();
    try {
      if (this.#unresponsive || this.#client.status !== "ready") return;
      if (this.#leased.size > 0) await this.#call("delete the leased keys", () => this.#client.del(...this.#leased));
      await this.#call("quit", () => this.#client.quit());
    } catch {
      // Reported by the call that failed before; the connection ends below either way.
    } finally {
      this.#client.disconnect();
    }
  }

  /** One Redis command, with the store's deadline; any failure is a `process_group` error naming it. */
  async #call<T>(what: string, call: () => Promise<T>): Promise<T> {
    try {
      return await withDeadline(what, call(), { onExpired: () => (this.#unresponsive = true) });
    } catch (error) {
      // Only Redis's own refusal (a script or type error) comes from a server that still answers.
      if (!(error instanceof ReplyError)) this.#unresponsive = true;
      throw new CheckpointError("process_group", `[redis] ${what} on ${this.where}: ${(error as Error).message}`, {
        cause: error,
      });
    }
  }
}
