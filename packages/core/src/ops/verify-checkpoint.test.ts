import { describe, expect, it } from "vitest";
import { load } from "../load/load.js";
import { readMetadata } from "../load/read-metadata.js";
import { save } from "../save/save.js";
import { DefaultSavePlanner } from "../plan/default-save-planner.js";
import { hostTensor } from "../state/tensors.js";
import { MapStorage } from "../../test/map-storage.js";
import { copyCheckpoint } from "./copy-checkpoint.js";
import { verifyCheckpoint } from "./verify-checkpoint.js";

/** Three tensors in three data files (`concurrency: 3`, and no minimum file size), blocks of 64 bytes. */
async function threeFiles(): Promise<{ storage: MapStorage; files: Record<string, string> }> {
  const storage = new MapStorage();
  const tensor = (seed: number) => {
    const t = hostTensor("float32", [8, 8]);
    t.data.forEach((_, i) => (t.data[i] = seed * 100 + i));
    return t;
  };
  await save(
    { a: tensor(1), b: tensor(2), c: tensor(3), step: 5 },
    { storage, path: "ckpt", blockSize: 64, concurrency: 3, planner: new DefaultSavePlanner({ minFileBytes: 0 }) },
  );
  const metadata = await readMetadata({ storage, path: "ckpt" });
  const files = Object.fromEntries(
    metadata.entries.flatMap((e) => (e.kind === "value" ? [] : [[String(e.key[0]), e.chunks[0]!.file]])),
  );
  return { storage, files };
}

describe("verifyCheckpoint", () => {
  it("reads every byte and passes an intact checkpoint", async () => {
    const { storage } = await threeFiles();
    const metadata = await readMetadata({ storage, path: "ckpt" });
    let read = 0;
    const report = await verifyCheckpoint(storage, "ckpt", metadata, { onRead: (n) => (read += n) });
    expect(report).toMatchObject({ entries: 4, files: 3, damaged: [], damagedKeys: [] });
    expect(read).toBe(Object.values(metadata.files).reduce((n, f) => n + f.size, 0));
  });

  it("reports every damaged file and entry, not only the first: a flipped byte, a damaged header, a missing file", async () => {
    const { storage, files } = await threeFiles();
    const metadata = await readMetadata({ storage, path: "ckpt" });
    const a = storage.objects.get(`ckpt/${files.a}`)!;
    a[a.byteLength - 1]! ^= 0x01;
    storage.objects.get(`ckpt/${files.b}`)![10]! ^= 0x01;
    storage.objects.delete(`ckpt/${files.c}`);
    const report = await verifyCheckpoint(storage, "ckpt", metadata);
    expect(report.damagedKeys).toEqual(["a", "b", "c"]);
    const problems = report.damaged.map((d) => d.problem).join("\n");
    expect(problems).toContain(`checksum mismatch in ${files.a} for a`);
    expect(problems).toContain(`${files.b}: its safetensors header does not match`);
    expect(problems).toContain(`${files.c} is missing`);
  });
});

describe("copyCheckpoint", () => {
  it("copies into new data file names, reads the copy back, commits it; a second copy is refused unless force, which replaces it", async () => {
    const { storage } = await threeFiles();
    const metadata = await readMetadata({ storage, path: "ckpt" });
    const source = { storage, dir: "ckpt", metadata, where: "map://ckpt" };
    const first = await copyCheckpoint(source, { storage, dir: "copy", where: "map://copy" });
    expect(Object.keys(first.metadata.files).some((f) => Object.hasOwn(metadata.files, f))).toBe(false);
    expect(await load({ storage, path: "copy" })).toEqual(await load({ storage, path: "ckpt" }));
    await expect(copyCheckpoint(source, { storage, dir: "copy", where: "map://copy" })).rejects.toMatchObject({
      code: "already_exists",
    });
    const second = await copyCheckpoint(source, { storage, dir: "copy", where: "map://copy" }, { force: true });
    expect(second.leftFiles).toEqual([]);
    const left = [];
    for await (const o of storage.list("copy/")) left.push(o.path.slice(5));
    expect(left.sort()).toEqual([...Object.keys(second.metadata.files), "metadata.json"].sort());
  });

  it("with share, each rank copies its own files and rank 0 commits only once every rank agreed; one failing rank fails all", async () => {
    const { storage, files } = await threeFiles();
    const read = await readMetadata({ storage, path: "ckpt" });
    // File c as rank 1's: two ranks, each copying from the same storage here.
    const metadata = { ...read, files: { ...read.files, [files.c!]: { ...read.files[files.c!]!, rank: 1 } } };
    const source = { storage, dir: "ckpt", metadata, where: "map://ckpt" };
    /** An in-process agreement of two ranks: resolves on both once both called, rejects if either failed. */
    const agreement = () => {
      const failures: unknown[] = [];
      let arrive!: () => void;
      const both = new Promise<void>((resolve) => (arrive = resolve));
      let arrived = 0;
      return async (failure: unknown): Promise<void> => {
        if (failure !== undefined) failures.push(failure);
        if (++arrived === 2) arrive();
        await both;
        if (failures.length > 0) throw new Error("a rank failed");
      };
    };
    const agree = agreement();
    const copies = [0, 1].map((rank) =>
      copyCheckpoint(
        source,
        { storage, dir: "shared", where: "map://shared" },
        { share: { attempt: "aaaaaaaaaaaa", rank, agree } },
      ),
    );
    const [zero, one] = await Promise.all(copies);
    expect([zero!.files, one!.files]).toEqual([2, 1]);
    expect(Object.keys(zero!.metadata.files).sort()).toEqual([
      "data-r0-0-aaaaaaaaaaaa.safetensors",
      "data-r0-1-aaaaaaaaaaaa.safetensors",
      "data-r1-0-aaaaaaaaaaaa.safetensors",
    ]);
    expect(await load({ storage, path: "shared" })).toEqual(await load({ storage, path: "ckpt" }));

    const failing = agreement();
    // Rank 1's source holds none of its files; without a read-back, only the agreement keeps rank 0 from committing.
    const broken = { ...source, dir: "nowhere" };
    const results = await Promise.allSettled([
      copyCheckpoint(
        source,
        { storage, dir: "failed", where: "map://failed" },
        { readBack: false, share: { attempt: "bbbbbbbbbbbb", rank: 0, agree: failing } },
      ),
      copyCheckpoint(
        broken,
        { storage, dir: "failed", where: "map://failed" },
        { share: { attempt: "bbbbbbbbbbbb", rank: 1, agree: failing } },
      ),
    ]);
    expect(results.map((r) => r.status)).toEqual(["rejected", "rejected"]);
    for await (const o of storage.list("failed/")) expect.unreachable(o.path);
  });

  it("a damaged source is never copied: corrupt, and nothing is left at the destination", async () => {
    const { storage, files } = await threeFiles();
    const metadata = await readMetadata({ storage, path: "ckpt" });
    const b = storage.objects.get(`ckpt/${files.b}`)!;
    b[b.byteLength - 3]! ^= 0x10;
    await expect(
      copyCheckpoint(
        { storage, dir: "ckpt", metadata, where: "map://ckpt" },
        { storage, dir: "copy", where: "map://copy" },
      ),
    ).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringContaining("is damaged, nothing was copied"),
    });
    for await (const o of storage.list("copy/")) expect.unreachable(o.path);
  });
});
