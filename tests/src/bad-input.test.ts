import { readdir } from "node:fs/promises";
import { join } from "node:path";
import {
  type StateDict,
  asyncSave,
  flattenStateDict,
  hostTensor,
  load,
  readMetadata,
  save,
  shardedTensor,
} from "@cairn/core";
import { openCheckpoint } from "@cairn/core/storage";
import { parseMetadata, parseSafetensorsHeader } from "@cairn/core/format";
import { describe, expect, it } from "vitest";
import { tempDir } from "./helpers.js";

const cyclic: Record<string, unknown> = { a: 1 };
cyclic.self = cyclic;

const disposedTensor = { shape: [2], dtype: "float32", isDisposed: true, data: async () => new Float32Array(2) };

const cases: [string, () => unknown, RegExp][] = [
  ["a cycle", () => ({ model: cyclic }), /model\.self.*cycle/],
  ["a function", () => ({ fn: () => 1 }), /fn.*function/],
  ["a symbol", () => ({ s: Symbol("x") }), /s: a symbol/],
  ["a bigint", () => ({ n: 10n }), /n: a bigint/],
  ["undefined", () => ({ u: undefined }), /u: undefined.*use null/],
  ["a class instance that is not Stateful", () => ({ when: new Date() }), /when: a Date instance.*Stateful/],
  ["a Map", () => ({ m: new Map() }), /m: a Map instance/],
  ["a bare Float32Array", () => ({ t: new Float32Array(3) }), /t: a bare Float32Array.*hostTensor/],
  [
    "an unsupported dtype",
    () => ({ t: { dtype: "complex64", shape: [1], data: new Float32Array(2) } }),
    /t.*complex64.*not supported/,
  ],
  [
    "data whose length does not match the shape",
    () => ({ t: { dtype: "float32", shape: [2, 2], data: new Float32Array(3) } }),
    /t.*\[2,2\] needs 4 elements.*has 3/,
  ],
  [
    "data of the wrong array type",
    () => ({ t: { dtype: "int64", shape: [1], data: new Int32Array(1) } }),
    /t.*BigInt64Array.*Int32Array/,
  ],
  [
    "a negative dimension",
    () => ({ t: { dtype: "float32", shape: [-1], data: new Float32Array(0) } }),
    /shape must be an array of non-negative integers/,
  ],
  ["a tfjs tensor that is already disposed", () => ({ t: disposedTensor }), /t.*already disposed/],
  [
    "a tfjs string tensor",
    () => ({ t: { shape: [1], dtype: "string", data: async () => [] } }),
    /t.*"string".*float32, int32 or bool/,
  ],
  // eslint-disable-next-line no-sparse-arrays -- the hole is the bad input under test
  ["an array with holes", () => ({ a: [1, , 3] }), /a\.1.*holes/],
  ["an array as the root", () => [1, 2], /plain object/],
];

describe("bad input to save is invalid_argument and writes nothing", () => {
  it.each(cases)("%s", async (_, make, message) => {
    const dir = join(await tempDir(), "ckpt");
    const error = await save(make() as StateDict, dir).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "invalid_argument" });
    expect((error as Error).message).toMatch(message);
    await expect(readdir(dir)).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("a valid sibling does not get written when another leaf is bad", async () => {
    const dir = join(await tempDir(), "ckpt");
    await expect(
      save({ ok: hostTensor("float32", [1 << 16]), bad: () => 1 } as unknown as StateDict, dir),
    ).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(readdir(dir)).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("a state dict nested 10,000 levels deep (or its user metadata) is invalid_argument, not a RangeError (issue 30, item 9)", async () => {
    const dir = join(await tempDir(), "ckpt");
    let deep: Record<string, unknown> = { w: hostTensor("float32", [2]) };
    for (let i = 0; i < 10_000; i++) deep = { a: deep };
    let list: unknown = [1];
    for (let i = 0; i < 10_000; i++) list = [list];
    for (const state of [deep, { list }] as StateDict[]) {
      await expect(save(state, dir)).rejects.toMatchObject({
        code: "invalid_argument",
        message: expect.stringMatching(/nests containers deeper than 512 levels/),
      });
      await expect(flattenStateDict(state)).rejects.toMatchObject({ code: "invalid_argument" });
      await expect(load(state, dir)).rejects.toMatchObject({ code: "invalid_argument" });
    }
    await expect(save({ x: 1 }, { checkpointId: dir, metadata: { deep } })).rejects.toMatchObject({
      code: "invalid_argument",
    });
    await expect(readdir(dir)).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("a tfjs tensor disposed while the save runs fails the save without committing", async () => {
    const dir = join(await tempDir(), "ckpt");
    const t = { shape: [2], dtype: "float32", isDisposed: false, data: async () => new Float32Array(2) };
    const sd = { a: hostTensor("float32", [2]), t };
    const saving = save(sd, dir);
    t.isDisposed = true;
    await expect(saving).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringContaining("disposed"),
    });
    expect((await readdir(dir).catch(() => [])).filter((f) => f === "metadata.json")).toEqual([]);
  });
});

describe("bad save options are invalid_argument and write nothing", () => {
  it.each([
    [{ blockSize: 0 }, /blockSize must be a positive whole number \(default 1048576 bytes\), not the number 0/],
    [{ blockSize: -4096 }, /blockSize.*not the number -4096/],
    [{ blockSize: 1.5 }, /blockSize.*not the number 1\.5/],
    [{ blockSize: Number.NaN }, /blockSize.*not the number NaN/],
    [{ concurrency: 0 }, /concurrency must be a positive whole number \(default 4 files\), not the number 0/],
    [{ concurrency: "4" }, /concurrency.*not the string "4"/],
  ])("%j", async (options, message) => {
    const dir = join(await tempDir(), "ckpt");
    const state = { t: hostTensor("float32", [1024]) };
    await expect(save(state, { checkpointId: dir, ...(options as object) })).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringMatching(message),
    });
    const { staged, done } = await asyncSave(state, { checkpointId: dir, ...(options as object) });
    await expect(staged).rejects.toMatchObject({ code: "invalid_argument", message: expect.stringMatching(message) });
    await expect(done).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(readdir(dir)).rejects.toMatchObject({ code: "ENOENT" });
  });
});

/** Calls a public entry point as a user would and returns what it threw or rejected with (a background save's `staged` and `done` included). */
async function failureOf(call: (dir: string) => unknown, dir: string): Promise<unknown> {
  try {
    const result = await call(dir);
    if (typeof result === "object" && result !== null && "staged" in result && "done" in result) {
      await (result as { staged: Promise<unknown> }).staged;
      await (result as { done: Promise<unknown> }).done;
    }
    return undefined;
  } catch (error) {
    return error;
  }
}

const any = (value: unknown): never => value as never;
const sd = { w: hostTensor("float32", [4]) };

const calls: [string, (dir: string) => unknown, RegExp][] = [
  ["load(null, dir)", (dir) => load(any(null), dir), /^load: the target must be a state dict.*not null/],
  ["load(undefined)", () => load(any(undefined)), /^load: pass a checkpoint URL or path.*not undefined/],
  ["load({}, 42)", () => load({}, any(42)), /^load: pass a checkpoint URL or path.*not the number 42/],
  ["load(dir, dir)", (dir) => load(any(dir), dir), /^load: the target must be a state dict.*not the string/],
  ["load([], dir)", (dir) => load(any([]), dir), /not an array of length 0/],
  ['load("")', () => load(""), /^load: the checkpoint URL or path is empty/],
  [
    "load({ checkpointId: 42 })",
    () => load(any({ checkpointId: 42 })),
    /option checkpointId must be a non-empty URL or path string, not the number 42/,
  ],
  ["load({})", () => load({}), /^load: say where the checkpoint is/],
  [
    "a signal that is not an AbortSignal",
    (dir) => load({ checkpointId: dir, signal: any({ aborted: false }) }),
    /option signal must be an AbortSignal, not an object/,
  ],
  [
    "a load planner without methods",
    (dir) => load({ checkpointId: dir, planner: any({}) }),
    /option planner must be a LoadPlanner/,
  ],
  [
    "a load concurrency string",
    (dir) => load(sd, { checkpointId: dir, concurrency: any("8") }),
    /option concurrency must be a positive whole number, not the string "8"/,
  ],
  [
    "maxReadBytes 0",
    (dir) => load({ checkpointId: dir, maxReadBytes: 0 }),
    /option maxReadBytes must be a positive whole number, not the number 0/,
  ],
  [
    "maxInflightBytes NaN",
    (dir) => load({ checkpointId: dir, maxInflightBytes: Number.NaN }),
    /maxInflightBytes.*not the number NaN/,
  ],
  [
    'partial: "yes"',
    (dir) => load(sd, { checkpointId: dir, partial: any("yes") }),
    /option partial must be true or false, not the string "yes"/,
  ],
  [
    "a tf module without tensor()",
    (dir) => load({ checkpointId: dir, tf: any({}) }),
    /option tf must be the tfjs module/,
  ],
  [
    "storage that is not an adapter",
    () => load({ storage: any({ read: () => 1 }), path: "x" }),
    /option storage must be a StorageAdapter/,
  ],
  [
    "path that is not a string",
    (dir) => load({ checkpointId: dir, path: any(5) }),
    /option path must be a string, not the number 5/,
  ],
  [
    "a process group with rank >= worldSize",
    (dir) =>
      load({
        checkpointId: dir,
        processGroup: any({ rank: 1, worldSize: 1, allGather: () => 0, broadcast: () => 0, barrier: () => 0 }),
      }),
    /option processGroup must be a ProcessGroup/,
  ],
  [
    "retry with no attempts",
    (dir) => load({ checkpointId: dir, retry: { maxAttempts: 0 } }),
    /option retry must be a partial RetryPolicy.*not an object/,
  ],
  [
    "storageOptions that are not an object",
    (dir) => load({ checkpointId: dir, storageOptions: any("fast") }),
    /option storageOptions must be an object/,
  ],
  [
    "readMetadata(123)",
    () => readMetadata(any(123)),
    /^readMetadata: pass a checkpoint URL or path.*not the number 123/,
  ],
  ["readMetadata(null)", () => readMetadata(any(null)), /^readMetadata: .*not null/],
  [
    "readMetadata({ storage: url })",
    () => readMetadata({ storage: any("memory://x") }),
    /option storage must be a StorageAdapter, not the string "memory:\/\/x"/,
  ],
  ["openCheckpoint(null)", () => openCheckpoint(any(null)), /^openCheckpoint: .*not null/],
  ["save(null, dir)", (dir) => save(any(null), dir), /a state dict must be a plain object of named values, not null/],
  ["save({}, {})", () => save({}, {}), /^save: say where the checkpoint is/],
  ["save(sd, null)", () => save(sd, any(null)), /^save: pass a checkpoint URL or path.*not null/],
  [
    "a save planner without methods",
    (dir) => save(sd, { checkpointId: dir, planner: any({ createLocalPlan: () => 0 }) }),
    /option planner must be a SavePlanner/,
  ],
  [
    "user metadata that is a number",
    (dir) => save(sd, { checkpointId: dir, metadata: any(5) }),
    /option metadata must be a plain object of JSON values.*not the number 5/,
  ],
  [
    "user metadata holding a bigint",
    (dir) => save(sd, { checkpointId: dir, metadata: { n: 10n } }),
    /metadata\.n: a bigint cannot be stored as JSON/,
  ],
  [
    "user metadata holding a class instance",
    (dir) => save(sd, { checkpointId: dir, metadata: { m: new Map() } }),
    /metadata\.m: must be a plain object/,
  ],
  [
    "a save signal that is not an AbortSignal",
    (dir) => save(sd, { checkpointId: dir, signal: any("stop") }),
    /option signal must be an AbortSignal, not the string "stop"/,
  ],
  ["asyncSave(sd, null)", () => asyncSave(sd, any(null)), /^asyncSave: pass a checkpoint URL or path.*not null/],
  [
    "asyncSave(null, dir)",
    (dir) => asyncSave(any(null), dir),
    /a state dict must be a plain object of named values, not null/,
  ],
  [
    "an unknown staging strategy",
    (dir) => asyncSave(sd, { checkpointId: dir, staging: any("fast") }),
    /option staging must be one of "copy", "reference", not the string "fast"/,
  ],
  [
    "a pool that is not a StagingPool",
    (dir) => asyncSave(sd, { checkpointId: dir, pool: any({}) }),
    /option pool must be a StagingPool/,
  ],
  [
    "a schedule that is not a function",
    (dir) => asyncSave(sd, { checkpointId: dir, schedule: any(1) }),
    /option schedule must be a function/,
  ],
  [
    'uploadWorker: "no"',
    (dir) => asyncSave(sd, { checkpointId: dir, uploadWorker: any("no") }),
    /option uploadWorker must be true or false/,
  ],
  [
    "an asyncSave blockSize of 0",
    (dir) => asyncSave(sd, { checkpointId: dir, blockSize: 0 }),
    /^asyncSave: option blockSize must be a positive whole number/,
  ],
  [
    "hostTensor with a plain array",
    () => hostTensor("float32", [2], any([1, 2])),
    /Float32Array, got an array of length 2/,
  ],
  [
    "hostTensor with a string shape",
    () => hostTensor("float32", any("2")),
    /shape must be an array of non-negative integers/,
  ],
  ["hostTensor without a dtype", () => hostTensor(any(undefined), [1]), /dtype undefined is not supported/],
  ["shardedTensor with null shards", () => shardedTensor("float32", [4], any(null)), /shards must be an array/],
  [
    "shardedTensor with a null shard tensor",
    () => shardedTensor("float32", [4], [{ offsets: [0], tensor: any(null) }]),
    /shard 0 tensor: shape must be an array/,
  ],
  [
    "flattenStateDict(5)",
    () => flattenStateDict(any(5)),
    /a state dict must be a plain object of named values, not the number 5/,
  ],
  [
    "parseMetadata of a string",
    () => parseMetadata(any("{}"), "m"),
    /^parseMetadata: pass the bytes of metadata.json as a Uint8Array, not the string/,
  ],
  ["parseSafetensorsHeader(null)", () => parseSafetensorsHeader(any(null)), /^parseSafetensorsHeader: .*not null/],
];

describe("bad arguments to any public entry point are invalid_argument naming the value, never a TypeError", () => {
  it.each(calls)("%s", async (_, call, message) => {
    const dir = join(await tempDir(), "ckpt");
    const error = await failureOf(call, dir);
    expect(error).toBeInstanceOf(Error);
    expect(error).toMatchObject({ name: "CheckpointError", code: "invalid_argument" });
    expect((error as Error).message).toMatch(message);
    await expect(readdir(dir)).rejects.toMatchObject({ code: "ENOENT" });
  });
});
