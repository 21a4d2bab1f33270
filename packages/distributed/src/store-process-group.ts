import { hostname } from "node:os";
import { CheckpointError, type CoordinatedProcessGroup, type ProcessGroup } from "@cairn/core";
import { MAX_TIMER_MS, checkDuration } from "@cairn/core/storage";
import type { Store } from "./store.js";

export interface StoreProcessGroupOptions {
  /** An open store; the group owns it from now on and closes it with the group. */
  readonly store: Store;
  readonly rank: number;
  readonly worldSize: number;
  /** The job's id, shared by all its ranks: keys live under `<runId>/`, so jobs on one store never meet. */
  readonly runId: string;
  /** How long a collective (and the join) may wait for its last rank (default 300 000 ms). */
  readonly timeoutMs?: number;
  /** What to check when a rank does not join (default: the same CAIRN_STORE, CAIRN_RUN_ID and WORLD_SIZE). */
  readonly joinHint?: string;
}

type Kind = "allGather" | "broadcast" | "barrier";
type Listener = (value: unknown, from: number) => void;

/** How often a waiting rank looks for a dead, departed or failed peer while it waits. */
const CHECK_MS = 1_000;
/** Values longer than this go in parts: etcd refuses requests over 1.5 MiB by default. */
const PART_CHARS = 512 * 1024;

/** State shared by a group and every `group(tag)` made from it: one store client, one membership. */
class Session {
  readonly sequences = new Map<string, number>();
  /** Per tag, the lowest sequence whose keys this rank has not yet deleted. */
  readonly collected = new Map<string, number>();
  readonly listeners = new Map<string, Set<Listener>>();
  readonly abort = new AbortController();
  /** Ranks whose claim was seen without a liveness key by the latest check: gone if the next check agrees. */
  readonly suspects = new Set<number>();
  broken: CheckpointError | undefined;
  closed = false;

  constructor(
    readonly store: Store,
    readonly runId: string,
    readonly rank: number,
    readonly worldSize: number,
    readonly timeoutMs: number,
  ) {}

  key(name: string): string {
    return `${this.runId}/${name}`;
  }

  /** Breaks the group with `reason` (published to the others unless it came from them) and throws. */
  fail(reason: string, publish = true): never {
    if (!this.broken) {
      this.broken = new CheckpointError("process_group", `process group (rank ${this.rank}): ${reason}`, {
        context: { rank: this.rank },
      });
      if (publish) this.store.compareAndSet(this.key("broken"), undefined, reason).catch(() => undefined);
    }
    throw this.broken;
  }

  /** The value at `name`, written by `rank` as part of `what`; fails naming `rank` when it dies, leaves or is late. */
  async take(name: string, rank: number, what: string, deadline: number, late?: string): Promise<string> {
    for (;;) {
      if (this.broken) throw this.broken;
      if (this.closed) throw closedError(this.rank);
      const remaining = deadline - Date.now();
      if (remaining <= 0)
        this.fail(
          late ??
            `rank ${rank} did not reach ${what} within ${seconds(this.timeoutMs)} (stuck, or running different code)`,
        );
      const value = await this.store.wait(this.key(name), Math.min(remaining, CHECK_MS), this.abort.signal);
      if (value !== undefined) return value;
      await this.check(rank, what);
    }
  }

  async check(rank: number, what: string): Promise<void> {
    const [broken, left, claimed, alive] = await Promise.all(
      ["broken", `left/${rank}`, `rank/${rank}`, `alive/${rank}`].map((k) => this.store.get(this.key(k))),
    );
    if (broken !== undefined) this.fail(broken, false);
    if (left !== undefined) this.fail(`rank ${rank} closed the process group before reaching ${what}`);
    // A rank claims, then sets its liveness key: seen between the two once, it is not dead yet.
    const gone = claimed !== undefined && alive === undefined;
    if (gone && !this.suspects.has(rank)) this.suspects.add(rank);
    else if (!gone) this.suspects.delete(rank);
    else {
      this.fail(
        `rank ${rank} disconnected: its liveness key on ${this.store.where} is gone (its process exited or crashed, or lost its connection or lease)`,
      );
    }
  }

  /** Writes a JSON value under the folder `dir`: long ones in parts first, then the head that readers wait for. */
  async put(dir: string, text: string): Promise<void> {
    if (text.length <= PART_CHARS) return this.store.set(this.key(`${dir}head`), `v${text}`);
    const parts = Math.ceil(text.length / PART_CHARS);
    await Promise.all(
      Array.from({ length: parts }, (_, i) =>
        this.store.set(this.key(`${dir}part${i}`), text.slice(i * PART_CHARS, (i + 1) * PART_CHARS)),
      ),
    );
    await this.store.set(this.key(`${dir}head`), `p${parts}`);
  }

  async read(dir: string, rank: number, what: string, deadline: number): Promise<unknown> {
    const head = await this.take(`${dir}head`, rank, what, deadline);
    let text = head.slice(1);
    if (head.startsWith("p")) {
      const parts = Number(text);
      if (!Number.isSafeInteger(parts) || parts < 1 || parts > 1 << 16)
        this.fail(`rank ${rank}'s value for ${what} is damaged (${parts} parts)`);
      const pieces = await Promise.all(
        Array.from({ length: parts }, (_, i) => this.store.get(this.key(`${dir}part${i}`))),
      );
      if (pieces.some((p) => p === undefined)) this.fail(`rank ${rank}'s value for ${what} lost a part`);
      text = pieces.join("");
    } else if (!head.startsWith("v")) {
      this.fail(`rank ${rank}'s value for ${what} is damaged`);
    }
    try {
      return JSON.parse(text);
    } catch (error) {
      return this.fail(`rank ${rank}'s value for ${what} is not JSON (${(error as Error).message})`);
    }
  }

  /** Runs one collective: this rank writes its part, then reads the parts it needs. */
  async collective(tag: string, kind: Kind, value: unknown, root: number): Promise<unknown> {
    if (this.broken) throw this.broken;
    if (this.closed) throw closedError(this.rank);
    const seq = (this.sequences.get(tag) ?? 0) + 1;
    this.sequences.set(tag, seq);
    const what = `${kind}${kind === "broadcast" ? ` from rank ${root}` : ""} #${seq}${tag ? ` on "${tag}"` : ""}`;
    const deadline = Date.now() + this.timeoutMs;
    const base = `c/${encodeURIComponent(tag)}/${seq}`;
    const contribution = (v: unknown): string => JSON.stringify({ kind, root, value: v ?? null });
    const readPart = async (rank: number): Promise<unknown> => {
      const part = (await this.read(`${base}/${rank}/`, rank, what, deadline)) as {
        kind?: unknown;
        root?: unknown;
        value?: unknown;
      } | null;
      if (part?.kind !== kind || part.root !== root) {
        this.fail(
          `rank ${rank} called ${String(part?.kind)} where rank ${this.rank} called ${what}; every rank must call the same collectives in the same order`,
        );
      }
      return part.value;
    };
    try {
      if (kind === "broadcast") {
        if (this.rank === root) {
          await this.put(`${base}/${root}/`, contribution(value));
          return value;
        }
        return await readPart(root);
      }
      await this.put(`${base}/${this.rank}/`, contribution(value));
      // One rank at a time: all must arrive anyway, and only one wait at a time polls for failures.
      const values: unknown[] = [];
      for (let r = 0; r < this.worldSize; r++) values.push(r === this.rank ? (value ?? null) : await readPart(r));
      await this.collect(tag, seq);
      return kind === "allGather" ? values : null;
    } catch (error) {
      if (error === this.broken) throw error;
      return this.fail(`${what} failed: ${(error as Error).message}`);
    }
  }

  /** After every rank reached `seq` of `tag`, nobody reads this rank's earlier values of `tag`: delete them. */
  async collect(tag: string, seq: number): Promise<void> {
    const from = this.collected.get(tag) ?? 1;
    this.collected.set(tag, seq);
    for (let s = from; s < seq; s++)
      await this.store.deletePrefix(this.key(`c/${encodeURIComponent(tag)}/${s}/${this.rank}/`));
  }

  /** Delivers every posted event, in order, to this rank's listeners until the group closes. */
  async tail(): Promise<void> {
    for (let n = 1; !this.closed && !this.broken;) {
      const text = await this.store.wait(this.key(`ev/${n}`), 60_000, this.abort.signal);
      if (text === undefined) continue;
      n++;
      let event: { topic?: unknown; from?: unknown; value?: unknown };
      try {
        event = JSON.parse(text) as typeof event;
      } catch {
        continue;
      }
      if (typeof event.topic !== "string" || typeof event.from !== "number") continue;
      for (const listener of this.listeners.get(event.topic) ?? []) listener(event.value, event.from);
    }
  }
}

/**
 * A process group whose collectives run on a key-value store (embedded TCP, etcd, Redis): each
 * rank writes its part under `<runId>/c/<tag>/<seq>/<rank>/` and waits for the parts it needs. Ranks claim
 * their rank with a compare-and-set and hold a leased liveness key, so a rank that dies, leaves
 * or is late fails the others with a `process_group` error naming it, within the timeout (a
 * dead rank: once its lease expires). After a failure every call rejects with the first reason.
 */
export class StoreProcessGroup implements CoordinatedProcessGroup {
  readonly rank: number;
  readonly worldSize: number;
  readonly #session: Session;
  readonly #tag: string;

  private constructor(session: Session, tag: string) {
    this.#session = session;
    this.rank = session.rank;
    this.worldSize = session.worldSize;
    this.#tag = tag;
  }

  /**
   * Joins: checks that every rank says the same world size, claims this rank (rejecting a second
   * claimant), starts its lease and waits for all ranks. Rejects with `invalid_argument` for a bad
   * rank or world size, `process_group` when ranks do not all join within the timeout.
   */
  static async connect(options: StoreProcessGroupOptions): Promise<StoreProcessGroup> {
    const { store, rank, worldSize, runId } = options;
    const timeoutMs = options.timeoutMs ?? 300_000;
    const session = new Session(store, runId, rank, worldSize, timeoutMs);
    try {
      checkDuration(timeoutMs, "the process group's timeoutMs", { min: 1, max: MAX_TIMER_MS });
      if (!Number.isSafeInteger(worldSize) || worldSize < 1)
        throw new CheckpointError("invalid_argument", `WORLD_SIZE must be a positive integer, got ${worldSize}`);
      if (!Number.isSafeInteger(rank) || rank < 0 || rank >= worldSize) {
        throw new CheckpointError(
          "invalid_argument",
          `RANK must be an integer in 0..${worldSize - 1} for WORLD_SIZE=${worldSize}, got ${rank}`,
        );
      }
      if (!/^[A-Za-z0-9._-]{1,128}$/.test(runId))
        throw new CheckpointError(
          "invalid_argument",
          `run id ${JSON.stringify(runId)} must be 1 to 128 letters, digits, '.', '_' or '-'`,
        );
      if (!(await store.compareAndSet(session.key("world"), undefined, String(worldSize)))) {
        const theirs = await store.get(session.key("world"));
        if (theirs !== String(worldSize)) {
          throw new CheckpointError(
            "invalid_argument",
            `this rank says WORLD_SIZE=${worldSize} but run ${runId} on ${store.where} has ${theirs}; start every rank with the same WORLD_SIZE`,
          );
        }
      }
      if (!(await store.compareAndSet(session.key(`rank/${rank}`), undefined, `${hostname()}:${process.pid}`))) {
        const holder = await store.get(session.key(`rank/${rank}`));
        throw new CheckpointError(
          "process_group",
          `process group (rank ${rank}): RANK=${rank} of run ${runId} on ${store.where} is already taken by ${holder ?? "another process"}; give every process its own rank, and every job its own run id`,
          { context: { rank } },
        );
      }
      await store.set(session.key(`alive/${rank}`), "1", { lease: true });
      const deadline = Date.now() + timeoutMs;
      for (let r = 0; r < worldSize; r++) {
        if (r === rank) continue;
        const late = `rank ${r} did not join ${runId === "job" ? "" : `run ${runId} `}on ${store.where} within ${seconds(timeoutMs)}; ${options.joinHint ?? "start every rank with the same CAIRN_STORE, CAIRN_RUN_ID and WORLD_SIZE"}`;
        await session.take(`rank/${r}`, r, "the join", deadline, late);
      }
    } catch (error) {
      session.closed = true;
      await store.close().catch(() => undefined);
      throw error;
    }
    session.tail().catch((error: unknown) => {
      if (!session.closed)
        session.broken ??= new CheckpointError(
          "process_group",
          `process group (rank ${rank}): lost the store at ${store.where}: ${(error as Error).message}`,
          { cause: error },
        );
    });
    return new StoreProcessGroup(session, "");
  }

  group(tag: string): ProcessGroup {
    return new StoreProcessGroup(this.#session, this.#tag ? `${this.#tag}/${tag}` : tag);
  }

  async allGather<T>(value: T): Promise<T[]> {
    return (await this.#session.collective(this.#tag, "allGather", value, 0)) as T[];
  }

  async broadcast<T>(value: T | undefined, root = 0): Promise<T> {
    return (await this.#session.collective(this.#tag, "broadcast", value, root)) as T;
  }

  async barrier(): Promise<void> {
    await this.#session.collective(this.#tag, "barrier", null, 0);
  }

  /** Sends `value` to every rank's `topic` listeners (this rank's too), without waiting for anyone. */
  post(topic: string, value?: unknown): void {
    const session = this.#session;
    if (session.broken || session.closed) return;
    const event = JSON.stringify({ topic, from: session.rank, value: value ?? null });
    session.store
      .add(session.key("evseq"), 1)
      .then((n) => session.store.set(session.key(`ev/${n}`), event))
      .catch((error: unknown) => {
        session.broken ??= new CheckpointError(
          "process_group",
          `process group (rank ${session.rank}): cannot post to ${session.store.where}: ${(error as Error).message}`,
          { cause: error },
        );
      });
  }

  on(topic: string, listener: (value: unknown, from: number) => void): () => void {
    const listeners = this.#session.listeners.get(topic) ?? new Set<Listener>();
    listeners.add(listener);
    this.#session.listeners.set(topic, listeners);
    return () => listeners.delete(listener);
  }

  /** Leaves the group; the last rank to leave deletes the run's keys. Other ranks still waiting for this one fail at once. */
  async close(): Promise<void> {
    const session = this.#session;
    if (session.closed) return;
    session.closed = true;
    session.abort.abort();
    try {
      // A group broken by its store (or a rank) says goodbye to nobody: the store may not answer.
      if (session.broken) return;
      await session.store.set(session.key(`left/${session.rank}`), "1");
      if ((await session.store.add(session.key("closed"), 1)) === session.worldSize)
        await session.store.deletePrefix(`${session.runId}/`);
    } finally {
      await session.store.close();
    }
  }
}

function closedError(rank: number): CheckpointError {
  return new CheckpointError("process_group", `process group (rank ${rank}): the group is closed; create a new one`);
}

function seconds(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}
