import {
  type CheckpointError,
  type StateDict,
  type StorageAdapter,
  hostTensor,
  load,
  openStorage,
  readMetadata,
  save,
} from "@cairn/core";
import type { FaultAction, ProxiedRequest } from "@cairn/core/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import "./index.js";
import { type GcsTestServer, startGcsTestServer } from "./testing/gcs-test-server.js";

// The fault suite for gs://: stalled, cut, short and lost answers and status storms injected on
// the wire between the SDK and the emulator. Each case asserts the outcome (the right bytes, or a
// coded error) and, where a checkpoint is involved, that a committed one is never lost. Deadlines
// and retry delays are short so the suite stays fast.
let server: GcsTestServer;
beforeAll(async () => {
  server = await startGcsTestServer();
});
afterAll(async () => {
  await server?.stop();
});
afterEach(() => server.proxy.clearRules());

const retry = { maxAttempts: 4, baseDelayMs: 1, maxDelayMs: 5 };
const gs = () => ({
  gs: { ...(server.storageOptions["gs"] as object), retry, progressTimeoutMs: 200, singleRequestMaxBytes: 64 << 10 },
});

/** A fresh location, its adapter, and a matcher for the requests that touch it. */
async function place(name: string): Promise<{
  url: string;
  storage: StorageAdapter;
  touches: (method: string, what?: "media" | "meta") => (r: { method: string; url: string }) => boolean;
}> {
  const url = server.location(name);
  const prefix = new URL(url).pathname.slice(1);
  const storage = await openStorage(url, gs());
  const touches = (method: string, what?: "media" | "meta") => (r: { method: string; url: string }) =>
    r.method === method &&
    r.url.includes(prefix) &&
    (what === undefined || r.url.includes("alt=media") === (what === "media"));
  return { url, storage, touches };
}

const pattern = (n: number): Uint8Array => new Uint8Array(n).map((_, i) => (i * 7919 + (i >> 8)) & 0xff);
const same = (a: Uint8Array, b: Uint8Array): boolean => Buffer.from(a).equals(Buffer.from(b));
const faults = (mark: number, kind: ProxiedRequest["fault"]) =>
  server.proxy.requests.slice(mark).filter((r) => r.fault === kind);

describe("reads that stall, are cut or come back short are retried, never hung or short", () => {
  const data = pattern(300_000);
  const cases: [string, FaultAction][] = [
    ["a body stalled after 1,000 bytes", { kind: "stall", phase: "response", afterBytes: 1000 }],
    ["an answer stalled before its body", { kind: "stall", phase: "response" }],
    // Past the headers, so the client already has the response: node-fetch 2 then never ends the body.
    ["a connection reset mid-body", { kind: "reset", phase: "response", afterBytes: 150_000 }],
    ["a body ended cleanly after 1,000 bytes", { kind: "truncate", afterBytes: 1000 }],
  ];
  for (const [name, action] of cases) {
    it(`${name}: ranged and whole reads`, async () => {
      const { storage, touches } = await place("read");
      await storage.write("obj", data);
      const mark = server.proxy.requests.length;
      server.proxy.addRule({ match: touches("GET", "media"), times: 2, action });
      expect(same(await storage.read("obj", { offset: 1000, length: 200_000 }), data.subarray(1000, 201_000))).toBe(
        true,
      );
      expect(same(await storage.read("obj"), data)).toBe(true);
      expect(faults(mark, action.kind)).toHaveLength(2);
    });
  }

  it("gives up with a coded error when every attempt stalls", async () => {
    const { storage, touches } = await place("read-stalled");
    await storage.write("obj", data);
    const mark = server.proxy.requests.length;
    server.proxy.addRule({
      match: touches("GET", "media"),
      times: Infinity,
      action: { kind: "stall", phase: "response", afterBytes: 10 },
    });
    const error = (await storage.read("obj", { offset: 0, length: 100 }).catch((e: unknown) => e)) as CheckpointError;
    expect(error).toMatchObject({ code: "storage", context: { transient: false } });
    expect(error.message).toMatch(/made no progress for 200 ms.*gave up after 4 attempts/);
    expect(faults(mark, "stall")).toHaveLength(4);
  });

  it("stat and list stalled before their answer are retried", async () => {
    const { storage, touches } = await place("meta-stall");
    await storage.write("a", new Uint8Array(3));
    server.proxy.addRule({ match: touches("GET", "meta"), times: 2, action: { kind: "stall", phase: "response" } });
    expect(await storage.stat("a")).toMatchObject({ size: 3 });
    const listed: string[] = [];
    for await (const o of storage.list("")) listed.push(o.path);
    expect(listed).toEqual(["a"]);
    expect(server.proxy.faults("stall").length).toBeGreaterThanOrEqual(2);
  });
});

describe("writes that stall or lose their answer", () => {
  it("retries a single-request upload whose body stalls, and one whose answer never comes", async () => {
    const { storage, touches } = await place("write-stall");
    const mark = server.proxy.requests.length;
    server.proxy.addRule({ match: touches("POST"), action: { kind: "stall", phase: "request", afterBytes: 1000 } });
    server.proxy.addRule({ match: touches("POST"), action: { kind: "stall", phase: "response" } });
    const data = pattern(20_000);
    await storage.write("obj", data);
    expect(same(await storage.read("obj"), data)).toBe(true);
    expect(faults(mark, "stall")).toHaveLength(2);
  });

  it("fails a stalled streamed upload with a transient error, for the caller to redo", async () => {
    const { storage, touches } = await place("stream-stall");
    server.proxy.addRule({ match: touches("PUT"), action: { kind: "stall", phase: "request", afterBytes: 50_000 } });
    async function* body() {
      for (let i = 0; i < 4; i++) yield pattern(100_000);
    }
    await expect(storage.write("obj", body())).rejects.toMatchObject({ code: "storage", context: { transient: true } });
    expect(await storage.stat("obj")).toBeNull();
  });

  it("finds its own create after a lost answer: already_exists, the object intact", async () => {
    const { storage, touches } = await place("lost-create");
    const mark = server.proxy.requests.length;
    server.proxy.addRule({ match: touches("POST"), action: { kind: "lose" } });
    await expect(storage.write("metadata.json", pattern(500), { ifAbsent: true })).rejects.toMatchObject({
      code: "already_exists",
    });
    expect(faults(mark, "lose")).toHaveLength(1);
    expect(faults(mark, "precondition")).toHaveLength(1);
    expect(same(await storage.read("metadata.json"), pattern(500))).toBe(true);
  });

  it("retries a delete, a stat and a list whose answers were lost", async () => {
    const { storage, touches } = await place("lost-answers");
    await storage.write("gone", new Uint8Array(1));
    await storage.write("kept", new Uint8Array(2));
    const mark = server.proxy.requests.length;
    server.proxy.addRule({ match: touches("DELETE"), action: { kind: "lose" } });
    server.proxy.addRule({ match: touches("GET", "meta"), times: 2, action: { kind: "lose" } });
    await storage.delete("gone");
    expect(await storage.stat("kept")).toMatchObject({ size: 2 });
    const listed: string[] = [];
    for await (const o of storage.list("")) listed.push(o.path);
    expect(listed).toEqual(["kept"]);
    expect(faults(mark, "lose")).toHaveLength(3);
  });
});

describe("status storms and refusals", () => {
  const json = (status: number, message: string): FaultAction => ({
    kind: "status",
    status,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ error: { code: status, message } }),
  });

  it("rides out a 503/429 storm shorter than the retry bounds", async () => {
    const { storage, touches } = await place("storm");
    const mark = server.proxy.requests.length;
    server.proxy.addRule({ match: touches("POST"), times: 2, action: json(503, "backend error") });
    server.proxy.addRule({ match: touches("POST"), action: json(429, "rate limit") });
    server.proxy.addRule({ match: touches("GET", "media"), times: 3, action: json(503, "backend error") });
    await storage.write("obj", pattern(1000));
    expect(same(await storage.read("obj"), pattern(1000))).toBe(true);
    expect(faults(mark, "status")).toHaveLength(6);
  });

  it("reports a storm longer than the bounds as a permanent storage error", async () => {
    const { storage, touches } = await place("long-storm");
    await storage.write("obj", pattern(10));
    server.proxy.addRule({ match: touches("GET", "meta"), times: Infinity, action: json(429, "rate limit") });
    await expect(storage.stat("obj")).rejects.toMatchObject({
      code: "storage",
      context: { transient: false },
      message: expect.stringMatching(/HTTP 429.*gave up after 4 attempts/),
    });
  });

  it("maps 401 and 403 to permission_denied, keeping the SDK's error as cause, without retrying", async () => {
    const { storage, touches } = await place("denied");
    await storage.write("obj", pattern(10));
    const mark = server.proxy.requests.length;
    server.proxy.addRule({
      match: touches("GET", "media"),
      action: json(403, "caller does not have storage.objects.get access"),
    });
    server.proxy.addRule({ match: touches("POST"), action: json(401, "invalid credentials") });
    const read = (await storage.read("obj").catch((e: unknown) => e)) as CheckpointError;
    expect(read).toMatchObject({
      code: "permission_denied",
      message: expect.stringMatching(/^\[gs\] read .*HTTP 403.*storage\.objects\.get.*credentials/),
    });
    expect(read.cause).toMatchObject({ code: 403 });
    await expect(storage.write("new", pattern(10))).rejects.toMatchObject({
      code: "permission_denied",
      cause: expect.anything(),
    });
    expect(faults(mark, "status")).toHaveLength(2);
  });
});

describe("checkpoints under faults", () => {
  const state = (seed: number): StateDict => ({
    w: hostTensor(
      "float32",
      [64, 100],
      new Float32Array(6400).map((_, i) => Math.sin(i + seed)),
    ),
    blob: pattern(20_000 + seed),
    step: seed,
  });
  const options = (checkpointId: string) => ({ checkpointId, storageOptions: gs(), retry });
  const expectState = (loaded: StateDict, seed: number) => {
    const expected = state(seed) as unknown as { w: { data: Float32Array }; blob: Uint8Array };
    const got = loaded as unknown as { w: { data: Float32Array }; blob: Uint8Array; step: number };
    expect(
      same(
        new Uint8Array(got.w.data.buffer, got.w.data.byteOffset, got.w.data.byteLength),
        new Uint8Array(expected.w.data.buffer),
      ),
    ).toBe(true);
    expect(same(got.blob, expected.blob)).toBe(true);
    expect(got.step).toBe(seed);
  };

  it("commits a save whose metadata.json answer was lost, and loads through stalls and cuts", async () => {
    const committed = server.location("ckpt-a");
    await save(state(1), options(committed));
    const { url, touches } = await place("ckpt-b");
    const mark = server.proxy.requests.length;
    server.proxy.addRule({
      match: (r) => touches("POST")(r) && r.url.includes("metadata.json"),
      action: { kind: "lose" },
    });
    await save(state(2), options(url));
    expect(faults(mark, "lose")).toHaveLength(1);
    server.proxy.addRule({
      match: touches("GET", "media"),
      action: { kind: "stall", phase: "response", afterBytes: 100 },
    });
    server.proxy.addRule({ match: touches("GET", "media"), action: { kind: "truncate", afterBytes: 100 } });
    expectState(await load(options(url)), 2);
    expectState(await load(options(committed)), 1);
  });

  it("commits nothing when uploads are refused, and the committed checkpoint beside it is intact", async () => {
    const committed = server.location("ckpt-c");
    await save(state(3), options(committed));
    const { url, storage, touches } = await place("ckpt-d");
    server.proxy.addRule({ match: touches("POST"), times: Infinity, action: { kind: "status", status: 403 } });
    await expect(save(state(4), options(url))).rejects.toMatchObject({ code: "permission_denied" });
    server.proxy.clearRules();
    expect(await storage.stat("metadata.json")).toBeNull();
    await expect(readMetadata(options(url))).rejects.toMatchObject({ code: "not_found" });
    expectState(await load(options(committed)), 3);
  });
});
