import {
  type CheckpointError,
  type HostTensor,
  type StateDict,
  DefaultSavePlanner,
  hostTensor,
  load,
  openStorage,
  readMetadata,
  save,
} from "@cairn/core";
import type { FaultRule } from "@cairn/core/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import "./index.js";
import { type GcsTestServer, startGcsTestServer } from "./testing/gcs-test-server.js";

// Save and load through gs:// end to end, with faults injected on the wire between the SDK and
// the emulator. The proxy also enforces ifGenerationMatch=0, which the emulator ignores.
let server: GcsTestServer;
beforeAll(async () => {
  server = await startGcsTestServer();
});
afterAll(async () => {
  await server?.stop();
});
afterEach(() => server.proxy.clearRules());

const retry = { baseDelayMs: 2, maxDelayMs: 20 };
// A low single-request threshold sends every data file as a resumable upload and metadata.json in one request.
const gs = () => ({ gs: { ...(server.storageOptions["gs"] as object), singleRequestMaxBytes: 64 << 10 } });
const options = (checkpointId: string) => ({ checkpointId, storageOptions: gs(), retry, concurrency: 3 });
// Three files however small the state (the default puts under 16 MiB in one).
const saveOptions = (checkpointId: string) => ({
  ...options(checkpointId),
  planner: new DefaultSavePlanner({ minFileBytes: 0 }),
});

function filled<T extends { length: number; [i: number]: number | bigint }>(
  array: T,
  f: (i: number) => number | bigint,
): T {
  for (let i = 0; i < array.length; i++) array[i] = f(i) as never;
  return array;
}

function stateDict(): StateDict {
  return {
    model: {
      "layer.0": {
        weight: hostTensor(
          "float32",
          [256, 300],
          filled(new Float32Array(256 * 300), (i) => Math.sin(i) * 1e3),
        ),
      },
      embedding: hostTensor(
        "bfloat16",
        [500, 64],
        filled(new Uint16Array(500 * 64), (i) => (i * 2654435761) & 0xffff),
      ),
      bias: hostTensor(
        "float64",
        [300],
        filled(new Float64Array(300), (i) => 1 / (i + 1)),
      ),
    },
    optim: {
      step: hostTensor(
        "int64",
        [4],
        filled(new BigInt64Array(4), (i) => BigInt(i) * 10_000_000_000n),
      ),
      lr: 3e-4,
    },
    rng: filled(new Uint8Array(5000), (i) => (i * 31) & 0xff),
    note: "gs round trip",
  };
}

const data = (value: unknown): Uint8Array => {
  const d = (value as HostTensor).data ?? value;
  return new Uint8Array((d as Uint8Array).buffer, (d as Uint8Array).byteOffset, (d as Uint8Array).byteLength);
};

function expectSameState(actual: StateDict, expected: StateDict): void {
  const a = actual as Record<string, Record<string, unknown>>;
  const e = expected as Record<string, Record<string, unknown>>;
  for (const [group, key] of [
    ["model", "embedding"],
    ["model", "bias"],
    ["optim", "step"],
  ] as const) {
    expect(Buffer.from(data(a[group]![key])).equals(Buffer.from(data(e[group]![key]))), `${group}.${key}`).toBe(true);
  }
  const layer = (s: Record<string, Record<string, unknown>>) => (s["model"]!["layer.0"] as { weight: unknown }).weight;
  expect(Buffer.from(data(layer(a))).equals(Buffer.from(data(layer(e))))).toBe(true);
  expect(Buffer.from(data(a["rng"])).equals(Buffer.from(data(e["rng"])))).toBe(true);
  expect(a["optim"]!["lr"]).toBe(3e-4);
  expect(actual["note"]).toBe("gs round trip");
}

/** Faults the proxy applied since `mark` (its request count then); the log spans the whole file. */
const faultsSince = (mark: number, kind?: string) =>
  server.proxy.requests.slice(mark).filter((r) => r.fault !== undefined && (kind === undefined || r.fault === kind));

const rangeLength = (header: string | string[] | undefined): number => {
  const match = /^bytes=(\d+)-(\d+)$/.exec(String(header));
  return match ? Number(match[2]) - Number(match[1]) + 1 : 0;
};

const isDataUpload = (r: { method: string; url: string }) =>
  r.url.includes("/upload/") && r.url.includes(".safetensors");

describe("save and load through gs://", () => {
  it("round-trips a state dict bit-exactly and reads its metadata", async () => {
    const url = server.location("roundtrip");
    const original = stateDict();
    const saved = await save(original, { ...saveOptions(url), metadata: { step: 100 } });
    expect(saved.files).toBeGreaterThan(1);
    const metadata = await readMetadata({ checkpointId: url, storageOptions: gs() });
    expect(metadata.user).toEqual({ step: 100 });
    expect(Object.keys(metadata.files)).toHaveLength(saved.files);
    expectSameState(await load(options(url)), original);

    const target = stateDict() as { model: { bias: HostTensor } };
    (target.model.bias.data as Float64Array).fill(0);
    const loaded = await load(target as StateDict, options(url));
    expect(loaded.entries).toBe(metadata.entries.length);
    expectSameState(target as StateDict, original);
  });

  it("loads with no metadata GET per data file, the sizes from Content-Range; a wrong size is corrupt", async () => {
    const url = server.location("sizes");
    await save(stateDict(), saveOptions(url));
    const metadata = await readMetadata({ checkpointId: url, storageOptions: gs() });
    const files = Object.keys(metadata.files);
    expect(files.length).toBeGreaterThan(1);
    const stats = (mark: number) =>
      server.proxy.requests
        .slice(mark)
        .filter((r) => r.method === "GET" && r.url.includes(".safetensors") && !r.url.includes("alt=media"));
    let mark = server.proxy.requests.length;
    expectSameState(await load(options(url)), stateDict());
    expect(stats(mark)).toEqual([]);

    // A byte appended: every range still reads and verifies; only the size tells.
    const storage = await openStorage(url, gs());
    const bytes = await storage.read(files[0]!);
    const extended = new Uint8Array(bytes.byteLength + 1);
    extended.set(bytes);
    await storage.write(files[0]!, extended);
    mark = server.proxy.requests.length;
    await expect(load(options(url))).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringMatching(/truncated or extended/),
    });
    expect(stats(mark)).toEqual([]);
    await storage.write(files[0]!, bytes.subarray(0, bytes.byteLength - 1));
    await expect(load(options(url))).rejects.toMatchObject({ code: "corrupt" });
  });

  it("detects a data file corrupted at rest", async () => {
    const url = server.location("corrupt");
    await save(stateDict(), saveOptions(url));
    const storage = await openStorage(url, gs());
    const names: string[] = [];
    for await (const o of storage.list("")) if (o.path.endsWith(".safetensors")) names.push(o.path);
    const bytes = await storage.read(names[0]!);
    const damaged = new Uint8Array(bytes);
    damaged[damaged.byteLength - 10]! ^= 0x01;
    await storage.write(names[0]!, damaged);
    const error = (await load(options(url)).catch((e: unknown) => e)) as CheckpointError;
    expect(error.code).toBe("corrupt");
  });

  it("reads each data file's header in the GET of its first range, and detects a damaged header", async () => {
    const url = server.location("header");
    await save(stateDict(), saveOptions(url));
    const metadata = await readMetadata({ checkpointId: url, storageOptions: gs() });
    const files = Object.keys(metadata.files);
    const dataGets = (mark: number) =>
      server.proxy.requests.slice(mark).filter((r) => r.method === "GET" && r.url.includes(".safetensors?alt=media"));
    const mark = server.proxy.requests.length;
    expectSameState(await load(options(url)), stateDict());
    // Each file's tensors are neighbours under maxReadBytes: one range read per file, and no request for a header alone.
    expect(dataGets(mark)).toHaveLength(files.length);

    const storage = await openStorage(url, gs());
    const damaged = new Uint8Array(await storage.read(files[0]!));
    damaged[8 + Math.floor(metadata.files[files[0]!]!.headerLength / 2)]! ^= 0x01;
    await storage.write(files[0]!, damaged);
    const error = await load(options(url)).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: "corrupt",
      context: { file: files[0] },
      message: expect.stringContaining("safetensors header does not match"),
    });
  });
});

describe("faults on the wire", () => {
  it("retries 429, 503, resets mid-body and delays, and the checkpoint commits", async () => {
    const url = server.location("transient");
    const rules: FaultRule[] = [
      {
        match: (r) => r.method === "POST" && r.url.includes("uploadType=resumable"),
        action: { kind: "status", status: 503 },
      },
      { match: (r) => r.method === "POST" && r.url.includes("metadata.json"), action: { kind: "status", status: 429 } },
      {
        match: (r) => r.method === "PUT" && isDataUpload(r),
        action: { kind: "reset", phase: "request", afterBytes: 20_000 },
      },
      // Only a range longer than afterBytes: FaultProxy never ends a shorter response, and the keep-alive
      // socket it holds would stall the next request sent on it. The retried range includes the file's header.
      {
        match: (r) =>
          r.method === "GET" && r.url.includes(".safetensors?alt=media") && rangeLength(r.headers.range) > 2000,
        action: { kind: "reset", phase: "response", afterBytes: 1000 },
      },
      {
        match: (r) => r.method === "GET" && r.url.includes("metadata.json?alt=media"),
        action: { kind: "status", status: 500 },
      },
      // The retry after the 500 is slow, not failed.
      {
        match: (r) => r.method === "GET" && r.url.includes("metadata.json?alt=media"),
        action: { kind: "delay", ms: 300 },
      },
    ];
    const mark = server.proxy.requests.length;
    for (const rule of rules) server.proxy.addRule(rule);
    const original = stateDict();
    await save(original, saveOptions(url));
    expectSameState(await load(options(url)), original);
    for (const kind of ["status", "reset", "delay"] as const)
      expect(faultsSince(mark, kind).length, kind).toBeGreaterThan(0);
    expect(faultsSince(mark)).toHaveLength(rules.length);
  });

  it("rejects a permanent 403 clearly and commits nothing", async () => {
    const url = server.location("denied");
    const mark = server.proxy.requests.length;
    server.proxy.addRule({
      match: (r) => r.method === "POST" && isDataUpload(r),
      times: Infinity,
      action: {
        kind: "status",
        status: 403,
        headers: { "content-type": "application/json" },
        body: '{"error":{"code":403,"message":"caller does not have storage.objects.create access"}}',
      },
    });
    const error = (await save(stateDict(), saveOptions(url)).catch((e: unknown) => e)) as CheckpointError;
    server.proxy.clearRules();
    expect(error.code).toBe("permission_denied");
    expect(error.message).toMatch(
      /^\[gs\] write gs:\/\/cairn-test\/denied-.*\.safetensors failed: HTTP 403.*storage\.objects\.create.*credentials/,
    );
    // Permanent: the first refusal of each file is the only one.
    expect(faultsSince(mark, "status").length).toBeGreaterThan(0);
    expect(faultsSince(mark, "status").length).toBeLessThanOrEqual(3);
    const storage = await openStorage(url, gs());
    expect(await storage.stat("metadata.json")).toBeNull();
    const left: string[] = [];
    for await (const o of storage.list("")) left.push(o.path);
    expect(left).toEqual([]);
  });

  it("gives up after the adapter's attempts without the caller retrying again", async () => {
    const url = server.location("exhausted");
    await save(stateDict(), saveOptions(url));
    const mark = server.proxy.requests.length;
    server.proxy.addRule({
      match: (r) => r.method === "GET" && r.url.includes("metadata.json?alt=media"),
      times: Infinity,
      action: { kind: "status", status: 503 },
    });
    const error = (await readMetadata({
      checkpointId: url,
      storageOptions: { gs: { ...gs().gs, retry: { ...retry, maxAttempts: 3 } } },
      retry,
    }).catch((e: unknown) => e)) as CheckpointError;
    expect(error).toMatchObject({ code: "storage", context: { transient: false } });
    expect(error.message).toMatch(/HTTP 503.*gave up after 3 attempts/);
    // 3, not 3 × core's 6: the adapter's exhausted error is permanent.
    expect(faultsSince(mark, "status")).toHaveLength(3);
  });

  it("redoes a streamed upload from a fresh body in core, the adapter trying it once", async () => {
    const url = server.location("stream-once");
    const mark = server.proxy.requests.length;
    server.proxy.addRule({
      match: (r) => r.method === "PUT" && isDataUpload(r),
      action: { kind: "status", status: 503 },
    });
    await save(stateDict(), saveOptions(url));
    const failed = faultsSince(mark, "status")[0]!;
    const name = new URL(failed.url, "http://x").searchParams.get("name")!;
    const sessions = server.proxy.requests.filter(
      (r) => r.method === "POST" && new URL(r.url, "http://x").searchParams.get("name") === name,
    );
    expect(sessions).toHaveLength(2);
  });
});

describe("commit races", () => {
  it("lets one of two racing saves commit; the other gets already_exists from the ifGenerationMatch=0 create", async () => {
    const url = server.location("race");
    const mark = server.proxy.requests.length;
    const results = await Promise.allSettled([
      save(stateDict(), saveOptions(url)),
      save(stateDict(), saveOptions(url)),
    ]);
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    const loser = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
    expect((loser.reason as CheckpointError).code).toBe("already_exists");
    expect(faultsSince(mark, "precondition").length).toBeGreaterThan(0);
    await expect(readMetadata({ checkpointId: url, storageOptions: gs() })).resolves.toBeDefined();
  });

  it("answers a 412 from the server as already_exists", async () => {
    const storage = await openStorage(server.location("412"), gs());
    server.proxy.addRule({
      match: (r) => r.method === "POST",
      action: {
        kind: "status",
        status: 412,
        headers: { "content-type": "application/json" },
        body: '{"error":{"code":412,"message":"conditionNotMet"}}',
      },
    });
    await expect(storage.write("metadata.json", new Uint8Array([1]), { ifAbsent: true })).rejects.toMatchObject({
      code: "already_exists",
      message: expect.stringMatching(/^\[gs\]/),
    });
  });
});
