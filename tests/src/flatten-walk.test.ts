// The state dict walk (core/src/state/flatten.ts) allocates no context or wrapper per value: its
// continuations after an asynchronous Stateful, its replacers and its shape check are made by
// helpers, and a key path made by an earlier walk at the same place from the same parent path is
// handed out again. These pin what that walk must still do: leaves in depth-first order across a
// Stateful that answers later, the right key paths whatever the walks before, values replaced
// where they were found on load, shapes copied, bad shapes refused with the same message.
import { type StateDict, type Stateful, flattenStateDict, hostTensor, load, save } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { locations } from "./helpers.js";

/** Every leaf's key path in a plain state dict of values and arrays, depth-first, worked out independently. */
function expectedPaths(value: unknown, path: (string | number)[] = []): (string | number)[][] {
  if (Array.isArray(value))
    return value.length === 0 ? [path] : value.flatMap((v, i) => expectedPaths(v, [...path, i]));
  if (typeof value === "object" && value !== null) {
    const keys = Object.keys(value);
    return keys.length === 0
      ? [path]
      : keys.flatMap((k) => expectedPaths((value as Record<string, unknown>)[k], [...path, k]));
  }
  return [path];
}

/** A Stateful whose stateDict() resolves a turn later, so the walk continues asynchronously after it. */
class Later implements Stateful {
  loaded: StateDict | undefined;
  constructor(readonly state: StateDict) {}
  async stateDict(): Promise<StateDict> {
    await new Promise((resolve) => setTimeout(resolve, 1));
    return this.state;
  }
  loadStateDict(state: StateDict): void {
    this.loaded = state;
  }
}

describe("the state dict walk", () => {
  it("lists leaves depth-first across Statefuls that answer later, at every level", async () => {
    const state: StateDict = {
      a: [1, new Later({ x: 2, y: [3, new Later({ z: 4 }), 5] }), 6],
      b: { c: 7, d: new Later({}), e: [8] },
      f: 9,
    };
    const leaves = await flattenStateDict(state);
    expect(leaves.map((leaf) => leaf.path)).toEqual([
      ["a", 0],
      ["a", 1, "x"],
      ["a", 1, "y", 0],
      ["a", 1, "y", 1, "z"],
      ["a", 1, "y", 2],
      ["a", 2],
      ["b", "c"],
      ["b", "e", 0],
      ["f"],
    ]);
    // Each leaf has a path of its own (no array shared between leaves or reused by the walk).
    expect(new Set(leaves.map((leaf) => leaf.path)).size).toBe(leaves.length);
  });

  it("hands out a frozen key path again only where the walk before made it from the same parent with the same key", async () => {
    const layer = (w: number) => ({ mlp: { w, b: [w, w] } });
    const first = await flattenStateDict({ model: { layers: [layer(1), layer(2)] }, step: 1 });
    const again = await flattenStateDict({ model: { layers: [layer(3), layer(4)] }, step: 2 });
    const paths = (leaves: readonly { path: readonly (string | number)[] }[]) => leaves.map((leaf) => leaf.path);
    expect(paths(again)).toEqual(paths(first));
    again.forEach((leaf, i) => expect(leaf.path).toBe(first[i]!.path));
    for (const leaf of again) expect(Object.isFrozen(leaf.path)).toBe(true);
    expect(() => (again[0]!.path as (string | number)[]).push("x")).toThrow(TypeError);
    // Keys renamed, inserted before others, arrays grown and shrunk, a container turned leaf and back:
    // every walk lists exactly the paths of its own state dict.
    const shapes: StateDict[] = [
      { model: { layers: [layer(1), layer(2)] }, step: 1 },
      { model: { layers: [layer(1), layer(2)] }, steps: 1 },
      { extra: 0, model: { layers: [layer(1), layer(2)] }, step: 1 },
      { model: { layers: [layer(1), layer(2), layer(3)] }, step: 1 },
      { model: { layers: [layer(1)] }, step: 1 },
      { model: { layers: [{ mlp: 5 }, layer(2)] }, step: 1 },
      { model: { layers: [layer(1), layer(2)] }, step: 1 },
      { model: { "layers.0": layer(1) }, step: 1 },
      { model: { layers: { 0: layer(1) } }, step: 1 },
      { model: { layers: [layer(1)] }, step: 1 },
    ];
    for (let round = 0; round < 3; round++)
      for (const state of shapes) expect(paths(await flattenStateDict(state))).toEqual(expectedPaths(state));
  });

  it("walks that interleave (Statefuls answering later) each get their own key paths", async () => {
    const a: StateDict = { x: { y: new Later({ p: 1, q: [2, 3] }), z: 4 }, w: [5, new Later({ r: 6 })] };
    const b: StateDict = { x: { y: new Later({ s: 1 }), t: new Later({ u: [2] }) }, v: 3 };
    for (let round = 0; round < 3; round++) {
      const [la, lb] = await Promise.all([flattenStateDict(a), flattenStateDict(b)]);
      expect(la.map((leaf) => leaf.path)).toEqual([
        ["x", "y", "p"],
        ["x", "y", "q", 0],
        ["x", "y", "q", 1],
        ["x", "z"],
        ["w", 0],
        ["w", 1, "r"],
      ]);
      expect(lb.map((leaf) => leaf.path)).toEqual([["x", "y", "s"], ["x", "t", "u", 0], ["v"]]);
    }
  });

  it("on load, replaces values where they were found, after a Stateful that answered later", async () => {
    const url = await locations.memory();
    await save(
      {
        a: [1, new Later({ x: 2, y: [3, 4] }), 5, "six"],
        b: { c: 7, d: Uint8Array.of(8, 8), e: new Later({ f: 9 }), g: [10, 11] },
      },
      url,
    );
    const inner = new Later({ x: 0, y: [0, 0] });
    const other = new Later({ f: 0 });
    const target: StateDict = { a: [0, inner, 0, ""], b: { c: 0, d: Uint8Array.of(0), e: other, g: [0, 0] } };
    await load(target, url);
    expect(target).toEqual({
      a: [1, inner, 5, "six"],
      b: { c: 7, d: Uint8Array.of(8, 8), e: other, g: [10, 11] },
    });
    expect(inner.loaded).toEqual({ x: 2, y: [3, 4] });
    expect(other.loaded).toEqual({ f: 9 });
  });

  it("copies each tensor's shape, host and tfjs-like alike", async () => {
    const host = hostTensor("float32", [2, 3]);
    const like = { shape: [4], dtype: "float32", data: async () => new Float32Array(4) };
    const leaves = await flattenStateDict({ host, like });
    const shapes = leaves.map((leaf) => (leaf.kind === "tensor" ? leaf.shape : undefined));
    expect(shapes).toEqual([[2, 3], [4]]);
    expect(shapes[0]).not.toBe(host.shape);
    expect(shapes[1]).not.toBe(like.shape);
    (host.shape as number[])[0] = 5;
    like.shape[0] = 1;
    expect(shapes).toEqual([[2, 3], [4]]);
  });

  it.each([
    ["a fractional dimension", [1.5]],
    ["a dimension that is a string", ["2"]],
    ["an unsafe integer", [2 ** 53]],
    ["a shape that is not an array", "2"],
  ])("refuses %s with the shape's message", async (_, shape) => {
    const state = { t: { dtype: "float32", shape, data: new Float32Array(2) } } as unknown as StateDict;
    await expect(flattenStateDict(state)).rejects.toThrow(
      /^state dict key t: shape must be an array of non-negative integers, got /,
    );
    // (A tfjs-like tensor's shape is an array by definition: without one it is not taken for a tensor.)
    if (!Array.isArray(shape)) return;
    const like = { t: { dtype: "float32", shape, data: async () => new Float32Array(2) } } as unknown as StateDict;
    await expect(flattenStateDict(like)).rejects.toThrow(/^state dict key t: shape must be an array/);
  });
});
