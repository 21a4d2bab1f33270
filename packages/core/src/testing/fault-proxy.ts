import {
  type IncomingMessage,
  type Server,
  type ServerResponse,
  createServer,
  request as httpRequest,
} from "node:http";
import type { AddressInfo, Socket } from "node:net";

/** What a matching request gets instead of a clean pass-through. */
export type FaultAction =
  /** Answer with this status (and body) without reaching the server; the request body is drained first. */
  | {
      readonly kind: "status";
      readonly status: number;
      readonly body?: string;
      readonly headers?: Readonly<Record<string, string>>;
    }
  /**
   * Drop the connection: after `afterBytes` of the request body reached the server, or of the
   * response body reached the client (a body no longer than that is passed whole, so
   * `afterBytes: 0` does not lose an empty answer: use "lose" for that).
   */
  | { readonly kind: "reset"; readonly phase: "request" | "response"; readonly afterBytes?: number }
  /**
   * Stop sending while keeping the connection open, until the client gives up or the proxy
   * closes. "request": the first `afterBytes` of the request body reach the server, the rest is
   * swallowed and no answer ever comes (an upload that hangs; the server never sees the whole
   * body unless it was that short). "response": the status, headers and first `afterBytes` of
   * the body reach the client, then nothing more, the end included (a download that hangs).
   */
  | { readonly kind: "stall"; readonly phase: "request" | "response"; readonly afterBytes?: number }
  /**
   * Lose the response: the request reaches the server whole and its answer is read in full (the
   * request took effect), then the client's connection is dropped before a byte of the answer.
   */
  | { readonly kind: "lose" }
  /**
   * End the response body cleanly after `afterBytes`, its `Content-Length` removed so it goes
   * chunked: a short body the client can tell from a whole one only by what it asked for (or by
   * `Content-Range`), as when a middlebox cuts it.
   */
  | { readonly kind: "truncate"; readonly afterBytes: number }
  /** Wait before forwarding. */
  | { readonly kind: "delay"; readonly ms: number }
  /** Forward, but flip one byte of the response body at `offset` (silent corruption on the wire). */
  | { readonly kind: "corrupt"; readonly offset?: number };

export interface FaultRule {
  /** Which requests the rule applies to (default: all). */
  readonly match?: (request: {
    readonly method: string;
    readonly url: string;
    readonly headers: IncomingMessage["headers"];
  }) => boolean;
  /** How many matching requests it affects (default 1; `Infinity` for all). */
  readonly times?: number;
  readonly action: FaultAction;
}

/**
 * Enforces create-only preconditions (S3 `If-None-Match: *`, GCS `ifGenerationMatch=0`) for a
 * server that ignores them: for a request `key` recognises as a conditional create, the proxy
 * asks `exists` and answers `conflict` if the object is there, otherwise forwards. Conditional
 * creates of one key are serialised until the server has answered, so racing creates see
 * each other as a real server's would.
 */
export interface PreconditionEnforcer {
  key(request: {
    readonly method: string;
    readonly url: string;
    readonly headers: IncomingMessage["headers"];
  }): string | undefined;
  exists(key: string): Promise<boolean>;
  readonly conflict: {
    readonly status: number;
    readonly body?: string;
    readonly headers?: Readonly<Record<string, string>>;
  };
}

export interface FaultProxyOptions {
  readonly preconditions?: PreconditionEnforcer;
}

export interface ProxiedRequest {
  readonly method: string;
  readonly url: string;
  /** The fault applied, if any. */
  readonly fault?: FaultAction["kind"] | "precondition";
}

/**
 * An HTTP proxy between a storage client and a real protocol server on 127.0.0.1 that injects
 * faults by rule: error statuses (412, 429, 503 SlowDown, 500; a storm is a rule with `times`),
 * connections reset mid-body, stalled bodies, lost responses, bodies cut short, delays,
 * corrupted bytes. Faults are injected below the adapter, on the wire, so the
 * adapter's own error handling and core's retry policy are what get tested.
 */
export class FaultProxy {
  readonly #server: Server;
  readonly #target: URL;
  readonly #rules: { rule: FaultRule; left: number }[] = [];
  readonly #sockets = new Set<Socket>();
  readonly #options: FaultProxyOptions;
  readonly #locks = new Map<string, Promise<void>>();
  readonly requests: ProxiedRequest[] = [];

  private constructor(server: Server, target: URL, options: FaultProxyOptions) {
    this.#server = server;
    this.#target = target;
    this.#options = options;
  }

  /** Starts a proxy to `target` (for example "http://127.0.0.1:9000") on a free port of 127.0.0.1. */
  static async start(target: string, options: FaultProxyOptions = {}): Promise<FaultProxy> {
    const server = createServer();
    const proxy = new FaultProxy(server, new URL(target), options);
    server.on("request", (req, res) => proxy.#handle(req, res));
    server.on("connection", (socket) => {
      proxy.#sockets.add(socket);
      socket.on("close", () => proxy.#sockets.delete(socket));
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    return proxy;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  addRule(rule: FaultRule): void {
    this.#rules.push({ rule, left: rule.times ?? 1 });
  }

  clearRules(): void {
    this.#rules.length = 0;
  }

  /** Requests whose fault was applied, by kind. */
  faults(kind?: ProxiedRequest["fault"]): ProxiedRequest[] {
    return this.requests.filter((r) => r.fault !== undefined && (kind === undefined || r.fault === kind));
  }

  #take(req: IncomingMessage): FaultAction | undefined {
    for (const entry of this.#rules) {
      if (entry.left <= 0) continue;
      if (
        entry.rule.match &&
        !entry.rule.match({ method: req.method ?? "GET", url: req.url ?? "/", headers: req.headers })
      )
        continue;
      entry.left--;
      return entry.rule.action;
    }
    return undefined;
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const enforcer = this.#options.preconditions;
    const key = enforcer?.key({ method: req.method ?? "GET", url: req.url ?? "/", headers: req.headers });
    if (enforcer && key !== undefined) {
      req.pause();
      void this.#conditional(key, enforcer, req, res);
      return;
    }
    this.#dispatch(req, res);
  }

  async #conditional(
    key: string,
    enforcer: PreconditionEnforcer,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const previous = this.#locks.get(key) ?? Promise.resolve();
    let release!: () => void;
    const mine = new Promise<void>((resolve) => (release = resolve));
    const chained = previous.then(() => mine);
    this.#locks.set(key, chained);
    await previous;
    res.on("close", () => {
      release();
      if (this.#locks.get(key) === chained) this.#locks.delete(key);
    });
    let exists: boolean;
    try {
      exists = await enforcer.exists(key);
    } catch {
      res.socket?.destroy();
      return;
    }
    if (exists) {
      this.requests.push({ method: req.method ?? "GET", url: req.url ?? "/", fault: "precondition" });
      req.resume();
      req.on("end", () => {
        res.writeHead(enforcer.conflict.status, { "content-type": "application/xml", ...enforcer.conflict.headers });
        res.end(enforcer.conflict.body ?? "");
      });
      return;
    }
    this.#dispatch(req, res);
  }

  #dispatch(req: IncomingMessage, res: ServerResponse): void {
    const action = this.#take(req);
    this.requests.push({ method: req.method ?? "GET", url: req.url ?? "/", ...(action ? { fault: action.kind } : {}) });
    if (action?.kind === "status") {
      req.resume();
      req.on("end", () => {
        res.writeHead(action.status, { "content-type": "application/xml", ...action.headers });
        res.end(action.body ?? "");
      });
      return;
    }
    if (action?.kind === "delay") {
      req.pause();
      setTimeout(() => this.#forward(req, res, undefined), action.ms);
      return;
    }
    this.#forward(req, res, action);
  }

  #forward(req: IncomingMessage, res: ServerResponse, action: FaultAction | undefined): void {
    const upstream = httpRequest(
      {
        host: this.#target.hostname,
        port: this.#target.port,
        method: req.method,
        path: req.url,
        headers: { ...req.headers, host: this.#target.host },
      },
      (up) => {
        up.on("error", () => res.socket?.destroy());
        if (action?.kind === "lose") {
          up.resume();
          up.on("end", () => res.socket?.destroy());
          return;
        }
        if (action?.kind === "stall" && action.phase === "request") {
          up.resume();
          return;
        }
        if (action?.kind === "truncate") {
          const headers = { ...up.headers };
          delete headers["content-length"];
          res.writeHead(up.statusCode ?? 502, headers);
          passThenHold(up, res, action.afterBytes, () => {
            res.end();
            // The rest of the server's answer is unwanted: its connection goes, the client's stays.
            up.removeAllListeners("error").on("error", () => undefined);
            up.destroy();
          });
          up.on("end", () => res.end());
          return;
        }
        res.writeHead(up.statusCode ?? 502, up.headers);
        if (action?.kind === "stall") {
          res.flushHeaders();
          // The rest of the answer is never sent; the server's side is let go when the client gives up.
          passThenHold(up, res, action.afterBytes ?? 0, () => up.pause());
          res.on("close", () => up.destroy());
          return;
        }
        if (action?.kind === "reset" && action.phase === "response") {
          // A response shorter than the limit ends normally, or its keep-alive socket would stay busy.
          passThenDrop(up, res, action.afterBytes ?? 0, () => {
            up.destroy();
            res.socket?.destroy();
          });
          return;
        }
        if (action?.kind === "corrupt") {
          let seen = 0;
          const at = action.offset ?? 0;
          up.on("data", (chunk: Buffer) => {
            if (at >= seen && at < seen + chunk.byteLength) {
              chunk = Buffer.from(chunk);
              chunk[at - seen] = chunk[at - seen]! ^ 0xff;
            }
            seen += chunk.byteLength;
            res.write(chunk);
          });
          up.on("end", () => res.end());
          return;
        }
        up.pipe(res);
      },
    );
    upstream.on("error", () => res.socket?.destroy());
    if (action?.kind === "stall" && action.phase === "request") {
      // The rest of the body is read and dropped rather than left unread: a paused socket would never notice the client leave.
      passThenHold(req, upstream, action.afterBytes ?? 0, () => req.resume());
      res.on("close", () => upstream.destroy());
      return;
    }
    if (action?.kind === "reset" && action.phase === "request") {
      passThenDrop(req, upstream, action.afterBytes ?? 0, () => {
        upstream.destroy();
        req.socket.destroy();
      });
      return;
    }
    req.pipe(upstream);
    req.resume();
  }

  async close(): Promise<void> {
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

/**
 * Forwards the first `limit` bytes of a body from `source` to `sink`, then calls `drop` (the
 * connection reset); a body no longer than the limit is forwarded whole and ended normally.
 */
function passThenDrop(
  source: IncomingMessage,
  sink: { write(chunk: Buffer): unknown; end(): unknown },
  limit: number,
  drop: () => void,
): void {
  let passed = 0;
  let dropped = false;
  source.on("data", (chunk: Buffer) => {
    if (dropped) return;
    if (passed + chunk.byteLength <= limit) {
      sink.write(chunk);
      passed += chunk.byteLength;
      return;
    }
    sink.write(chunk.subarray(0, limit - passed));
    dropped = true;
    drop();
  });
  source.on("end", () => {
    if (!dropped) sink.end();
  });
}

/**
 * Forwards at most the first `limit` bytes of a body from `source` to `sink`, then calls `hold`
 * and forwards nothing more, the body's end included: the receiver waits for bytes that never come.
 */
function passThenHold(
  source: IncomingMessage,
  sink: { write(chunk: Buffer): unknown },
  limit: number,
  hold: () => void,
): void {
  let passed = 0;
  const onData = (chunk: Buffer): void => {
    const take = Math.min(chunk.byteLength, limit - passed);
    if (take > 0) sink.write(chunk.subarray(0, take));
    passed += take;
    if (passed >= limit) {
      source.off("data", onData);
      hold();
    }
  };
  if (limit <= 0) hold();
  else source.on("data", onData);
}
