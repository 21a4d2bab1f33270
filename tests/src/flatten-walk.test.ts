// The state dict walk (core/src/state/flatten.ts) allocates no context or wrapper per value: its
// continuations after an asynchronous Stateful, its replacers and its shape check are made by
// helpers. These pin what that walk must still do: leaves in depth-first order across a Stateful
// that answers later, values replaced where they were found on load, shapes copied, bad shapes
// refused with the same message.
import { type StateDict, type Stateful, flattenStateDict, hostTensor, load, save } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { locations } from "./helpers.js";

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
