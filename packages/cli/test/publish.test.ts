import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { hostTensor, save } from "@cairn/core";
import { describe, expect, it } from "vitest";
import { cairn, tempDir } from "./helpers.js";

describe("cairn publish", () => {
  it("adds each committed step's files to the root's index, and refuses a step that is not committed", async () => {
    const root = await tempDir();
    for (const step of [1, 2])
      await save({ w: hostTensor("float32", [4], new Float32Array(4).fill(step)) }, join(root, String(step)));
    const first = await cairn(["publish", root, "1"]);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/published step 1 .*: 2 files; cairn-index.json lists 2/);
    expect((await cairn(["publish", root, "2"])).code).toBe(0);
    const index = JSON.parse(await readFile(join(root, "cairn-index.json"), "utf8")) as { objects: { path: string }[] };
    const paths = index.objects.map((o) => o.path);
    expect(paths.filter((p) => p.endsWith("metadata.json"))).toEqual(["1/metadata.json", "2/metadata.json"]);
    expect(paths.filter((p) => p.endsWith(".safetensors"))).toHaveLength(2);
    const missing = await cairn(["publish", root, "3"]);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/not_found|does not exist|no checkpoint/i);
  });
});
