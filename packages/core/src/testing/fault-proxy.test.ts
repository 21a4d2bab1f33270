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
    proxy.addRule({ match: (r) => r.url === "/slow", times: 2, action: { kind: "status", status: 503, body: "<Error><Code>SlowDown</Code></Error>" } });
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
        Array.from({ length: 5 }, () => fetch(`${proxy.url}/obj`, { method: "PUT", body: "x", headers: { "if-none-match": "*" } }).then((r) => r.status)),
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
