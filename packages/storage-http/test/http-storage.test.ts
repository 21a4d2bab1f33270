// https:// (here http://) read-only storage in Node, against static servers on 127.0.0.1: one
// honouring Range, one ignoring it, one stalling mid-body, and ones sending other body lengths.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { hostTensor, load, save } from "@cairn/core";
import "@cairn/storage-local";
import { CheckpointManager } from "@cairn/manager";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HTTP_INDEX_FILE, publishStep } from "../src/index.js";
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

async function loadA(url: string): Promise<Float32Array> {
  const target = { a: hostTensor("float32", [ROWS, 256]) };
  await load(target, { checkpointId: url, storageOptions: options });
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
