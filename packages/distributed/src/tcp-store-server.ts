import { createHash, timingSafeEqual } from "node:crypto";
import { type Server, type Socket, createServer } from "node:net";
import { CheckpointError } from "@cairn/core";
import { longTimer } from "@cairn/core/storage";
import { DEFAULT_MAX_MESSAGE_BYTES, onJsonLines, sendJsonLine } from "./json-lines.js";

/** Requests from a `TcpStore`, after its hello; every one is answered with its `id`. */
export type TcpStoreRequest =
  | { readonly op: "set"; readonly id: number; readonly key: string; readonly value: string; readonly lease?: boolean }
  | { readonly op: "get"; readonly id: number; readonly key: string }
  | { readonly op: "add"; readonly id: number; readonly key: string; readonly delta: number }
  | {
      readonly op: "cas";
      readonly id: number;
      readonly key: string;
      readonly expected: string | null;
      readonly value: string;
    }
  | { readonly op: "wait"; readonly id: number; readonly key: string; readonly timeoutMs: number }
  | { readonly op: "del"; readonly id: number; readonly key: string };

export interface TcpStoreServerOptions {
  /** The job's secret: a client whose hello does not carry it is refused before it can read or write. */
  readonly token?: string;
  /** The longest request a client may send (default 256 MiB). */
  readonly maxMessageBytes?: number;
}

/** What a client may send before it has shown the token, and how long it has to say hello. */
const HELLO_MAX_BYTES = 64 * 1024;
const HELLO_TIMEOUT_MS = 10_000;
const MAX_KEY_CHARS = 1024;
/** The longest wait a client may ask for. */
export const MAX_WAIT_MS = 24 * 3600 * 1000;
/** How long a refused client's socket may take to receive the reason before it is closed anyway. */
const REFUSAL_GRACE_MS = 1_000;

/**
 * The embedded store rank 0 hosts, like torch's `TCPStore`: a key-value map in memory that the
 * ranks reach over TCP. A leased key belongs to the connection that set it and goes when that
 * connection closes, so a rank whose process dies loses its liveness key at once.
 */
export class TcpStoreServer {
  readonly #server: Server;
  readonly #options: TcpStoreServerOptions;
  readonly #values = new Map<string, string>();
  readonly #waiters = new Map<string, Set<(value: string) => void>>();
  readonly #clients = new Set<Socket>();
  #drained: (() => void) | undefined;

  private constructor(server: Server, options: TcpStoreServerOptions) {
    this.#server = server;
    this.#options = options;
    server.on("connection", (socket) => this.#accept(socket));
  }

  /** Listens on `host:port` (0 picks a free port). Fails with `invalid_argument` if the port is taken. */
  static async listen(host: string, port: number, options: TcpStoreServerOptions = {}): Promise<TcpStoreServer> {
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
    return new TcpStoreServer(server, options);
  }

  get port(): number {
    const bound = this.#server.address();
    return typeof bound === "object" && bound ? bound.port : 0;
  }

  /** Resolves once every client has disconnected (at most `timeoutMs`), then stops listening. */
  async close(timeoutMs: number): Promise<void> {
    if (this.#clients.size > 0) {
      await new Promise<void>((resolve) => {
        const cancel = longTimer(resolve, timeoutMs);
        this.#drained = () => {
          cancel();
          resolve();
        };
      });
    }
    for (const socket of this.#clients) socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(socket: Socket): void {
    let admitted = false;
    const leased = new Set<string>();
    const maxBytes = this.#options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    const helloTimer = setTimeout(() => socket.destroy(), HELLO_TIMEOUT_MS);
    helloTimer.unref();
    onJsonLines(
      socket,
      (message) => {
        const m = message as { op?: unknown; token?: unknown };
        if (admitted) return this.#handle(socket, leased, message as TcpStoreRequest);
        clearTimeout(helloTimer);
        if (m.op !== "hello") return refuse(socket, "the first message must be hello");
        const { token } = this.#options;
        if (token !== undefined && !sameSecret(m.token, token)) {
          return refuse(
            socket,
            "this client did not show the job's token; start every rank with the same CAIRN_JOB_TOKEN (cairn-run sets one)",
          );
        }
        admitted = true;
        this.#clients.add(socket);
        sendJsonLine(socket, { op: "ready" });
      },
      (reason) => refuse(socket, `${reason} (the limit is ${admitted ? maxBytes : HELLO_MAX_BYTES} bytes)`),
      () => (admitted ? maxBytes : HELLO_MAX_BYTES),
    );
    socket.on("error", () => undefined);
    socket.on("close", () => {
      clearTimeout(helloTimer);
      for (const key of leased) this.#values.delete(key);
      if (this.#clients.delete(socket) && this.#clients.size === 0) this.#drained?.();
    });
  }

  #handle(socket: Socket, leased: Set<string>, request: TcpStoreRequest): void {
    const reply = (value: unknown): void => sendJsonLine(socket, { id: request.id, value: value ?? null });
    const problem = invalid(request);
    if (problem) return refuse(socket, problem);
    const { key } = request;
    switch (request.op) {
      case "set":
        this.#set(key, request.value);
        if (request.lease) leased.add(key);
        else leased.delete(key);
        return reply(null);
      case "get":
        return reply(this.#values.get(key));
      case "add": {
        const before = Number(this.#values.get(key) ?? 0);
        if (!Number.isSafeInteger(before))
          return sendJsonLine(socket, { id: request.id, error: `${key} holds no counter` });
        this.#set(key, String(before + request.delta));
        return reply(before + request.delta);
      }
      case "cas": {
        const matches = request.expected === null ? !this.#values.has(key) : this.#values.get(key) === request.expected;
        if (matches) this.#set(key, request.value);
        return reply(matches);
      }
      case "wait": {
        const present = this.#values.get(key);
        if (present !== undefined) return reply(present);
        const waiters = this.#waiters.get(key) ?? new Set();
        this.#waiters.set(key, waiters);
        const timer = setTimeout(() => {
          waiters.delete(wake);
          reply(null);
        }, request.timeoutMs);
        timer.unref();
        const wake = (value: string): void => {
          clearTimeout(timer);
          reply(value);
        };
        waiters.add(wake);
        return;
      }
      case "del":
        for (const k of [...this.#values.keys()]) if (k.startsWith(key)) this.#values.delete(k);
        return reply(null);
    }
  }

  #set(key: string, value: string): void {
    this.#values.set(key, value);
    const waiters = this.#waiters.get(key);
    if (!waiters) return;
    this.#waiters.delete(key);
    for (const wake of waiters) wake(value);
  }
}

/** Why a request is malformed, or undefined: everything a client sends is checked before use. */
function invalid(r: TcpStoreRequest): string | undefined {
  if (!Number.isSafeInteger(r.id)) return "a request without an id";
  if (typeof r.key !== "string" || r.key.length > MAX_KEY_CHARS)
    return `request ${r.id} has no key, or one over ${MAX_KEY_CHARS} characters`;
  switch (r.op) {
    case "set":
      return typeof r.value === "string" ? undefined : `request ${r.id} sets no string`;
    case "cas":
      return typeof r.value === "string" && (r.expected === null || typeof r.expected === "string")
        ? undefined
        : `request ${r.id} is a malformed compare-and-set`;
    case "add":
      return Number.isSafeInteger(r.delta) ? undefined : `request ${r.id} adds no integer`;
    case "wait":
      return Number.isFinite(r.timeoutMs) && r.timeoutMs >= 0 && r.timeoutMs <= MAX_WAIT_MS
        ? undefined
        : `request ${r.id} waits ${String(r.timeoutMs)} ms`;
    case "get":
    case "del":
      return undefined;
    default:
      return `unknown operation ${JSON.stringify(String((r as { op?: unknown }).op)).slice(0, 40)}`;
  }
}

/** Compares in constant time, so the token cannot be guessed byte by byte from response times. */
function sameSecret(given: unknown, expected: string): boolean {
  if (typeof given !== "string") return false;
  const digest = (text: string): Buffer => createHash("sha256").update(text).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

/** Sends the reason and closes the socket, whether or not the client ever closes its side. */
function refuse(socket: Socket, message: string): void {
  if (socket.destroyed) return;
  sendJsonLine(socket, { op: "error", message });
  socket.end(() => socket.destroy());
  setTimeout(() => socket.destroy(), REFUSAL_GRACE_MS).unref();
}
