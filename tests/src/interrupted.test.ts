import { CheckpointError, DefaultSavePlanner, hostTensor, load, openStorage, readMetadata, save } from "@cairn/core";
import { FaultyStorageAdapter } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { locations, sampleTensor } from "./helpers.js";

function stateDict(): Record<string, unknown> {
  return Object.fromEntries(Array.from({ length: 12 }, (_, i) => [`t${i}`, sampleTensor("float32", [128, 64], i + 1)]));
}

async function names(storage: { list(prefix: string): AsyncIterable<{ path: string }> }): Promise<string[]> {
  const out: string[] = [];
  for await (const o of storage.list("")) out.push(o.path);
  return out.sort();
}

describe("a save that cannot finish commits nothing", () => {
  it.each(["file", "memory"] as const)(
    "a data file write that fails midway leaves no committed checkpoint and no data files (%s://)",
    async (kind) => {
      const inner = await openStorage(await locations[kind]());
      const storage = new FaultyStorageAdapter(inner, [
        { operation: "write", nth: 3, path: (p) => p.includes("data-") },
      ]);
      // Several data files however small the state (the default puts under 16 MiB in one): the third write fails.
      const planner = new DefaultSavePlanner({ minFileBytes: 0 });
      const error = await save(stateDict() as never, { storage, path: "", planner }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(CheckpointError);
      expect((error as CheckpointError).code).toBe("storage");
      expect(await inner.stat("metadata.json")).toBeNull();
      expect(await names(inner)).toEqual([]);
      await expect(readMetadata({ storage: inner, path: "" })).rejects.toMatchObject({ code: "not_found" });
    },
  );

  it("a failing metadata write commits nothing and removes the data files", async () => {
    const inner = await openStorage(await locations.memory());
    const storage = new FaultyStorageAdapter(inner, [{ operation: "write", path: (p) => p.endsWith("metadata.json") }]);
    await expect(save(stateDict() as never, { storage, path: "run/1" })).rejects.toMatchObject({ code: "storage" });
    expect(await names(inner)).toEqual([]);
  });

  it("transient storage errors are retried and the checkpoint commits", async () => {
    const inner = await openStorage(await locations.memory());
    const blip = (): Error =>
      new CheckpointError("storage", "[memory] injected blip", { context: { transient: true } });
    const storage = new FaultyStorageAdapter(inner, [
      { operation: "write", nth: 2, times: 2, error: blip },
      { operation: "read", nth: 2, error: blip },
    ]);
    const sd = stateDict();
    const retry = { baseDelayMs: 1, maxDelayMs: 2 };
    await save(sd as never, { storage, path: "", retry });
    const back = await load({ storage, path: "", retry });
    expect(back.t3).toEqual(sd.t3);
  });

  it("an aborted save is cancelled and leaves nothing behind", async () => {
    const inner = await openStorage(await locations.memory());
    const controller = new AbortController();
    let reads = 0;
    const slow = {
      shape: [1024],
      dtype: "float32",
      data: async () => {
        if (++reads === 2) controller.abort(new Error("preempted"));
        return new Float32Array(1024);
      },
    };
    const sd = Object.fromEntries(Array.from({ length: 8 }, (_, i) => [`t${i}`, { ...slow }]));
    await expect(
      save(sd as never, { storage: inner, path: "", signal: controller.signal, concurrency: 1 }),
    ).rejects.toMatchObject({ code: "cancelled" });
    expect(await names(inner)).toEqual([]);
  });

  it("of two savers racing for one checkpoint, exactly one commits and the loser's files are gone", async () => {
    const storage = await openStorage(await locations.memory());
    const results = await Promise.allSettled([
      save({ w: hostTensor("float32", [1000], new Float32Array(1000).fill(1)) }, { storage, path: "" }),
      save({ w: hostTensor("float32", [1000], new Float32Array(1000).fill(2)) }, { storage, path: "" }),
    ]);
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    const loser = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
    expect(loser.reason).toMatchObject({ code: "already_exists" });
    const metadata = await readMetadata({ storage, path: "" });
    expect((await names(storage)).filter((n) => n !== "metadata.json")).toEqual(Object.keys(metadata.files).sort());
  });
});
