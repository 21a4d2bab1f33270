import { describe, expect, it } from "vitest";
import { sweptPathOf } from "./rank-deletions.js";

describe("sweptPathOf: the paths a rank deletes on rank 0's word", () => {
  it("takes <step>/<data file name>", () => {
    expect(sweptPathOf("12/data-r1-0-0123456789ab.safetensors")).toEqual({
      path: "12/data-r1-0-0123456789ab.safetensors",
      step: 12,
    });
    expect(sweptPathOf("0/x")).toEqual({ path: "0/x", step: 0 });
  });

  it.each([
    ["not a string", 12],
    ["no step", "data.safetensors"],
    ["an empty name", "12/"],
    ["a step that is not canonical", "012/data.safetensors"],
    ["a negative step", "-1/data.safetensors"],
    ["a nested path", "12/a/data.safetensors"],
    ["a climb", "12/.."],
    ["a climb out of the root", "../12/data.safetensors"],
    ["an absolute path", "/12/data.safetensors"],
    ["a backslash", "12/..\\data.safetensors"],
    ["the commit marker", "12/metadata.json"],
    ["a prototype key", "12/__proto__"],
    ["a NUL", "12/data\0.safetensors"],
  ])("refuses %s", (_, value) => {
    expect(sweptPathOf(value)).toBeUndefined();
  });
});
