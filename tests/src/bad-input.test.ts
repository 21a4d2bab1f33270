import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { type StateDict, asyncSave, hostTensor, save } from "@cairn/core";
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
  ["an unsupported dtype", () => ({ t: { dtype: "complex64", shape: [1], data: new Float32Array(2) } }), /t.*complex64.*not supported/],
  ["data whose length does not match the shape", () => ({ t: { dtype: "float32", shape: [2, 2], data: new Float32Array(3) } }), /t.*\[2,2\] needs 4 elements.*has 3/],
  ["data of the wrong array type", () => ({ t: { dtype: "int64", shape: [1], data: new Int32Array(1) } }), /t.*BigInt64Array.*Int32Array/],
  ["a negative dimension", () => ({ t: { dtype: "float32", shape: [-1], data: new Float32Array(0) } }), /shape must be an array of non-negative integers/],
  ["a tfjs tensor that is already disposed", () => ({ t: disposedTensor }), /t.*already disposed/],
  ["a tfjs string tensor", () => ({ t: { shape: [1], dtype: "string", data: async () => [] } }), /t.*"string".*float32, int32 or bool/],
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
    await expect(save({ ok: hostTensor("float32", [1 << 16]), bad: () => 1 } as unknown as StateDict, dir)).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(readdir(dir)).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("a tfjs tensor disposed while the save runs fails the save without committing", async () => {
    const dir = join(await tempDir(), "ckpt");
    const t = { shape: [2], dtype: "float32", isDisposed: false, data: async () => new Float32Array(2) };
    const sd = { a: hostTensor("float32", [2]), t };
    const saving = save(sd, dir);
    t.isDisposed = true;
    await expect(saving).rejects.toMatchObject({ code: "invalid_argument", message: expect.stringContaining("disposed") });
    expect((await readdir(dir).catch(() => [])).filter((f) => f === "metadata.json")).toEqual([]);
  });
});

describe("bad save options are invalid_argument and write nothing", () => {
  it.each([
    [{ blockSize: 0 }, /blockSize must be a positive whole number \(default 1048576 bytes\), not 0/],
    [{ blockSize: -4096 }, /blockSize.*not -4096/],
    [{ blockSize: 1.5 }, /blockSize.*not 1\.5/],
    [{ blockSize: Number.NaN }, /blockSize.*not NaN/],
    [{ concurrency: 0 }, /concurrency must be a positive whole number \(default 4 files\), not 0/],
    [{ concurrency: "4" }, /concurrency.*not 4/],
  ])("%j", async (options, message) => {
    const dir = join(await tempDir(), "ckpt");
    const state = { t: hostTensor("float32", [1024]) };
    await expect(save(state, { checkpointId: dir, ...(options as object) })).rejects.toMatchObject({ code: "invalid_argument", message: expect.stringMatching(message) });
    const { staged, done } = await asyncSave(state, { checkpointId: dir, ...(options as object) });
    await expect(staged).rejects.toMatchObject({ code: "invalid_argument", message: expect.stringMatching(message) });
    await expect(done).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(readdir(dir)).rejects.toMatchObject({ code: "ENOENT" });
  });
});
