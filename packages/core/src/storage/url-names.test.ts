import { describe, expect, it } from "vitest";
import { type CheckpointError, isCheckpointError } from "../errors.js";
import { urlNames } from "./url-names.js";

describe("urlNames", () => {
  it("decodes the host and each path segment on its own", () => {
    expect(urlNames("memory", new URL("memory://vol/a/b%20c/%3F%23"), "volume")).toEqual(["vol", "a", "b c", "?#"]);
    expect(urlNames("opfs", new URL("opfs://dir//x/"), "directory")).toEqual(["dir", "x"]);
  });

  it.each([
    ["memory://", "names its volume first; write memory://<name>/<path>"],
    ["memory://a%2Fb/c", 'decodes to "a/b"'],
    ["memory://a/%5C", 'decodes to "\\\\"'],
    ["memory://a/x%00y", "not a plain name"],
    ["memory://%2E%2E/x", 'decodes to ".."'],
    ["memory://a/%zz", "not valid percent-encoding"],
    ["memory://a/b?c", 'no query "?c"'],
  ])("refuses %s, saying what to write", (url, advice) => {
    let error: unknown;
    try {
      urlNames("memory", new URL(url), "volume");
    } catch (e) {
      error = e;
    }
    expect(isCheckpointError(error, "invalid_argument")).toBe(true);
    expect((error as CheckpointError).message).toMatch(/^\[memory\] memory:\/\//);
    expect((error as CheckpointError).message).toContain(advice);
  });

  it("never shows credentials the URL holds", () => {
    expect(() => urlNames("memory", new URL("memory://user:secret@vol/a%2Fb"), "volume")).toThrow(
      expect.objectContaining({ message: expect.not.stringContaining("secret") }),
    );
  });
});
