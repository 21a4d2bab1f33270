import { describe, expect, it } from "vitest";
import { table } from "./open.js";
import { sparkline } from "./stats.js";

describe("table", () => {
  it("aligns each column to its widest cell", () => {
    const rows = [
      ["step", "size"],
      ["7", "1.5 MiB"],
      ["12", "3 B"],
    ];
    expect(table(rows).split("\n")).toEqual(["step  size", "7     1.5 MiB", "12    3 B"]);
  });

  it("lays out a store of 200k steps without running out of stack", () => {
    const rows = [["step"], ...Array.from({ length: 200_000 }, (_, i) => [String(i)])];
    expect(table(rows).split("\n")).toHaveLength(200_001);
  });
});

describe("sparkline", () => {
  it("draws 200k bins", () => {
    expect([...sparkline(Array.from({ length: 200_000 }, (_, i) => i % 9))]).toHaveLength(200_000);
  });
});
