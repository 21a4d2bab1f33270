// file:// as loads and listings meet it: a faulty adapter around it, and roots of many steps.
import { promises as nodeFs } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type StorageAdapter, load, openStorage, save } from "@cairn/core";
import { FaultyStorageAdapter, freshDirs } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { FsStorageAdapter } from "./fs-storage-adapter.js";
import type { FsPromisesLike } from "./fs-like.js";
import "./index.js";

const freshDir = freshDirs("cairn-listing-");

describe("load through a faulty adapter", () => {
  let saved = 0;
  async function savedCheckpoint(): Promise<StorageAdapter> {
    const storage = await openStorage(`memory://faults-load/${saved++}`);
    await save(
      { w: { dtype: "float32", shape: [256], data: new Float32Array(256).fill(1.5) } },
      { storage, path: "ck" },
    );
    return storage;
  }

  it("reports a short read of a data file as corrupt instead of returning it", async () => {
    const storage = new FaultyStorageAdapter(await savedCheckpoint(), [
      { operation: "read", path: (p) => p.endsWith(".safetensors"), times: 100, shortRead: 100 },
    ]);
    await expect(load({ storage, path: "ck" })).rejects.toMatchObject({ code: "corrupt" });
  });

  it("reports a short read of metadata.json as corrupt", async () => {
    const storage = new FaultyStorageAdapter(await savedCheckpoint(), [
      { operation: "read", path: (p) => p.endsWith("metadata.json"), shortRead: 10 },
    ]);
    await expect(load({ storage, path: "ck" })).rejects.toMatchObject({ code: "corrupt" });
  });

  it("ends a stalled read when the load's signal aborts", async () => {
    const controller = new AbortController();
    const stalls = (path: string): boolean => {
      if (!path.endsWith(".safetensors")) return false;
      queueMicrotask(() => controller.abort(new Error("preempted")));
      return true;
    };
    const storage = new FaultyStorageAdapter(await savedCheckpoint(), [
      { operation: "read", path: stalls, stall: true },
    ]);
    await expect(load({ storage, path: "ck", signal: controller.signal })).rejects.toMatchObject({ code: "cancelled" });
  });
});

describe("FsStorageAdapter.list on a root of many step directories", () => {
  it("stats and reads directories several at a time, within a bound, and yields in name order", async () => {
    const dir = await freshDir();
    const expected: string[] = [];
    for (let step = 0; step < 150; step++) {
      await nodeFs.mkdir(join(dir, String(step)), { recursive: true });
      for (const name of ["data-0.safetensors", "metadata.json"]) {
        await writeFile(join(dir, String(step), name), "x");
        expected.push(`${step}/${name}`);
      }
    }
    let inFlight = 0;
    let most = 0;
    const base = nodeFs as unknown as FsPromisesLike;
    const counted =
      <A extends unknown[], R>(call: (...args: A) => Promise<R>) =>
      async (...args: A): Promise<R> => {
        most = Math.max(most, ++inFlight);
        try {
          return await call(...args);
        } finally {
          inFlight--;
        }
      };
    const fs: FsPromisesLike = {
      ...base,
      stat: counted(base.stat.bind(base)),
      readdir: counted(base.readdir.bind(base)),
    };
    const storage = new FsStorageAdapter("file", dir, fs, dir, { syncDirectories: false });
    const listed: string[] = [];
    for await (const object of storage.list("")) listed.push(object.path);
    expect(listed).toEqual([...expected].sort());
    expect(most).toBeGreaterThan(1);
    expect(most).toBeLessThanOrEqual(32);
  });
});
