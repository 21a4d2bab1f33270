import { Buffer } from "node:buffer";
import { describe, expect, it } from "vitest";
import { DefaultSavePlanner } from "../plan/default-save-planner.js";
import { seededRandom } from "../testing/seeded-random.js";
import { type DType, type DTypeArrays, arrayConstructorFor, bytesOf } from "../state/dtypes.js";
import { flattenStateDict } from "../state/flatten.js";
import { type Leaf, hostDataOf } from "../state/leaf.js";
import { shardedTensor } from "../state/sharded-tensor.js";
import type { StateDict } from "../state/state-dict.js";
import { type TensorLike, hostTensor } from "../state/tensors.js";
import { stageLeaves } from "./staging.js";
import { StagingPool } from "./staging-pool.js";

/** A tfjs-like tensor whose `data()` resolves only when the test says, recording when it was asked. */
function deviceTensor(name: string, values: Float32Array, log: string[]): { tensor: TensorLike; release: () => void } {
  let release!: () => void;
  const ready = new Promise<void>((resolve) => (release = resolve));
  const tensor: TensorLike = {
    shape: [values.length],
    dtype: "float32",
    data: async () => {
      log.push(`data ${name}`);
      await ready;
      log.push(`read ${name}`);
      return values;
    },
  };
  return { tensor, release };
}

describe("copy staging of tfjs tensors", () => {
  it("asks for the next tensor's data() while the one before is still being read, one ahead", async () => {
    const log: string[] = [];
    const values = ["a", "b", "c"].map((_, i) => Float32Array.from({ length: 64 }, (_, k) => i * 100 + k));
    const tensors = ["a", "b", "c"].map((name, i) => deviceTensor(name, values[i]!, log));
    const leaves = await flattenStateDict({
      a: tensors[0]!.tensor,
      step: 3,
      b: tensors[1]!.tensor,
      c: tensors[2]!.tensor,
    });
    const staging = stageLeaves(leaves, "copy", new StagingPool());
    await new Promise((resolve) => setTimeout(resolve, 10));
    // b's download starts while a's is pending; c's only once a's is copied.
    expect(log).toEqual(["data a", "data b"]);
    tensors[0]!.release();
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(log).toEqual(["data a", "data b", "read a", "data c"]);
    tensors[2]!.release();
    tensors[1]!.release();
    const staged = await staging;
    const copies = staged.leaves.flatMap((leaf) =>
      leaf.kind === "tensor" && leaf.source.kind === "host"
        ? [Array.from(leaf.source.tensor.data as Float32Array)]
        : [],
    );
    expect(copies).toEqual(values.map((v) => Array.from(v)));
    staged.release();
  });

  it("fails with the first failed read, and a read started ahead leaves no unhandled rejection", async () => {
    const failing = (name: string): TensorLike => ({
      shape: [4],
      dtype: "float32",
      data: () => Promise.reject(new Error(`${name}: the device was lost`)),
    });
    const leaves = await flattenStateDict({ a: failing("a"), b: failing("b") });
    await expect(stageLeaves(leaves, "copy", new StagingPool())).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("a: the device was lost"),
    });
  });
});

/** The default planner with files of any size, for rank 0 of one with `filesPerRank` files. */
function anySizeLayout(filesPerRank: number) {
  return { planner: new DefaultSavePlanner({ minFileBytes: 0 }), defaultPlanner: true, rank: 0, filesPerRank };
}

/** The bytes a leaf holds now: a copy, for comparing later. */
async function bytesNow(leaf: Leaf): Promise<Buffer | undefined> {
  if (leaf.kind === "value") return undefined;
  if (leaf.kind === "bytes") return Buffer.from(leaf.data);
  const data = leaf.source.kind === "host" ? leaf.source.tensor.data : await leaf.source.tensor.data();
  return Buffer.from(bytesOf(data));
}

describe("copy staging of tensor-likes", () => {
  it("takes values that data() returns as they are, not in a promise", async () => {
    const values = Float32Array.of(1, 2, 3);
    const tensor = { shape: [3], dtype: "float32", data: () => values } as unknown as TensorLike;
    const staged = await stageLeaves(await flattenStateDict({ t: tensor }), "copy", new StagingPool());
    expect(Array.from(hostDataOf(staged.leaves[0]!) as Float32Array)).toEqual([1, 2, 3]);
    staged.release();
  });
});

describe("copy staging of a blob that changes size meanwhile", () => {
  it("fails the staging rather than copy past the blob's planned place", async () => {
    // A blob over a resizable buffer, grown while staging waits for a device tensor's download before it.
    const Resizable = ArrayBuffer as unknown as new (
      bytes: number,
      options: { maxByteLength: number },
    ) => ArrayBuffer & { resize(bytes: number): void };
    const buffer = new Resizable(8, { maxByteLength: 64 });
    const { tensor, release } = deviceTensor("t", new Float32Array(4), []);
    const leaves = await flattenStateDict({ t: tensor, blob: new Uint8Array(buffer) });
    const staging = stageLeaves(leaves, "copy", new StagingPool());
    await new Promise((resolve) => setTimeout(resolve, 10));
    buffer.resize(16);
    release();
    await expect(staging).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("blob: its data changed size while being staged (8 bytes, now 16)"),
    });
  });
});

describe("copy staging over random states (seeded)", () => {
  it("snapshots exactly the leaves given, each in its planned place, through one pool saved again and again", async () => {
    for (let seed = 1; seed <= 8; seed++) {
      const next = seededRandom(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)]!;
      const pool = new StagingPool();
      // Files of any size, so large tensors share planned segments and small ones get buffers of their own.
      const layout = anySizeLayout(2);
      const keys = Array.from({ length: 8 }, (_, i) => `k${i}`);
      const kinds = new Map(keys.map((k) => [k, pick(["host", "tfjs", "slow", "blob", "value", "shard"] as const)]));
      for (let op = 0; op < 8; op++) {
        // Values change every save; now and then a leaf changes kind or size.
        if (next() < 0.3) kinds.set(pick(keys), pick(["host", "tfjs", "slow", "blob", "value", "shard"] as const));
        const state: StateDict = {};
        for (const [key, kind] of kinds) {
          const length = pick([1, 7, 1000, 1 << 18]);
          // Filled cheaply, with one element apart, so a copy from the wrong place or time shows.
          const values = new Float32Array(length).fill(next());
          values[Math.floor(next() * length)] = next();
          if (kind === "value") state[key] = next();
          else if (kind === "blob") state[key] = bytesOf(values).slice();
          else if (kind === "host") state[key] = hostTensor("float32", [length], values);
          else if (kind === "shard")
            state[key] = shardedTensor(
              "float32",
              [length * 2],
              [{ offsets: [length], tensor: hostTensor("float32", [length], values) }],
            );
          else
            state[key] = {
              shape: [length],
              dtype: "float32",
              // "slow": a device backend's read, which resolves in a later turn.
              data: () =>
                kind === "slow" ? new Promise((r) => setTimeout(() => r(values), 1)) : Promise.resolve(values),
            } satisfies TensorLike;
        }
        const leaves = await flattenStateDict(state);
        const expected = await Promise.all(leaves.map(bytesNow));
        const staged = await stageLeaves(leaves, "copy", pool, undefined, layout);
        const where = `seed ${seed}, op ${op}`;
        // Training goes on: the sources change, the snapshot does not.
        for (const leaf of leaves) {
          if (leaf.kind === "bytes") leaf.data.fill(0xee);
          if (leaf.kind === "tensor" && leaf.source.kind === "host") bytesOf(leaf.source.tensor.data).fill(0xff);
        }
        expect(
          staged.leaves.map((l) => [l.kind, l.path]),
          where,
        ).toEqual(leaves.map((l) => [l.kind, l.path]));
        const segments = new Map<number, { buffer: ArrayBufferLike; offsets: number[] }>();
        for (const [i, leaf] of staged.leaves.entries()) {
          const source = leaves[i]!;
          if (leaf.kind === "value") {
            expect(leaf, where).toBe(source);
            continue;
          }
          expect(leaf.kind === "tensor" && leaf.source.kind, where).toBe(leaf.kind === "tensor" ? "host" : false);
          if (leaf.kind === "tensor" && source.kind === "tensor") {
            expect([leaf.dtype, leaf.shape, leaf.shard], where).toEqual([source.dtype, source.shape, source.shard]);
          }
          const data = hostDataOf(leaf);
          expect(Buffer.from(bytesOf(data!)).equals(expected[i]!), `${where}, leaf ${i}`).toBe(true);
          if (leaf.staged) {
            const segment = segments.get(leaf.staged.segment) ?? { buffer: data!.buffer, offsets: [] };
            expect(data!.buffer, where).toBe(segment.buffer);
            segment.offsets[leaf.staged.index] = data!.byteOffset;
            segments.set(leaf.staged.segment, segment);
          }
        }
        // A segment's items lie back to back in file order, past its header.
        for (const { offsets } of segments.values()) expect(offsets, where).toEqual([...offsets].sort((a, b) => a - b));
        staged.release();
      }
    }
  });
});

describe("the staging plan remembered between saves", () => {
  it("is not reused for a host tensor whose shape array was changed in place (same bytes, other shape)", async () => {
    const pool = new StagingPool();
    const layout = anySizeLayout(1);
    const shape = [1024, 1024];
    const a = { dtype: "float32" as const, shape, data: new Float32Array(1 << 20) };
    const b = hostTensor("float32", [1 << 20]);
    (await stageLeaves(await flattenStateDict({ a, b }), "copy", pool, undefined, layout)).release();
    shape.splice(0, 2, 2048, 512);
    const staged = await stageLeaves(await flattenStateDict({ a, b }), "copy", pool, undefined, layout);
    const leaf = staged.leaves[0]!;
    expect(leaf.kind === "tensor" && leaf.staged?.segment === 0).toBe(true);
    // The segment's safetensors header (the data file's, written from the segment) has the new shape.
    const data = hostDataOf(leaf)!;
    const header = Buffer.from(data.buffer, 0, 200).toString("latin1");
    expect(header).toContain('"shape":[2048,512]');
    staged.release();
  });
});

describe("copy staging of tensors of every width at odd lengths", () => {
  it("stages each bit-exact, back to back in its segment, save after save through one pool", async () => {
    const pool = new StagingPool();
    const layout = anySizeLayout(1);
    // Widest first, so each item's offset suits its typed array and the file is one segment,
    // while the narrower ones start at offsets that are not multiples of 8 (or of 2).
    const shapes = [
      ["float64", 2_049],
      ["float32", 262_145],
      ["int32", 4_099],
      ["float32", 8_193],
      ["int16", 10_001],
      ["uint16", 3],
      ["uint8", 20_001],
      ["bool", 16_385],
    ] as const;
    // Enough copies of over 16 KiB that both copy methods run (copy-bytes.ts tries each before it chooses).
    for (let save = 0; save < 6; save++) {
      // A blob of 16,392 bytes: a multiple of 8, so the tensors after it stay aligned.
      const state: StateDict = { blob: new Uint8Array(16_392).fill(save + 1) };
      shapes.forEach(([dtype, length], i) => {
        const values = new (arrayConstructorFor(dtype))(length);
        const bytes = bytesOf(values);
        for (let k = 0; k < bytes.length; k++) bytes[k] = (k * 13 + i * 31 + save * 7) & 0xff;
        // tfjs-like tensors (read through data()) for the dtypes tfjs has, host tensors for the rest.
        const tfjs = dtype === "float32" || dtype === "int32" || dtype === "bool";
        state[`t${i}`] = tfjs
          ? ({ shape: [length], dtype, data: async () => values } satisfies TensorLike)
          : hostTensor(dtype as DType, [length], values as DTypeArrays[DType]);
      });
      const leaves = await flattenStateDict(state);
      const expected = await Promise.all(leaves.map(bytesNow));
      const staged = await stageLeaves(leaves, "copy", pool, undefined, layout);
      const placed: { segment: number; index: number; start: number; end: number }[] = [];
      for (const [i, leaf] of staged.leaves.entries()) {
        const data = hostDataOf(leaf)!;
        expect(Buffer.from(bytesOf(data)).equals(expected[i]!), `save ${save}, leaf ${leaf.path.join(".")}`).toBe(true);
        if (leaf.kind !== "value" && leaf.staged)
          placed.push({ ...leaf.staged, start: data.byteOffset, end: data.byteOffset + data.byteLength });
      }
      placed.sort((a, b) => a.segment - b.segment || a.index - b.index);
      expect(placed.length).toBeGreaterThan(4);
      for (let k = 1; k < placed.length; k++)
        if (placed[k]!.segment === placed[k - 1]!.segment)
          expect(placed[k]!.start, `save ${save}`).toBe(placed[k - 1]!.end);
      staged.release();
    }
  });
});
