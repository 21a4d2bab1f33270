import { describe, expect, it } from "vitest";
import { announcedRange } from "./gcs-integrity.js";

describe("announcedRange", () => {
  const answer = (contentRange: string | undefined, statusCode = 206) => ({
    statusCode,
    headers: { "content-range": contentRange },
  });

  it("reads first byte, last byte and the object's size from a partial answer", () => {
    expect(announcedRange(answer("bytes 8-15/100"))).toEqual({ start: 8, end: 15, size: 100 });
  });

  it("says nothing of a whole answer", () => {
    expect(announcedRange(answer(undefined, 200))).toBeUndefined();
  });

  it.each([
    undefined,
    "",
    "bytes 8-15/*",
    "bytes */100",
    "bytes 15-8/100",
    "bytes 8-100/100",
    "bytes 8-15/99999999999999999",
  ])("distrusts %j", (header) => {
    expect(announcedRange(answer(header))).toBeNull();
  });
});
