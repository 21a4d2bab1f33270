import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { runTypeScript } from "@cairn/core/testing";
import { afterAll, describe, expect, it } from "vitest";

const quickstart = fileURLToPath(new URL("./quickstart.ts", import.meta.url));
let dir: string | undefined;
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("the README's example", () => {
  it(
    "checkpoints every 20 steps, keeps two, and a second run resumes from the latest",
    { timeout: 120_000 },
    async () => {
      dir = await mkdtemp(join(tmpdir(), "cairn-quickstart-"));
      const first = await runTypeScript(quickstart, [], { cwd: dir });
      expect(first.code, first.stderr).toBe(0);
      expect(first.stdout).toContain("step 80: loss");
      expect(first.stdout).toContain("checkpoints: 60, 80");
      const second = await runTypeScript(quickstart, [], { cwd: dir });
      expect(second.code, second.stderr).toBe(0);
      expect(second.stdout).toContain("resumed from step 80");
      expect(second.stdout).not.toContain("checkpoint committed");
    },
  );

  it("is the code the README shows, line for line", async () => {
    const readme = await readFile(fileURLToPath(new URL("../../README.md", import.meta.url)), "utf8");
    const shown = /## A complete example[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const source = (await readFile(quickstart, "utf8"))
      .split("\n")
      .filter((line, i) => i > 1 || !line.startsWith("//"))
      .join("\n");
    expect(shown).toBe(source);
  });
});
