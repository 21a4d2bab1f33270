import { type Socket, connect } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { CheckpointError, type CoordinatedProcessGroup, type ProcessGroup } from "@cairn/core";
import { DEFAULT_MAX_MESSAGE_BYTES, onJsonLines, sendJsonLine } from "./json-lines.js";
import { type ClientMessage, type CollectiveKind, RendezvousServer, type ServerMessage } from "./rendezvous-server.js";

export interface TcpProcessGroupOptions {
  readonly rank: number;
  readonly worldSize: number;
  /** Rank 0's address: rank 0 listens there, the others connect to it. */
  readonly host: string;
  readonly port: number;
  /**
   * How long a collective may wait for its last rank, and how long ranks wait for each other
   * to join (default 300 000 ms, 5 minutes). A rank that dies fails the others at once.
   */
  readonly timeoutMs?: number;
  /** The job's secret: rank 0's server admits only ranks that show it. Required unless `host` is a loopback address. */
  readonly token?: string;
  /** The longest message a rank sends (default 256 MiB); rank 0's server refuses longer ones. */
  readonly maxMessageBytes?: number;
}

type Listener = (value: unknown, from: number) => void;

interface Waiter {
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: Error) => void;
  readonly timer: NodeJS.Timeout;
}

/** How long past the server's own timeout a rank waits before it concludes the server is gone. */
const SERVER_GRACE_MS = 5_000;

/** One rank's connection to the rendezvous server, shared by every tag's group. */
class Connection {
  readonly waiters = new Map<string, Waiter>();
  readonly listeners = new Map<string, Set<Listener>>();
  readonly sequences = new Map<string, number>();
  broken: CheckpointError | undefined;
  closed = false;

  constructor(
    readonly socket: Socket,
    readonly where: string,
    readonly rank: number,
    readonly timeoutMs: number,
    readonly maxBytes: number,
    worldSize: number,
  ) {
    // The server's answers gather one message from every rank.
    onJsonLines(
      socket,
      (message) => this.#receive(message as ServerMessage),
      (reason) => {
        this.fail(`rank ${rank} got ${reason} from the rendezvous server at ${where}`);
        socket.destroy();
      },
      () => maxBytes * worldSize + 1024 * 1024,
    );
    socket.on("close", () => {
      if (!this.closed) this.fail(`lost the connection to the rendezvous server at ${where}: rank 0, which hosts it, exited, crashed or closed the group`);
    });
  }

  fail(reason: string): void {
    this.broken ??= new CheckpointError("process_group", `process group (rank ${this.rank}): ${reason}`, { context: { rank: this.rank } });
    for (const [id, waiter] of this.waiters) {
      clearTimeout(waiter.timer);
      this.waiters.delete(id);
      waiter.reject(this.broken);
    }
  }

  async collective(tag: string, kind: CollectiveKind, value: unknown, root?: number): Promise<unknown> {
    if (this.broken) throw this.broken;
    if (this.closed) throw new CheckpointError("process_group", `process group (rank ${this.rank}): the group is closed; create a new one`);
    const seq = (this.sequences.get(tag) ?? 0) + 1;
    this.sequences.set(tag, seq);
    const message = { op: "collective", tag, seq, kind, ...(root === undefined ? {} : { root }), value } satisfies ClientMessage;
    const result = this.wait(`${tag}#${seq}`, `no answer to ${kind} #${seq} from the rendezvous server at ${this.where} within ${this.timeoutMs + SERVER_GRACE_MS} ms`);
    try {
      sendJsonLine(this.socket, message, this.maxBytes);
    } catch (error) {
      // Too long to send: this rank never contributes, so the group cannot go on; the others learn why.
      const reason = `cannot send its value for ${kind} #${seq}: ${(error as Error).message} (maxMessageBytes)`;
      sendJsonLine(this.socket, { op: "abort", reason } satisfies ClientMessage);
      this.fail(`rank ${this.rank} ${reason}`);
    }
    return result;
  }

  /** Resolves with the server's answer to `id`; after the server's own timeout and a grace period the group fails with `timeoutReason`. */
  wait(id: string, timeoutReason: string): Promise<unknown> {
    return new Promise<unknown>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(timeoutReason), this.timeoutMs + SERVER_GRACE_MS);
      timer.unref();
      this.waiters.set(id, { resolve, reject, timer });
    });
  }

  #receive(message: ServerMessage): void {
    if (message.op === "result" || message.op === "ready") {
      const id = message.op === "ready" ? "ready" : `${message.tag}#${message.seq}`;
      const waiter = this.waiters.get(id);
      if (!waiter) return;
      clearTimeout(waiter.timer);
      this.waiters.delete(id);
      waiter.resolve(message.op === "result" ? message.value : undefined);
    } else if (message.op === "error") {
      this.fail(message.message);
    } else if (message.op === "event") {
      for (const listener of this.listeners.get(message.topic) ?? []) listener(message.value, message.from);
    }
  }
}

/**
 * A process group over TCP, like `torch.distributed` with the `env://` or `tcp://` init
 * method: rank 0 hosts a `RendezvousServer`, every rank (rank 0 too) connects to it, and
 * collectives go through it. Values are JSON. Every collective has a timeout, and a rank
 * that dies, leaves or never arrives makes the others' calls reject with a `process_group`
 * error naming it; after that the group is broken and every call rejects.
 *
 * Independent streams of collectives (a background save beside the training loop's own
 * coordination) each take their own `group(tag)`: sequences are counted per tag, so the
 * streams need no order between each other, only within each.
 */
export class TcpProcessGroup implements CoordinatedProcessGroup {
  readonly rank: number;
  readonly worldSize: number;
  readonly #connection: Connection;
  readonly #tag: string;
  readonly #server: RendezvousServer | undefined;

  private constructor(connection: Connection, worldSize: number, tag: string, server: RendezvousServer | undefined) {
    this.#connection = connection;
    this.rank = connection.rank;
    this.worldSize = worldSize;
    this.#tag = tag;
    this.#server = server;
  }

  /**
   * Joins the group: rank 0 starts the server, every rank connects (retrying until rank 0
   * listens) and waits for all `worldSize` ranks. Rejects with `process_group` when a rank
   * does not join within the timeout, and `invalid_argument` for a bad rank or a taken port.
   */
  static async connect(options: TcpProcessGroupOptions): Promise<TcpProcessGroup> {
    const { rank, worldSize, host, port, token } = options;
    const timeoutMs = options.timeoutMs ?? 300_000;
    const maxBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    if (token === undefined && worldSize > 1 && !isLoopback(host)) {
      throw new CheckpointError(
        "invalid_argument",
        `MASTER_ADDR=${host} is reachable from other hosts: give every rank the same secret CAIRN_JOB_TOKEN (e.g. from \`openssl rand -hex 16\`) so that no stray client joins the job`,
      );
    }
    if (!Number.isSafeInteger(worldSize) || worldSize < 1) {
      throw new CheckpointError("invalid_argument", `WORLD_SIZE must be a positive integer, got ${worldSize}`);
    }
    if (!Number.isSafeInteger(rank) || rank < 0 || rank >= worldSize) {
      throw new CheckpointError("invalid_argument", `RANK must be an integer in 0..${worldSize - 1} for WORLD_SIZE=${worldSize}, got ${rank}`);
    }
    if (!Number.isSafeInteger(port) || port < 0 || port > 65535 || (port === 0 && worldSize > 1)) {
      throw new CheckpointError("invalid_argument", `MASTER_PORT must be a TCP port (1..65535), got ${port}`);
    }
    const server = rank === 0 ? await RendezvousServer.listen(host, port, { worldSize, timeoutMs, maxMessageBytes: maxBytes, ...(token === undefined ? {} : { token }) }) : undefined;
    const where = `${host}:${server?.port ?? port}`;
    try {
      const socket = await connectWithRetries(host, server?.port ?? port, timeoutMs, where, rank);
      const connection = new Connection(socket, where, rank, timeoutMs, maxBytes, worldSize);
      const ready = connection.wait("ready", `the ranks did not all join ${where} within ${timeoutMs + SERVER_GRACE_MS} ms`);
      sendJsonLine(socket, { op: "hello", rank, worldSize, ...(token === undefined ? {} : { token }) } satisfies ClientMessage);
      try {
        await ready;
      } catch (error) {
        connection.closed = true;
        socket.destroy();
        throw error;
      }
      return new TcpProcessGroup(connection, worldSize, "", server);
    } catch (error) {
      await server?.close(0);
      throw error;
    }
  }

  /** The port rank 0's server listens on (useful with port 0 in tests); `undefined` on other ranks. */
  get serverPort(): number | undefined {
    return this.#server?.port;
  }

  /** A group over the same ranks whose collectives are sequenced apart from this one's. */
  group(tag: string): ProcessGroup {
    return new TcpProcessGroup(this.#connection, this.worldSize, this.#tag ? `${this.#tag}/${tag}` : tag, undefined);
  }

  async allGather<T>(value: T): Promise<T[]> {
    return (await this.#connection.collective(this.#tag, "allGather", value)) as T[];
  }

  async broadcast<T>(value: T | undefined, root = 0): Promise<T> {
    return (await this.#connection.collective(this.#tag, "broadcast", this.rank === root ? value : undefined, root)) as T;
  }

  async barrier(): Promise<void> {
    await this.#connection.collective(this.#tag, "barrier", null);
  }

  /** Sends `value` to every rank's `topic` listeners (this rank's too), without waiting for anyone. */
  post(topic: string, value?: unknown): void {
    if (this.#connection.broken || this.#connection.closed) return;
    try {
      sendJsonLine(this.#connection.socket, { op: "post", topic, value } satisfies ClientMessage, this.#connection.maxBytes);
    } catch (error) {
      throw new CheckpointError("invalid_argument", `process group (rank ${this.rank}): cannot post to ${topic}: ${(error as Error).message}`, { cause: error });
    }
  }

  /** Calls `listener` for every value posted to `topic` by any rank; returns the unsubscribe. */
  on(topic: string, listener: (value: unknown, from: number) => void): () => void {
    const listeners = this.#connection.listeners.get(topic) ?? new Set<Listener>();
    listeners.add(listener);
    this.#connection.listeners.set(topic, listeners);
    return () => listeners.delete(listener);
  }

  /**
   * Leaves the group. Other ranks' collectives that still wait for this rank fail at once.
   * Rank 0 keeps its server until every rank has left (or the timeout passes).
   */
  async close(): Promise<void> {
    const connection = this.#connection;
    if (connection.closed) return;
    connection.closed = true;
    sendJsonLine(connection.socket, { op: "bye" } satisfies ClientMessage);
    connection.socket.end();
    await this.#server?.close(connection.timeoutMs);
  }
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\./.test(host);
}

async function connectWithRetries(host: string, port: number, timeoutMs: number, where: string, rank: number): Promise<Socket> {
  const deadline = Date.now() + timeoutMs;
  let delay = 50;
  for (;;) {
    try {
      return await new Promise<Socket>((resolve, reject) => {
        const socket = connect({ host, port, noDelay: true });
        socket.once("connect", () => {
          socket.off("error", reject);
          socket.on("error", () => undefined);
          resolve(socket);
        });
        socket.once("error", reject);
      });
    } catch (error) {
      if (Date.now() + delay > deadline) {
        throw new CheckpointError(
          "process_group",
          `process group (rank ${rank}): cannot reach rank 0 at ${where} within ${timeoutMs} ms (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); is rank 0 running, with the same MASTER_ADDR and MASTER_PORT?`,
          { cause: error },
        );
      }
      await sleep(delay);
      delay = Math.min(delay * 2, 1000);
    }
  }
}
