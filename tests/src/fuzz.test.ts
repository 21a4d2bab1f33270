import { readFile, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import {
  type DType,
  type HostTensor,
  type StateDict,
  CheckpointError,
  DefaultSavePlanner,
  hostTensor,
  load,
  openStorage,
  readMetadata,
  save,
} from "@cairn/core";
import { bytesOf, crc32c, itemSize, numel } from "@cairn/core/format";
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { locations, sampleTensor, sharedPrototypes, tempDir } from "./helpers.js";

// Fixed so a run is reproducible; fast-check prints the seed and path of a failure, and FUZZ_SEED replays or varies it.
const seed = Number(process.env.FUZZ_SEED ?? 20261124);

const FORBIDDEN = ["__proto__", "constructor", "prototype"];

/** Keys a hostile or careless state dict holds: the prototype's names, separators, empty, numeric, unicode, long. */
const hostileKey = fc.oneof(
  fc.constantFrom(
    ...FORBIDDEN,
    ".",
    "/",
    "",
    "0",
    "01",
    "-1",
    "1.5",
    "a.b",
    "a/b",
    "..",
    "ünï☃",
    "toString",
    "hasOwnProperty",
    "__proto_",
    "@0,1",
    "#2",
    " ",
  ),
  fc.string({ maxLength: 8 }),
  fc.string({ unit: "binary", maxLength: 6 }),
  fc.string({ minLength: 200, maxLength: 300 }),
);

const DTYPES: DType[] = ["float32", "float64", "int32", "int64", "uint8", "bfloat16", "bool"];

const tensor = fc
  .record({ dtype: fc.constantFrom(...DTYPES), shape: fc.array(fc.integer({ min: 0, max: 4 }), { maxLength: 3 }) })
  .chain(({ dtype, shape }) =>
    fc
      .uint8Array({ minLength: numel(shape) * itemSize(dtype), maxLength: numel(shape) * itemSize(dtype) })
      .map((bytes) => {
        const t = hostTensor(dtype, shape);
        bytesOf(t.data).set(dtype === "bool" ? bytes.map((b) => b & 1) : bytes);
        return t;
      }),
  );

const leaf = fc.oneof(
  fc.constant(null),
  fc.boolean(),
  fc.double(),
  fc.integer(),
  fc.string({ maxLength: 10 }),
  fc.uint8Array({ maxLength: 40 }),
  tensor,
);

/** An object whose keys are own data properties whatever their names (as JSON.parse makes them). */
function objectOf(entries: readonly (readonly [string, unknown])[]): Record<string, unknown> {
  const object: Record<string, unknown> = {};
  for (const [key, value] of entries)
    Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
  return object;
}

const { tree } = fc.letrec<{ tree: unknown; object: Record<string, unknown>; array: unknown[] }>((tie) => ({
  tree: fc.oneof({ depthSize: "small", maxDepth: 3 }, leaf, tie("object"), tie("array")),
  object: fc.array(fc.tuple(hostileKey, tie("tree")), { maxLength: 4 }).map(objectOf),
  array: fc.array(tie("tree"), { maxLength: 3 }),
}));

const stateDict = fc
  .array(fc.tuple(hostileKey, tree), { maxLength: 5 })
  .map((entries) => objectOf(entries) as StateDict);

const isHostTensor = (v: unknown): v is HostTensor =>
  typeof v === "object" && v !== null && "dtype" in v && ArrayBuffer.isView((v as { data?: unknown }).data);

function holdsForbiddenKey(value: unknown): boolean {
  if (typeof value !== "object" || value === null || ArrayBuffer.isView(value) || isHostTensor(value)) return false;
  if (Array.isArray(value)) return value.some(holdsForbiddenKey);
  return Object.entries(value).some(([k, v]) => FORBIDDEN.includes(k) || holdsForbiddenKey(v));
}

/** Bit-exact sameness of what was saved and what came back: keys and their order, dtypes, shapes, bytes, -0 and NaN. */
function expectSame(back: unknown, saved: unknown, path = "<root>"): void {
  if (isHostTensor(saved)) {
    expect(isHostTensor(back), path).toBe(true);
    const b = back as HostTensor;
    expect([b.dtype, b.shape], path).toEqual([saved.dtype, saved.shape]);
    expect(Buffer.from(bytesOf(b.data)).equals(Buffer.from(bytesOf(saved.data))), path).toBe(true);
  } else if (saved instanceof Uint8Array) {
    expect(back, path).toBeInstanceOf(Uint8Array);
    expect(Buffer.from(back as Uint8Array).equals(Buffer.from(saved)), path).toBe(true);
  } else if (Array.isArray(saved)) {
    expect(Array.isArray(back) && back.length === saved.length, path).toBe(true);
    saved.forEach((v, i) => expectSame((back as unknown[])[i], v, `${path}.${i}`));
  } else if (typeof saved === "object" && saved !== null) {
    expect(typeof back === "object" && back !== null && !Array.isArray(back), path).toBe(true);
    expect(Reflect.ownKeys(back as object), path).toEqual(Reflect.ownKeys(saved));
    for (const key of Object.keys(saved))
      expectSame(
        Object.getOwnPropertyDescriptor(back, key)?.value,
        Object.getOwnPropertyDescriptor(saved, key)?.value,
        `${path}.${key}`,
      );
  } else {
    expect(Object.is(back, saved), `${path}: ${String(back)} is not ${String(saved)}`).toBe(true);
  }
}

/** A target of the same structure to load into: fresh tensors and blobs, placeholder values. */
function targetLike(value: unknown): unknown {
  if (isHostTensor(value)) return hostTensor(value.dtype, value.shape);
  if (value instanceof Uint8Array) return new Uint8Array(value.byteLength);
  if (Array.isArray(value)) return value.map(targetLike);
  if (typeof value === "object" && value !== null)
    return objectOf(Object.entries(value).map(([k, v]) => [k, targetLike(v)] as const));
  return 0;
}

describe("fuzz: state dicts with hostile keys round-trip exactly or fail cleanly", () => {
  it("save → load (with and without a target) on memory://, never touching a shared prototype", async () => {
    const before = sharedPrototypes();
    await fc.assert(
      fc.asyncProperty(stateDict, async (sd) => {
        const url = await locations.memory();
        const saving = await save(sd, url).then(
          () => undefined,
          (e: unknown) => e,
        );
        if (holdsForbiddenKey(sd)) {
          expect(saving).toBeInstanceOf(CheckpointError);
          expect(saving).toMatchObject({
            code: "invalid_argument",
            message: expect.stringMatching(/the key "(__proto__|constructor|prototype)" is not allowed/),
          });
          const storage = await openStorage(url);
          expect(await storage.stat("metadata.json")).toBeNull();
          await storage.close();
        } else {
          expect(saving).toBeUndefined();
          expectSame(await load(url), sd);
          const target = targetLike(sd) as StateDict;
          await load(target, url);
          expectSame(target, sd);
        }
        expect(sharedPrototypes()).toEqual(before);
      }),
      { seed, numRuns: 150 },
    );
  }, 30_000);
});

type Damage =
  { kind: "flip"; at: number; bit: number } | { kind: "truncate"; to: number } | { kind: "extend"; bytes: Uint8Array };

const damage: fc.Arbitrary<Damage> = fc.oneof(
  fc.record({ kind: fc.constant("flip" as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ kind: fc.constant("truncate" as const), to: fc.nat() }),
  fc.record({ kind: fc.constant("extend" as const), bytes: fc.uint8Array({ minLength: 1, maxLength: 64 }) }),
);

function damaged(bytes: Uint8Array, d: Damage): Uint8Array {
  if (d.kind === "flip") {
    const copy = bytes.slice();
    copy[d.at % copy.byteLength] = copy[d.at % copy.byteLength]! ^ (1 << d.bit);
    return copy;
  }
  if (d.kind === "truncate") return bytes.slice(0, d.to % bytes.byteLength);
  return Buffer.concat([bytes, d.bytes]);
}

describe("fuzz: every changed, cut or extended byte of every file of a checkpoint is found by load", () => {
  // Each data file holds data (so a full load reads every file), and blocks are small (so a chunk has many).
  const state = (): StateDict => ({
    model: {
      w: sampleTensor("float32", [16, 9], 1),
      b: sampleTensor("int64", [7], 2),
      h: sampleTensor("bfloat16", [3, 5], 3),
    },
    "a.b": { "/": sampleTensor("uint8", [33], 4) },
    blob: Uint8Array.from({ length: 50 }, (_, i) => i * 7),
    step: 12,
    lr: -0,
    name: "ünï",
    list: [1, null, [], {}],
  });
  let dir: string;
  let files: [string, Uint8Array][];

  beforeAll(async () => {
    dir = join(await tempDir(), "ckpt");
    // Two files however small the state (the default puts under 16 MiB in one).
    await save(state(), {
      checkpointId: dir,
      blockSize: 64,
      concurrency: 2,
      planner: new DefaultSavePlanner({ minFileBytes: 0 }),
    });
    const metadata = await readMetadata(dir);
    expect(Object.keys(metadata.files)).toHaveLength(2);
    // Copies as plain Uint8Arrays: a Buffer's slice() is a view, and damage must not reach the pristine bytes.
    files = await Promise.all(
      (await readdir(dir))
        .sort()
        .map(async (name) => [name, new Uint8Array(await readFile(join(dir, name)))] as [string, Uint8Array]),
    );
  });

  it("load with a target and without one is corrupt, never a crash, a wrong value or a changed prototype", async () => {
    const before = sharedPrototypes();
    const loads = [() => load(state(), dir), () => load(dir)];
    await fc.assert(
      fc.asyncProperty(fc.nat(), damage, async (which, d) => {
        const [name, pristine] = files[which % files.length]!;
        await writeFile(join(dir, name), damaged(pristine, d));
        try {
          for (const call of loads) {
            const outcome = await call().then(
              (value) => ({ value }),
              (error: unknown) => ({ error }),
            );
            expect(outcome, `${name} ${JSON.stringify(d)}`).toHaveProperty("error");
            const { error } = outcome as { error: unknown };
            expect(error, `${name} ${JSON.stringify(d)}: ${String(error)}`).toBeInstanceOf(CheckpointError);
            expect((error as CheckpointError).code, `${name} ${JSON.stringify(d)}: ${String(error)}`).toBe("corrupt");
          }
        } finally {
          await writeFile(join(dir, name), pristine);
        }
        expect(sharedPrototypes()).toEqual(before);
      }),
      { seed, numRuns: 300 },
    );
    // The pristine checkpoint still loads exactly: every failure above was the damage.
    expectSame(await load(dir), state());
  }, 30_000);
});

describe("fuzz: a metadata.json 2.x changed in structure (with a fresh checksum) is read or refused, never trusted blindly", () => {
  /** Every JSON path in `value` below `entries` and `files`: where a hostile writer would change a field. */
  function paths(value: unknown, at: (string | number)[] = []): (string | number)[][] {
    if (typeof value !== "object" || value === null) return [at];
    const keys: (string | number)[] = Array.isArray(value) ? value.map((_, i) => i) : Object.keys(value);
    return [at, ...keys.flatMap((k) => paths((value as Record<string | number, unknown>)[k], [...at, k]))];
  }

  it("load without a target returns or throws corrupt / unsupported_version, and no prototype changes", async () => {
    const dir = join(await tempDir(), "ckpt");
    await save(
      {
        model: { layers: [{ w: sampleTensor("float32", [4, 3], 1) }, { w: sampleTensor("int32", [5], 2) }] },
        blob: Uint8Array.of(1, 2),
        step: 3,
        nan: NaN,
      },
      dir,
    );
    const path = join(dir, "metadata.json");
    const { metadataCrc32c: _, ...raw } = JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
    const targets = paths({ entries: raw.entries, files: raw.files }).filter((p) => p.length > 0);
    const before = sharedPrototypes();
    await fc.assert(
      fc.asyncProperty(
        fc.nat(),
        fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.constantFrom(...FORBIDDEN), fc.constant(-1), fc.constant(2 ** 53)),
        async (which, replacement) => {
          const edited = structuredClone(raw);
          const target = targets[which % targets.length]!;
          let node = edited as Record<string | number, unknown>;
          for (const key of target.slice(0, -1)) node = node[key] as Record<string | number, unknown>;
          node[target.at(-1)!] = replacement;
          const body = JSON.stringify(edited);
          await writeFile(path, `{"metadataCrc32c":${crc32c(new TextEncoder().encode(body))},${body.slice(1)}`);
          const outcome = await load(dir).then(
            () => undefined,
            (error: unknown) => error,
          );
          if (outcome !== undefined) {
            expect(
              outcome,
              `${JSON.stringify(target)} = ${JSON.stringify(replacement)}: ${String(outcome)}`,
            ).toBeInstanceOf(CheckpointError);
            expect(
              ["corrupt", "unsupported_version"],
              `${JSON.stringify(target)} = ${JSON.stringify(replacement)}: ${String(outcome)}`,
            ).toContain((outcome as CheckpointError).code);
          }
          expect(sharedPrototypes()).toEqual(before);
        },
      ),
      { seed, numRuns: 300 },
    );
  }, 60_000);
});
