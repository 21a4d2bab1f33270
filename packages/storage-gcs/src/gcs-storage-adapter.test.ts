import { type CheckpointError, type StorageAdapter, openStorage } from "@cairn/core";
import { storageContractSuite } from "@cairn/core/testing";
import { CRC32C, Storage } from "@google-cloud/storage";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { nativeCrc32cValidator } from "./gcs-integrity.js";
import type { GcsStorageAdapter } from "./gcs-storage-adapter.js";
import "./index.js";
import { type GcsTestServer, startGcsTestServer } from "./testing/gcs-test-server.js";

// One emulator per test file, in this worker. Its proxy enforces ifGenerationMatch=0 because
// the emulator ignores preconditions: without it the contract's ifAbsent tests would pass
// writes a real bucket refuses, or fail for the server's sake rather than the adapter's.
let server: GcsTestServer;
beforeAll(async () => {
  server = await startGcsTestServer();
});
afterAll(async () => {
  await server?.stop();
});

const open = (name?: string, gs: Record<string, unknown> = {}): Promise<StorageAdapter> =>
  openStorage(server.location(name), { gs: { ...(server.storageOptions["gs"] as object), ...gs } });

// 24 MiB streams past the 8 MiB single-request threshold, so the resumable path is what gets tested.
// Listing across pages is the tuned suite's (pages of 100): here 230 objects, one page.
storageContractSuite("gs:// (firebase emulator)", {
  open: () => open("contract"),
  largeObjectBytes: 24 << 20,
  listCount: 230,
  timeoutMs: 60_000,
});

storageContractSuite("gs:// with tiny thresholds: split reads, single-request streams, small pages", {
  open: () =>
    open("tuned", {
      parallelReadMinBytes: 64 << 10,
      parallelReadPartBytes: 20_000,
      listPageSize: 100,
      singleRequestMaxBytes: 64 << 20,
    }),
  // 4 MiB: over 200 split-read parts of 20,000 bytes, a head of 1.3 MiB past many of them.
  largeObjectBytes: 4 << 20,
  listCount: 230,
  timeoutMs: 60_000,
});

describe("gs:// specifics", () => {
  it("roots the adapter at the URL's bucket and prefix", async () => {
    const url = server.location("rooted");
    const storage = await openStorage(`${url}/sub/`, server.storageOptions);
    expect(storage.root).toBe(`${url}/sub/`);
    await storage.write("x.bin", new Uint8Array([1, 2, 3]));
    const parent = await openStorage(url, server.storageOptions);
    expect(await parent.stat("sub/x.bin")).toMatchObject({ path: "sub/x.bin", size: 3 });
    expect((await parent.stat("sub/x.bin"))?.modified).toBeInstanceOf(Date);
  });

  it("reads ranges past the end as the contract says, though the emulator answers them with the whole object", async () => {
    const storage = await open();
    await storage.write("r", new Uint8Array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]));
    expect(await storage.read("r", { offset: 8, length: 5 })).toEqual(new Uint8Array([8, 9]));
    expect((await storage.read("r", { offset: 10, length: 5 })).byteLength).toBe(0);
    expect((await storage.read("r", { offset: 50, length: 5 })).byteLength).toBe(0);
  });

  it("carries ReadOptions.head in the first part of a split read, at no extra GET", async () => {
    const storage = await open("head", { parallelReadMinBytes: 64 << 10, parallelReadPartBytes: 20_000 });
    const data = new Uint8Array(100_000).map((_, i) => (i * 7919) & 0xff);
    await storage.write("blob", data);
    const head = new Uint8Array(30_000);
    const mark = server.proxy.requests.length;
    const body = await storage.read("blob", { offset: 0, length: 100_000 }, { head });
    expect(Buffer.from(head).equals(data.subarray(0, 30_000))).toBe(true);
    expect(Buffer.from(body).equals(data.subarray(30_000))).toBe(true);
    // 50,000 bytes (head and a part), whose answer tells the size, then three parts for the remaining 50,000: no stat.
    const gets = server.proxy.requests.slice(mark).filter((r) => r.method === "GET" && r.url.includes("alt=media"));
    expect(gets).toHaveLength(4);
    expect(server.proxy.requests.slice(mark).filter((r) => r.method === "GET" && !r.url.includes("alt=media"))).toEqual(
      [],
    );
  });

  it("deletes many objects in parallel, missing ones included", async () => {
    const storage = (await open()) as GcsStorageAdapter;
    const paths = Array.from({ length: 60 }, (_, i) => `step/${i}`);
    await Promise.all(paths.map((p) => storage.write(p, new Uint8Array([1]))));
    await storage.deleteMany([...paths, "step/never"]);
    const left: string[] = [];
    for await (const o of storage.list("step/")) left.push(o.path);
    expect(left).toEqual([]);
  });

  it("names bucket and object in every error", async () => {
    const storage = await open("named");
    const error = (await storage.read("missing/file").catch((e: unknown) => e)) as CheckpointError;
    expect(error.code).toBe("not_found");
    expect(error.message).toMatch(/^\[gs\] .*gs:\/\/cairn-test\/named-\d+-\d+\/missing\/file/);
  });

  it("refuses a URL without a bucket", async () => {
    await expect(openStorage("gs:///prefix", server.storageOptions)).rejects.toMatchObject({
      code: "invalid_argument",
    });
  });

  it("honours STORAGE_EMULATOR_HOST when no endpoint is given", async () => {
    const saved = process.env["STORAGE_EMULATOR_HOST"];
    process.env["STORAGE_EMULATOR_HOST"] = server.emulator.host;
    try {
      const storage = await openStorage(server.location("env"), { gs: { projectId: "demo-cairn" } });
      await storage.write("via-env", new Uint8Array([7]));
      expect(await storage.read("via-env")).toEqual(new Uint8Array([7]));
    } finally {
      if (saved === undefined) delete process.env["STORAGE_EMULATOR_HOST"];
      else process.env["STORAGE_EMULATOR_HOST"] = saved;
    }
  });

  it("uses a Storage client it is given, leaving retries to the SDK when the client has them on", async () => {
    const client = new Storage({
      projectId: "demo-cairn",
      apiEndpoint: server.proxy.url,
      retryOptions: { maxRetries: 1, maxRetryDelay: 0.01 },
    });
    const storage = await openStorage(server.location("client"), { gs: { storage: client } });
    await storage.write("c", new Uint8Array([1]));
    const before = server.proxy.faults("status").length;
    server.proxy.addRule({
      match: (r) => r.method === "GET" && r.url.includes("/o/client-"),
      times: 5,
      action: { kind: "status", status: 503 },
    });
    await expect(storage.stat("c")).rejects.toMatchObject({ code: "storage", context: { transient: false } });
    server.proxy.clearRules();
    // The SDK's two attempts and no more: the adapter made one, so the layers did not multiply.
    expect(server.proxy.faults("status").length - before).toBe(2);
  });
});

describe("nativeCrc32cValidator", () => {
  it("hashes like the SDK's own CRC32C across chunk boundaries, and validates only the right value", () => {
    const bytes = Buffer.from(Array.from({ length: 100_003 }, (_, i) => (i * 7919) % 251));
    const sdk = new CRC32C();
    const native = nativeCrc32cValidator();
    for (const [from, to] of [
      [0, 1],
      [1, 4096],
      [4096, 65_536],
      [65_536, 100_003],
    ] as const) {
      sdk.update(bytes.subarray(from, to));
      native.update(bytes.subarray(from, to));
    }
    expect(native.toString()).toBe(sdk.toString());
    expect(native.validate(sdk.toString())).toBe(true);
    expect(native.validate(new CRC32C().toString())).toBe(false);
    expect(nativeCrc32cValidator().toString()).toBe(new CRC32C().toString());
  });
});
