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
