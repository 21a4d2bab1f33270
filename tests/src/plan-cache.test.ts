import {
  type DType,
  type HostTensor,
  type ShardedTensor,
  type StateDict,
  DefaultSavePlanner,
  hostTensor,
  isShardedTensor,
  load,
  save,
  shardedTensor,
} from "@cairn/core";
import { seededRandom } from "@cairn/core/testing";
import { describe, expect, it } from "vitest";
import { locations } from "./helpers.js";
import { bits, copied, filesOf, filled } from "./plan-cache-helpers.js";

/**
 * The plan cache (core/src/plan/save-plan-cache.ts) reuses what a save planned from its state's
 * structure for the next save of the same structure. A stale entry would write a wrong layout
 * silently, so random sequences of saves of changing states (keys renamed, shapes and dtypes
 * changed at the same byte count, leaves added, removed and reordered, shards moved, the same
 * objects changed in place, values changed, saves aborted) check that every save's metadata.json
 * and data files are byte for byte those of the same save planned without the cache, and that
 * every step loads bit-exact.
 */

/** Dtypes that share an element size, so a change between them keeps every byte count. */
const SAME_SIZE: readonly (readonly DType[])[] = [
  ["float32", "int32", "uint32"],
  ["int16", "uint16", "float16", "bfloat16"],
  ["int8", "uint8"],
];

type Random = () => number;

const pick = <T>(random: Random, list: readonly T[]): T => list[Math.floor(random() * list.length)]!;

function shapeOf(random: Random): number[] {
  return pick(random, [[], [1], [3], [2, 3], [3, 2], [6], [4, 1, 2], [8], [0], [5, 5], [16, 32], [300]]).slice();
}

/** A two-shard tensor of `rows` x 3 held whole by this rank, cut at `cut` (shards may come in either order). */
function sharded(dtype: DType, rows: number, cut: number, reversed: boolean, random: Random): ShardedTensor {
  const shards = [
    { offsets: [0, 0], tensor: filled(dtype, [cut, 3], random) },
    { offsets: [cut, 0], tensor: filled(dtype, [rows - cut, 3], random) },
  ];
  return shardedTensor(dtype, [rows, 3], reversed ? shards.reverse() : shards);
}

function leafOf(random: Random): unknown {
  const roll = random();
  if (roll < 0.55) return filled(pick(random, pick(random, SAME_SIZE)), shapeOf(random), random);
  if (roll < 0.65) return new Uint8Array(Math.floor(random() * 40)).map(() => Math.floor(random() * 256));
  if (roll < 0.75) return sharded("float32", 4, pick(random, [1, 2, 2, 3]), random() < 0.5, random);
  return pick(random, [1, 2.5, "lr", true, null, Number.NaN, -0, [1, 2], {}]);
}

/** Keys that collide once dotted (`a.b` and `a` → `b`), or sort first in a safetensors header ("7", "12"). */
const NAMES = ["a", "b", "a.b", "7", "12", "w", "bias", "ü", "x y"];

function randomState(random: Random): StateDict {
  const state: Record<string, unknown> = {};
  const count = 1 + Math.floor(random() * 6);
  for (let i = 0; i < count; i++) {
    const name = pick(random, NAMES);
    if (random() < 0.4) state[name] = leafOf(random);
    else state[`g${i % 3}`] = { ...(state[`g${i % 3}`] as object), [name]: leafOf(random) };
  }
  if (random() < 0.5)
    state.layers = Array.from({ length: 1 + Math.floor(random() * 4) }, () => ({ w: leafOf(random) }));
  return state as StateDict;
}

/** Every container of the state with its keys (arrays by index), for mutations to choose from. */
function containers(state: unknown): Record<string | number, unknown>[] {
  const found: Record<string | number, unknown>[] = [];
  const visit = (value: unknown): void => {
    if (typeof value !== "object" || value === null || ArrayBuffer.isView(value)) return;
    if ("dtype" in value || isShardedTensor(value)) return;
    found.push(value as Record<string, unknown>);
    for (const child of Object.values(value)) visit(child);
  };
  visit(state);
  return found;
}

/** The state's host tensors; with `shards`, those of its sharded tensors too (whose shapes and dtypes are not theirs to change). */
function hostTensors(state: unknown, shards = true): HostTensor[] {
  const found: HostTensor[] = [];
  const visit = (value: unknown): void => {
    if (typeof value !== "object" || value === null || ArrayBuffer.isView(value)) return;
    if (isShardedTensor(value)) return void (shards && value.shards.forEach((s) => found.push(s.tensor as HostTensor)));
    if ("dtype" in value && "data" in value) return void found.push(value as HostTensor);
    for (const child of Object.values(value)) visit(child);
  };
  visit(state);
  return found;
}

/** Changes the state in place, one of the ways a structure can change (or not). */
function mutate(state: StateDict, random: Random): string {
  const places = containers(state);
  const place = pick(random, places);
  const keys = Object.keys(place);
  const key = keys.length > 0 ? pick(random, keys) : undefined;
  const tensors = hostTensors(state, false);
  const tensor = tensors.length > 0 ? pick(random, tensors) : undefined;
  switch (Math.floor(random() * 10)) {
    case 0: {
      if (key === undefined || Array.isArray(place)) return "none";
      // Renamed: the same leaf under another key, at the end of its container.
      const value = place[key];
      delete place[key];
      place[`${pick(random, NAMES)}${Math.floor(random() * 3)}`] = value;
      return "rename";
    }
    case 1: {
      if (!tensor || tensor.shape.length === 0) return "none";
      // The same bytes under another shape, in the same shape array (mutated in place).
      const n = tensor.shape.reduce((a, b) => a * b, 1);
      const shape = tensor.shape as number[];
      shape.length = 0;
      if (n % 2 === 0 && random() < 0.5) shape.push(2, n / 2);
      else shape.push(n);
      return "reshape in place";
    }
    case 2: {
      if (!tensor) return "none";
      // Another dtype of the same element size, over the same bytes.
      const group = SAME_SIZE.find((g) => g.includes(tensor.dtype));
      if (!group) return "none";
      const dtype = pick(random, group);
      const bytes = new Uint8Array(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
      const replacement = hostTensor(dtype, [...tensor.shape]);
      new Uint8Array(replacement.data.buffer).set(bytes);
      (tensor as { dtype: DType }).dtype = dtype;
      (tensor as { data: unknown }).data = replacement.data;
      return "dtype";
    }
    case 3:
      if (Array.isArray(place)) place.push({ w: leafOf(random) });
      else place[pick(random, NAMES)] = leafOf(random);
      return "add";
    case 4: {
      if (key === undefined || places.length < 2 || Array.isArray(place)) return "none";
      delete place[key];
      return "remove";
    }
    case 5: {
      if (keys.length < 2 || Array.isArray(place)) return "none";
      // Reordered: the same keys and leaves, another insertion order.
      const entries = keys.map((k) => [k, place[k]] as const).reverse();
      for (const k of keys) delete place[k];
      for (const [k, v] of entries) place[k] = v;
      return "reorder";
    }
    case 6: {
      const shardedOnes = containers(state)
        .flatMap((c) => Object.entries(c))
        .filter(([, v]) => isShardedTensor(v));
      if (shardedOnes.length === 0) return "none";
      // The same shards in the other order (in place: same sizes, other offsets when cut in half), or cut elsewhere.
      const [k, v] = pick(random, shardedOnes);
      const old = v as ShardedTensor;
      if (random() < 0.5) (old.shards as unknown[]).reverse();
      else {
        const owner = containers(state).find((c) => c[k] === v)!;
        const dtype = random() < 0.5 ? old.dtype : pick(random, ["float32", "int32"] as const);
        owner[k] = sharded(dtype, 4, pick(random, [1, 2, 2, 3]), random() < 0.5, random);
      }
      return "shards";
    }
    case 7: {
      const all = hostTensors(state);
      if (all.length === 0) return "none";
      const tensor = pick(random, all);
      // Only the bytes change: the structure is the same.
      const bytes = new Uint8Array(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
      for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(random() * 256);
      return "bytes";
    }
    case 8:
      if (key === undefined) return "none";
      place[key] = pick(random, [3, "s", false, [4], 1e300]);
      return "value";
    default:
      return "none";
  }
}

/** A load target of the state's structure, its tensors zeroed. */
function zeroed(state: StateDict): StateDict {
  const target = copied(state) as StateDict;
  for (const t of hostTensors(target)) new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength).fill(0);
  const visit = (value: unknown): void => {
    if (typeof value !== "object" || value === null) return;
    if (value instanceof Uint8Array) return void value.fill(0);
    if (ArrayBuffer.isView(value) || "dtype" in value || isShardedTensor(value)) return;
    for (const child of Object.values(value)) visit(child);
  };
  visit(target);
  return target;
}

async function run(seed: number, where: "file" | "memory", steps: number): Promise<string[]> {
  const random = seededRandom(seed);
  let state = randomState(random);
  const log: string[] = [];
  for (let step = 0; step < steps; step++) {
    if (step > 0) {
      if (random() < 0.3) state = copied(state) as StateDict;
      const changes = 1 + Math.floor(random() * 2);
      for (let c = 0; c < changes; c++) log.push(mutate(state, random));
    }
    const options = {
      ...(random() < 0.3 ? { blockSize: pick(random, [64, 4096]) } : {}),
      concurrency: pick(random, [1, 2, 3]),
    };
    // minFileBytes 0: as many files as `concurrency`, so a state's items are spread over several.
    const minFileBytes = pick(random, [0, undefined]);
    if (random() < 0.15) {
      // An aborted save in between: nothing committed, and the cache must not remember a wrong layout from it.
      const controller = new AbortController();
      const aborted = save(state, {
        checkpointId: await locations[where](),
        ...options,
        planner: new DefaultSavePlanner({ minFileBytes: pick(random, [0, undefined]) }),
        signal: controller.signal,
      });
      if (random() < 0.5) controller.abort();
      else queueMicrotask(() => controller.abort());
      await aborted.catch((error: unknown) => expect(error).toMatchObject({ code: "cancelled" }));
      log.push("aborted");
    }
    const cached = await locations[where]();
    const plain = await locations[where]();
    await save(state, { checkpointId: cached, ...options, planner: new DefaultSavePlanner({ minFileBytes }) });
    await save(state, {
      checkpointId: plain,
      ...options,
      planner: new DefaultSavePlanner({ minFileBytes, cachePlans: false }),
    });
    const [a, b] = [await filesOf(cached), await filesOf(plain)];
    expect([...a.keys()].sort(), `seed ${seed} step ${step}: ${log.join(", ")}`).toEqual([...b.keys()].sort());
    for (const [name, bytes] of a)
      expect(bytes.equals(b.get(name)!), `seed ${seed} step ${step} ${name}: ${log.join(", ")}`).toBe(true);
    const target = zeroed(state);
    await load(target, cached);
    expect(bits(target), `seed ${seed} step ${step} loaded`).toEqual(bits(state));
  }
  return log;
}

describe("the plan cache", () => {
  for (const where of ["file", "memory"] as const) {
    it(`writes what a save without it writes, over random sequences of changing states (${where}://)`, async () => {
      const kinds = new Set<string>();
      for (let seed = 1; seed <= 12; seed++) for (const kind of await run(seed, where, 12)) kinds.add(kind);
      // Every kind of change was met, so the sequences test what they claim to.
      expect([...kinds].sort()).toEqual(
        [
          "aborted",
          "add",
          "bytes",
          "dtype",
          "none",
          "remove",
          "rename",
          "reorder",
          "reshape in place",
          "shards",
          "value",
        ].sort(),
      );
    }, 180_000);
  }
});
