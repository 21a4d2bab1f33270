// A static web server on 127.0.0.1 for pages under test: files from memory and from directories,
// single byte ranges honoured, cross-origin isolation headers when a page needs SharedArrayBuffer.
import { readFile, realpath, stat } from "node:fs/promises";
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { extname, join, sep } from "node:path";

export interface StaticServerOptions {
  /** URL path ("/index.html") → body. */
  readonly files?: Readonly<Record<string, string | Uint8Array>>;
  /** URL prefix ("/wasm/") → directory served below it; nothing outside the directory is reachable. */
  readonly directories?: Readonly<Record<string, string>>;
  /** Adds COOP/COEP, making pages cross-origin isolated (SharedArrayBuffer, precise timers). */
  readonly crossOriginIsolated?: boolean;
  /** Extra headers on every response. */
  readonly headers?: Readonly<Record<string, string>>;
  /** The port to listen on (default: a free one). A page's origin, and so its OPFS and IndexedDB, include it. */
  readonly port?: number;
}

export interface StaticServer {
  /** "http://127.0.0.1:PORT", without a trailing slash. */
  readonly origin: string;
  /** Adds or replaces an in-memory file while the server runs. */
  setFile(path: string, body: string | Uint8Array): void;
  close(): Promise<void>;
}

const CONTENT_TYPES: Readonly<Record<string, string>> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".json": "application/json",
  ".wasm": "application/wasm",
  ".css": "text/css; charset=utf-8",
  ".map": "application/json",
};

function contentType(path: string): string {
  return CONTENT_TYPES[extname(path)] ?? "application/octet-stream";
}

/** The body of a single "bytes=a-b" range within `size`, or undefined for no (or an unsupported) range header. */
function byteRange(
  header: string | undefined,
  size: number,
): { start: number; end: number } | "unsatisfiable" | undefined {
  const match = header === undefined ? null : /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!match || (match[1] === "" && match[2] === "")) return undefined;
  let start: number;
  let end: number;
  if (match[1] === "") {
    start = Math.max(0, size - Number(match[2]));
    end = size - 1;
  } else {
    start = Number(match[1]);
    end = match[2] === "" ? size - 1 : Math.min(Number(match[2]), size - 1);
  }
  return start > end || start >= size ? "unsatisfiable" : { start, end };
}

/** Starts the server on a free port of 127.0.0.1. */
export async function serveStatic(options: StaticServerOptions = {}): Promise<StaticServer> {
  const files = new Map<string, Uint8Array>();
  const setFile = (path: string, body: string | Uint8Array): void => {
    files.set(
      path.startsWith("/") ? path : `/${path}`,
      typeof body === "string" ? new TextEncoder().encode(body) : body,
    );
  };
  for (const [path, body] of Object.entries(options.files ?? {})) setFile(path, body);
  const headers: Record<string, string> = {
    "cache-control": "no-store",
    ...(options.crossOriginIsolated
      ? { "cross-origin-opener-policy": "same-origin", "cross-origin-embedder-policy": "require-corp" }
      : {}),
    ...options.headers,
  };

  async function find(path: string): Promise<Uint8Array | undefined> {
    const inMemory = files.get(path);
    if (inMemory) return inMemory;
    for (const [prefix, directory] of Object.entries(options.directories ?? {})) {
      if (!path.startsWith(prefix)) continue;
      const root = await realpath(directory);
      let file: string;
      try {
        file = await realpath(join(root, path.slice(prefix.length)));
      } catch {
        continue;
      }
      if (!file.startsWith(root + sep) || !(await stat(file)).isFile()) continue;
      return new Uint8Array(await readFile(file));
    }
    return undefined;
  }

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const url = new URL(request.url ?? "/", "http://127.0.0.1");
    let path: string;
    try {
      path = decodeURIComponent(url.pathname);
    } catch {
      response.writeHead(400, headers).end();
      return;
    }
    if (path.endsWith("/")) path += "index.html";
    const body = request.method === "GET" || request.method === "HEAD" ? await find(path) : undefined;
    if (!body) {
      response.writeHead(request.method === "GET" || request.method === "HEAD" ? 404 : 405, headers).end();
      return;
    }
    const common = { ...headers, "content-type": contentType(path), "accept-ranges": "bytes" };
    const range = byteRange(request.headers.range, body.length);
    if (range === "unsatisfiable") {
      response.writeHead(416, { ...common, "content-range": `bytes */${body.length}` }).end();
    } else if (range) {
      response.writeHead(206, {
        ...common,
        "content-length": String(range.end - range.start + 1),
        "content-range": `bytes ${range.start}-${range.end}/${body.length}`,
      });
      response.end(request.method === "HEAD" ? undefined : body.subarray(range.start, range.end + 1));
    } else {
      response.writeHead(200, { ...common, "content-length": String(body.length) });
      response.end(request.method === "HEAD" ? undefined : body);
    }
  }

  const server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      if (!response.headersSent) response.writeHead(500, headers);
      response.end(String(error));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    setFile,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
