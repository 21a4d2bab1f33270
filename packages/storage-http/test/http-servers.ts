// Static web servers on 127.0.0.1 that serve a directory the way real ones do, or misbehave in
// one chosen way: ignoring Range, stalling mid-body, answering a different body length, trickling.
import { readFile } from "node:fs/promises";
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join, normalize } from "node:path";

export type ServerBehaviour =
  /** Honours single byte ranges (206), as nginx, Caddy and CDNs do. */
  | "ranges"
  /** Answers every GET with 200 and the whole file (python -m http.server). */
  | "ignore-range"
  /** Sends half the body of the first `faults` GETs of a data file, then stops sending (the connection stays open). */
  | "stall"
  /** Answers ranged GETs of data files with a body 10 bytes shorter than asked, with a matching Content-Length. */
  | "short-range"
  /** Declares the full Content-Length, sends half, and closes the connection. */
  | "cut"
  /** Sends ranged bodies of data files in 8 pieces, 150 ms apart: slow, yet never 500 ms without progress. */
  | "trickle";

export interface TestServer {
  readonly origin: string;
  /** Requests (method and path) and body bytes sent, per server. */
  readonly requests: string[];
  bytesSent: number;
  close(): Promise<void>;
}

export async function startServer(root: string, behaviour: ServerBehaviour, faults = Infinity): Promise<TestServer> {
  let faulted = 0;
  const state: TestServer = { origin: "", requests: [], bytesSent: 0, close: async () => undefined };
  const handle = async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    const path = decodeURIComponent(new URL(request.url ?? "/", "http://x").pathname);
    state.requests.push(`${request.method} ${path}${request.headers.range ? ` ${request.headers.range}` : ""}`);
    let body: Uint8Array;
    try {
      body = new Uint8Array(await readFile(join(root, normalize(path).replace(/^(\.\.(\/|$))+/, ""))));
    } catch {
      response.writeHead(404).end();
      return;
    }
    const data = path.endsWith(".safetensors");
    const match = /^bytes=(\d+)-(\d+)$/.exec(request.headers.range ?? "");
    const send = (status: number, bytes: Uint8Array, headers: Record<string, string> = {}): void => {
      response.writeHead(status, { "content-length": String(bytes.byteLength), ...headers });
      state.bytesSent += bytes.byteLength;
      response.end(bytes);
    };
    if (!match || behaviour === "ignore-range") {
      if (behaviour === "cut" && data && faulted++ < faults) {
        response.writeHead(200, { "content-length": String(body.byteLength) });
        response.write(body.subarray(0, body.byteLength >> 1));
        state.bytesSent += body.byteLength >> 1;
        response.destroy();
        return;
      }
      send(200, body);
      return;
    }
    const start = Number(match[1]);
    if (start >= body.byteLength) {
      response.writeHead(416, { "content-range": `bytes */${body.byteLength}` }).end();
      return;
    }
    const end = Math.min(Number(match[2]), body.byteLength - 1);
    let part = body.subarray(start, end + 1);
    const headers = { "content-range": `bytes ${start}-${end}/${body.byteLength}` };
    if (data && faulted < faults && part.byteLength > 20) {
      if (behaviour === "stall") {
        faulted++;
        response.writeHead(206, { ...headers, "content-length": String(part.byteLength) });
        response.write(part.subarray(0, part.byteLength >> 1));
        state.bytesSent += part.byteLength >> 1;
        return; // and never more: the client's progress deadline must end it
      }
      if (behaviour === "trickle") {
        faulted++;
        response.writeHead(206, { ...headers, "content-length": String(part.byteLength) });
        const piece = Math.ceil(part.byteLength / 8);
        for (let at = 0; at < part.byteLength; at += piece) {
          response.write(part.subarray(at, at + piece));
          state.bytesSent += Math.min(piece, part.byteLength - at);
          await new Promise((resolve) => setTimeout(resolve, 150));
        }
        response.end();
        return;
      }
      if (behaviour === "short-range") {
        faulted++;
        part = part.subarray(0, part.byteLength - 10);
      }
      if (behaviour === "cut") {
        faulted++;
        response.writeHead(206, { ...headers, "content-length": String(part.byteLength) });
        response.write(part.subarray(0, part.byteLength >> 1));
        state.bytesSent += part.byteLength >> 1;
        response.destroy();
        return;
      }
    }
    send(206, part, headers);
  };
  const server = createServer((request, response) => {
    handle(request, response).catch(() => response.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return Object.assign(state, {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}
