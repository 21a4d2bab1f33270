import { CheckpointError } from "@cairn/core";
import { DEFAULT_LEASE_MS, STORE_DEADLINE_MS, type Store, type StoreOptions, withDeadline } from "@cairn/distributed";
import { longTimer } from "@cairn/core/storage";
import { noop as noRetries } from "cockatiel";
import { Etcd3, type Lease, type Namespace, type Watcher } from "etcd3";

/**
 * A `Store` on etcd v3 through the `etcd3` client: `etcd://host:2379[,host2:2379]/prefix`
 * (`etcds://` for TLS, `user:password@` for etcd's auth). Leased keys hang on one etcd lease
 * this client keeps alive; `wait` is a watch, `add` and `compareAndSet` are transactions.
 */
export class EtcdStore implements Store {
  readonly where: string;
  readonly #client: Etcd3;
  readonly #kv: Namespace;
  readonly #lease: Lease;
  /** Set once a call failed (its deadline, gRPC's own, or a lost connection): teardown then no longer waits for etcd. */
  #unresponsive = false;

  constructor(url: URL, options: StoreOptions = {}) {
    const scheme = url.protocol === "etcds:" ? "https" : "http";
    const hosts = url.host.split(",").map((host) => `${scheme}://${host.includes(":") ? host : `${host}:2379`}`);
    const prefix = `${decodeURIComponent(url.pathname).replace(/^\/+|\/+$/g, "")}/`;
    this.where = `${url.protocol}//${url.host}/${prefix}`;
    this.#client = new Etcd3({
      hosts,
      ...(url.username
        ? { auth: { username: decodeURIComponent(url.username), password: decodeURIComponent(url.password) } }
        : {}),
      defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + STORE_DEADLINE_MS }),
      // One attempt per call: every call has its own deadline (withDeadline), which retries would stretch.
      faultHandling: { global: noRetries, host: () => noRetries },
    });
    this.#kv = this.#client.namespace(prefix === "/" ? "cairn/" : prefix);
    this.#lease = this.#kv.lease(Math.max(1, Math.ceil((options.leaseMs ?? DEFAULT_LEASE_MS) / 1000)), {
      autoKeepAlive: true,
    });
    this.#lease.on("lost", () => undefined);
  }

  async set(key: string, value: string, options: { readonly lease?: boolean } = {}): Promise<void> {
    await this.#call(`set ${key}`, () =>
      options.lease ? this.#lease.put(key).value(value).exec() : this.#kv.put(key).value(value).exec(),
    );
  }

  async get(key: string): Promise<string | undefined> {
    return (await this.#call(`get ${key}`, () => this.#kv.get(key).string())) ?? undefined;
  }

  async add(key: string, delta: number): Promise<number> {
    for (;;) {
      const current = await this.#call(`read ${key}`, () => this.#kv.get(key).exec());
      const kv = current.kvs[0];
      const before = kv ? Number(kv.value.toString()) : 0;
      if (!Number.isSafeInteger(before))
        throw new CheckpointError(
          "process_group",
          `[etcd] ${this.where}${key} holds ${JSON.stringify(kv?.value.toString())}, not a counter`,
        );
      const next = before + delta;
      const put = this.#kv.put(key).value(String(next));
      const txn = kv ? this.#kv.if(key, "Mod", "==", kv.mod_revision) : this.#kv.if(key, "Create", "==", 0);
      const result = await this.#call(`add to ${key}`, () => txn.then(put).commit());
      if (result.succeeded) return next;
    }
  }

  async compareAndSet(key: string, expected: string | undefined, value: string): Promise<boolean> {
    const txn =
      expected === undefined ? this.#kv.if(key, "Create", "==", 0) : this.#kv.if(key, "Value", "==", expected);
    return (await this.#call(`compare-and-set ${key}`, () => txn.then(this.#kv.put(key).value(value)).commit()))
      .succeeded;
  }

  async wait(key: string, timeoutMs: number, signal?: AbortSignal): Promise<string | undefined> {
    if (signal?.aborted) return undefined;
    // Teardown has a deadline too, but nobody waits for it: the answer (or the failure) is already known.
    const cancelWatch = (w: Watcher): void =>
      void withDeadline(`[etcd] cancel the watch of ${key} on ${this.where}`, w.cancel()).catch(() => undefined);
    const watcher = await this.#call(`watch ${key}`, () => this.#kv.watch().key(key).create(), {
      late: cancelWatch,
    });
    try {
      return await new Promise<string | undefined>((resolve, reject) => {
        const cancel = longTimer(() => done(undefined), timeoutMs);
        const done = (value: string | undefined): void => {
          cancel();
          signal?.removeEventListener("abort", onAbort);
          resolve(value);
        };
        const onAbort = (): void => done(undefined);
        signal?.addEventListener("abort", onAbort);
        watcher.on("put", (kv) => done(kv.value.toString()));
        // Watching first, then reading, so a write between the two is never missed.
        this.get(key).then(
          (value) => value !== undefined && done(value),
          (error: unknown) => {
            cancel();
            reject(error instanceof Error ? error : new Error(String(error)));
          },
        );
      });
    } finally {
      cancelWatch(watcher);
    }
  }

  async deletePrefix(prefix: string): Promise<void> {
    await this.#call(`delete ${prefix}*`, () => this.#kv.delete().prefix(prefix).exec());
  }

  /** Revokes the lease (waiting for it only while etcd answers), then closes the client. */
  async close(): Promise<void> {
    const revoked = withDeadline(`[etcd] revoke the lease on ${this.where}`, this.#lease.revoke()).catch(
      () => undefined,
    );
    if (!this.#unresponsive) await revoked;
    this.#client.close();
  }

  /** One etcd call, with the store's deadline; any failure is a `process_group` error naming the call. */
  async #call<T>(what: string, call: () => Promise<T>, options: { late?: (value: T) => void } = {}): Promise<T> {
    try {
      return await withDeadline(what, call(), options);
    } catch (error) {
      // gRPC's deadline and ours are the same length, and either may fire first: any failure counts.
      this.#unresponsive = true;
      throw new CheckpointError("process_group", `[etcd] ${what} on ${this.where}: ${(error as Error).message}`, {
        cause: error,
      });
    }
  }
}
