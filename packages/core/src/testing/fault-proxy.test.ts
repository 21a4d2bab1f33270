import { type Server, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FaultProxy } from "./fault-proxy.js";

describe("FaultProxy", () => {
  let upstream: Server;
  let proxy: FaultProxy;
  const body = Buffer.alloc(100_000, 7);

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      let received = 0;
      req.on("data", (c: Buffer) => (received += c.byteLength));
      req.on("end", () => {
        res.setHeader("x-received", String(received));
        res.end(body);
      });
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", () => r()));
    proxy = await FaultProxy.start(`http://127.0.0.1:${(upstream.address() as AddressInfo).port}`);
  });
  afterAll(async () => {
    await proxy.close();
    await new Promise((r) => upstream.close(r));
  });

  it("passes requests through untouched by default", async () => {
    const res = await fetch(`${proxy.url}/x`, { method: "PUT", body: new Uint8Array(1234) });
    expect(res.headers.get("x-received")).toBe("1234");
    expect(Buffer.from(await res.arrayBuffer()).equals(body)).toBe(true);
  });

  it("answers a status for as many matching requests as asked, then passes through", async () => {
    proxy.addRule({
      match: (r) => r.url === "/slow",
      times: 2,
      action: { kind: "status", status: 503, body: "<Error><Code>SlowDown</Code></Error>" },
    });
    expect((await fetch(`${proxy.url}/slow`)).status).toBe(503);
    expect((await fetch(`${proxy.url}/other`)).status).toBe(200);
    expect((await fetch(`${proxy.url}/slow`)).status).toBe(503);
    expect((await fetch(`${proxy.url}/slow`)).status).toBe(200);
    expect(proxy.faults("status")).toHaveLength(2);
  });

  it("resets a connection mid-response", async () => {
    proxy.addRule({ action: { kind: "reset", phase: "response", afterBytes: 1000 } });
    await expect(fetch(`${proxy.url}/r`).then((r) => r.arrayBuffer())).rejects.toThrow();
  });

  it("resets a connection mid-request-body", async () => {
    proxy.addRule({ action: { kind: "reset", phase: "request", afterBytes: 10 } });
    await expect(fetch(`${proxy.url}/u`, { method: "PUT", body: new Uint8Array(1 << 20) })).rejects.toThrow();
  });

  it("flips a byte of the response body", async () => {
    proxy.addRule({ action: { kind: "corrupt", offset: 50_000 } });
    const got = Buffer.from(await (await fetch(`${proxy.url}/c`)).arrayBuffer());
    expect(got.byteLength).toBe(body.byteLength);
    expect(got[50_000]).toBe(7 ^ 0xff);
    expect(got[49_999]).toBe(7);
  });
});

describe("FaultProxy stalls and lost responses", () => {
  let upstream: Server;
  let proxy: FaultProxy;
  // What the server saw of each request: bytes of body, whether it answered, whether the client went away first.
  const seen = new Map<string, { received: number; answered: boolean; aborted: boolean }>();
  const body = Buffer.alloc(100_000, 3);

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      const record = { received: 0, answered: false, aborted: false };
      seen.set(req.url ?? "", record);
      req.on("data", (c: Buffer) => (record.received += c.byteLength));
      req.on("close", () => (record.aborted = !req.complete));
      req.on("end", () => {
        record.answered = true;
        if (req.url === "/empty") res.writeHead(204).end();
        else res.end(body);
      });
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", () => r()));
    proxy = await FaultProxy.start(`http://127.0.0.1:${(upstream.address() as AddressInfo).port}`);
  });
  afterAll(async () => {
    await proxy.close();
    await new Promise((r) => upstream.close(r));
  });

  /** Resolves when `condition` holds, polling; a test that never sees it fails by its own timeout. */
  const until = async (condition: () => boolean): Promise<void> => {
    while (!condition()) await new Promise((r) => setTimeout(r, 5));
  };
  /** Whether a promise settles before `ms`: for asserting that a stalled transfer has not moved. */
  const settlesWithin = (promise: Promise<unknown>, ms: number): Promise<boolean> =>
    Promise.race([
      promise.then(
        () => true,
        () => true,
      ),
      new Promise<boolean>((r) => setTimeout(() => r(false), ms)),
    ]);

  it("stalls a response after its headers and afterBytes of its body, until the client gives up", async () => {
    proxy.addRule({
      match: (r) => r.url === "/stall-down",
      action: { kind: "stall", phase: "response", afterBytes: 1000 },
    });
    const client = new AbortController();
    const res = await fetch(`${proxy.url}/stall-down`, { signal: client.signal });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-length")).toBe(String(body.byteLength));
    const reader = res.body!.getReader();
    let got = 0;
    while (got < 1000) got += (await reader.read()).value!.byteLength;
    expect(got).toBe(1000);
    const next = reader.read();
    expect(await settlesWithin(next, 100)).toBe(false);
    client.abort();
    await expect(next).rejects.toThrow();
    expect(proxy.faults("stall")).toHaveLength(1);
  });

  it("stalls a response before its body's first byte when afterBytes is 0", async () => {
    proxy.addRule({ match: (r) => r.url === "/stall-head", action: { kind: "stall", phase: "response" } });
    const client = new AbortController();
    const res = await fetch(`${proxy.url}/stall-head`, { signal: client.signal });
    expect(res.status).toBe(200);
    const first = res.body!.getReader().read();
    expect(await settlesWithin(first, 100)).toBe(false);
    client.abort();
    await expect(first).rejects.toThrow();
  });

  it("stalls a request body after afterBytes, never answering, and lets the server go when the client gives up", async () => {
    proxy.addRule({
      match: (r) => r.url === "/stall-up",
      action: { kind: "stall", phase: "request", afterBytes: 10_000 },
    });
    const client = new AbortController();
    const answer = fetch(`${proxy.url}/stall-up`, {
      method: "PUT",
      body: new Uint8Array(1 << 20),
      signal: client.signal,
    });
    await until(() => (seen.get("/stall-up")?.received ?? 0) >= 10_000);
    expect(await settlesWithin(answer, 100)).toBe(false);
    expect(seen.get("/stall-up")).toMatchObject({ received: 10_000, answered: false });
    client.abort();
    await expect(answer).rejects.toThrow();
    await until(() => seen.get("/stall-up")!.aborted);
    expect(seen.get("/stall-up")!.answered).toBe(false);
  });

  it("ends a body cleanly after afterBytes, without its Content-Length", async () => {
    proxy.addRule({ match: (r) => r.url === "/short", action: { kind: "truncate", afterBytes: 30_000 } });
    const res = await fetch(`${proxy.url}/short`);
    expect(res.headers.get("content-length")).toBeNull();
    expect((await res.arrayBuffer()).byteLength).toBe(30_000);
    // The connection is still good for the next request.
    expect((await (await fetch(`${proxy.url}/after-short`)).arrayBuffer()).byteLength).toBe(body.byteLength);
  });

  it("loses a response: the server handled the request, the client gets a dropped connection", async () => {
    proxy.addRule({ match: (r) => r.url === "/lost", action: { kind: "lose" } });
    await expect(
      fetch(`${proxy.url}/lost`, { method: "PUT", body: new Uint8Array(5000) }).then((r) => r.arrayBuffer()),
    ).rejects.toThrow();
    expect(seen.get("/lost")).toMatchObject({ received: 5000, answered: true });
    expect(proxy.faults("lose")).toHaveLength(1);
  });

  it("loses an empty answer too, which a reset after 0 bytes would deliver", async () => {
    proxy.addRule({ match: (r) => r.url === "/empty", action: { kind: "lose" } });
    await expect(fetch(`${proxy.url}/empty`, { method: "DELETE" })).rejects.toThrow();
    expect(seen.get("/empty")!.answered).toBe(true);
    proxy.addRule({ match: (r) => r.url === "/empty", action: { kind: "reset", phase: "response", afterBytes: 0 } });
    expect((await fetch(`${proxy.url}/empty`, { method: "DELETE" })).status).toBe(204);
  });
});

describe("FaultProxy preconditions", () => {
  it("serialises conditional creates of one key and answers the conflict once the object exists", async () => {
    const stored = new Map<string, number>();
    const upstream = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        // A slow server, so racing creates would all pass an unserialised existence check.
        setTimeout(() => {
          stored.set(req.url ?? "", (stored.get(req.url ?? "") ?? 0) + 1);
          res.end("ok");
        }, 20);
      });
    });
    await new Promise<void>((r) => upstream.listen(0, "127.0.0.1", () => r()));
    const proxy = await FaultProxy.start(`http://127.0.0.1:${(upstream.address() as AddressInfo).port}`, {
      preconditions: {
        key: (r) => (r.headers["if-none-match"] === "*" ? r.url : undefined),
        exists: async (key) => stored.has(key),
        conflict: { status: 412, body: "<Error><Code>PreconditionFailed</Code></Error>" },
      },
    });
    try {
      const statuses = await Promise.all(
        Array.from({ length: 5 }, () =>
          fetch(`${proxy.url}/obj`, { method: "PUT", body: "x", headers: { "if-none-match": "*" } }).then(
            (r) => r.status,
          ),
        ),
      );
      expect(statuses.filter((s) => s === 200)).toHaveLength(1);
      expect(statuses.filter((s) => s === 412)).toHaveLength(4);
      expect(stored.get("/obj")).toBe(1);
      expect((await fetch(`${proxy.url}/obj`, { method: "PUT", body: "y" })).status).toBe(200);
    } finally {
      await proxy.close();
      await new Promise((r) => upstream.close(r));
    }
  });
});
