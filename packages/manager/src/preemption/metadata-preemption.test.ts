import { EventEmitter } from "node:events";
import { type IncomingMessage, type Server, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { CheckpointManager } from "../checkpoint-manager.js";
import type { ManagerEvents } from "../events/manager-events.js";
import { MetadataPreemptionSource } from "./metadata-preemption.js";

const SPOT_PATH = "/latest/meta-data/spot/instance-action";

/** Waits for a condition the pollers reach on their own; generous, as the machine may be busy. */
function poll<T>(read: () => T): ReturnType<typeof expect.poll<T>> {
  return expect.poll(read, { timeout: 10_000 });
}

/**
 * An imitation of EC2's instance metadata service on 127.0.0.1. `v2-required`: GETs without a
 * valid token answer 401, as on instances launched with IMDSv2 required. `v1-only`: the token
 * PUT answers `putStatus` (what the AWS SDKs read as "no IMDSv2"), GETs need no token.
 * `put-blackhole`: the PUT never answers (a hop limit that drops the reply), GETs need no token.
 */
class FakeImds {
  notice = false;
  puts = 0;
  unauthorized = 0;
  readonly tokens = new Set<string>();
  readonly tokensSeen: (string | undefined)[] = [];
  readonly #server: Server;

  constructor(
    readonly mode: "v2-required" | "v1-only" | "put-blackhole",
    readonly putStatus = 405,
  ) {
    this.#server = createServer((req, res) => this.#answer(req, res));
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.#server.listen(0, "127.0.0.1", resolve));
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}${SPOT_PATH}`;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise((resolve) => this.#server.close(resolve));
  }

  #answer(req: IncomingMessage, res: ServerResponse): void {
    if (req.method === "PUT" && req.url === "/latest/api/token") {
      if (this.mode === "put-blackhole") return;
      if (this.mode === "v1-only") return void res.writeHead(this.putStatus).end();
      if (!req.headers["x-aws-ec2-metadata-token-ttl-seconds"]) return void res.writeHead(400).end();
      const token = `token-${++this.puts}`;
      this.tokens.add(token);
      return void res.end(token);
    }
    if (req.method !== "GET" || req.url !== SPOT_PATH) return void res.writeHead(404).end();
    const token = req.headers["x-aws-ec2-metadata-token"] as string | undefined;
    this.tokensSeen.push(token);
    if ((this.mode === "v2-required" && token === undefined) || (token !== undefined && !this.tokens.has(token))) {
      this.unauthorized++;
      return void res.writeHead(401).end();
    }
    if (!this.notice) return void res.writeHead(404).end("Not Found");
    res.end(JSON.stringify({ action: "terminate", time: "2026-11-24T22:00:00Z" }));
  }
}

/** A free port with nothing listening on it: connections are refused. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

interface Watch {
  readonly notices: string[];
  readonly reports: unknown[];
}

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

function watch(source: MetadataPreemptionSource): Watch {
  const seen: Watch = { notices: [], reports: [] };
  source.start(
    (reason) => seen.notices.push(reason),
    (error) => seen.reports.push(error),
  );
  cleanups.push(() => source.stop());
  return seen;
}

async function imds(mode: FakeImds["mode"], putStatus?: number): Promise<{ server: FakeImds; url: string }> {
  const server = new FakeImds(mode, putStatus);
  const url = await server.listen();
  cleanups.push(() => server.close());
  return { server, url };
}

describe("MetadataPreemptionSource.awsSpot", () => {
  it("sees the notice where IMDSv2 is required, sending one session token on every GET", async () => {
    const { server, url } = await imds("v2-required");
    const seen = watch(MetadataPreemptionSource.awsSpot({ url, intervalMs: 10 }));
    await poll(() => server.tokensSeen.length).toBeGreaterThanOrEqual(3);
    expect(seen.notices).toEqual([]);
    server.notice = true;
    await poll(() => seen.notices).toEqual([`preemption notice from ${url}`]);
    expect(server.puts).toBe(1);
    expect(new Set(server.tokensSeen)).toEqual(new Set(["token-1"]));
    expect(seen.reports).toEqual([]);
  });

  it("asks for a new token when IMDS refuses the old one (401), and reports nothing", async () => {
    const { server, url } = await imds("v2-required");
    const seen = watch(MetadataPreemptionSource.awsSpot({ url, intervalMs: 10 }));
    await poll(() => server.tokensSeen.length).toBeGreaterThanOrEqual(2);
    server.tokens.clear();
    await poll(() => server.tokensSeen.at(-1)).toBe("token-2");
    server.notice = true;
    await poll(() => seen.notices.length).toBe(1);
    expect(server.unauthorized).toBe(1);
    expect(seen.reports).toEqual([]);
  });

  it("renews the token before its lifetime ends, so no GET carries an expired one", async () => {
    const { server, url } = await imds("v2-required");
    let now = 0;
    watch(MetadataPreemptionSource.awsSpot({ url, intervalMs: 10, tokenTtlSeconds: 100, now: () => now }));
    await poll(() => server.tokensSeen.length).toBeGreaterThanOrEqual(2);
    now = 89_000;
    const before = server.tokensSeen.length;
    await poll(() => server.tokensSeen.length).toBeGreaterThan(before + 1);
    expect(server.puts).toBe(1);
    // 90 s of a 100 s token: renewed with a tenth of its life left.
    now = 90_000;
    await poll(() => server.tokensSeen.at(-1)).toBe("token-2");
    expect(server.unauthorized).toBe(0);
  });

  it.each([403, 404, 405])("falls back to IMDSv1 when the token PUT answers %i", async (status) => {
    const { server, url } = await imds("v1-only", status);
    const seen = watch(MetadataPreemptionSource.awsSpot({ url, intervalMs: 10 }));
    await poll(() => server.tokensSeen.length).toBeGreaterThanOrEqual(2);
    server.notice = true;
    await poll(() => seen.notices.length).toBe(1);
    expect(server.tokensSeen.every((t) => t === undefined)).toBe(true);
    expect(seen.reports).toEqual([]);
  });

  it("falls back to IMDSv1 when the token PUT never answers within the deadline", async () => {
    const { server, url } = await imds("put-blackhole");
    const seen = watch(MetadataPreemptionSource.awsSpot({ url, intervalMs: 10, timeoutMs: 100 }));
    server.notice = true;
    await poll(() => seen.notices.length).toBe(1);
    // Every GET went without a token; how many polls ran before the notice was seen depends on load.
    expect(server.tokensSeen.length).toBeGreaterThanOrEqual(1);
    expect(server.tokensSeen.every((t) => t === undefined)).toBe(true);
    expect(seen.reports).toEqual([]);
  });

  it("reports an unreachable endpoint once, through the manager's error event, and keeps polling", async () => {
    const url = `http://127.0.0.1:${await closedPort()}${SPOT_PATH}`;
    let requests = 0;
    const counting: typeof fetch = (input, init) => {
      requests++;
      return fetch(input, init);
    };
    const source = MetadataPreemptionSource.awsSpot({ url, intervalMs: 10, fetch: counting });
    const mgr = new CheckpointManager(`memory://preemption/${process.pid}`, 1, {
      preemptionSources: [source],
      signalTarget: new EventEmitter(),
    });
    cleanups.push(() => mgr.close());
    const errors: ManagerEvents["error"][] = [];
    mgr.on("error", (e) => errors.push(e));
    await poll(() => requests).toBeGreaterThanOrEqual(6);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({
      operation: "preemption",
      error: { code: "storage", message: expect.stringContaining(url) },
    });
    expect(((errors[0]!.error as Error).cause as Error).cause).toBeDefined();
  });
});

describe("MetadataPreemptionSource.gce", () => {
  it("gives up on a response whose body stalls at the deadline, and reports it once as a timeout", async () => {
    let requests = 0;
    const server = createServer((_req, res) => {
      requests++;
      res.writeHead(200, { "content-length": "5" });
      res.write("FA");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    });
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/computeMetadata/v1/instance/preempted`;
    const seen = watch(MetadataPreemptionSource.gce({ url, intervalMs: 10, timeoutMs: 50 }));
    await poll(() => requests).toBeGreaterThanOrEqual(3);
    expect(seen.reports).toHaveLength(1);
    expect(seen.reports[0]).toMatchObject({ code: "timeout", cause: { code: "timeout" } });
  });

  it("reports an answer that is neither a notice nor the ordinary one, then recovers silently", async () => {
    let status = 500;
    let requests = 0;
    const server = createServer((_req, res) => {
      requests++;
      res.writeHead(status).end(status === 200 ? "FALSE" : "boom");
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    const seen = watch(MetadataPreemptionSource.gce({ url, intervalMs: 10 }));
    await poll(() => seen.reports.length).toBe(1);
    expect(seen.reports[0]).toMatchObject({ code: "storage", cause: { message: expect.stringContaining("HTTP 500") } });
    status = 200;
    const healthy = requests;
    await poll(() => requests).toBeGreaterThan(healthy + 1);
    status = 503;
    await poll(() => seen.reports.length).toBe(2);
    expect(seen.notices).toEqual([]);
  });
});
