import { type StateDict, hostTensor, openStorage, save } from "@cairn/core";
import { crc32c } from "@cairn/core/format";
import { describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import type { ManagerEvents } from "../src/events/manager-events.js";

function state(step: number): StateDict {
  return { w: hostTensor("float32", [4], Float32Array.of(step, step, step, step)), step };
}

async function names(storage: Awaited<ReturnType<typeof openStorage>>, prefix: string): Promise<string[]> {
  const out: string[] = [];
  for await (const o of storage.list(prefix)) out.push(o.path);
  return out.sort();
}

describe("a root holding damaged and foreign step directories", () => {
  it("reports each damaged step once and skips it in allSteps, latestStep and retention, which go on with the rest", async () => {
    const root = `memory://damaged-steps/${process.pid}`;
    const storage = await openStorage(root);
    const writer = new CheckpointManager(storage, 1);
    await writer.save(1, state(1));
    await writer.save(2, state(2));
    await writer.close();
    const good = new TextDecoder().decode(await storage.read("2/metadata.json"));
    const enc = (text: string): Uint8Array => new TextEncoder().encode(text);
    await storage.write("5/metadata.json", enc("{not json"));
    await storage.write(
      "6/metadata.json",
      enc(good.replace(/"user":\s*\{/, '"user":{"extra":{"__proto__":{"polluted":1}},')),
    );
    await storage.write("7/metadata.json", enc(good.replace(/"version":\s*"[^"]*"/, '"version":"9.0"')));
    for (const foreign of ["007", "__proto__", "-3"]) await storage.write(`${foreign}/metadata.json`, enc(good));
    // A checkpoint another tool wrote with core's save: usable, with user metadata of the wrong types.
    await save(state(8), { storage, path: "8", metadata: { savedAt: 12345, metrics: { loss: "high", acc: 0.5 } } });

    const mgr = new CheckpointManager(storage, 1, { maxToKeep: 2 });
    const errors: ManagerEvents["error"][] = [];
    mgr.on("error", (e) => errors.push(e));
    expect(await mgr.allSteps()).toEqual([1, 2, 8]);
    expect(await mgr.latestStep()).toBe(8);
    expect(errors.map((e) => [e.operation, e.step, (e.error as { code?: string }).code])).toEqual([
      ["listing", 5, "corrupt"],
      ["listing", 6, "corrupt"],
      // A newer major version, or (where metadata.json carries its own checksum) an edited file.
      ["listing", 7, expect.stringMatching(/^(unsupported_version|corrupt)$/)],
    ]);
    expect(await mgr.metadata(8)).toEqual({ step: 8, savedAt: "", metrics: { acc: 0.5 }, metadata: {} });

    await mgr.save(9, state(9));
    await mgr.save(10, state(10));
    expect(await mgr.close()).toEqual({ retentionFailures: [] });
    expect(errors).toHaveLength(3);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    const after = new CheckpointManager(storage, 1, { readOnly: true });
    after.on("error", () => undefined);
    expect(await after.allSteps()).toEqual([9, 10]);
    // Nothing retention does not own was touched.
    for (const dir of ["5", "6", "7", "007", "__proto__", "-3"])
      expect(await names(storage, `${dir}/`)).toEqual([`${dir}/metadata.json`]);
    await after.close();
  });

  it("keeps every data file while a step of a newer format is committed: it may use any; the leftover sweep takes them once it is gone", async () => {
    const storage = await openStorage(`memory://damaged-steps/${process.pid}-newer`);
    const big = hostTensor("float32", [1024], new Float32Array(1024).fill(7));
    const writer = new CheckpointManager(storage, 1, { incremental: true });
    await writer.save(1, { big, step: 1 });
    await writer.save(2, { big, step: 2 });
    await writer.close();
    // Step 3 is a newer Cairn's: its metadata.json (a valid checksum, version 3.0) may reference step 1's and 2's files in ways this Cairn cannot see.
    const text = new TextDecoder().decode(await storage.read("2/metadata.json"));
    const body = text.replace(/^\{"metadataCrc32c":\d+,/, "{").replace('"version":"2.2"', '"version":"3.0"');
    await storage.write(
      "3/metadata.json",
      new TextEncoder().encode(`{"metadataCrc32c":${crc32c(new TextEncoder().encode(body))},${body.slice(1)}`),
    );
    const before = (await names(storage, "")).filter((n) => n.endsWith(".safetensors"));

    const mgr = new CheckpointManager(storage, 1, {
      maxToKeep: 1,
      leftoverAgeMs: 1,
      now: () => Date.now() + 3_600_000,
    });
    const errors: ManagerEvents["error"][] = [];
    mgr.on("error", (e) => errors.push(e));
    expect(await mgr.allSteps()).toEqual([1, 2]);
    await mgr.delete(1);
    await mgr.delete(2);
    await mgr.save(4, { big, step: 4 });
    await mgr.close();
    expect(errors.map((e) => (e.error as { code?: string }).code)).toEqual(["unsupported_version"]);
    expect(await names(storage, "1/")).not.toContain("1/metadata.json");
    expect(await names(storage, "2/")).not.toContain("2/metadata.json");
    // Only metadata.json went: every data file of the removed steps is still there.
    const after = (await names(storage, "")).filter((n) => n.endsWith(".safetensors"));
    for (const file of before) expect(after).toContain(file);

    await storage.delete("3/metadata.json");
    const sweeper = new CheckpointManager(storage, 1, {
      maxToKeep: 1,
      leftoverAgeMs: 1,
      now: () => Date.now() + 3_600_000,
    });
    await sweeper.save(5, { big, step: 5 });
    await sweeper.close();
    expect((await names(storage, "")).filter((n) => !n.startsWith("5/"))).toEqual([]);
  });

  // Found by attack30: a tiered manager's listing and latestStep read a damaged step at once, and each reported it.
  for (const tier of [0, 1])
    it(`a tiered manager reports a damaged step on tier ${tier} once, however its reads race`, async () => {
      const roots = [0, 1].map((i) => openStorage(`memory://damaged-steps/${process.pid}-once-${tier}-${i}`));
      const [t0, t1] = await Promise.all(roots);
      await [t0!, t1!][tier]!.write("7/metadata.json", new TextEncoder().encode("{not json"));
      const mgr = new CheckpointManager([t0!, t1!], 1, { checkpointOnPreemption: false, tiers: [{ maxToKeep: 1 }] });
      const errors: ManagerEvents["error"][] = [];
      mgr.on("error", (e) => errors.push(e));
      await mgr.latestStep();
      await mgr.allSteps();
      await mgr.save(8, state(8));
      await mgr.save(9, state(9));
      await mgr.latestStep();
      await mgr.close();
      expect(errors).toEqual([expect.objectContaining({ operation: "listing", step: 7, tier })]);
    });
});
