import { type HostTensor, type StateDict, type Stateful, hostTensor, load, readMetadata, save } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { DTYPE_NAMES, locations, sameBits, sampleTensor } from "./helpers.js";

const SHAPES: Record<string, number[]> = {
  scalar: [],
  "zero-size": [0],
  "zero-size 2-D": [3, 0],
  "1-D": [7],
  "3-D": [2, 3, 5],
};

describe.each(Object.keys(locations) as (keyof typeof locations)[])("round trips through %s://", (kind) => {
  it("every dtype and shape class comes back bit-exact, into a target and without one", async () => {
    const url = await locations[kind]();
    const saved: Record<string, Record<string, HostTensor>> = {};
    for (const dtype of DTYPE_NAMES) {
      saved[dtype] = {};
      for (const [name, shape] of Object.entries(SHAPES))
        saved[dtype]![name] = sampleTensor(dtype, shape, dtype.length + shape.length);
    }
    const result = await save(saved, url);
    expect(result.entries).toBe(DTYPE_NAMES.length * Object.keys(SHAPES).length);
    const target: Record<string, Record<string, HostTensor>> = {};
    for (const dtype of DTYPE_NAMES) {
      target[dtype] = {};
      for (const [name, shape] of Object.entries(SHAPES)) target[dtype]![name] = hostTensor(dtype, shape);
    }
    const loaded = await load(target, url);
    expect(loaded.entries).toBe(result.entries);
    const whole = (await load(url)) as Record<string, Record<string, HostTensor>>;
    for (const dtype of DTYPE_NAMES) {
      for (const name of Object.keys(SHAPES)) {
        expect(sameBits(target[dtype]![name]!, saved[dtype]![name]!), `${dtype} ${name} into target`).toBe(true);
        expect(sameBits(whole[dtype]![name]!, saved[dtype]![name]!), `${dtype} ${name} without target`).toBe(true);
      }
    }
  });

  it("keeps odd keys exactly: dots, slashes, spaces, unicode, empty, numeric strings", async () => {
    const url = await locations[kind]();
    const keys = ["a.b", "a/b", "with space", "ünïcödé ☃", "", "0", "__proto_", "a.b.c"];
    const sd: StateDict = { nested: { "a.b": { c: 1 } }, a: { b: hostTensor("int8", [1], Int8Array.of(-1)) } };
    keys.forEach((k, i) => (sd[k] = hostTensor("int32", [1], Int32Array.of(i))));
    // One data file, so "a.b" and a → b share it and need distinct safetensors names.
    await save(sd, { checkpointId: url, concurrency: 1 });
    const back = await load(url);
    expect(Object.keys(back)).toEqual(Object.keys(sd));
    keys.forEach((k, i) => expect((back[k] as HostTensor).data).toEqual(Int32Array.of(i)));
    expect(back.nested).toEqual({ "a.b": { c: 1 } });
    expect(((back.a as StateDict).b as HostTensor).data).toEqual(Int8Array.of(-1));
    const metadata = await readMetadata(url);
    expect(metadata.entries.map((e) => e.key)).toContainEqual(["nested", "a.b", "c"]);
  });

  it("restores nested objects, arrays, blobs, JSON values and special numbers", async () => {
    const url = await locations[kind]();
    const sd: StateDict = {
      list: [1, "two", null, true, [hostTensor("float64", [2], Float64Array.of(1.5, -2))]],
      specials: { nan: NaN, inf: Infinity, ninf: -Infinity, negzero: -0, big: Number.MAX_SAFE_INTEGER },
      blob: Uint8Array.of(1, 2, 3),
      emptyBlob: new Uint8Array(0),
      emptyObject: {},
      emptyArray: [],
      text: "ünï",
    };
    await save(sd, url);
    const back = await load(url);
    expect(back.list).toEqual(sd.list);
    expect(Array.isArray(back.list)).toBe(true);
    expect(back.specials).toEqual(sd.specials);
    expect(Object.is((back.specials as Record<string, number>).negzero, -0)).toBe(true);
    expect(back.blob).toEqual(Uint8Array.of(1, 2, 3));
    expect(back.emptyBlob).toEqual(new Uint8Array(0));
    expect(back.emptyObject).toEqual({});
    expect(back.emptyArray).toEqual([]);
    expect(back.text).toBe("ünï");
  });

  it("fills a target in place: host tensors filled, blobs and values replaced, Statefuls called back", async () => {
    const url = await locations[kind]();
    const calls: string[] = [];
    class Counter implements Stateful {
      count = 0;
      weights = hostTensor("float32", [3]);
      stateDict(): StateDict {
        return { count: this.count, weights: this.weights };
      }
      loadStateDict(sd: StateDict): void {
        calls.push("counter");
        this.count = sd.count as number;
      }
    }
    const source = new Counter();
    source.count = 41;
    source.weights.data.set([1, 2, 3]);
    await save({ counter: source, rng: Uint8Array.of(9, 9, 9, 9), step: 7 }, url);
    const fresh = new Counter();
    const weights = fresh.weights;
    const target: StateDict = { counter: fresh, rng: Uint8Array.of(0), step: 0 };
    const result = await load(target, url);
    expect(calls).toEqual(["counter"]);
    expect(fresh.count).toBe(41);
    expect(fresh.weights).toBe(weights);
    expect(weights.data).toEqual(Float32Array.of(1, 2, 3));
    expect(target.rng).toEqual(Uint8Array.of(9, 9, 9, 9));
    expect(target.step).toBe(7);
    expect(result.bytesRead).toBeGreaterThan(12);
  });

  it("loads only what the target asks for and ignores the rest", async () => {
    const url = await locations[kind]();
    const big = sampleTensor("float32", [256, 256]);
    await save({ model: { w: sampleTensor("float32", [4]) }, optim: { m: big } }, url);
    const target = { model: { w: hostTensor("float32", [4]) } };
    const result = await load(target, url);
    expect(result.entries).toBe(1);
    expect(result.bytesRead).toBeLessThan(big.data.byteLength);
  });

  it("returns user metadata and refuses to save over a committed checkpoint", async () => {
    const url = await locations[kind]();
    await save({ x: 1 }, { checkpointId: url, metadata: { step: 100, metrics: { loss: 0.5 } } });
    expect((await readMetadata(url)).user).toEqual({ step: 100, metrics: { loss: 0.5 } });
    await expect(save({ x: 2 }, url)).rejects.toMatchObject({ code: "already_exists" });
    expect((await load(url)).x).toBe(1);
  });
});

describe("loading large tensors in pieces", () => {
  it("reads a chunk bigger than maxReadBytes in several verified pieces", async () => {
    const url = await locations.memory();
    const t = sampleTensor("float64", [300, 1000]);
    await save({ t }, { checkpointId: url, blockSize: 4096 });
    const target = { t: hostTensor("float64", [300, 1000]) };
    await load(target, { checkpointId: url, maxReadBytes: 100_000, maxInflightBytes: 250_000, concurrency: 3 });
    expect(sameBits(target.t, t)).toBe(true);
  });
});
