import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { type StateDict, type Stateful, asyncSave, hostTensor, load, readMetadata, save } from "@cairn/core";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { rewriteMetadata, sharedPrototypes, tempDir } from "./helpers.js";

let before: Record<string, string[]>;
beforeEach(() => {
  before = sharedPrototypes();
});
afterEach(() => {
  // Nothing a test did may have reached the prototypes every object shares.
  expect(sharedPrototypes()).toEqual(before);
  expect(({} as Record<string, unknown>).polluted).toBeUndefined();
});

/** An own data property, the way JSON.parse or Object.defineProperty make one, whatever its name. */
function withOwn(key: string, value: unknown, into: Record<string, unknown> = {}): Record<string, unknown> {
  Object.defineProperty(into, key, { value, enumerable: true, writable: true, configurable: true });
  return into;
}

const statefulOf = (inner: StateDict): Stateful => ({ stateDict: () => inner, loadStateDict: () => undefined });

describe("save refuses keys that reach a prototype, naming the key path, and writes nothing", () => {
  it.each([
    [
      "__proto__ from JSON.parse",
      () => JSON.parse('{"__proto__": {"polluted": 1}}') as StateDict,
      /key __proto__: the key "__proto__" is not allowed/,
    ],
    ["constructor", () => withOwn("constructor", { prototype: { polluted: 1 } }) as StateDict, /key constructor:/],
    ["prototype, nested", () => ({ model: withOwn("prototype", 1) }) as StateDict, /key model\.prototype:/],
    [
      "__proto__ in an object inside an array",
      () => ({ list: [1, JSON.parse('{"__proto__": 2}')] }) as StateDict,
      /key list\.1\.__proto__:/,
    ],
    [
      "__proto__ inside a Stateful's state dict",
      () => ({ opt: statefulOf(JSON.parse('{"a": {"__proto__": {"polluted": 1}}}') as StateDict) }),
      /key opt\.a\.__proto__:/,
    ],
    [
      "__proto__ above a tensor",
      () =>
        JSON.parse('{"__proto__": {}}', (k, v: unknown) =>
          k === "__proto__" ? withOwn("w", hostTensor("float32", [2])) : v,
        ) as StateDict,
      /__proto__/,
    ],
  ])("%s", async (_, make, message) => {
    const dir = join(await tempDir(), "ckpt");
    await expect(save(make(), dir)).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringMatching(message),
    });
    const { staged, done } = await asyncSave(make(), dir);
    await expect(staged).rejects.toMatchObject({ code: "invalid_argument", message: expect.stringMatching(message) });
    await expect(done).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(readdir(dir)).rejects.toMatchObject({ code: "ENOENT" });
  });

  it("refuses them in user metadata too", async () => {
    const dir = join(await tempDir(), "ckpt");
    const metadata = { run: JSON.parse('{"__proto__": {"polluted": 1}}') as Record<string, unknown> };
    await expect(save({ w: hostTensor("float32", [1]) }, { checkpointId: dir, metadata })).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringMatching(/metadata\.run\.__proto__: the key "__proto__" is not allowed/),
    });
    await expect(readdir(dir)).rejects.toMatchObject({ code: "ENOENT" });
  });
});

/** metadata.json 2.x as JSON: entries are `[kind, [sharedPrefix, ...key], ...]` (docs/format.md). */
type RawMetadata = { entries: unknown[][]; files: Record<string, unknown>[]; user: unknown };

/** A committed checkpoint whose metadata.json is then edited as a hostile writer would. */
async function crafted(edit: (metadata: RawMetadata) => unknown): Promise<string> {
  const dir = join(await tempDir(), "ckpt");
  await save({ w: hostTensor("float32", [4], Float32Array.of(1, 2, 3, 4)), step: 7, blob: Uint8Array.of(9) }, dir);
  await rewriteMetadata(dir, (m) => edit(m as never));
  return dir;
}

const renameEntry = (from: string, to: (string | number)[]) => (m: RawMetadata) => ({
  ...m,
  entries: m.entries.map((e) => ((e[1] as unknown[])[1] === from ? [e[0], [0, ...to], ...e.slice(2)] : e)),
});

describe("a crafted metadata.json never reaches a prototype", () => {
  it.each([
    ["a value at __proto__.polluted", renameEntry("step", ["__proto__", "polluted"])],
    ["a tensor at __proto__.polluted", renameEntry("w", ["__proto__", "polluted"])],
    ["a blob at constructor.prototype.polluted", renameEntry("blob", ["constructor", "prototype", "polluted"])],
    ["a value at a.prototype", renameEntry("step", ["a", "prototype"])],
    [
      "a __proto__ key in user metadata",
      (m: { user: unknown }) => ({ ...m, user: withOwn("__proto__", { polluted: 1 }) }),
    ],
    [
      "a data file named __proto__",
      (m: RawMetadata) => JSON.parse(JSON.stringify(m).replaceAll(m.files[0]!.name as string, "__proto__")) as unknown,
    ],
  ])("%s is corrupt, with and without a target", async (_, edit) => {
    const dir = await crafted(edit);
    await expect(load(dir)).rejects.toMatchObject({
      code: "corrupt",
      message: expect.stringMatching(/__proto__|constructor|prototype/),
    });
    await expect(readMetadata(dir)).rejects.toMatchObject({ code: "corrupt" });
    await expect(load({ w: hostTensor("float32", [4]) }, { checkpointId: dir, partial: true })).rejects.toMatchObject({
      code: "corrupt",
    });
  });

  it.each([
    [
      "a key stored twice",
      (m: RawMetadata) => ({ ...m, entries: [...m.entries, m.entries.find((e) => e[0] === "v")] }),
    ],
    [
      "a value that is also a container",
      (m: RawMetadata) => ({ ...m, entries: [...m.entries, ["v", [0, "step", "x"], 1]] }),
    ],
    [
      "an index into an object",
      (m: RawMetadata) => ({ ...m, entries: [...m.entries, ["v", [0, "o", "a"], 1], ["v", [1, 0], 1]] }),
    ],
    [
      "an array with a hole",
      (m: RawMetadata) => ({ ...m, entries: [...m.entries, ["v", [0, "list", 4294967295], 1]] }),
    ],
    [
      "a value that is not a leaf",
      (m: RawMetadata) => ({ ...m, entries: [...m.entries, ["v", [0, "v"], { polluted: 1 }]] }),
    ],
    [
      "a key path __proto__ reached through a shared prefix",
      (m: RawMetadata) => ({
        ...m,
        entries: [...m.entries, ["v", [0, "__proto__", "a"], 1], ["v", [1, "polluted"], 1]],
      }),
    ],
  ])("%s is corrupt when loaded without a target", async (_, edit) => {
    const dir = await crafted(edit);
    await expect(load(dir)).rejects.toMatchObject({ code: "corrupt" });
  });

  it("a checkpoint with odd but harmless keys still loads exactly", async () => {
    const dir = join(await tempDir(), "ckpt");
    const sd: StateDict = {
      __proto_: 1,
      Constructor: [2],
      "prototype.x": { "constructor ": 3 },
      toString: 4,
      hasOwnProperty: 5,
    };
    await save(sd, dir);
    const back = await load(dir);
    expect(back).toEqual(sd);
    expect(Object.getPrototypeOf(back)).toBe(Object.prototype);
  });
});
