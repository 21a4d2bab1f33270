import { describe, expect, it } from "vitest";
import { MapStorage } from "../../test/map-storage.js";
import { readMetadata } from "../load/read-metadata.js";
import { save } from "../save/save.js";
import { shardedTensor } from "../state/sharded-tensor.js";
import type { StateDict } from "../state/state-dict.js";
import { hostTensor } from "../state/tensors.js";
import { CheckpointReader } from "./checkpoint-reader.js";
import { diffCheckpoints } from "./diff-checkpoints.js";

// Expected changes are computed here by plain loops over the numbers the test chose.

/** Count of changed elements and the largest absolute and relative change, as `diffCheckpoints` defines them. */
function reference(a: readonly number[], b: readonly number[]) {
  let changed = 0;
  let nonFinite = 0;
  let maxAbs: number | null = null;
  let maxRel: number | null = null;
  for (let i = 0; i < a.length; i++) {
    const [x, y] = [a[i]!, b[i]!];
    if (Object.is(x, y)) continue;
    changed++;
    if (!Number.isFinite(x) || !Number.isFinite(y)) {
      nonFinite++;
      continue;
    }
    const abs = Math.abs(y - x);
    maxAbs = Math.max(maxAbs ?? 0, abs);
    if (x !== 0) maxRel = Math.max(maxRel ?? 0, abs / Math.abs(x));
  }
  return {
    elements: a.length,
    changedElements: changed,
    maxAbsChange: maxAbs,
    maxRelChange: maxRel,
    nonFiniteChanges: nonFinite,
  };
}

/** A float16's bits for a number it holds exactly (normal), by its definition. */
function float16Bits(x: number): number {
  const sign = x < 0 ? 0x8000 : 0;
  const exponent = Math.floor(Math.log2(Math.abs(x)));
  return sign | ((exponent + 15) << 10) | Math.round((Math.abs(x) / 2 ** exponent - 1) * 1024);
}

function bfloat16Bits(x: number): number {
  return new Uint32Array(new Float32Array([x]).buffer)[0]! >>> 16;
}

const f32 = (values: number[], shape = [values.length]) => hostTensor("float32", shape, new Float32Array(values));

async function open(storage: MapStorage, dir: string, reads: { bytes: number }) {
  const metadata = await readMetadata({ storage, path: dir });
  return new CheckpointReader(storage, dir, metadata, { onRead: (n) => (reads.bytes += n) });
}

describe("diffCheckpoints", () => {
  it("names exactly what changed: values by plain loops, float16 and bfloat16, added, removed, reshaped, values", async () => {
    const storage = new MapStorage();
    const w = Array.from({ length: 30 }, (_, i) => i * 0.25 - 3);
    const w2 = [...w];
    w2[4] = 7.5;
    w2[17] = -0.125;
    w2[29] = w[29]! * 1.5;
    const half = [1.5, -2, 0.375, 96];
    const half2 = [1.5, -2, 0.5, 96];
    const brain = [1, 2, 3, 4, -8, 0.5, 0.25, 64];
    const brain2 = [1, 2, 3, 4, -8, 0.5, 0.75, 64];
    const same = Array.from({ length: 100 }, (_, i) => Math.sin(i));
    const a: StateDict = {
      w: f32(w, [6, 5]),
      h: hostTensor("float16", [4], new Uint16Array(half.map(float16Bits))),
      s: hostTensor("bfloat16", [8], new Uint16Array(brain.map(bfloat16Bits))),
      same: f32(same),
      gone: f32([1]),
      reshaped: f32([1, 2, 3, 4], [4]),
      lr: 0.1,
      note: "x",
    };
    const b: StateDict = {
      w: f32(w2, [6, 5]),
      h: hostTensor("float16", [4], new Uint16Array(half2.map(float16Bits))),
      s: hostTensor("bfloat16", [8], new Uint16Array(brain2.map(bfloat16Bits))),
      same: f32(same),
      reshaped: f32([1, 2, 3, 4], [2, 2]),
      lr: 0.05,
      note: "x",
      added: f32([5]),
    };
    await save(a, { storage, path: "run/1", blockSize: 32 });
    await save(b, { storage, path: "run/2", blockSize: 32 });
    const reads = { bytes: 0 };
    const diff = await diffCheckpoints(await open(storage, "run/1", reads), await open(storage, "run/2", reads));
    const byName = Object.fromEntries(diff.entries.map((e) => [e.name, e]));
    expect(diff.entries.map((e) => `${e.name}:${e.status}`)).toEqual([
      "w:changed",
      "h:changed",
      "s:changed",
      "same:identical",
      "reshaped:changed",
      "lr:changed",
      "note:identical",
      "added:added",
      "gone:removed",
    ]);
    expect({ ...diff, entries: undefined }).toEqual({
      entries: undefined,
      identical: 2,
      changed: 5,
      added: 1,
      removed: 1,
    });
    expect(byName.w).toMatchObject({ by: "read", ...reference([...new Float32Array(w)], [...new Float32Array(w2)]) });
    expect(byName.h).toMatchObject({ by: "read", ...reference(half, half2) });
    expect(byName.s).toMatchObject({ by: "read", ...reference(brain, brain2) });
    expect(byName.same).toMatchObject({ by: "checksum" });
    expect(byName.reshaped).toMatchObject({ shape: [2, 2], before: { kind: "tensor", dtype: "float32", shape: [4] } });
    expect(byName.reshaped!.changedElements).toBeUndefined();
    expect(byName.lr).toMatchObject({ values: { a: 0.1, b: 0.05 } });
    expect(byName.added).toMatchObject({ kind: "tensor", dtype: "float32", shape: [1] });
  });

  it("an incremental step's unchanged tensors are identical by reference, and not a byte of them is read", async () => {
    const storage = new MapStorage();
    const big = Array.from({ length: 4096 }, (_, i) => i / 7);
    const moving = Array.from({ length: 64 }, (_, i) => i);
    await save({ frozen: f32(big), moving: f32(moving) }, { storage, path: "run/100", concurrency: 2 });
    const moved = moving.map((x, i) => (i === 9 ? x + 0.5 : x));
    await save(
      { frozen: f32(big), moving: f32(moved) },
      { storage, path: "run/200", concurrency: 2, incremental: { base: "100" } },
    );
    const reads = { bytes: 0 };
    const diff = await diffCheckpoints(await open(storage, "run/100", reads), await open(storage, "run/200", reads));
    expect(diff.entries.find((e) => e.name === "frozen")).toMatchObject({ status: "identical", by: "reference" });
    expect(diff.entries.find((e) => e.name === "moving")).toMatchObject({
      status: "changed",
      changedElements: 1,
      maxAbsChange: 0.5,
      maxRelChange: 0.5 / 9,
    });
    // Only the changed tensor's bytes (and its files' headers) were read: never the 16 KiB of "frozen".
    expect(reads.bytes).toBeGreaterThan(0);
    expect(reads.bytes).toBeLessThan(4096);

    const self = { bytes: 0 };
    const again = await diffCheckpoints(await open(storage, "run/200", self), await open(storage, "run/200", self));
    expect(again.entries.every((e) => e.status === "identical" && e.by === "reference")).toBe(true);
    expect(self.bytes).toBe(0);
  });

  it("sharded by rows on one side and by columns on the other: compared element by element in global order", async () => {
    const storage = new MapStorage();
    const rows = 6;
    const cols = 9;
    const global = Array.from({ length: rows * cols }, (_, i) => i - 20);
    const boxOf = (values: number[], r0: number, r1: number, c0: number, c1: number) => {
      const data = new Float32Array((r1 - r0) * (c1 - c0));
      for (let r = r0; r < r1; r++)
        for (let c = c0; c < c1; c++) data[(r - r0) * (c1 - c0) + c - c0] = values[r * cols + c]!;
      return { offsets: [r0, c0], tensor: hostTensor("float32", [r1 - r0, c1 - c0], data) };
    };
    const byRows = (values: number[]) =>
      shardedTensor("float32", [rows, cols], [boxOf(values, 0, 2, 0, cols), boxOf(values, 2, rows, 0, cols)]);
    const byCols = (values: number[]) =>
      shardedTensor(
        "float32",
        [rows, cols],
        [boxOf(values, 0, rows, 0, 4), boxOf(values, 0, rows, 4, 7), boxOf(values, 0, rows, 7, cols)],
      );
    const changed = [...global];
    changed[rows * cols - 1] = NaN;
    changed[13] = 100;
    await save({ t: byRows(global) }, { storage, path: "r/1", blockSize: 16 });
    await save({ t: byCols(global) }, { storage, path: "r/2", blockSize: 16 });
    await save({ t: byCols(changed) }, { storage, path: "r/3", blockSize: 16 });
    const reads = { bytes: 0 };
    const same = await diffCheckpoints(await open(storage, "r/1", reads), await open(storage, "r/2", reads), {
      readBytes: 20,
    });
    expect(same.entries[0]).toMatchObject({ status: "identical", by: "read", changedElements: 0 });
    const diff = await diffCheckpoints(await open(storage, "r/1", reads), await open(storage, "r/3", reads), {
      readBytes: 20,
    });
    expect(diff.entries[0]).toMatchObject({ status: "changed", by: "read", ...reference(global, changed) });
    expect(diff.entries[0]!.nonFiniteChanges).toBe(1);
  });

  it("the same tensor saved with other checksum blocks is identical by its content hash, not a byte read", async () => {
    const storage = new MapStorage();
    const values = Array.from({ length: 512 }, (_, i) => Math.cos(i));
    await save({ t: f32(values) }, { storage, path: "h/1", blockSize: 64 });
    await save({ t: f32(values) }, { storage, path: "h/2", blockSize: 256 });
    const reads = { bytes: 0 };
    const [a, b] = [await open(storage, "h/1", reads), await open(storage, "h/2", reads)];
    const chunks = [a, b].map((r) =>
      r.metadata.entries[0]!.kind === "tensor" ? r.metadata.entries[0]!.chunks[0]! : undefined,
    );
    expect(chunks[0]!.crc32c).not.toEqual(chunks[1]!.crc32c);
    expect(chunks[0]!.hash).toBe(chunks[1]!.hash);
    expect((await diffCheckpoints(a, b)).entries[0]).toMatchObject({ status: "identical", by: "checksum" });
    expect(reads.bytes).toBe(0);
  });

  it("a damaged block on either side is corrupt", async () => {
    const storage = new MapStorage();
    await save({ t: f32([1, 2, 3, 4]) }, { storage, path: "d/1" });
    await save({ t: f32([1, 2, 3, 5]) }, { storage, path: "d/2" });
    const metadata = await readMetadata({ storage, path: "d/2" });
    const entry = metadata.entries[0]!;
    const chunk = entry.kind === "tensor" ? entry.chunks[0]! : undefined;
    storage.objects.get(`d/2/${chunk!.file}`)![chunk!.byteOffset]! ^= 1;
    const reads = { bytes: 0 };
    await expect(
      diffCheckpoints(await open(storage, "d/1", reads), await open(storage, "d/2", reads)),
    ).rejects.toMatchObject({ code: "corrupt" });
  });
});
