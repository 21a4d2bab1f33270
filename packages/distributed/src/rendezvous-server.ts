import { createHash, timingSafeEqual } from "node:crypto";
import { type Server, type Socket, createServer } from "node:net";
import { CheckpointError } from "@cairn/core";
import { DEFAULT_MAX_MESSAGE_BYTES, onJsonLines, sendJsonLine } from "./json-lines.js";

/** The collectives the server runs; every rank of a collective must name the same one. */
export type CollectiveKind = "allGather" | "broadcast" | "barrier";

/** Messages from a rank to the server. */
export type ClientMessage =
  | { readonly op: "hello"; readonly rank: number; readonly worldSize: number; readonly token?: string }
  | { readonly op: "collective"; readonly tag: string; readonly seq: number; readonly kind: CollectiveKind; readonly root?: number; readonly value?: unknown }
  | { readonly op: "post"; readonly topic: string; readonly value?: unknown }
  | { readonly op: "abort"; readonly reason: string }
  | { readonly op: "bye" };

/** Messages from the server to a rank. */
export type ServerMessage =
  | { readonly op: "ready" }
  | { readonly op: "result"; readonly tag: string; readonly seq: number; readonly value?: unknown }
  | { readonly op: "error"; readonly tag?: string; readonly seq?: number; readonly message: string }
  | { readonly op: "event"; readonly topic: string; readonly from: number; readonly value?: unknown };

interface Pending {
  readonly kind: CollectiveKind;
  readonly root: number;
  readonly tag: string;
  readonly seq: number;
  readonly values: Map<number, unknown>;
  readonly timer: NodeJS.Timeout;
}

export interface RendezvousServerOptions {
  readonly worldSize: number;
  /** How long a collective (and the initial join) may wait for its last rank. */
  readonly timeoutMs: number;
  /** For messages: where ranks reach this server. */
  readonly address: string;
  /** The job's secret: a client whose hello does not carry it cannot join or claim a rank. */
  readonly token?: string;
  /** The longest message a rank may send (default 256 MiB). */
  readonly maxMessageBytes?: number;
}

/** What a client may send before it has shown the token, and how long it has to say hello. */
const HELLO_MAX_BYTES = 64 * 1024;
const HELLO_TIMEOUT_MS = 10_000;

/**
 * The small server rank 0 hosts, like torch's `TCPStore`: ranks join it, and it runs every
 * collective by collecting each rank's contribution and answering all of them at once. It
 * watches every connection, so a rank that dies or never arrives fails the others with an
 * error naming it instead of leaving them waiting. Once a collective fails the group is
 * broken: ranks are out of step, and every later collective fails with the first reason.
 */
export class RendezvousServer {
  readonly #server: Server;
  readonly #options: RendezvousServerOptions;
  readonly #ranks = new Map<number, Socket>();
  readonly #left = new Set<number>();
  readonly #pending = new Map<string, Pending>();
  readonly #joinTimer: NodeJS.Timeout;
  #broken: string | undefined;
  #drained: (() => void) | undefined;

  private constructor(server: Server, options: RendezvousServerOptions) {
    this.#server = server;
    this.#options = options;
    this.#joinTimer = setTimeout(() => {
      const missing = this.#missing(new Set(this.#ranks.keys()));
      this.#break(`${describeRanks(missing)} did not join within ${seconds(options.timeoutMs)}; check that every rank was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE`);
    }, options.timeoutMs);
    this.#joinTimer.unref();
    server.on("connection", (socket) => this.#accept(socket));
  }

  /** Listens on `host:port` (port 0 picks a free one). Fails with `invalid_argument` if the port is taken. */
  static async listen(host: string, port: number, options: Omit<RendezvousServerOptions, "address">): Promise<RendezvousServer> {
    const server = createServer({ noDelay: true });
    await new Promise<void>((resolve, reject) => {
      server.once("error", (error: NodeJS.ErrnoException) => {
        reject(
          new CheckpointError(
            "invalid_argument",
            `rank 0 cannot listen on ${host}:${port} for the other ranks: ${error.code ?? error.message}; pick a free MASTER_PORT, and a MASTER_ADDR that is an address of rank 0's host`,
            { cause: error },
          ),
        );
      });
      server.listen({ host, port }, resolve);
    });
    const bound = server.address();
    const address = typeof bound === "object" && bound ? `${host}:${bound.port}` : `${host}:${port}`;
    return new RendezvousServer(server, { ...options, address });
  }

  get port(): number {
    const bound = this.#server.address();
    return typeof bound === "object" && bound ? bound.port : 0;
  }

  /** Resolves once every rank has left or disconnected (at most `timeoutMs`), then stops listening. */
  async close(timeoutMs: number): Promise<void> {
    if (this.#ranks.size > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        timer.unref();
        this.#drained = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    clearTimeout(this.#joinTimer);
    for (const pending of this.#pending.values()) clearTimeout(pending.timer);
    for (const socket of this.#ranks.values()) socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(socket: Socket): void {
    let rank: number | undefined;
    const helloTimer = setTimeout(() => socket.destroy(), HELLO_TIMEOUT_MS);
    helloTimer.unref();
    socket.once("close", () => clearTimeout(helloTimer));
    onJsonLines(
      socket,
      (message) => {
        const m = message as ClientMessage;
        if (rank === undefined) {
          if (m.op !== "hello") return reject(socket, "the first message must be hello");
          clearTimeout(helloTimer);
          rank = this.#join(socket, m);
          return;
        }
        this.#handle(rank, m);
      },
      (reason) => {
        if (rank !== undefined && this.#ranks.get(rank) === socket) this.#break(`rank ${rank} sent ${reason}; the limit is maxMessageBytes`);
        reject(socket, `${reason} (the limit is ${rank === undefined ? HELLO_MAX_BYTES : this.#maxBytes} bytes)`);
      },
      () => (rank === undefined ? HELLO_MAX_BYTES : this.#maxBytes),
    );
    socket.on("error", () => undefined);
    socket.on("close", () => {
      if (rank === undefined || this.#ranks.get(rank) !== socket) return;
      this.#ranks.delete(rank);
      if (!this.#left.has(rank)) {
        this.#left.add(rank);
        this.#break(`rank ${rank} disconnected without closing the process group (its process exited or crashed)`);
      }
      if (this.#ranks.size === 0) this.#drained?.();
    });
  }

  get #maxBytes(): number {
    return this.#options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  }

  #join(socket: Socket, hello: Extract<ClientMessage, { op: "hello" }>): number | undefined {
    const { worldSize, token } = this.#options;
    if (token !== undefined && !sameSecret(hello.token, token)) {
      reject(socket, "this client did not show the job's token; start every rank with the same CAIRN_JOB_TOKEN (cairn-run sets one)");
      return undefined;
    }
    if (hello.worldSize !== worldSize) {
      reject(socket, `this rank says WORLD_SIZE=${hello.worldSize} but rank 0 says ${worldSize}; start every rank with the same WORLD_SIZE`);
      return undefined;
    }
    if (!Number.isSafeInteger(hello.rank) || hello.rank < 0 || hello.rank >= worldSize) {
      reject(socket, `rank ${hello.rank} is out of range for WORLD_SIZE=${worldSize}; ranks are 0..${worldSize - 1}`);
      return undefined;
    }
    if (this.#ranks.has(hello.rank) || this.#left.has(hello.rank)) {
      reject(socket, `two processes claim RANK=${hello.rank}; give every process its own rank`);
      return undefined;
    }
    if (this.#broken) {
      reject(socket, this.#broken);
      return undefined;
    }
    this.#ranks.set(hello.rank, socket);
    if (this.#ranks.size === worldSize) {
      clearTimeout(this.#joinTimer);
      for (const s of this.#ranks.values()) sendJsonLine(s, { op: "ready" } satisfies ServerMessage);
    }
    return hello.rank;
  }

  #handle(rank: number, message: ClientMessage): void {
    switch (message.op) {
      case "collective":
        if (typeof message.tag !== "string" || !Number.isSafeInteger(message.seq) || !["allGather", "broadcast", "barrier"].includes(message.kind)) {
          this.#break(`rank ${rank} sent a malformed collective`);
          return;
        }
        this.#contribute(rank, message);
        return;
      case "post":
        for (const socket of this.#ranks.values()) sendJsonLine(socket, { op: "event", topic: message.topic, from: rank, value: message.value } satisfies ServerMessage);
        return;
      case "abort":
        this.#break(`rank ${rank} failed: ${String(message.reason).slice(0, 1000)}`);
        return;
      case "bye":
        this.#left.add(rank);
        for (const pending of this.#pending.values()) {
          if (!pending.values.has(rank)) this.#break(`rank ${rank} closed the process group before reaching ${describe(pending)}`);
        }
        return;
      case "hello":
        return;
    }
  }

  #contribute(rank: number, message: Extract<ClientMessage, { op: "collective" }>): void {
    const socket = this.#ranks.get(rank)!;
    const id = `${message.tag}#${message.seq}`;
    if (this.#broken) {
      sendJsonLine(socket, { op: "error", tag: message.tag, seq: message.seq, message: this.#broken } satisfies ServerMessage);
      return;
    }
    let pending = this.#pending.get(id);
    if (!pending) {
      const timer = setTimeout(() => {
        const current = this.#pending.get(id);
        if (!current) return;
        const missing = this.#missing(new Set(current.values.keys()));
        this.#break(`${describeRanks(missing)} did not reach ${describe(current)} within ${seconds(this.#options.timeoutMs)} (stuck, or running different code)`);
      }, this.#options.timeoutMs);
      timer.unref();
      pending = { kind: message.kind, root: message.root ?? 0, tag: message.tag, seq: message.seq, values: new Map(), timer };
      this.#pending.set(id, pending);
    }
    if (pending.kind !== message.kind || pending.root !== (message.root ?? 0)) {
      this.#break(`rank ${rank} called ${message.kind}${rootOf(message.kind, message.root ?? 0)} where another rank called ${describe(pending)}; every rank must call the same collectives in the same order`,
      );
      return;
    }
    const gone = [...this.#left].filter((r) => !pending.values.has(r));
    if (gone.length > 0) {
      this.#break(`${describeRanks(gone)} closed the process group before reaching ${describe(pending)}`);
      return;
    }
    pending.values.set(rank, message.value);
    if (pending.values.size < this.#options.worldSize) return;
    clearTimeout(pending.timer);
    this.#pending.delete(id);
    const value =
      pending.kind === "allGather"
        ? Array.from({ length: this.#options.worldSize }, (_, r) => pending.values.get(r) ?? null)
        : pending.kind === "broadcast"
          ? pending.values.get(pending.root)
          : null;
    for (const s of this.#ranks.values()) sendJsonLine(s, { op: "result", tag: pending.tag, seq: pending.seq, value } satisfies ServerMessage);
  }

  /** Breaks the group: every waiting rank and every later collective gets `reason`. */
  #break(reason: string): void {
    this.#broken ??= reason;
    for (const [id, pending] of this.#pending) {
      clearTimeout(pending.timer);
      this.#pending.delete(id);
      for (const socket of this.#ranks.values()) {
        sendJsonLine(socket, { op: "error", tag: pending.tag, seq: pending.seq, message: this.#broken } satisfies ServerMessage);
      }
    }
    for (const socket of this.#ranks.values()) sendJsonLine(socket, { op: "error", message: this.#broken } satisfies ServerMessage);
  }

  #missing(present: ReadonlySet<number>): number[] {
    return Array.from({ length: this.#options.worldSize }, (_, r) => r).filter((r) => !present.has(r));
  }
}

/** Compares in constant time, so the token cannot be guessed byte by byte from response times. */
function sameSecret(given: unknown, expected: string): boolean {
  if (typeof given !== "string") return false;
  const digest = (text: string): Buffer => createHash("sha256").update(text).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

function reject(socket: Socket, message: string): void {
  sendJsonLine(socket, { op: "error", message } satisfies ServerMessage);
  socket.end();
}

function describe(pending: Pick<Pending, "kind" | "root" | "tag" | "seq">): string {
  return `${pending.kind}${rootOf(pending.kind, pending.root)} #${pending.seq}${pending.tag ? ` on "${pending.tag}"` : ""}`;
}

function rootOf(kind: CollectiveKind, root: number): string {
  return kind === "broadcast" ? ` from rank ${root}` : "";
}

function describeRanks(ranks: readonly number[]): string {
  return ranks.length === 1 ? `rank ${ranks[0]}` : `ranks ${ranks.join(", ")}`;
}

function seconds(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}
