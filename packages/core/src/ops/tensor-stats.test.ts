import { describe, expect, it } from "vitest";
import { MapStorage } from "../../test/map-storage.js";
import { readMetadata } from "../load/read-metadata.js";
import { save } from "../save/save.js";
import { DefaultSavePlanner } from "../plan/default-save-planner.js";
import type { DType, DTypeArrays } from "../state/dtypes.js";
import { shardedTensor } from "../state/sharded-tensor.js";
import type { StateDict } from "../state/state-dict.js";
import { hostTensor } from "../state/tensors.js";
import { CheckpointReader } from "./checkpoint-reader.js";
import { type TensorStats, checkpointStats } from "./tensor-stats.js";

// Every expected figure is computed here by plain loops over the numbers the test chose, never
// by decoding the stored bytes: float16 and bfloat16 bits are made by encoders of the test's own.

/** A float16's bits for a number float16 holds exactly (normal or zero), by its definition. */
function float16Bits(x: number): number {
  if (x === 0) return Object.is(x, -0) ? 0x8000 : 0;
  const sign = x < 0 ? 0x8000 : 0;
  const exponent = Math.floor(Math.log2(Math.abs(x)));
  const mantissa = Math.abs(x) / 2 ** exponent - 1;
  return sign | ((exponent + 15) << 10) | Math.round(mantissa * 1024);
}

/** A bfloat16's bits for a number bfloat16 holds exactly: the top half of its float32. */
function bfloat16Bits(x: number): number {
  return new Uint32Array(new Float32Array([x]).buffer)[0]! >>> 16;
}

interface Expected {
  elements: number;
  nan: number;
  posInf: number;
  negInf: number;
  min: number | null;
  max: number | null;
  mean: number | null;
  std: number | null;
  counts: number[] | null;
  edges: [number, number] | null;
}

/** The statistics of `values` by definition: two passes of plain loops, bins found by comparing with every edge. */
function reference(values: readonly number[], bins: number): Expected {
  const finite = values.filter((x) => Number.isFinite(x));
  const nan = values.filter((x) => Number.isNaN(x)).length;
  const posInf = values.filter((x) => x === Infinity).length;
  const negInf = values.filter((x) => x === -Infinity).length;
  if (finite.length === 0)
    return {
      elements: values.length,
      nan,
      posInf,
      negInf,
      min: null,
      max: null,
      mean: null,
      std: null,
      counts: null,
      edges: null,
    };
  let min = Infinity;
  let max = -Infinity;
  let sum = 0;
  for (const x of finite) {
    min = Math.min(min, x);
    max = Math.max(max, x);
    sum += x;
  }
  const mean = sum / finite.length;
  let squares = 0;
  for (const x of finite) squares += (x - mean) ** 2;
  const [lo, hi] = min === max ? [min - 0.5, max + 0.5] : [min, max];
  const edge = (i: number): number => (i === bins ? hi : lo + i * ((hi - lo) / bins));
  const counts = new Array<number>(bins).fill(0);
  for (const x of finite) {
    for (let i = 0; i < bins; i++) {
      if (x >= edge(i) && (x < edge(i + 1) || i === bins - 1)) {
        counts[i]!++;
        break;
      }
    }
  }
  return {
    elements: values.length,
    nan,
    posInf,
    negInf,
    min,
    max,
    mean,
    std: Math.sqrt(squares / finite.length),
    counts,
    edges: [lo, hi],
  };
}

function expectStats(stats: TensorStats, expected: Expected): void {
  expect(stats.elements).toBe(expected.elements);
  expect({ nan: stats.nan, posInf: stats.posInf, negInf: stats.negInf }).toEqual({
    nan: expected.nan,
    posInf: expected.posInf,
    negInf: expected.negInf,
  });
  expect(stats.min).toBe(expected.min);
  expect(stats.max).toBe(expected.max);
  if (expected.mean === null) {
    expect(stats.mean).toBeNull();
    expect(stats.std).toBeNull();
    expect(stats.histogram).toBeNull();
    return;
  }
  expect(Math.abs(stats.mean! - expected.mean)).toBeLessThanOrEqual(1e-12 * Math.max(1, Math.abs(expected.mean)));
  expect(Math.abs(stats.std! - expected.std!)).toBeLessThanOrEqual(1e-12 * Math.max(1, expected.std!));
  expect(stats.histogram!.counts).toEqual(expected.counts);
  expect([stats.histogram!.min, stats.histogram!.max]).toEqual(expected.edges);
}

/** A seeded generator (mulberry32): the same numbers every run. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function saved(state: StateDict, options: { blockSize?: number; concurrency?: number } = {}) {
  const storage = new MapStorage();
  await save(state, {
    storage,
    path: "ckpt",
    blockSize: options.blockSize ?? 64,
    concurrency: options.concurrency ?? 2,
    // As many files as `concurrency`, however small the state: stats must follow chunks across files.
    planner: new DefaultSavePlanner({ minFileBytes: 0 }),
  });
  const metadata = await readMetadata({ storage, path: "ckpt" });
  return { storage, reader: new CheckpointReader(storage, "ckpt", metadata) };
}

function tensorOf<D extends DType>(dtype: D, shape: number[], data: DTypeArrays[D]) {
  return hostTensor(dtype, shape, data);
}

describe("tensorStats", () => {
  it("float32 with NaN and ±Infinity, read in many small ranges: every figure as plain loops compute it", async () => {
    const next = random(7);
    const values = Array.from({ length: 1000 }, () => (next() - 0.3) * 50);
    values[3] = NaN;
    values[500] = NaN;
    values[10] = Infinity;
    values[999] = -Infinity;
    const data = new Float32Array(values);
    const exact = [...data];
    const { reader } = await saved({ w: tensorOf("float32", [10, 100], data) });
    for (const readBytes of [256, 100, 1 << 20]) {
      const [stats] = await checkpointStats(reader, ["w"], { readBytes, bins: 10 });
      expectStats(stats!, reference(exact, 10));
      expect(stats).toMatchObject({ name: "w", dtype: "float32", shape: [10, 100] });
    }
    await reader.close();
  });

  it("float16: decoded from its bits, subnormals, the largest finite, ±Infinity and NaN included", async () => {
    const next = random(11);
    const values = Array.from({ length: 300 }, () => Math.round((next() - 0.5) * 1600) / 8);
    const bits = values.map(float16Bits);
    const specials: [number, number][] = [
      [0x0001, 2 ** -24],
      [0x03ff, 1023 * 2 ** -24],
      [0x7bff, 65504],
      [0xfbff, -65504],
      [0x7c00, Infinity],
      [0xfc00, -Infinity],
      [0x7e00, NaN],
      [0xfe01, NaN],
    ];
    for (const [b, v] of specials) {
      bits.push(b);
      values.push(v);
    }
    const { reader } = await saved({ h: tensorOf("float16", [bits.length], new Uint16Array(bits)) });
    const [stats] = await checkpointStats(reader, [], { readBytes: 64 });
    expectStats(stats!, reference(values, 16));
    await reader.close();
  });

  it("bfloat16: decoded from its bits, ±Infinity and NaN included", async () => {
    const next = random(13);
    const values = Array.from({ length: 257 }, () => Math.round((next() - 0.5) * 500) / 4);
    const bits = values.map(bfloat16Bits);
    bits.push(0x7f80, 0xff80, 0x7fc0);
    values.push(Infinity, -Infinity, NaN);
    const { reader } = await saved({ g: tensorOf("bfloat16", [bits.length], new Uint16Array(bits)) });
    const [stats] = await checkpointStats(reader, ["g"], { readBytes: 50, bins: 7 });
    expectStats(stats!, reference(values, 7));
    await reader.close();
  });

  it("a sharded tensor saved as four uneven blocks in several files: the whole global tensor", async () => {
    const next = random(17);
    const rows = 10;
    const cols = 7;
    const global = Float64Array.from({ length: rows * cols }, () => next() * 8 - 2);
    global[33] = NaN;
    const block = (r0: number, r1: number, c0: number, c1: number) => {
      const data = new Float64Array((r1 - r0) * (c1 - c0));
      for (let r = r0; r < r1; r++)
        for (let c = c0; c < c1; c++) data[(r - r0) * (c1 - c0) + (c - c0)] = global[r * cols + c]!;
      return { offsets: [r0, c0], tensor: tensorOf("float64", [r1 - r0, c1 - c0], data) };
    };
    const sharded = shardedTensor(
      "float64",
      [rows, cols],
      [block(0, 3, 0, 2), block(0, 3, 2, 7), block(3, 10, 0, 2), block(3, 10, 2, 7)],
    );
    const { reader } = await saved({ s: sharded }, { concurrency: 3, blockSize: 16 });
    const entry = reader.metadata.entries.find((e) => e.key[0] === "s")!;
    expect(entry.kind === "tensor" && entry.chunks.length).toBe(4);
    expect(new Set(entry.kind === "tensor" ? entry.chunks.map((c) => c.file) : []).size).toBeGreaterThan(1);
    const [stats] = await checkpointStats(reader, ["s"], { readBytes: 40 });
    expectStats(stats!, reference([...global], 16));
    await reader.close();
  });

  it("integers, int64, bool; a constant tensor gets the ±0.5 bins; an all-NaN tensor has no finite figures", async () => {
    const ints = [5, -3, 120, 0, 7, -128, 127];
    const longs = [2n ** 40n, -(2n ** 33n), 0n, 17n];
    const bools = [1, 0, 1, 1, 0];
    const { reader } = await saved({
      i: tensorOf("int8", [ints.length], new Int8Array(ints)),
      l: tensorOf("int64", [longs.length], new BigInt64Array(longs)),
      b: tensorOf("bool", [bools.length], new Uint8Array(bools)),
      c: tensorOf("float32", [6], new Float32Array(6).fill(2.5)),
      n: tensorOf("float32", [3], new Float32Array(3).fill(NaN)),
      blob: new Uint8Array([1, 2, 3]),
      note: "text",
    });
    const all = await checkpointStats(reader);
    expect(all.map((s) => s.name)).toEqual(["i", "l", "b", "c", "n"]);
    const [i, l, b, c, n] = all;
    expectStats(i!, reference(ints, 16));
    expectStats(l!, reference(longs.map(Number), 16));
    expectStats(b!, reference(bools, 16));
    expectStats(c!, reference(new Array(6).fill(2.5), 16));
    expect(c!.histogram!.counts[8]).toBe(6);
    expectStats(n!, reference([NaN, NaN, NaN], 16));
    await reader.close();
  });

  it("selects by dotted name or whole-segment prefix; a blob alone, an unknown key and bad bins are refused", async () => {
    const one = tensorOf("float32", [2], new Float32Array([1, 2]));
    const { reader } = await saved({
      model: { dense: { kernel: one, bias: one }, densest: one },
      blob: new Uint8Array(4),
    });
    const names = async (keys: string[]) => (await checkpointStats(reader, keys, { bins: 0 })).map((s) => s.name);
    expect(await names(["model.dense"])).toEqual(["model.dense.kernel", "model.dense.bias"]);
    expect(await names(["model"])).toEqual(["model.dense.kernel", "model.dense.bias", "model.densest"]);
    expect(await names(["model.densest", "model.dense.bias"])).toEqual(["model.dense.bias", "model.densest"]);
    expect((await checkpointStats(reader, ["model.densest"], { bins: 0 }))[0]!.histogram).toBeNull();
    await expect(checkpointStats(reader, ["blob"])).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(checkpointStats(reader, ["model.dens"])).rejects.toMatchObject({
      code: "not_found",
      message: expect.stringContaining("model.dense.kernel"),
    });
    await expect(checkpointStats(reader, [], { bins: -1 })).rejects.toMatchObject({ code: "invalid_argument" });
    await reader.close();
  });

  it("a damaged block is corrupt, not a figure", async () => {
    const { storage, reader } = await saved({ w: tensorOf("float32", [64], new Float32Array(64).fill(1)) });
    const entry = reader.metadata.entries[0]!;
    const chunk = entry.kind === "tensor" ? entry.chunks[0]! : undefined;
    storage.objects.get(`ckpt/${chunk!.file}`)![chunk!.byteOffset + 5]! ^= 0x40;
    await expect(checkpointStats(reader, ["w"])).rejects.toMatchObject({ code: "corrupt" });
    await reader.close();
  });
});
