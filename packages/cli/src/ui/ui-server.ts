import { createHash, randomBytes } from "node:crypto";
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { CheckpointError, isCheckpointError } from "@cairn/core";
import { pageFiles } from "./page-assets.js";
import { allowedHosts, checkRequest } from "./request-guard.js";
import { type RunView, stepParameter } from "./run-view.js";
import type { ApiError, VerifyEvent } from "./ui-types.js";

export interface UiServerOptions {
  /** The address to listen on (default 127.0.0.1, loopback only). */
  readonly host?: string;
  /** The port (default 0: a free one). */
  readonly port?: number;
  /** The URL's token (default 24 random bytes); tests pass their own. */
  readonly token?: string;
}

export interface UiServer {
  /** The page's URL, token included: what to open. */
  readonly url: string;
  readonly port: number;
  readonly token: string;
  close(): Promise<void>;
}

/** Headers of every answer: nothing is cached, framed, sniffed or sent on as a referrer; the page loads only its own files. */
const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  "Content-Security-Policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "X-Content-Type-Options": "nosniff",
  "Referrer-Policy": "no-referrer",
  "Cache-Control": "no-store",
  "Cross-Origin-Opener-Policy": "same-origin",
  "Cross-Origin-Resource-Policy": "same-origin",
};

/** Key paths a request may name: JSON arrays of strings and numbers, bounded. */
const MAX_KEY_CHARS = 8192;

function statusOf(error: unknown): number {
  if (!isCheckpointError(error)) return 500;
  switch (error.code) {
    case "not_found":
      return 404;
    case "invalid_argument":
      return 400;
    case "corrupt":
      return 422;
    default:
      return 500;
  }
}

function errorBody(error: unknown): ApiError {
  return isCheckpointError(error)
    ? { error: { code: error.code, message: error.message } }
    : { error: { code: "internal", message: error instanceof Error ? error.message : String(error) } };
}

function send(response: ServerResponse, status: number, type: string, body: string | Uint8Array, head = false): void {
  response.writeHead(status, { ...SECURITY_HEADERS, "Content-Type": type, "Content-Length": Buffer.byteLength(body) });
  response.end(head ? undefined : body);
}

function sendJson(request: IncomingMessage, response: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  const etag = `"${createHash("sha1").update(body).digest("base64url")}"`;
  if (status === 200 && request.headers["if-none-match"] === etag) {
    response.writeHead(304, { ...SECURITY_HEADERS, ETag: etag });
    response.end();
    return;
  }
  response.setHeader("ETag", etag);
  send(response, status, "application/json; charset=utf-8", body, request.method === "HEAD");
}

function tierParameter(query: URLSearchParams): number | undefined {
  const raw = query.get("tier");
  if (raw === null) return undefined;
  if (!/^\d{1,3}$/.test(raw))
    throw new CheckpointError("invalid_argument", `tier must be a tier's number, got ${JSON.stringify(raw)}`);
  return Number(raw);
}

function keyParameter(query: URLSearchParams): (string | number)[] {
  const raw = query.get("key") ?? "";
  let key: unknown;
  try {
    key = raw.length <= MAX_KEY_CHARS ? JSON.parse(raw) : undefined;
  } catch {
    key = undefined;
  }
  if (!Array.isArray(key) || key.length === 0 || !key.every((k) => typeof k === "string" || Number.isSafeInteger(k)))
    throw new CheckpointError(
      "invalid_argument",
      "key must be an entry's key path, as a JSON array of strings and numbers",
    );
  return key as (string | number)[];
}

/** Streams a verification as JSON lines; the client going away cancels it. */
async function streamVerify(view: RunView, query: URLSearchParams, response: ServerResponse, signal: AbortSignal) {
  const step = stepParameter(query.get("step"), "step");
  const tier = tierParameter(query);
  let started = false;
  const write = (event: VerifyEvent): void => {
    if (!started) {
      response.writeHead(200, { ...SECURITY_HEADERS, "Content-Type": "application/x-ndjson; charset=utf-8" });
      started = true;
    }
    response.write(`${JSON.stringify(event)}\n`);
  };
  try {
    await view.verify(step, tier, write, signal);
  } catch (error) {
    if (!started) throw error;
    write({ type: "failed", error: errorBody(error).error });
  }
  response.end();
}

async function answer(
  view: RunView,
  path: string,
  query: URLSearchParams,
  request: IncomingMessage,
  response: ServerResponse,
  signal: AbortSignal,
) {
  const head = request.method === "HEAD";
  const file = path === "/" ? "index.html" : path.slice(1);
  if (!path.startsWith("/api/")) {
    const page = (await pageFiles()).get(file);
    if (!page) return send(response, 404, "text/plain; charset=utf-8", "not found", head);
    return send(response, 200, page.type, page.body, head);
  }
  const json = (value: unknown) => sendJson(request, response, 200, value);
  switch (path) {
    case "/api/steps":
      return json(await view.steps());
    case "/api/step":
      return json(await view.step(stepParameter(query.get("step"), "step"), tierParameter(query), signal));
    case "/api/stats":
      return json(
        await view.stats(stepParameter(query.get("step"), "step"), keyParameter(query), tierParameter(query), signal),
      );
    case "/api/diff":
      return json(await view.diff(stepParameter(query.get("a"), "a"), stepParameter(query.get("b"), "b"), signal));
    case "/api/verify":
      return streamVerify(view, query, response, signal);
    default:
      return sendJson(request, response, 404, { error: { code: "not_found", message: `no API ${path}` } });
  }
}

/**
 * Serves the `cairn ui` page and its API over `view`, read-only: GET and HEAD only, the token
 * as every path's first segment, the Host header checked against the names the server answers
 * to (DNS rebinding), strict security headers. Listens on 127.0.0.1 unless told otherwise;
 * resolves once listening. Throws `invalid_argument` when the address cannot be listened on.
 */
export async function startUiServer(view: RunView, options: UiServerOptions = {}): Promise<UiServer> {
  const host = options.host ?? "127.0.0.1";
  const token = options.token ?? randomBytes(24).toString("base64url");
  let hosts = new Set<string>();
  const server = createServer((request, response) => {
    const checked = checkRequest(request, token, hosts);
    if ("status" in checked) return send(response, checked.status, "text/plain; charset=utf-8", `${checked.message}\n`);
    if (checked.path === "") {
      response.writeHead(308, { ...SECURITY_HEADERS, Location: `/${token}/` });
      return response.end();
    }
    const controller = new AbortController();
    response.on("close", () => {
      if (!response.writableFinished) controller.abort(new Error("the page went away"));
    });
    answer(view, checked.path, checked.query, request, response, controller.signal).catch((error: unknown) => {
      if (response.headersSent) return response.destroy();
      sendJson(request, response, statusOf(error), errorBody(error));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (error: NodeJS.ErrnoException) =>
      reject(
        new CheckpointError(
          "invalid_argument",
          `cairn ui cannot listen on ${host}:${options.port ?? 0}: ${error.code ?? error.message}`,
          {
            cause: error,
          },
        ),
      ),
    );
    server.listen(options.port ?? 0, host, resolve);
  });
  const port = (server.address() as AddressInfo).port;
  hosts = allowedHosts(host, port);
  const shown = host.includes(":") ? `[${host}]` : host === "0.0.0.0" ? "127.0.0.1" : host;
  return {
    url: `http://${shown === "[::]" ? "127.0.0.1" : shown}:${port}/${token}/`,
    port,
    token,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
