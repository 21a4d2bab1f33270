// https:// (here http://) read-only storage in Node, against static servers on 127.0.0.1: one
// honouring Range, one ignoring it, one stalling mid-body, and ones sending other body lengths.
import { mkdtemp, readFile, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { hostTensor, load, save } from "@cairn/core";
import "@cairn/storage-local";
import { CheckpointManager } from "@cairn/manager";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HTTP_INDEX_FILE, HttpStorageAdapter, publishStep } from "../src/index.js";
import { type ServerBehaviour, type TestServer, startServer } from "./http-servers.js";

const ROWS = 512;
function matrix(seed: number): Float32Array {
  const data = new Float32Array(ROWS * 256);
  for (let i = 0; i < data.length; i++) data[i] = Math.sin(i * 0.37 + seed);
  return data;
}

let dir: string;
let root: string;
const servers: TestServer[] = [];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "cairn-http-"));
  root = pathToFileURL(join(dir, "run")).href;
  for (const step of [5, 10]) {
    await save(
      {
        a: hostTensor("float32", [ROWS, 256], matrix(step)),
        b: hostTensor("float32", [ROWS, 256], matrix(-step)),
        step,
      },
      { checkpointId: `${root}/${step}`, metadata: { step } },
    );
  }
  await publishStep(root, 5);
  await publishStep(root, 10);
});
afterAll(async () => {
  await Promise.all(servers.map((s) => s.close()));
  await rm(dir, { recursive: true, force: true });
});

async function serve(behaviour: ServerBehaviour, faults?: number): Promise<TestServer> {
  const server = await startServer(dir, behaviour, faults);
  servers.push(server);
  return server;
}

const options = { http: { progressTimeoutMs: 500, retry: { baseDelayMs: 10, maxDelayMs: 50, maxAttempts: 3 } } };

// Core's own retry of each read, around the adapter's, is off: the adapter's three attempts are what
// these tests count, and six more of each stall (500 ms apiece) would add nothing but waiting.
async function loadA(url: string): Promise<Float32Array> {
  const target = { a: hostTensor("float32", [ROWS, 256]) };
  await load(target, { checkpointId: url, storageOptions: options, retry: { maxAttempts: 1 } });
  return target.a.data;
}

describe("http:// storage", () => {
  it("loads only the ranges a partial load needs from a server that honours Range, bit-exact", async () => {
    const server = await serve("ranges");
    expect(await loadA(`${server.origin}/run/10`)).toEqual(matrix(10));
    const size = ROWS * 256 * 4;
    expect(server.bytesSent).toBeLessThan(size * 1.2);
    expect(server.requests.some((r) => r.includes("bytes="))).toBe(true);
  });

  it("lists published steps through the index and restores through a read-only manager", async () => {
    const server = await serve("ranges");
    const manager = new CheckpointManager(`${server.origin}/run`, 1, { readOnly: true, storageOptions: options });
    expect(await manager.allSteps()).toEqual([5, 10]);
    const target = { a: hostTensor("float32", [ROWS, 256]), b: hostTensor("float32", [ROWS, 256]), step: 0 };
    await manager.restore(5, target);
    expect(target.a.data).toEqual(matrix(5));
    expect(target.b.data).toEqual(matrix(-5));
    expect(target.step).toBe(5);
    await manager.close();
  });

  it("falls back to the whole body from a server that ignores Range, reading the same bytes", async () => {
    const server = await serve("ignore-range");
    expect(await loadA(`${server.origin}/run/10`)).toEqual(matrix(10));
  });

  it("reads a range from inside a file bit-exact, from a server that honours Range and from one that ignores it", async () => {
    const file = (await readdir(join(dir, "run", "10"))).find((name) => name.endsWith(".safetensors"))!;
    const bytes = new Uint8Array(await readFile(join(dir, "run", "10", file)));
    for (const behaviour of ["ranges", "ignore-range"] as const) {
      const server = await serve(behaviour);
      const storage = new HttpStorageAdapter(new URL(`${server.origin}/run`));
      for (const [offset, length] of [
        [0, 100],
        [1000, 4096],
        [bytes.byteLength - 7, 7],
      ] as const) {
        expect(await storage.read(`10/${file}`, { offset, length }), `${behaviour} ${offset}+${length}`).toEqual(
          bytes.subarray(offset, offset + length),
        );
      }
    }
  });

  it("lets a slow body run past the progress deadline as long as bytes keep coming", { timeout: 60_000 }, async () => {
    const server = await serve("trickle");
    const started = performance.now();
    expect(await loadA(`${server.origin}/run/10`)).toEqual(matrix(10));
    // At least one body took longer than the 500 ms deadline in all, and was not retried.
    expect(performance.now() - started).toBeGreaterThan(1_000);
    expect(server.requests.filter((r) => r.includes(".safetensors")).length).toBe(1);
  });

  it("aborts a body that stalls past the progress deadline and retries it", async () => {
    const server = await serve("stall", 1);
    expect(await loadA(`${server.origin}/run/10`)).toEqual(matrix(10));
    const dataGets = server.requests.filter((r) => r.includes(".safetensors"));
    expect(dataGets.length).toBeGreaterThan(1);
  });

  it("fails with a storage error naming the stall when every attempt stalls", { timeout: 60_000 }, async () => {
    const server = await serve("stall");
    await expect(loadA(`${server.origin}/run/10`)).rejects.toMatchObject({
      code: "storage",
      message: expect.stringMatching(/made no progress for 500 ms/),
    });
  });

  it("tries a failing range as often as the adapter's policy says, not that times core's retry around it", async () => {
    const server = await serve("short-range");
    const target = { a: hostTensor("float32", [ROWS, 256]) };
    // Core's default retry (6 attempts) is on here: the adapter's given-up error is permanent.
    await expect(
      load(target, { checkpointId: `${server.origin}/run/10`, storageOptions: options }),
    ).rejects.toMatchObject({ code: "storage", message: expect.stringMatching(/gave up after 3 attempts/) });
    const perRange = new Map<string, number>();
    for (const r of server.requests.filter((r) => r.includes(".safetensors")))
      perRange.set(r, (perRange.get(r) ?? 0) + 1);
    expect(perRange.size).toBeGreaterThan(0);
    expect(Math.max(...perRange.values())).toBeLessThanOrEqual(3);
  });

  it(
    "catches a body shorter than its Content-Range, and a connection cut before Content-Length",
    { timeout: 60_000 },
    async () => {
      for (const behaviour of ["short-range", "cut"] as const) {
        const server = await serve(behaviour);
        await expect(loadA(`${server.origin}/run/10`)).rejects.toMatchObject({ code: "storage" });
        const once = await serve(behaviour, 1);
        expect(await loadA(`${once.origin}/run/10`)).toEqual(matrix(10));
      }
    },
  );

  it("catches a body or range other than its headers or the request said, whatever fetch let through", async () => {
    // A fetch answering 90 bytes with the given status and headers, and no error (undici throws for some of these).
    const answering = (status: number, headers: Record<string, string>) =>
      new HttpStorageAdapter(new URL("http://127.0.0.1:9/run"), {
        fetch: async () => new Response(new Uint8Array(90), { status, headers }),
        retry: { maxAttempts: 1 },
      });
    const fails = (message: RegExp) => ({ code: "storage", message: expect.stringMatching(message) });
    await expect(answering(200, { "content-length": "100" }).read("x.bin")).rejects.toMatchObject(
      fails(/the body ended after 90 of 100 bytes/),
    );
    const range = { offset: 0, length: 100 };
    await expect(answering(206, { "content-range": "bytes 0-99/1000" }).read("x.bin", range)).rejects.toMatchObject(
      fails(/held 90 of the 100 bytes/),
    );
    await expect(
      answering(206, { "content-range": "bytes 0-99/1000", "content-length": "90" }).read("x.bin", range),
    ).rejects.toMatchObject(fails(/Content-Range says 100 bytes, Content-Length 90/));
    await expect(
      answering(206, { "content-range": "bytes 0-89/1000" }).read("x.bin", { offset: 100, length: 90 }),
    ).rejects.toMatchObject(fails(/answered another range \(bytes 0-89\/1000\)/));
  });

  it("is read-only, and says how to list a root that was never published", async () => {
    const server = await serve("ranges");
    await expect(
      save({ x: 1 }, { checkpointId: `${server.origin}/run/11`, storageOptions: options }),
    ).rejects.toMatchObject({
      code: "permission_denied",
    });
    const manager = new CheckpointManager(`${server.origin}/missing`, 1, { readOnly: true, storageOptions: options });
    await expect(manager.allSteps()).rejects.toThrow(new RegExp(`no ${HTTP_INDEX_FILE}.*cairn publish`));
    await manager.close().catch(() => undefined);
  });
});
