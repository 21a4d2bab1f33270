import { type Socket, connect } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { CheckpointError } from "@cairn/core";
import { MAX_TIMER_MS, checkDuration, longTimer } from "@cairn/core/storage";
import { DEFAULT_MAX_MESSAGE_BYTES, onJsonLines, sendJsonLine } from "./json-lines.js";
import type { Store } from "./store.js";
import { MAX_WAIT_MS, type TcpStoreRequest, type TcpStoreServer } from "./tcp-store-server.js";
import { STORE_DEADLINE_MS } from "./store-deadline.js";

export interface TcpStoreOptions {
  readonly host: string;
  readonly port: number;
  /** The job's secret, shown in the hello. */
  readonly token?: string;
  /** How long to keep trying to reach the server (it may not listen yet), and rank 0's drain on close. */
  readonly timeoutMs: number;
  readonly maxMessageBytes?: number;
  /** On rank 0: the server it hosts, closed with this client once the other ranks have left. */
  readonly server?: TcpStoreServer;
}

type Request = TcpStoreRequest extends infer R ? (R extends TcpStoreRequest ? Omit<R, "id"> : never) : never;

interface Pending {
  readonly resolve: (value: unknown) => void;
  readonly reject: (error: Error) => void;
  readonly cancel: () => void;
}

/** How long a request may go unanswered (beyond a wait's own timeout) before the server counts as gone. */
const ANSWER_DEADLINE_MS = STORE_DEADLINE_MS;

/**
 * A `Store` on rank 0's embedded `TcpStoreServer`: the default when no `CAIRN_STORE` is given.
 * Leased keys live as long as this connection. Losing the connection fails every call with a
 * `process_group` error saying that rank 0 is gone.
 */
export class TcpStore implements Store {
  readonly where: string;
  readonly #socket: Socket;
  readonly #pending = new Map<number, Pending>();
  readonly #maxBytes: number;
  readonly #options: TcpStoreOptions;
  #next = 1;
  #lost: CheckpointError | undefined;
  #closed = false;

  private constructor(socket: Socket, where: string, options: TcpStoreOptions) {
    this.#socket = socket;
    this.where = where;
    this.#options = options;
    this.#maxBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  }

  /** Connects (retrying until the server listens or `timeoutMs` passes) and shows the token. */
  static async connect(options: TcpStoreOptions): Promise<TcpStore> {
    checkDuration(options.timeoutMs, "the TCP store's timeoutMs", { min: 1, max: MAX_TIMER_MS });
    const where = `tcp://${options.host}:${options.port}`;
    const socket = await connectWithRetries(options.host, options.port, options.timeoutMs, where);
    const store = new TcpStore(socket, where, options);
    const ready = new Promise<void>((resolve, reject) => {
      store.#pending.set(0, {
        resolve: () => resolve(),
        reject,
        cancel: longTimer(
          () => store.#fail(`no answer to the hello within ${ANSWER_DEADLINE_MS} ms`),
          ANSWER_DEADLINE_MS,
        ),
      });
    });
    onJsonLines(
      socket,
      (message) =>
        store.#receive(message as { op?: unknown; id?: unknown; value?: unknown; error?: unknown; message?: unknown }),
      (reason) => {
        store.#fail(`got ${reason} from rank 0's store`);
        socket.destroy();
      },
      // Answers carry values other ranks wrote: as long as a request, and a little more.
      () => store.#maxBytes + 1024 * 1024,
    );
    socket.on("close", () =>
      store.#fail("lost the connection: rank 0, which hosts it, exited, crashed or closed the group"),
    );
    sendJsonLine(socket, { op: "hello", ...(options.token === undefined ? {} : { token: options.token }) });
    try {
      await ready;
    } catch (error) {
      socket.destroy();
      throw error;
    }
    return store;
  }

  async set(key: string, value: string, options: { readonly lease?: boolean } = {}): Promise<void> {
    await this.#request({ op: "set", key, value, ...(options.lease ? { lease: true } : {}) });
  }

  async get(key: string): Promise<string | undefined> {
    return text(await this.#request({ op: "get", key }));
  }

  async add(key: string, delta: number): Promise<number> {
    return Number(await this.#request({ op: "add", key, delta }));
  }

  async compareAndSet(key: string, expected: string | undefined, value: string): Promise<boolean> {
    return (await this.#request({ op: "cas", key, expected: expected ?? null, value })) === true;
  }

  async wait(key: string, timeoutMs: number, signal?: AbortSignal): Promise<string | undefined> {
    if (signal?.aborted) return undefined;
    checkDuration(timeoutMs, "a wait's timeoutMs", { max: MAX_WAIT_MS });
    const answer = this.#request({ op: "wait", key, timeoutMs: Math.ceil(timeoutMs) }, timeoutMs);
    if (!signal) return text(await answer);
    // An abort answers now; the server's own timeout ends its side of the wait.
    let onAbort = (): void => undefined;
    const aborted = new Promise<undefined>((resolve) => (onAbort = () => resolve(undefined)));
    signal.addEventListener("abort", onAbort, { once: true });
    answer.catch(() => undefined);
    try {
      return text(await Promise.race([answer, aborted]));
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  async deletePrefix(prefix: string): Promise<void> {
    await this.#request({ op: "del", key: prefix });
  }

  /** Ends the connection (its leased keys go with it); on rank 0, then waits for the others to leave before the server stops. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#socket.end();
    await this.#options.server?.close(this.#options.timeoutMs);
  }

  #request(request: Request, waitMs = 0): Promise<unknown> {
    if (this.#lost) return Promise.reject(this.#lost);
    if (this.#closed)
      return Promise.reject(new CheckpointError("process_group", `[tcp] the store client for ${this.where} is closed`));
    const id = this.#next++;
    return new Promise<unknown>((resolve, reject) => {
      const cancel = longTimer(
        () => this.#fail(`no answer to ${request.op} ${request.key} within ${ANSWER_DEADLINE_MS + waitMs} ms`),
        ANSWER_DEADLINE_MS + waitMs,
      );
      this.#pending.set(id, { resolve, reject, cancel });
      try {
        sendJsonLine(this.#socket, { ...request, id }, this.#maxBytes);
      } catch (error) {
        cancel();
        this.#pending.delete(id);
        reject(
          new CheckpointError(
            "process_group",
            `[tcp] cannot send ${request.op} ${request.key} to ${this.where}: ${(error as Error).message} (maxMessageBytes)`,
            { cause: error },
          ),
        );
      }
    });
  }

  #receive(message: { op?: unknown; id?: unknown; value?: unknown; error?: unknown; message?: unknown }): void {
    if (message.op === "error") return this.#fail(String(message.message));
    const id = message.op === "ready" ? 0 : message.id;
    const pending = typeof id === "number" ? this.#pending.get(id) : undefined;
    if (!pending) return;
    pending.cancel();
    this.#pending.delete(id as number);
    if (message.error !== undefined)
      pending.reject(new CheckpointError("process_group", `[tcp] ${String(message.error)} on ${this.where}`));
    else pending.resolve(message.value);
  }

  #fail(reason: string): void {
    if (this.#closed && this.#pending.size === 0) return;
    this.#lost ??= new CheckpointError("process_group", `[tcp] rank 0's store at ${this.where}: ${reason}`);
    for (const [id, pending] of this.#pending) {
      pending.cancel();
      this.#pending.delete(id);
      pending.reject(this.#lost);
    }
  }
}

function text(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

async function connectWithRetries(host: string, port: number, timeoutMs: number, where: string): Promise<Socket> {
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
          `cannot reach rank 0 at ${where} within ${timeoutMs} ms (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); is rank 0 running, with the same MASTER_ADDR and MASTER_PORT?`,
          { cause: error },
        );
      }
      await sleep(delay);
      delay = Math.min(delay * 2, 1000);
    }
  }
}
