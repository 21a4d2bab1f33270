import { describe, expect, it } from "vitest";
import { parseContentRange } from "./content-range.js";

describe("parseContentRange", () => {
  it("reads first byte, last byte and total", () => {
    expect(parseContentRange("bytes 0-4/11")).toEqual({ start: 0, end: 4, size: 11 });
    expect(parseContentRange("bytes 8-15/100 ")).toEqual({ start: 8, end: 15, size: 100 });
    expect(parseContentRange("bytes 0-0/0")).toEqual({ start: 0, end: 0, size: 0 });
  });

  it.each([
    undefined,
    "",
    "bytes 0-4/*",
    "bytes */11",
    "bytes 5-4/11",
    "bytes 0-11/11",
    "bytes 12-12/11",
    "bytes 0-4/99999999999999999",
    "bytes 0-4/11/12",
    "items 0-4/11",
  ])("refuses %j", (header) => {
    expect(parseContentRange(header)).toBeUndefined();
  });
});
